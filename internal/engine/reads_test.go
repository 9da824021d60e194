package engine

import (
	"context"
	"testing"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// The typed reads answer what a reader asks with copies and the revision
// they reflect; a write's caller reads its own write in Rev at once.
func TestReadsAreCopiesAtTheirRevision(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 4)
	ctx := context.Background()
	for _, id := range []string{"old", "new"} {
		if _, err := b.eng.Submit(ctx, mustLoad(t, "id: "+id+"\nname: "+id+"\ntasks:\n  - {id: a, kind: noop}\n  - {id: b, kind: noop, depends_on: [a]}\n")); err != nil {
			t.Fatal(err)
		}
		// Answers to writes carry Rev (kit.MarkRevision): it must already
		// include the write.
		rev := b.eng.Rev()
		got, err := cli.Get(ctx, store.DAGKey(id))
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("DAG %s in etcd: %v %v", id, got, err)
		}
		if created := got.Kvs[0].CreateRevision; rev < created {
			t.Fatalf("Rev %d right after DAG %s was submitted, created at %d", rev, id, created)
		}
		b.waitDAG(id, core.DAGSucceeded)
	}

	v, rev, err := b.eng.DAG(ctx, "new")
	if err != nil || v == nil || len(v.Tasks) != 2 || rev <= 0 || rev > b.eng.Rev() {
		t.Fatalf("DAG new: %+v at %d (Rev %d), %v", v, rev, b.eng.Rev(), err)
	}
	// A copy: changing it changes nothing the next read sees.
	v.Tasks[0].Status, v.Counts[core.Succeeded], v.Tasks[0].DependsOn = core.Failed, 0, append(v.Tasks[0].DependsOn, "x")
	if again, _, _ := b.eng.DAG(ctx, "new"); again.Tasks[0].Status != core.Succeeded || again.Counts[core.Succeeded] != 2 ||
		len(again.Tasks[0].DependsOn) != 0 {
		t.Fatalf("a changed copy changed the state: %+v", again)
	}
	if v, _, err := b.eng.DAG(ctx, "none"); v != nil || err != nil {
		t.Fatalf("DAG none: %+v, %v", v, err)
	}

	dags, _, err := b.eng.DAGs(ctx, core.DAGQuery{})
	if err != nil || len(dags) != 2 || dags[0].ID != "new" || dags[1].ID != "old" {
		t.Fatalf("DAGs, newest first: %+v, %v", dags, err)
	}
	if dags, _, _ := b.eng.DAGs(ctx, core.DAGQuery{Limit: 1}); len(dags) != 1 || dags[0].ID != "new" {
		t.Fatalf("DAGs limit 1: %+v", dags)
	}
	if dags, _, _ := b.eng.DAGs(ctx, core.DAGQuery{Status: core.DAGRunning}); len(dags) != 0 {
		t.Fatalf("DAGs running: %+v", dags)
	}
	keep := func(d *core.DAGSummary) bool { return d.ID == "old" }
	if views, _, _ := b.eng.DAGViews(ctx, core.DAGQuery{Keep: keep}); len(views) != 1 || views[0].ID != "old" || len(views[0].Tasks) != 2 {
		t.Fatalf("DAGViews old: %+v", views)
	}

	for _, c := range []struct {
		dag, task     string
		view, dagSeen bool
	}{{"new", "b", true, true}, {"new", "zz", false, true}, {"none", "b", false, false}} {
		r, err := b.eng.Task(ctx, c.dag, c.task)
		if err != nil || (r.View != nil) != c.view || r.DAGFound != c.dagSeen || r.Rev <= 0 {
			t.Errorf("Task %s/%s: %+v, %v", c.dag, c.task, r, err)
		}
	}
	if st, run, ok, err := b.eng.DAGState(ctx, "old"); st != core.DAGSucceeded || run != 1 || !ok || err != nil {
		t.Errorf("DAGState old: %s %d %v %v", st, run, ok, err)
	}
	counts, crev, err := b.eng.Counts(ctx)
	if err != nil || counts[core.Succeeded] != 4 || crev <= 0 || crev > b.eng.Rev() {
		t.Errorf("Counts: %v at %d (Rev %d), %v", counts, crev, b.eng.Rev(), err)
	}
}
