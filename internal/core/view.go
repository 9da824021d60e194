package core

import (
	"fmt"
	"sort"
	"strings"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
)

// The views are the API's JSON types (internal/http/apitypes declares them once)
// instantiated with the core's typed statuses, which marshal to the same
// spellings the client decodes as strings.
type (
	// DAGSummary is a DAG as lists show it.
	DAGSummary = apitypes.DAGSummary[DAGStatus]
	// DAGView is one DAG with every task's live state.
	DAGView = apitypes.DAG[DAGStatus, Status]
	// TaskView is a task's spec and runtime state together.
	TaskView = apitypes.Task[Status]
)

func (d *dagRun) summary() DAGSummary {
	counts := make(map[string]int)
	for s := Status(0); s < numStatuses; s++ {
		if n := d.counts[s]; n > 0 {
			counts[s.String()] = int(n)
		}
	}
	return DAGSummary{ID: d.id, Name: d.rec.Name, Status: d.rec.Status, Run: d.rec.Run,
		SubmittedAt: d.rec.SubmittedAt, FinishedAt: d.rec.FinishedAt, TaskCount: len(d.tasks) + d.instances, Counts: counts,
		CancelRequested: d.rec.CancelRequested}
}

// roleNames are the roles as the API spells them (TaskView.Role).
var roleNames = [numRoles]string{roleTask: "task", roleHandler: "handler", roleNotify: "notification"}

func (t *task) view() TaskView {
	s := t.spec()
	v := TaskView{ID: t.id(), Kind: s.Kind, Status: t.status, Attempts: t.attempt(), Retries: t.retries(),
		MaxRetries: s.MaxRetries, Priority: s.Priority, DependsOn: s.DependsOn, Spec: *s,
		TriggerRule: s.Rule(), When: s.When, Role: roleNames[t.dag.role(t.idx)]}
	if t.status == Skipped && t.rec != nil {
		v.Skipped = t.rec.Event
	}
	t.mapView(&v)
	if v.DependsOn == nil {
		v.DependsOn = []string{}
	}
	if r := t.rec; r != nil {
		v.Worker, v.StartedAt, v.FinishedAt, v.RetryAt = r.Worker, r.StartedAt, r.FinishedAt, r.RetryAt
		v.ExitCode, v.Error, v.OutputTail, v.Event = r.ExitCode, r.Error, r.OutputTail, r.Event
		v.Cascade, v.Cause = r.Cascade, r.Cause
		v.Outputs = r.Outputs
		for _, h := range r.History {
			v.History = append(v.History, apitypes.Attempt(h))
		}
		v.HistoryOmitted = r.HistoryOmitted
		if r.StartedAt != nil && r.FinishedAt != nil && !r.Cascade && r.Status != Skipped {
			ms := r.FinishedAt.Sub(*r.StartedAt).Milliseconds()
			v.DurationMs = &ms
		}
		if t.status == Pending && r.Run != t.dag.rec.Run {
			// Reset by a retry: the old run's outcome is history, not state.
			v.ExitCode, v.Error, v.OutputTail, v.Event, v.FinishedAt = nil, "", "", "reset", nil
		}
	}
	return v
}

// DAGs lists DAGs, newest first.
func (c *Core) DAGs() []DAGSummary {
	out := make([]DAGSummary, 0, len(c.dags))
	for _, d := range c.dags {
		out = append(out, d.summary())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := c.dags[out[i].ID], c.dags[out[j].ID]
		if a.seq != b.seq {
			return a.seq > b.seq
		}
		return a.id < b.id
	})
	return out
}

// DAG returns one DAG with its tasks in submission order.
func (c *Core) DAG(id string) (*DAGView, bool) {
	d := c.dags[id]
	if d == nil {
		return nil, false
	}
	v := &DAGView{DAGSummary: d.summary(), Params: d.rec.Params, Scheduled: d.rec.Scheduled, Tasks: make([]TaskView, len(d.tasks))}
	for i := range d.tasks {
		v.Tasks[i] = d.tasks[i].view()
		v.Tasks[i].Waiting = c.waitReason(&d.tasks[i])
	}
	return v, true
}

// Summary returns one DAG's summary without building its task views.
func (c *Core) Summary(id string) (DAGSummary, bool) {
	d := c.dags[id]
	if d == nil {
		return DAGSummary{}, false
	}
	return d.summary(), true
}

// Task returns one task.
func (c *Core) Task(dagID, taskID string) (*TaskView, bool) {
	t := c.lookup(dagID, taskID)
	if t == nil {
		return nil, false
	}
	v := t.view()
	v.Waiting = c.waitReason(t)
	return &v, true
}

// Counts returns the number of tasks in each status over all DAGs.
func (c *Core) Counts() map[Status]int {
	out := make(map[Status]int, numStatuses)
	for s := Status(0); s < numStatuses; s++ {
		out[s] = c.counts[s]
	}
	return out
}

// QueueLen is the number of entries in the ready queue (including stale ones
// not yet skipped).
func (c *Core) QueueLen() int {
	n := 0
	for _, cl := range c.classList {
		n += cl.q.Len()
	}
	return n
}

// DAGCount is the number of DAGs held.
func (c *Core) DAGCount() int { return len(c.dags) }

// Dump renders the replicated state deterministically: two replicas that
// applied the same entries print the same text. Tests compare it; operators
// can diff it.
func (c *Core) Dump() string {
	var b strings.Builder
	for _, id := range c.sortedDAGIDs() {
		d := c.dags[id]
		fmt.Fprintf(&b, "dag %s %s run=%d remaining=%d", id, d.rec.Status, d.rec.Run, d.remaining)
		if d.rec.CancelRequested {
			b.WriteString(" cancel_requested")
		}
		b.WriteByte('\n')
		for i := range d.tasks {
			t := &d.tasks[i]
			fmt.Fprintf(&b, "  %s %s attempt=%d retries=%d waiting=%d", t.id(), t.status, t.attempt(), t.retries(), t.waiting)
			if t.bad > 0 || t.skipped > 0 {
				fmt.Fprintf(&b, " bad=%d skipped=%d", t.bad, t.skipped)
			}
			if t.rec != nil {
				fmt.Fprintf(&b, " event=%s worker=%s cascade=%v cause=%s history=%d", t.rec.Event, t.rec.Worker, t.rec.Cascade, t.rec.Cause, len(t.rec.History))
				if len(t.rec.Outputs) > 0 {
					fmt.Fprintf(&b, " outputs=%d", model.OutputsBytes(t.rec.Outputs))
				}
			}
			b.WriteByte('\n')
		}
		dumpGroups(&b, d)
	}
	if len(c.poolRunning) > 0 {
		fmt.Fprintf(&b, "pools running:")
		for _, p := range c.Pools() {
			if p.Running > 0 {
				fmt.Fprintf(&b, " %s=%d", p.Name, p.Running)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (c *Core) sortedDAGIDs() []string {
	ids := make([]string, 0, len(c.dags))
	for id := range c.dags {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// DAGState returns a DAG's status and run without building its view.
func (c *Core) DAGState(id string) (status DAGStatus, run int, ok bool) {
	d := c.dags[id]
	if d == nil {
		return "", 0, false
	}
	return d.rec.Status, d.rec.Run, true
}
