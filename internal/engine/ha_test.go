package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

func dump(b *bundle) string {
	var s string
	_ = b.eng.query(context.Background(), func(c *core.Core) { s = c.Dump() })
	return s
}

// A standby follows the log through its watch and holds the leader's state;
// when the leader crashes and is deposed, the standby takes over from the
// revision it had applied and finishes the DAG.
func TestStandbyFollowsAndTakesOver(t *testing.T) {
	_, cli := etcdtest.Start(t)
	dir := t.TempDir()
	a := startReplica(t, cli, "a", 2)
	testkit.WaitFor(t, 10*time.Second, "a leads", func() bool { return a.eng.Status().Leader })
	b := startReplica(t, cli, "b", 2)
	d := mustLoad(t, fmt.Sprintf(`
id: ha
name: ha
tasks:
  - {id: one, command: "echo $ORION_LEADER_FENCE >> %[1]s/one"}
  - {id: two, command: "echo $ORION_LEADER_FENCE >> %[1]s/two; while [ ! -e %[1]s/gate ]; do sleep 0.05; done", depends_on: [one]}
  - {id: three, command: "echo $ORION_LEADER_FENCE >> %[1]s/three", depends_on: [two]}
`, dir))
	if _, err := a.eng.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	// A wide DAG puts many task records into one transaction, all at one
	// revision: the standby must apply every one of them.
	var wide strings.Builder
	wide.WriteString("id: wide\nname: wide\ntasks:\n")
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&wide, "  - {id: t%d, kind: noop}\n", i)
	}
	if _, err := a.eng.Submit(context.Background(), mustLoad(t, wide.String())); err != nil {
		t.Fatal(err)
	}
	a.waitDAG("wide", core.DAGSucceeded)
	testkit.WaitFor(t, 10*time.Second, "two started", func() bool { _, err := os.Stat(filepath.Join(dir, "two")); return err == nil })
	testkit.WaitFor(t, 5*time.Second, "standby caught up", func() bool { return dump(a) == dump(b) })
	if n := testutilApplyErrors(b); n != 0 {
		t.Fatalf("standby refused %v committed entries", n)
	}
	if b.eng.Status().Leader {
		t.Fatal("two leaders")
	}
	if _, err := b.eng.Submit(context.Background(), mustLoad(t, "name: x\ntasks: [{id: a, kind: noop}]\n")); err == nil {
		t.Fatal("standby accepted a write")
	}

	// two is running on a (it waits for the gate), so three has not run:
	// after the crash b re-runs two, whose worker died, and runs three once.
	a.crash()
	if err := os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b.eng.SuspectLeader("a") // what b's stream to a would report
	testkit.WaitFor(t, 5*time.Second, "b leads", func() bool { return b.eng.Status().Leader })
	testkit.WaitFor(t, 5*time.Second, "b's first write", func() bool { return !b.eng.Status().FirstCommitAt.IsZero() })
	took := b.eng.Status().FirstCommitAt.Sub(start)
	t.Logf("takeover (suspect → first committed write): %s", took)
	b.waitDAG("ha", core.DAGSucceeded)
	// Each run wrote the fence revision of the leader that dispatched it.
	fences := func(name string) []string {
		raw, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Fields(string(raw))
	}
	count := func(name string) int { return len(fences(name)) }
	if count("one") != 1 || count("three") != 1 || count("two") < 1 || count("two") > 2 {
		t.Fatalf("runs one=%d two=%d three=%d", count("one"), count("two"), count("three"))
	}
	// one ran in a's term and three in b's, which began later: b's
	// election key, and so its fence, has the higher revision.
	fa, errA := strconv.ParseInt(fences("one")[0], 10, 64)
	fb, errB := strconv.ParseInt(fences("three")[0], 10, 64)
	if errA != nil || errB != nil || fa <= 0 || fb <= fa {
		t.Fatalf("ORION_LEADER_FENCE: one ran under %q, three under %q; want a positive fence, then a higher one", fences("one"), fences("three"))
	}
}

// A leader whose lease is revoked behind its back (a standby's false alarm,
// a partition, SIGSTOP) finds its next write rejected by the fence, steps
// down, and never applies a write of the old term.
func TestDeposedLeaderIsFenced(t *testing.T) {
	_, cli := etcdtest.Start(t)
	a := startReplica(t, cli, "a", 2)
	testkit.WaitFor(t, 10*time.Second, "a leads", func() bool { return a.eng.Status().Leader })
	b := startReplica(t, cli, "b", 2)
	testkit.WaitFor(t, 5*time.Second, "b registered", func() bool {
		resp, _ := cli.Get(context.Background(), "/orion/v1/replicas/b")
		return resp != nil && len(resp.Kvs) == 1
	})
	ok, err := store.Depose(context.Background(), cli, "a")
	if err != nil || !ok {
		t.Fatalf("depose: %v %v", ok, err)
	}
	testkit.WaitFor(t, 5*time.Second, "b leads", func() bool { return b.eng.Status().Leader })
	testkit.WaitFor(t, 5*time.Second, "a steps down", func() bool { return !a.eng.Status().Leader })
	if _, err := a.eng.Submit(context.Background(), mustLoad(t, "id: late\nname: late\ntasks: [{id: a, kind: noop}]\n")); err == nil {
		t.Fatal("deposed leader accepted a write")
	}
	if _, err := b.eng.Submit(context.Background(), mustLoad(t, "id: fresh\nname: fresh\ntasks: [{id: a, kind: noop}]\n")); err != nil {
		t.Fatal(err)
	}
	b.waitDAG("fresh", core.DAGSucceeded)
	testkit.WaitFor(t, 5*time.Second, "a follows b", func() bool { return dump(a) == dump(b) })
	// a campaigns again and is b's standby now.
	if a.eng.Status().Leader {
		t.Fatal("two leaders")
	}
}

func testutilApplyErrors(b *bundle) float64 {
	return testutil.ToFloat64(b.eng.m.ApplyErrors)
}

// The store closes a watch channel when the watch's context or the client
// itself ends; the loop then receives zero events. A standby must take that
// as "watch ended" and follow on, not crash (it used to dereference a zero
// response's nil header).
func TestStandbySurvivesAClosedWatchChannel(t *testing.T) {
	_, cli := etcdtest.Start(t)
	a := startReplica(t, cli, "a", 1)
	testkit.WaitFor(t, 10*time.Second, "a leads", func() bool { return a.eng.Status().Leader })
	b := startReplica(t, cli, "b", 1)
	testkit.WaitFor(t, 10*time.Second, "b follows", func() bool { return b.eng.Status().Loaded })
	for i := range 3 {
		closed := make(chan store.WatchEvent)
		close(closed)
		done := make(chan struct{})
		b.eng.reqs <- func() { b.eng.watchCh = closed; close(done) }
		<-done
		id := fmt.Sprintf("after-close-%d", i)
		if _, err := a.eng.Submit(context.Background(), mustLoad(t, "id: "+id+"\nname: c\ntasks: [{id: a, kind: noop}, {id: b, kind: noop, depends_on: [a]}]\n")); err != nil {
			t.Fatal(err)
		}
		a.waitDAG(id, core.DAGSucceeded)
		testkit.WaitFor(t, 10*time.Second, "the standby to follow on after its watch channel closed", func() bool { return dump(a) == dump(b) })
	}
	select {
	case <-b.eng.Done():
		t.Fatal("the standby's loop ended")
	default:
	}
}

// WaitApplied on a standby returns once the standby has applied the
// revision: after a write the leader committed (the standby then shows it),
// and after a write to a key outside the log (which only a progress
// notification can move the standby past).
func TestStandbyWaitApplied(t *testing.T) {
	_, cli := etcdtest.Start(t)
	a := startReplica(t, cli, "a", 1)
	testkit.WaitFor(t, 10*time.Second, "a leads", func() bool { return a.eng.Status().Leader })
	b := startReplica(t, cli, "b", 1)
	testkit.WaitFor(t, 10*time.Second, "b loaded", func() bool { return b.eng.Status().Loaded })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		id := fmt.Sprintf("ryw-%d", i)
		if _, err := a.eng.Submit(ctx, mustLoad(t, "id: "+id+"\nname: x\ntasks: [{id: a, kind: noop}]\n")); err != nil {
			t.Fatal(err)
		}
		var rev int64
		_ = a.eng.query(ctx, func(c *core.Core) { rev = c.Rev() })
		if err := b.eng.WaitApplied(ctx, rev); err != nil {
			t.Fatalf("WaitApplied(%d): %v", rev, err)
		}
		var seen bool
		_ = b.eng.query(ctx, func(c *core.Core) { _, seen = c.DAG(id) })
		if !seen {
			t.Fatalf("standby returned from WaitApplied(%d) without %s", rev, id)
		}
	}
	// Quiet: every DAG done, nothing more for the log.
	for i := range 20 {
		a.waitDAG(fmt.Sprintf("ryw-%d", i), core.DAGSucceeded)
	}
	var rev int64
	_ = a.eng.query(ctx, func(c *core.Core) { rev = c.Rev() })
	if err := b.eng.WaitApplied(ctx, rev); err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, "/elsewhere/key", "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.eng.WaitApplied(ctx, put.Header.Revision); err != nil {
		t.Fatalf("WaitApplied past a revision outside the log: %v", err)
	}
}
