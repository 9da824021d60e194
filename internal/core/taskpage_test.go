package core_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// bigDAG restores a DAG of a start task, a fan-out of wide tasks, a map
// group of items instances after start, a join after all of them and a
// chain of chain tasks after it. The failed ones are every wide task whose
// index is a multiple of failEvery and the map instances at indices
// multiple of failEvery too.
func bigDAG(t testing.TB, wide, items, chain, failEvery int) *core.Core {
	t.Helper()
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	tasks := []model.Task{{ID: "start", Kind: model.KindNoop}}
	join := []string{"fan"}
	for i := range wide {
		id := fmt.Sprintf("w%05d", i)
		tasks = append(tasks, model.Task{ID: id, Kind: model.KindNoop, DependsOn: []string{"start"}})
		join = append(join, id)
	}
	arr := make([]int, items)
	for i := range arr {
		arr[i] = i
	}
	raw, _ := json.Marshal(arr)
	tasks = append(tasks, model.Task{ID: "fan", Kind: model.KindNoop, DependsOn: []string{"start"}, ForEach: model.ForEach(raw)})
	tasks = append(tasks, model.Task{ID: "join", Kind: model.KindNoop, DependsOn: join})
	prev := "join"
	for i := range chain {
		id := fmt.Sprintf("c%05d", i)
		tasks = append(tasks, model.Task{ID: id, Kind: model.KindNoop, DependsOn: []string{prev}})
		prev = id
	}
	d := model.DAG{ID: "big", Name: "big", Tasks: tasks}
	d.Normalize()
	c := core.New(core.Config{})
	dags := []core.Entry{{Rev: 10, DAG: "big", D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1, SubmittedAt: now}}}
	rec := func(task string, st core.Status) core.Entry {
		r := &core.TaskRecord{Status: st, Run: 1, Attempt: 1, Worker: "w1", StartedAt: &now, Event: "dispatch"}
		if st.Terminal() {
			end := now.Add(time.Second)
			r.FinishedAt, r.Event, r.Error = &end, "fail", "exit 1"
		}
		return core.Entry{Rev: 11, DAG: "big", Task: task, T: r}
	}
	recs := []core.Entry{rec("start", core.Succeeded)}
	recs[0].T.Event, recs[0].T.Error = "succeed", ""
	for i := range wide {
		switch {
		case i%failEvery == 0:
			recs = append(recs, rec(fmt.Sprintf("w%05d", i), core.Failed))
		case i%failEvery == 1:
			recs = append(recs, rec(fmt.Sprintf("w%05d", i), core.Running))
		}
	}
	if items > 0 {
		recs = append(recs, core.Entry{Rev: 11, DAG: "big", Task: "fan", T: &core.TaskRecord{Status: core.Running, Run: 1,
			Attempt: 1, Event: "expand", Items: raw, Expanded: 1}})
		for i := 0; i < items; i += failEvery {
			recs = append(recs, rec(fmt.Sprintf("fan[%d]", i), core.Failed))
		}
	}
	if errs := c.Restore(20, dags, recs); len(errs) > 0 {
		t.Fatalf("restore: %v", errs[:min(len(errs), 3)])
	}
	return c
}

// Paging a DAG's tasks walks every one once, map instances after their
// group, and a status filter returns just those, across pages whose
// scans are bounded.
func TestTaskPageWalksEveryTaskOnce(t *testing.T) {
	const wide, items, chain, every = 3000, 2500, 40, 97
	c := bigDAG(t, wide, items, chain, every)
	walk := func(q core.TaskQuery) (ids []string, pages int) {
		for {
			p, ok, err := c.TaskPage("big", q)
			if !ok || err != nil {
				t.Fatalf("page: ok %v err %v", ok, err)
			}
			pages++
			if pages > 1000 {
				t.Fatal("the walk does not end")
			}
			for _, v := range p.Tasks {
				ids = append(ids, v.ID)
			}
			if p.Next == nil {
				return ids, pages
			}
			next, err := core.ParseTaskCursor(p.Next.String())
			if err != nil || next != *p.Next {
				t.Fatalf("cursor %v reads back as %v, %v", p.Next, next, err)
			}
			q.From = next
		}
	}
	all, pages := walk(core.TaskQuery{Limit: 1000})
	total := 1 + wide + 1 + items + 1 + chain
	if len(all) != total || pages != (total+999)/1000 {
		t.Fatalf("walked %d tasks in %d pages, want %d", len(all), pages, total)
	}
	seen := map[string]bool{}
	for _, id := range all {
		if seen[id] {
			t.Fatalf("%s listed twice", id)
		}
		seen[id] = true
	}
	if all[wide+1] != "fan" || all[wide+2] != "fan[0]" || all[wide+1+items] != "fan[2499]" || all[total-1] != "c00039" {
		t.Fatalf("order: %v ... %v", all[wide:wide+3], all[total-3:])
	}

	failed, _ := walk(core.TaskQuery{Statuses: core.StatusSet(0).Add(core.Failed), Limit: 7})
	want := (wide+every-1)/every + (items+every-1)/every
	if len(failed) != want {
		t.Fatalf("%d failed listed, want %d: %v", len(failed), want, failed)
	}
	for _, id := range failed {
		if !strings.HasPrefix(id, "w") && !strings.HasPrefix(id, "fan[") {
			t.Fatalf("%s listed as failed", id)
		}
	}

	// A group's instances alone, from a cursor in the middle.
	p, _, err := c.TaskPage("big", core.TaskQuery{Group: "fan", Limit: 3})
	if err != nil || len(p.Tasks) != 3 || p.Tasks[0].ID != "fan[0]" || p.Tasks[0].Instance == nil {
		t.Fatalf("group page: %v %+v", err, p)
	}
	p, _, _ = c.TaskPage("big", core.TaskQuery{Group: "fan", From: *p.Next, Limit: 2})
	if p.Tasks[0].ID != "fan[3]" {
		t.Fatalf("next group page starts at %s", p.Tasks[0].ID)
	}
	if _, _, err := c.TaskPage("big", core.TaskQuery{Group: "join"}); err != core.ErrNoGroup {
		t.Fatalf("a task that is no group: %v", err)
	}
	if _, ok, _ := c.TaskPage("nope", core.TaskQuery{}); ok {
		t.Fatal("a DAG that is not there")
	}
}

// A filter that matches little still answers within its scan: a page may
// be empty and carry a cursor, and the next one finds the match.
func TestTaskPageScanIsBounded(t *testing.T) {
	const wide = core.TaskPageScan + 500
	c := bigDAG(t, wide, 0, 0, wide-1) // fails w00000 and the last wide task
	q := core.TaskQuery{Statuses: core.StatusSet(0).Add(core.Failed)}
	p, _, _ := c.TaskPage("big", q)
	if len(p.Tasks) != 1 || p.Next == nil || p.Next.Task != core.TaskPageScan {
		t.Fatalf("first page: %d tasks, next %v", len(p.Tasks), p.Next)
	}
	q.From = *p.Next
	p, _, _ = c.TaskPage("big", q)
	if len(p.Tasks) != 1 || p.Tasks[0].ID != fmt.Sprintf("w%05d", wide-1) || p.Next != nil {
		t.Fatalf("second page: %+v", p)
	}
}

// A big DAG's head lists MaxViewTasks tasks and says it left some out; a
// small one's lists every task, as DAG does.
func TestDAGHead(t *testing.T) {
	c := bigDAG(t, 1500, 10, 0, 10)
	v, truncated, ok := c.DAGHead("big", -1)
	if !ok || !truncated || len(v.Tasks) != core.MaxViewTasks || v.TaskCount != 1+1500+1+10+1 {
		t.Fatalf("head: ok %v truncated %v tasks %d count %d", ok, truncated, len(v.Tasks), v.TaskCount)
	}
	small := bigDAG(t, 10, 10, 3, 5)
	v, truncated, _ = small.DAGHead("big", -1)
	full, _ := small.DAG("big")
	if truncated || len(v.Tasks) != len(full.Tasks) {
		t.Fatalf("small head: truncated %v, %d tasks of %d", truncated, len(v.Tasks), len(full.Tasks))
	}
}

// A fan-out is one node, a map group one node with its instances' counts,
// and a long chain collapses into bands: never more than MaxShapeNodes.
func TestShape(t *testing.T) {
	c := bigDAG(t, 3000, 400, 20, 100)
	s, ok := c.Shape("big")
	if !ok {
		t.Fatal("no shape")
	}
	var got []string
	for _, n := range s.Nodes {
		got = append(got, fmt.Sprintf("%s:%s:%d@%d", n.ID, n.Kind, n.Tasks, n.Level))
	}
	want := "start:task:1@0 ~1:tasks:3000@1 fan:map:1@1 join:task:1@2"
	if g := strings.Join(got[:4], " "); g != want {
		t.Fatalf("nodes %s, want %s", g, want)
	}
	if len(s.Nodes) != 4+20 || s.Depth != 23 {
		t.Fatalf("%d nodes, depth %d", len(s.Nodes), s.Depth)
	}
	counts, ok := c.ShapeCounts(s)
	if !ok || counts[1].Of(core.Failed) != 30 || counts[1].Of(core.Running) != 30 || counts[1].Of(core.Ready) != 2940 {
		t.Fatalf("fan-out counts %v", counts[1])
	}
	if counts[2].Of(core.Failed) != 4 || counts[2].Of(core.Ready) != 396 {
		t.Fatalf("map counts %v", counts[2])
	}
	if s.Node("~1") != &s.Nodes[1] || s.Node("fan") != &s.Nodes[2] || s.Node("~9") != nil {
		t.Fatal("Node does not find the nodes by id")
	}
	p, _, _ := c.TaskPage("big", core.TaskQuery{Members: s.Nodes[1].Members, Statuses: core.StatusSet(0).Add(core.Failed), Limit: 1000})
	if len(p.Tasks) != 30 || p.Next != nil {
		t.Fatalf("the node's failed tasks: %d, next %v", len(p.Tasks), p.Next)
	}

	long := bigDAG(t, 2, 0, 1000, 100)
	s, _ = long.Shape("big")
	if len(s.Nodes) > core.MaxShapeNodes || s.Depth != 1003 {
		t.Fatalf("a chain of 1000: %d nodes, depth %d", len(s.Nodes), s.Depth)
	}
	n := 0
	for _, nd := range s.Nodes {
		n += nd.Tasks
	}
	if n != 1+2+1+1+1000 {
		t.Fatalf("the bands hold %d tasks", n)
	}
}

// BenchmarkShape100k: building a 100,000-task DAG's shape (once per DAG
// and replica), reading its counts, its head, a page from its middle and
// a filtered page (per request).
func BenchmarkShape100k(b *testing.B) {
	c := bigDAG(b, 90_000, 10_000, 9_996, 1000)
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			c.Shape("big")
		}
	})
	s, _ := c.Shape("big")
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			c.ShapeCounts(s)
		}
	})
	b.Run("head", func(b *testing.B) {
		for b.Loop() {
			c.DAGHead("big", -1)
		}
	})
	b.Run("page-100", func(b *testing.B) {
		for b.Loop() {
			c.TaskPage("big", core.TaskQuery{From: core.TaskCursor{Task: 50_000}})
		}
	})
	b.Run("page-failed", func(b *testing.B) {
		for b.Loop() {
			c.TaskPage("big", core.TaskQuery{Statuses: core.StatusSet(0).Add(core.Failed)})
		}
	})
}
