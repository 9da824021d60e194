package store

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// BenchmarkColdLoad is a replica's cold start over a backlog, the shape
// `orion bench --live` holds: DAGs of 1000 tasks waiting behind a root,
// one record each. It loads them (Load, in pages) and rebuilds the core
// from them (Restore), and reports both per task; profile it with
// -cpuprofile to see what bounds a cold load.
func BenchmarkColdLoad(b *testing.B) {
	const dags, size = 100, 1000
	_, cli := etcdtest.Start(b)
	ctx := context.Background()
	now := time.Now()
	for i := range dags {
		id := "live-" + strconv.Itoa(i)
		d := model.DAG{ID: id, Name: id, Tasks: []model.Task{{ID: "hold", Kind: model.KindNoop, Pool: "held"}}}
		for k := 1; k < size; k++ {
			d.Tasks = append(d.Tasks, model.Task{ID: "t" + strconv.Itoa(k), Kind: model.KindNoop, DependsOn: []string{"hold"}})
		}
		d.Normalize()
		ops, _, err := Ops(&core.Entry{DAG: id, D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1, SubmittedAt: now}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	var load, restore time.Duration
	for b.Loop() {
		t0 := time.Now()
		snap, err := Load(ctx, cli.KV)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		c := core.New(core.Config{})
		if errs := c.Restore(snap.Rev, snap.DAGs, snap.Tasks); len(errs) > 0 || len(snap.DAGs) != dags {
			b.Fatalf("%d DAGs loaded, errors %v", len(snap.DAGs), errs)
		}
		load, restore = load+t1.Sub(t0), restore+time.Since(t1)
	}
	tasks := float64(b.N * dags * size)
	b.ReportMetric(float64(load.Nanoseconds())/tasks, "load-ns/task")
	b.ReportMetric(float64(restore.Nanoseconds())/tasks, "restore-ns/task")
}

// decodeAll gives what DecodeKV gives key by key, in the page's order,
// whatever runs it splits the page into: records of every size, keys
// outside the prefixes and values that do not decode.
func TestDecodeAllKeepsOrder(t *testing.T) {
	var kvs []*mvccpb.KeyValue
	for i := range 3000 {
		key := TaskKey("d"+strconv.Itoa(i/100), "t"+strconv.Itoa(i))
		val := `{"status":"succeeded","attempt":1,"output":"` + strings.Repeat("x", i%7*200) + `"}`
		switch i % 500 {
		case 17:
			val = "{not json"
		case 42:
			key = "/orion/v1/elsewhere/" + strconv.Itoa(i)
		}
		kvs = append(kvs, &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), ModRevision: int64(i + 1)})
	}
	got := decodeAll(kvs, DecodeKV)
	if len(got) != len(kvs) {
		t.Fatalf("%d results for %d keys", len(got), len(kvs))
	}
	bad := 0
	for i, kv := range kvs {
		e, ok, err := DecodeKV(kv)
		if got[i].ok != ok || (got[i].err == nil) != (err == nil) || !reflect.DeepEqual(got[i].e, e) {
			t.Fatalf("key %d (%s): decodeAll gave %+v, DecodeKV %+v %v %v", i, kv.Key, got[i], e, ok, err)
		}
		if err != nil {
			bad++
		}
	}
	if bad != 6 {
		t.Fatalf("%d values did not decode, want the 6 put there", bad)
	}
}
