package api

import (
	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
)

// The wire views: the core's read model (core.DAGSummary, DAGView,
// TaskView) in the API's JSON types, declared once in apitypes and
// instantiated with the core's typed statuses, which marshal to the
// spellings clients decode as strings. Built here, off the engine's loop,
// so that the core knows nothing of the wire format. A field added to a
// core view is added to its apitypes type and set here, in one line.

type (
	dagSummary = apitypes.DAGSummary[core.DAGStatus]
	dagView    = apitypes.DAG[core.DAGStatus, core.Status]
	taskView   = apitypes.Task[core.Status]
)

func wireSummary(s *core.DAGSummary) dagSummary {
	counts := make(map[string]int)
	for st, n := range s.Counts {
		if n > 0 {
			counts[core.Status(st).String()] = n
		}
	}
	return dagSummary{ID: s.ID, Name: s.Name, Status: s.Status, Run: s.Run, SubmittedAt: s.SubmittedAt,
		FinishedAt: s.FinishedAt, TaskCount: s.TaskCount, Counts: counts, CancelRequested: s.CancelRequested}
}

func wireDAG(v *core.DAGView, rev int64) *dagView {
	w := &dagView{DAGSummary: wireSummary(&v.DAGSummary), Params: v.Params, Scheduled: v.Scheduled,
		Tasks: make([]taskView, len(v.Tasks)), Revision: rev}
	for i := range v.Tasks {
		w.Tasks[i] = wireTask(&v.Tasks[i])
	}
	return w
}

func wireTask(t *core.TaskView) taskView {
	w := taskView{ID: t.ID, Kind: t.Kind, Status: t.Status, Attempts: t.Attempts, Retries: t.Retries,
		MaxRetries: t.MaxRetries, Priority: t.Priority, DependsOn: t.DependsOn, Worker: t.Worker,
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, RetryAt: t.RetryAt, DurationMs: t.DurationMs,
		ExitCode: t.ExitCode, Error: t.Error, OutputTail: t.OutputTail, Event: t.Event, Cascade: t.Cascade,
		Cause: t.Cause, Outputs: t.Outputs, HistoryOmitted: t.HistoryOmitted, Waiting: t.Waiting,
		TriggerRule: t.TriggerRule, When: t.When, Role: t.Role, Skipped: t.Skipped, Spec: t.Spec}
	w.Map, w.Instance = wireMap(t.Map), wireInstance(t.Instance)
	if len(t.History) > 0 {
		w.History = make([]apitypes.Attempt, len(t.History))
		for i, h := range t.History {
			w.History[i] = apitypes.Attempt(h)
		}
	}
	return w
}

func wireMap(m *core.MapGroup) *apitypes.MapGroup {
	if m == nil {
		return nil
	}
	w := &apitypes.MapGroup{Expanded: m.Expanded, Count: m.Count, Counts: map[string]int{}}
	for st, n := range m.Counts {
		if n > 0 {
			w.Counts[core.Status(st).String()] = n
		}
	}
	return w
}

func wireInstance(i *core.MapInstance) *apitypes.MapInstance {
	if i == nil {
		return nil
	}
	return &apitypes.MapInstance{Group: i.Group, Index: i.Index, Item: i.Item}
}

func wireInstances(l *core.InstanceList, rev int64) *apitypes.InstanceList[core.Status] {
	w := &apitypes.InstanceList[core.Status]{Instances: make([]taskView, len(l.Instances)), Offset: l.Offset,
		Limit: l.Limit, Total: l.Total, Revision: rev}
	for i := range l.Instances {
		w.Instances[i] = wireTask(&l.Instances[i])
	}
	return w
}

// wireHead is a DAG's head: the DAG, whether its tasks are truncated, and
// then its shape.
func wireHead(h *engine.HeadRead) *dagView {
	w := wireDAG(h.View, h.Rev)
	w.TasksTruncated = h.Truncated
	w.Shape = wireShape(h.Shape, h.Counts)
	return w
}

func wireCounts(c *core.StatusCounts) map[string]int {
	m := map[string]int{}
	for st, n := range c {
		if n > 0 {
			m[core.Status(st).String()] = n
		}
	}
	return m
}

func wireShape(s *core.Shape, counts []core.StatusCounts) *apitypes.Shape {
	if s == nil {
		return nil
	}
	w := &apitypes.Shape{Nodes: make([]apitypes.ShapeNode, len(s.Nodes)), Edges: s.Edges, Depth: s.Depth}
	if w.Edges == nil {
		w.Edges = [][2]int32{}
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		w.Nodes[i] = apitypes.ShapeNode{ID: n.ID, Kind: string(n.Kind), Role: n.Role, Level: n.Level, Levels: n.Levels,
			Tasks: n.Tasks, Sample: n.Sample, Counts: wireCounts(&counts[i])}
	}
	return w
}

func wireTaskPage(p *core.TaskPageResult, rev int64) *apitypes.TaskPage[core.Status] {
	w := &apitypes.TaskPage[core.Status]{Tasks: make([]taskView, len(p.Tasks)), Revision: rev}
	for i := range p.Tasks {
		w.Tasks[i] = wireTask(&p.Tasks[i])
	}
	if p.Next != nil {
		w.Next = p.Next.String()
	}
	return w
}
