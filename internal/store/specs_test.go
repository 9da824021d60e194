package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// recordTail holds exactly DAGRecord's own fields, so a field added to the
// record cannot be dropped by the tail-only decode (it would be an unknown
// field there, and every such record would be decoded in full: correct,
// but the test says so first).
func TestRecordTailIsDAGRecordsOwnFields(t *testing.T) {
	rec, tail := reflect.TypeOf(core.DAGRecord{}), reflect.TypeOf(recordTail{})
	var own []reflect.StructField
	for i := 0; i < rec.NumField(); i++ {
		// Spec is encoded before the tail: a part of the spec.
		if f := rec.Field(i); !f.Anonymous && f.Name != "Spec" {
			own = append(own, f)
		}
	}
	if len(own) != tail.NumField() {
		t.Fatalf("DAGRecord has %d own fields, recordTail %d", len(own), tail.NumField())
	}
	for i, f := range own {
		g := tail.Field(i)
		if f.Name != g.Name || f.Type != g.Type || f.Tag != g.Tag {
			t.Errorf("field %d: DAGRecord has %s %s %q, recordTail %s %s %q", i, f.Name, f.Type, f.Tag, g.Name, g.Type, g.Tag)
		}
	}
}

func putEvent(key string, value []byte) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: value, ModRevision: 9}}
}

func encoded(t *testing.T, e core.Entry) []byte {
	t.Helper()
	ops, _, err := Ops(&e)
	if err != nil {
		t.Fatal(err)
	}
	return ops[0].ValueBytes()
}

// A DAG's later records decode to what a full decode gives, sharing the
// spec decoded from its first; a changed spec, a deletion or a bad record
// make the watch decode in full again.
func TestKnownSpecsDecodeLaterRecordsByTheirTail(t *testing.T) {
	specs := newKnownSpecs()
	decode := func(ev *clientv3.Event) core.Entry {
		t.Helper()
		got, ok, err := specs.decodeEvent(ev)
		want, wantOK, wantErr := DecodeEvent(ev)
		if ok != wantOK || (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("known specs gave %+v %v %v, a full decode %+v %v %v", got, ok, err, want, wantOK, wantErr)
		}
		return got
	}
	shares := func(a, b core.Entry) bool { return &a.D.Tasks[0] == &b.D.Tasks[0] }

	submitted := dagEntry("d1", 3)
	first := decode(putEvent(DAGKey("d1"), encoded(t, submitted)))

	ended := dagEntry("d1", 3)
	at := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	ended.D.Status, ended.D.FinishedAt = core.DAGSucceeded, &at
	end := decode(putEvent(DAGKey("d1"), encoded(t, ended)))
	if !shares(first, end) || end.D.Status != core.DAGSucceeded || !end.D.FinishedAt.Equal(at) {
		t.Fatalf("the end record did not reuse the spec: %+v", end.D)
	}

	// A cancellation requested (a DAG with handlers): the tail carries it.
	requested := dagEntry("d1", 3)
	requested.D.CancelRequested = true
	if got := decode(putEvent(DAGKey("d1"), encoded(t, requested))); !shares(first, got) || !got.D.CancelRequested {
		t.Fatalf("cancel_requested through the tail: %+v", got.D)
	}

	changed := dagEntry("d1", 3)
	changed.D.Tasks[2].Timeout = model.Duration(2 * time.Minute)
	other := decode(putEvent(DAGKey("d1"), encoded(t, changed)))
	if shares(first, other) || other.D.Tasks[2].Timeout.D() != 2*time.Minute {
		t.Fatal("a changed spec was not decoded in full")
	}

	// Deleted, then submitted again with the same bytes: decoded in full.
	decode(&clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(DAGKey("d1")), ModRevision: 10}})
	if _, held := specs.byDAG["d1"]; held {
		t.Fatal("a deleted DAG's spec is still held")
	}
	again := decode(putEvent(DAGKey("d1"), encoded(t, changed)))
	if shares(other, again) {
		t.Fatal("a spec was reused across a deletion")
	}

	// A bad record drops the held spec; the next one is decoded in full.
	decode(putEvent(DAGKey("d1"), []byte(`{"id":"d1"`)))
	if _, held := specs.byDAG["d1"]; held {
		t.Fatal("a spec is still held after a record that did not decode")
	}

	// Fields after the status that are not the tail's (a record edited by
	// hand) are never read as the held spec with a tail.
	base := encoded(t, submitted)
	decode(putEvent(DAGKey("d2"), encoded(t, dagEntry("d2", 3))))
	hand := append(append([]byte{}, encoded(t, dagEntry("d2", 3))[:len(base)-1]...), []byte(`,"name":"renamed"}`)...)
	if got := decode(putEvent(DAGKey("d2"), hand)); got.D.Name != "renamed" {
		t.Fatalf("name after the tail: %q", got.D.Name)
	}
}

// A record nested more deeply than any Orion writes is refused, reported
// and skipped, whether a watch has seen its DAG or not; it never reaches
// the decoder that would overflow the stack.
func TestDeeplyNestedRecordIsRefused(t *testing.T) {
	deep := []byte(`{"status":"running","x":` + strings.Repeat("[", 4<<20))
	for _, key := range []string{TaskKey("d1", "t0"), DAGKey("d1")} {
		if _, _, err := DecodeEvent(putEvent(key, deep)); err == nil || !strings.Contains(err.Error(), "levels deep") {
			t.Errorf("%s: %v", key, err)
		}
	}
	specs := newKnownSpecs()
	ended := dagEntry("d1", 2)
	specs.decodeEvent(putEvent(DAGKey("d1"), encoded(t, ended)))
	v := encoded(t, ended)
	v = append(append(v[:len(v)-1:len(v)-1], `,"x":`...), strings.Repeat("[", 4<<20)...)
	if _, _, err := specs.decodeEvent(putEvent(DAGKey("d1"), v)); err == nil || !strings.Contains(err.Error(), "levels deep") {
		t.Errorf("through known specs: %v", err)
	}
}

// A chunked DAG's later records, decoded by their tail, keep the reference
// to its chunks: a standby that leads writes the DAG's record again from
// what it decoded, and without the reference that record would carry
// every task inline, past what etcd takes for a big DAG.
func TestKnownSpecsKeepAChunkedDAGsSpec(t *testing.T) {
	big := chunked(t, "d1", 20000, DefaultLimits)
	if big.D.Spec == nil {
		t.Fatal("not chunked")
	}
	specs := newKnownSpecs()
	specs.read = func(_ context.Context, _ string, _ int64, _ *core.SpecRef) ([][]byte, error) {
		out := make([][]byte, len(big.Chunks))
		for i, c := range big.Chunks {
			out[i] = []byte(c)
		}
		return out, nil
	}
	head := func(status core.DAGStatus) []byte {
		rec := *big.D
		rec.Status = status
		return encoded(t, core.Entry{DAG: "d1", D: &rec})
	}
	for i, status := range []core.DAGStatus{core.DAGRunning, core.DAGFailed, core.DAGRunning} {
		got, ok, err := specs.decodeEvent(putEvent(DAGKey("d1"), head(status)))
		if !ok || err != nil || got.D == nil {
			t.Fatalf("record %d: %v %v", i, ok, err)
		}
		if got.D.Spec == nil || *got.D.Spec != *big.D.Spec || len(got.D.Tasks) != 20000 || got.D.Status != status {
			t.Fatalf("record %d decoded with spec %+v, %d tasks, %s", i, got.D.Spec, len(got.D.Tasks), got.D.Status)
		}
		// What a leader writes back from it is the small head again.
		if b := encoded(t, got); len(b) > 1024 {
			t.Fatalf("record %d is written back as %d bytes", i, len(b))
		}
	}
}
