package store

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// chunked is a submission of n noop tasks, split as the engine splits it.
func chunked(t *testing.T, id string, n int, lim Limits) core.Entry {
	t.Helper()
	e := dagEntry(id, n)
	if err := SplitSpec(&e, lim); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestSplitSpecOnlyPastTheThreshold(t *testing.T) {
	small := chunked(t, "small", 1000, DefaultLimits)
	if small.D.Spec != nil || small.Chunks != nil {
		t.Fatalf("a 1000-task DAG was split: %+v", small.D.Spec)
	}
	ops, _, err := Ops(&small)
	if err != nil || len(ops) != 1 {
		t.Fatalf("a small DAG is %d operations (%v), not one put", len(ops), err)
	}
	big := chunked(t, "big", 100000, DefaultLimits)
	ref := big.D.Spec
	if ref == nil || ref.Chunks != len(big.Chunks) || ref.Chunks < 2 || ref.Tasks != 100000 {
		t.Fatalf("a 100,000-task DAG: %+v, %d chunks", ref, len(big.Chunks))
	}
	for i, c := range big.Chunks {
		if len(c) > DefaultLimits.ChunkSize() {
			t.Errorf("chunk %d holds %d bytes, past %d", i, len(c), DefaultLimits.ChunkSize())
		}
	}
	ps, err := pieces(&big)
	if err != nil {
		t.Fatal(err)
	}
	head := ps[len(ps)-1]
	if head.bytes > 1024 || strings.Contains(string(head.ops[0].ValueBytes()), `"t1"`) {
		t.Fatalf("the head holds %d bytes: %.200s", head.bytes, head.ops[0].ValueBytes())
	}
	if _, err := Measure(&big, DefaultLimits); err != nil {
		t.Fatalf("a chunked DAG measured as too large: %v", err)
	}
}

// A chunked DAG is committed chunk by chunk, each in its own fenced
// transaction, its head last; a load and a watch both build it whole when
// its head is there; writing the head again does not touch the chunks; and
// its deletion removes every key it had.
func TestChunkedDAGLifecycle(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := NewEtcd(cli)
	fence := testFence(t, cli)
	big := chunked(t, "d1", 20000, DefaultLimits)
	want := append([]core.Entry(nil), big)
	// d1-a sorts between d1's head and its chunks.
	entries := []core.Entry{dagEntry("d0", 2), big, dagEntry("d1-a", 2)}
	watch := st.Watch(ctx, 1)
	res, err := Commit(ctx, cli, fence, entries, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if res.Txns != len(big.Chunks)+2 || len(res.Revs) != 3 {
		t.Fatalf("%d transactions for %d chunks, revisions %v", res.Txns, len(big.Chunks), res.Revs)
	}
	got := keys(t, cli, ChunkPrefix("d1"))
	if len(got) != big.D.Spec.Chunks {
		t.Fatalf("chunk keys %v", got)
	}

	snap, err := Load(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DAGs) != 3 || len(snap.Bad) != 0 {
		t.Fatalf("loaded %d DAGs, bad %v", len(snap.DAGs), snap.Bad)
	}
	if d := snap.DAGs[1].D; snap.DAGs[1].DAG != "d1" || !reflect.DeepEqual(d.Tasks, want[0].D.Tasks) || d.Spec == nil {
		t.Fatalf("loaded %s with %d tasks, spec %+v", snap.DAGs[1].DAG, len(d.Tasks), d.Spec)
	}

	// The DAG ends: its head is written again, without its tasks.
	end := *want[0].D
	end.Status = core.DAGSucceeded
	if _, err := Commit(ctx, cli, fence, []core.Entry{{DAG: "d1", D: &end}}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, ChunkPrefix("d1"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if kv.ModRevision != kv.CreateRevision {
			t.Errorf("%s was written again", kv.Key)
		}
	}
	head, err := cli.Get(ctx, DAGKey("d1"))
	if err != nil || len(head.Kvs[0].Value) > 1024 {
		t.Fatalf("the head written at the DAG's end: %v %d bytes", err, len(head.Kvs[0].Value))
	}

	var seen []core.Entry
	for len(seen) < 4 {
		select {
		case ev := <-watch:
			if ev.Err != nil || len(ev.Bad) > 0 {
				t.Fatalf("watch: %v %v", ev.Err, ev.Bad)
			}
			seen = append(seen, ev.Entries...)
		case <-ctx.Done():
			t.Fatalf("the watch delivered %d entries", len(seen))
		}
	}
	for _, i := range []int{1, 3} {
		if e := seen[i]; e.DAG != "d1" || len(e.D.Tasks) != 20000 || !reflect.DeepEqual(e.D.Tasks, want[0].D.Tasks) {
			t.Fatalf("watch entry %d: %s with %d tasks", i, e.DAG, len(e.D.Tasks))
		}
	}
	if seen[3].D.Status != core.DAGSucceeded {
		t.Fatalf("the watch saw %s", seen[3].D.Status)
	}

	if _, err := Commit(ctx, cli, fence, []core.Entry{{DAG: "d1", Delete: true}}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, cli, DAGKey("d1")); len(got) != 1 || got[0] != DAGKey("d1-a") {
		t.Fatalf("after the deletion: %v", got)
	}
}

// Chunks without a head (their leader died before it) are never loaded,
// and the next term's sweep deletes them; chunks of this term, and those
// of a DAG whose head is there, stay.
func TestOrphanChunksAreSweptNotLoaded(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := testFence(t, cli)
	dead := chunked(t, "dead", 6000, DefaultLimits)
	// The dead leader's chunks, committed without their head.
	for i, c := range dead.Chunks {
		if _, err := Commit(ctx, cli, old, []core.Entry{}, DefaultLimits, clientv3.OpPut(ChunkKey("dead", i), c)); err != nil {
			t.Fatal(err)
		}
	}
	live := chunked(t, "live", 6000, DefaultLimits)
	if _, err := Commit(ctx, cli, old, []core.Entry{live}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	next := Fence{Key: ElectionPrefix + "/next", Rev: 0}
	resp, err := cli.Put(ctx, next.Key, "me")
	if err != nil {
		t.Fatal(err)
	}
	next.Rev = resp.Header.Revision
	// This term's own submission in flight: its chunks, not yet its head.
	mine := chunked(t, "mine", 6000, DefaultLimits)
	if _, err := cli.Put(ctx, ChunkKey("mine", 0), mine.Chunks[0]); err != nil {
		t.Fatal(err)
	}

	snap, err := Load(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DAGs) != 1 || snap.DAGs[0].DAG != "live" || len(snap.Bad) != 0 {
		t.Fatalf("loaded %d DAGs (bad %v)", len(snap.DAGs), snap.Bad)
	}
	n, err := SweepOrphanChunks(ctx, cli, next)
	if err != nil || n != len(dead.Chunks) {
		t.Fatalf("swept %d of %d: %v", n, len(dead.Chunks), err)
	}
	if got := keys(t, cli, ChunkPrefix("dead")); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
	if len(keys(t, cli, ChunkPrefix("live"))) != live.D.Spec.Chunks || len(keys(t, cli, ChunkPrefix("mine"))) != 1 {
		t.Fatal("the sweep deleted chunks it should have kept")
	}
}

// A chunk changed by hand after its head no longer matches the digest: the
// DAG is reported and skipped, not built from it.
func TestTamperedChunkIsReported(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	e := chunked(t, "d", 6000, DefaultLimits)
	if _, err := Commit(ctx, cli, testFence(t, cli), []core.Entry{e}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, ChunkKey("d", 0), `[]`); err != nil {
		t.Fatal(err)
	}
	snap, err := Load(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DAGs) != 0 || len(snap.Bad) != 1 || !strings.Contains(snap.Bad[0].Error(), "chunks hold") {
		t.Fatalf("loaded %d DAGs, bad %v", len(snap.DAGs), snap.Bad)
	}
}

func keys(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// A term's first commit starts the sweep: chunks a leader before left
// without their head are gone once it reports.
func TestTermStartSweepsOrphanChunks(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dead := chunked(t, "dead", 6000, DefaultLimits)
	for i, c := range dead.Chunks {
		if _, err := cli.Put(ctx, ChunkKey("dead", i), c); err != nil {
			t.Fatal(err)
		}
	}
	st := NewEtcd(cli)
	swept := make(chan int, 1)
	st.OnSweep = func(n int, err error) {
		if err != nil {
			t.Error(err)
		}
		swept <- n
	}
	if _, err := st.Begin(testFence(t, cli), nil, DefaultLimits, &TermRecord{Name: "me"}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-swept:
		if n != len(dead.Chunks) || len(keys(t, cli, ChunkPrefix("dead"))) != 0 {
			t.Fatalf("swept %d of %d chunks; left %v", n, len(dead.Chunks), keys(t, cli, ChunkPrefix("dead")))
		}
	case <-ctx.Done():
		t.Fatal("no sweep")
	}
}

// Deleting a DAG deletes at most MaxDeletedKeys keys a transaction: a DAG
// of 12,000 task records goes in three, its record in the last, so that a
// watcher sees the DAG whole until it is gone whole, and no key of it, or
// of the DAG whose id extends its own, is left or taken.
func TestLargeDeletionIsSplit(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fence := testFence(t, cli)
	const n = 2*MaxDeletedKeys + 2000
	big := chunked(t, "d1", n, DefaultLimits)
	if _, err := Commit(ctx, cli, fence, []core.Entry{big, dagEntry("d10", 2)}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var ops []clientv3.Op
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("t%d", i)
		ids = append(ids, id)
		ops = append(ops, clientv3.OpPut(TaskKey("d1", id), `{"status":"succeeded","attempt":1}`))
		if len(ops) == 100 || i == n-1 {
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if _, err := cli.Put(ctx, TaskKey("d10", "t0"), `{"status":"succeeded","attempt":1}`); err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	st := NewEtcd(cli)
	from, err := cli.Get(ctx, "/", clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	watch := st.Watch(ctx, from.Header.Revision+1)
	res, err := Commit(ctx, cli, fence, []core.Entry{{DAG: "d1", Delete: true, Records: ids}}, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if res.Txns != 3 {
		t.Fatalf("the deletion of %d records took %d transactions, want 3", n, res.Txns)
	}
	if got, err := cli.Get(ctx, DAGKey("d1")); err != nil || len(got.Kvs) != 0 {
		t.Fatalf("d1's record is left (%v)", err)
	}
	for _, p := range []string{DAGSubkeysPrefix("d1"), DAGTasksPrefix("d1")} {
		if left := keys(t, cli, p); len(left) > 0 {
			t.Fatalf("%d keys left under %s: %v", len(left), p, left[:min(3, len(left))])
		}
	}
	if got := keys(t, cli, DAGKey("d10")); len(got) != 1 {
		t.Fatalf("d10's record: %v", got)
	}
	if got := keys(t, cli, TaskPrefix+"d10/"); len(got) != 1 {
		t.Fatalf("d10's task records: %v", got)
	}
	// The watch gives one entry for it all: the DAG's deletion, at its
	// last transaction (the ranges before it are no entries).
	for {
		select {
		case b := <-watch:
			if b.Err != nil || len(b.Bad) > 0 {
				t.Fatalf("watch: %v %v", b.Err, b.Bad)
			}
			if len(b.Entries) == 0 {
				continue
			}
			if len(b.Entries) != 1 || !b.Entries[0].Delete || b.Entries[0].DAG != "d1" || b.Entries[0].Rev != res.Revs[0] {
				t.Fatalf("watched %+v, want d1's deletion at %d", b.Entries, res.Revs[0])
			}
			return
		case <-ctx.Done():
			t.Fatal("the watch saw no entry")
		}
	}
}

// A chunked head whose reference was edited by hand to name absurd counts
// is refused before anything is sized by them (a trillion chunks once made
// every replica that read it run out of memory).
func TestChunkedHeadWithAbsurdCountsIsRefused(t *testing.T) {
	big := chunked(t, "d1", 20000, DefaultLimits)
	for _, edit := range []func(r *core.SpecRef){
		func(r *core.SpecRef) { r.Chunks = 1_000_000_000_000 },
		func(r *core.SpecRef) { r.Tasks = 1_000_000_000_000 },
		func(r *core.SpecRef) { r.Chunks = r.Tasks + 1 },
		func(r *core.SpecRef) { r.Bytes = 1 << 40 },
		func(r *core.SpecRef) { r.Chunks, r.Tasks = 0, 0 },
	} {
		rec := *big.D
		ref := *rec.Spec
		edit(&ref)
		rec.Spec = &ref
		v := encoded(t, core.Entry{DAG: "d1", D: &rec})
		if _, err := decodeHead("d1", v); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("reference %+v: %v", ref, err)
		}
	}
	if _, err := decodeHead("d1", encoded(t, core.Entry{DAG: "d1", D: big.D})); err != nil {
		t.Fatalf("the real head: %v", err)
	}
}
