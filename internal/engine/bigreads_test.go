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

// The index lists what the core's own sort lists, DAGs of one revision
// included, through creations, deletions (compacted once they are half of
// it), ids submitted again and a rebuild.
func TestDAGIndexMatchesTheCoresOrder(t *testing.T) {
	c := core.New(core.Config{})
	var b bigReads
	rev := int64(10)
	apply := func(en *core.Entry) {
		t.Helper()
		if err := c.Apply(en); err != nil {
			t.Fatal(err)
		}
		b.applied(c, en)
	}
	create := func(id string) *core.Entry {
		d := model.DAG{ID: id, Name: id, Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}
		d.Normalize()
		return &core.Entry{Rev: rev, DAG: id, D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1}}
	}
	same := func() {
		t.Helper()
		want := c.DAGs(core.DAGQuery{})
		got := c.DAGsFrom(core.DAGQuery{}, b.all())
		if len(got) != len(want) {
			t.Fatalf("index lists %d DAGs, the core %d", len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID {
				t.Fatalf("at %d: index %s, core %s", i, got[i].ID, want[i].ID)
			}
		}
	}
	for i := range 300 {
		// Three DAGs per revision, applied out of id order.
		for _, s := range []string{"c", "a", "b"} {
			apply(create(fmt.Sprintf("d%03d%s", i, s)))
		}
		rev++
	}
	same()
	for i := range 250 {
		for _, s := range []string{"a", "b"} {
			apply(&core.Entry{Rev: rev, DAG: fmt.Sprintf("d%03d%s", i, s), Delete: true})
			rev++
		}
	}
	if len(b.newest) >= 900-250 {
		t.Fatalf("the index kept %d entries for %d DAGs", len(b.newest), c.DAGCount())
	}
	same()
	apply(create("d002a")) // an id deleted, submitted again: the newest
	rev++
	same()
	if got := c.DAGsFrom(core.DAGQuery{Limit: 1}, b.all()); got[0].ID != "d002a" {
		t.Fatalf("newest: %s", got[0].ID)
	}
	b.restored(c)
	same()
}

// BenchmarkDAGList10k: a page of 100 of 10,000 DAGs, by the core's sort of
// every DAG (before) and from the index.
func BenchmarkDAGList10k(b *testing.B) {
	c := core.New(core.Config{})
	var ix bigReads
	for i := range 10_000 {
		d := model.DAG{ID: fmt.Sprintf("d%05d", i), Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}
		d.Normalize()
		en := &core.Entry{Rev: int64(10 + i), DAG: d.ID, D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1}}
		if err := c.Apply(en); err != nil {
			b.Fatal(err)
		}
		ix.applied(c, en)
	}
	q := core.DAGQuery{Limit: 100}
	b.Run("sort", func(b *testing.B) {
		for b.Loop() {
			c.DAGs(q)
		}
	})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			c.DAGsFrom(q, ix.all())
		}
	})
}

// A shape's counts are read again once a second old, not per request.
func TestShapeCountsAtMostOnceASecond(t *testing.T) {
	c := core.New(core.Config{})
	d := model.DAG{ID: "big", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}, {ID: "b", Kind: model.KindNoop}}}
	d.Normalize()
	var b bigReads
	for _, en := range []*core.Entry{{Rev: 10, DAG: "big", D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1}}} {
		if err := c.Apply(en); err != nil {
			t.Fatal(err)
		}
		b.applied(c, en)
	}
	t0 := time.Date(2026, 11, 28, 11, 0, 0, 0, time.UTC)
	s, counts := b.shape(c, "big", t0)
	if s == nil || len(s.Nodes) != 1 || counts[0][core.Ready] != 2 {
		t.Fatalf("shape %+v counts %v", s, counts)
	}
	if err := c.Apply(&core.Entry{Rev: 11, DAG: "big", Task: "a", T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 1, Worker: "w", Event: "dispatch"}}); err != nil {
		t.Fatal(err)
	}
	if _, counts := b.shape(c, "big", t0.Add(900*time.Millisecond)); counts[0][core.Running] != 0 {
		t.Fatalf("counts read again within the second: %v", counts)
	}
	if _, counts := b.shape(c, "big", t0.Add(time.Second)); counts[0][core.Running] != 1 || counts[0][core.Ready] != 1 {
		t.Fatalf("counts a second later: %v", counts)
	}
}
