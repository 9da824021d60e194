package store

import (
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
)

// FuzzDecode feeds arbitrary keys and values, as a hand-edited etcd could
// hold them, to the log-entry decoder. It must never panic; a value it
// accepts must be a record of the key it came from (a DAG record that
// validates, or a task record), encode again, and decode to the same entry;
// anything else is a *DecodeError (reported and skipped) or not a log key.
//
//	go test ./internal/store -run '^$' -fuzz FuzzDecode -fuzztime 10m
func FuzzDecode(f *testing.F) {
	good := dagEntry("d1", 2)
	ops, _, _ := Ops(&good)
	f.Add(DAGKey("d1"), ops[0].ValueBytes(), false)
	task := core.Entry{DAG: "d1", Task: "t0", T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 2, Worker: "w"}}
	ops, _, _ = Ops(&task)
	f.Add(TaskKey("d1", "t0"), ops[0].ValueBytes(), false)
	f.Add(DAGKey("d1"), []byte(`{"id":"d2","name":"x","tasks":[{"id":"a","kind":"noop","timeout":"1s"}]}`), false)
	f.Add(DAGKey("d1"), []byte(`{"id":"d1","name":"x","tasks":[{"id":"a","depends_on":["a"]}]}`), false)
	f.Add(TaskKey("d1", "t0"), []byte(`{"status":"bogus"}`), false)
	f.Add(DAGKey("d1"), []byte("{"), true)
	ended := dagEntry("d1", 2)
	ended.D.Status = core.DAGSucceeded
	ops, _, _ = Ops(&ended)
	f.Add(DAGKey("d1"), ops[0].ValueBytes(), false)
	f.Add(DAGKey("d1"), append(ops[0].ValueBytes()[:len(ops[0].ValueBytes())-1:len(ops[0].ValueBytes())-1], []byte(`,"tasks":[]}`)...), false)
	f.Add(DAGKey("d1"), []byte(strings.Replace(string(ops[0].ValueBytes()), `"status"`, `"Status"`, 1)), false)
	f.Add(Prefix+"leader", []byte(`{}`), false)
	f.Add(TaskPrefix+"d1/", []byte(`{}`), true)
	f.Fuzz(func(t *testing.T, key string, value []byte, deleted bool) {
		kv := &mvccpb.KeyValue{Key: []byte(key), Value: value, CreateRevision: 3, ModRevision: 7}
		e, ok, err := DecodeKV(kv)
		if err != nil {
			if _, isDecode := err.(*DecodeError); !isDecode || !ok {
				t.Fatalf("error %T (ok=%v): %v", err, ok, err)
			}
		} else if ok {
			checkRoundTrip(t, key, e)
		}
		ev := &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv}
		if deleted {
			ev.Type = clientv3.EventTypeDelete
		}
		e, ok, err = DecodeEvent(ev)
		// A watch that has decoded d1's record before decodes the value to
		// the same entry, or fails alike.
		specs := newKnownSpecs()
		good := dagEntry("d1", 2)
		first, _, _ := Ops(&good)
		if _, _, err := specs.decodeEvent(&clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(DAGKey("d1")), Value: first[0].ValueBytes()}}); err != nil {
			t.Fatal(err)
		}
		e2, ok2, err2 := specs.decodeEvent(ev)
		if ok2 != ok || (err2 == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(e2, e)) {
			t.Fatalf("through known specs: %+v %v %v; in full: %+v %v %v", e2, ok2, err2, e, ok, err)
		}
		if err != nil {
			if _, isDecode := err.(*DecodeError); !isDecode {
				t.Fatalf("event error %T: %v", err, err)
			}
			return
		}
		if ok && !e.Delete {
			checkRoundTrip(t, key, e)
		}
	})
}

func checkRoundTrip(t *testing.T, key string, e core.Entry) {
	t.Helper()
	dagID, taskID, ok := ParseKey(key)
	if !ok || e.DAG != dagID || e.Task != taskID {
		t.Fatalf("entry %s/%s from key %q", e.DAG, e.Task, key)
	}
	if (e.Task == "") != (e.D != nil) || (e.Task != "") != (e.T != nil) {
		t.Fatalf("entry %s/%s carries the wrong record kind", e.DAG, e.Task)
	}
	ops, _, err := Ops(&e)
	if err != nil {
		t.Fatalf("an accepted record does not encode: %v", err)
	}
	again, ok2, err := DecodeKV(&mvccpb.KeyValue{Key: []byte(key), Value: ops[0].ValueBytes(), CreateRevision: 3, ModRevision: 7})
	if err != nil || !ok2 {
		t.Fatalf("re-encoded record does not decode: %v", err)
	}
	b1, _, _ := Ops(&again)
	if string(b1[0].ValueBytes()) != string(ops[0].ValueBytes()) {
		t.Fatalf("round trip changed the record:\n%s\n%s", ops[0].ValueBytes(), b1[0].ValueBytes())
	}
}
