package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// The DAG list comes from the index the loop keeps: newest first, without
// the DAGs deleted, the same on a replica that loaded the state whole and
// followed it; a big DAG's head has its shape, and a node's tasks page.
func TestBigReads(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 4)
	ctx := context.Background()
	ids := func(e *Engine) []string {
		dags, _, err := e.DAGs(ctx, core.DAGQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range dags {
			out = append(out, d.ID)
		}
		return out
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := b.eng.Submit(ctx, mustLoad(t, "id: "+id+"\ntasks:\n  - {id: x, kind: noop}\n")); err != nil {
			t.Fatal(err)
		}
		b.waitDAG(id, core.DAGSucceeded)
	}
	if err := b.eng.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// The same id again is a new DAG: the newest.
	if err := b.eng.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.Submit(ctx, mustLoad(t, "id: a\ntasks:\n  - {id: y, kind: noop}\n")); err != nil {
		t.Fatal(err)
	}
	const wide = 1500
	tasks := []model.Task{{ID: "start", Kind: model.KindNoop}}
	join := model.Task{ID: "join", Kind: model.KindNoop}
	for i := range wide {
		id := fmt.Sprintf("w%04d", i)
		tasks = append(tasks, model.Task{ID: id, Kind: model.KindNoop, DependsOn: []string{"start"}})
		join.DependsOn = append(join.DependsOn, id)
	}
	big := &model.DAG{ID: "big", Tasks: append(tasks, join)}
	big.Normalize()
	if _, err := b.eng.Submit(ctx, big); err != nil {
		t.Fatal(err)
	}
	want := []string{"big", "a", "d", "c"}
	if got := ids(b.eng); !slices.Equal(got, want) {
		t.Fatalf("DAGs %v, want %v", got, want)
	}
	if got, _, _ := b.eng.DAGs(ctx, core.DAGQuery{Limit: 2}); len(got) != 2 || got[1].ID != "a" {
		t.Fatalf("DAGs limit 2: %+v", got)
	}

	h, err := b.eng.DAGHead(ctx, "big", -1)
	if err != nil || !h.Truncated || len(h.View.Tasks) != core.MaxViewTasks || h.Shape == nil || len(h.Shape.Nodes) != 3 {
		t.Fatalf("head: %v truncated %v shape %+v", err, h.Truncated, h.Shape)
	}
	if n := h.Shape.Nodes[1]; n.ID != "~1" || n.Tasks != wide || h.Counts[1][core.Pending]+h.Counts[1][core.Ready]+
		h.Counts[1][core.Running]+h.Counts[1][core.Succeeded] != wide {
		t.Fatalf("the fan-out node %+v, counts %v", n, h.Counts[1])
	}
	r, err := b.eng.Tasks(ctx, "big", TasksQuery{Group: "~1", Limit: 1000})
	if err != nil || r.Page == nil || len(r.Page.Tasks) != 1000 || r.Page.Tasks[0].ID != "w0000" || r.Page.Next == nil {
		t.Fatalf("the node's first page: %v %+v", err, r.Page)
	}
	r, _ = b.eng.Tasks(ctx, "big", TasksQuery{Group: "~1", Limit: 1000, Cursor: *r.Page.Next})
	if len(r.Page.Tasks) != wide-1000 || r.Page.Next != nil {
		t.Fatalf("the node's second page: %d tasks, next %v", len(r.Page.Tasks), r.Page.Next)
	}
	if r, _ := b.eng.Tasks(ctx, "big", TasksQuery{Group: "~7"}); r.Page != nil || !r.DAGFound {
		t.Fatalf("no such node: %+v", r)
	}
	if r, _ := b.eng.Tasks(ctx, "nope", TasksQuery{}); r.Page != nil || r.DAGFound {
		t.Fatalf("no such DAG: %+v", r)
	}
	b.waitDAG("big", core.DAGSucceeded)

	// A replica that loads the state builds its index whole, then follows.
	s := startReplica(t, cli, "n2", 1)
	testkit.WaitFor(t, 10*time.Second, "the standby to load", func() bool { return slices.Equal(ids(s.eng), want) })
	if err := b.eng.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	want = []string{"big", "a", "c"}
	testkit.WaitFor(t, 10*time.Second, "the standby to follow", func() bool { return slices.Equal(ids(s.eng), want) })
}
