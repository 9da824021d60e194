package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// etcd at its quota on a real member: a submission is refused as storage
// full (nothing written), the accepted DAG stays readable and its running
// task's transition is held, not lost; once space is freed (keys deleted, as
// retention does) the member's own maintenance compacts, defragments and
// disarms, the held transition commits, and new DAGs run, with no step by
// hand and without a leader change.
func TestStorageFullOnARealMember(t *testing.T) {
	const quota = 8 << 20
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) {
		c.QuotaBackendBytes = quota
		c.MaintenanceInterval, c.NoSpaceRetry = 100*time.Millisecond, 200*time.Millisecond
	})
	// A long lease: the test is about space, not about a loaded machine
	// letting a 1 s lease expire.
	b := startEngine(t, cli, 2, func(c *Config) { c.SessionTTL = 10 * time.Second })
	term := b.eng.Status().LeaderSince
	ctx := context.Background()

	gate := filepath.Join(t.TempDir(), "go")
	d1 := mustLoad(t, fmt.Sprintf("id: d1\nname: d1\ntasks:\n  - {id: a, command: 'while [ ! -f %s ]; do sleep 0.02; done'}\n  - {id: b, kind: noop, depends_on: [a]}\n", gate))
	if _, err := b.eng.Submit(ctx, d1); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "d1/a running", func() bool {
		v := b.dag("d1")
		return v != nil && v.Counts[core.Running] == 1
	})

	// Live data up to the quota: the member cannot disarm by compacting.
	etcdtest.FillToQuota(t, cli, quota)

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := b.eng.Submit(sctx, mustLoad(t, "id: d2\nname: d2\ntasks: [{id: a, kind: noop}]\n"))
	cancel()
	var sf *StorageFullError
	if !errors.Is(err, ErrStorageFull) || !errors.As(err, &sf) || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("submission at the quota: %v, want a storage-full refusal naming the quota", err)
	}
	if r, _ := cli.Get(ctx, store.DAGKey("d2")); len(r.Kvs) != 0 {
		t.Fatal("the refused DAG is in etcd")
	}
	if testutil.ToFloat64(b.eng.m.StorageFullRefused) < 1 {
		t.Fatal("the refusal was not counted")
	}

	// a finishes while etcd is full: its success is held.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "a's success to be held", func() bool {
		held := false
		_ = b.eng.query(ctx, func(*core.Core) {
			for _, en := range b.eng.pending {
				held = held || (en.DAG == "d1" && en.Task == "a" && en.T.Status == core.Succeeded)
			}
		})
		return held && testutil.ToFloat64(b.eng.m.StorageFull) == 1
	})
	if v := b.dag("d1"); v == nil || v.Status != core.DAGRunning {
		t.Fatalf("d1 while etcd is full: %+v", v)
	}
	if r, err := cli.Get(ctx, store.TaskKey("d1", "a")); err != nil || len(r.Kvs) != 1 || !strings.Contains(string(r.Kvs[0].Value), `"running"`) {
		t.Fatalf("d1/a in etcd while full: %v %v", r, err)
	}

	if _, err := cli.Delete(ctx, "/fill/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("deletes under NOSPACE: %v", err)
	}
	b.waitDAG("d1", core.DAGSucceeded)
	testkit.WaitFor(t, 30*time.Second, "a new DAG to be accepted", func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := b.eng.Submit(sctx, mustLoad(t, "id: d3\nname: d3\ntasks: [{id: a, kind: noop}]\n"))
		return err == nil
	})
	b.waitDAG("d3", core.DAGSucceeded)
	if st := b.eng.Status(); !st.Leader || !st.LeaderSince.Equal(term) {
		t.Fatalf("leadership moved: leader %v, since %s → %s", st.Leader, term, st.LeaderSince)
	}
}

// While etcd is full, a retention delete goes ahead of the held puts, alone
// in its transaction (etcd accepts a transaction without puts), unless an
// entry of its own DAG is held before it; and nothing else goes until the
// retry is due.
func TestStorageFullLetsDeletesThrough(t *testing.T) {
	clk := newFakeClock()
	e := New(Config{Node: "n1", Clock: clk}, nil)
	e.term = &fakeTerm{}
	put := func(d, task string) core.Entry {
		return core.Entry{DAG: d, Task: task, T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1}}
	}
	del := func(d string) core.Entry { return core.Entry{DAG: d, Delete: true} }
	e.pending = []core.Entry{put("d1", "a"), del("d2"), put("d3", "a"), del("d3"), del("d4")}
	e.full = storageFull{term: e.term, cause: store.ErrNoSpace, retryAt: clk.Now().Add(time.Second), backoff: time.Second}

	names := func() string {
		var out []string
		for _, en := range e.pending {
			kind := "put"
			if en.Delete {
				kind = "del"
			}
			out = append(out, kind+" "+en.DAG)
		}
		return strings.Join(out, ", ")
	}
	if e.holdForStorage() || e.solo != 1 || names() != "del d2, put d1, put d3, del d3, del d4" {
		t.Fatalf("first: solo=%d %s", e.solo, names())
	}
	e.pending, e.solo = e.pending[1:], 0 // d2's delete committed
	if e.holdForStorage() || e.solo != 1 || names() != "del d4, put d1, put d3, del d3" {
		t.Fatalf("second: solo=%d %s", e.solo, names())
	}
	e.pending, e.solo = e.pending[1:], 0
	if !e.holdForStorage() || names() != "put d1, put d3, del d3" {
		t.Fatalf("d3's delete overtook its own put, or a put went early: %s", names())
	}
	clk.Advance(time.Second)
	if e.holdForStorage() || e.full.active() {
		t.Fatal("the retry came due and everything is still held")
	}
}
