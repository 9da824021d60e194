package core

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// The read model: copies of the state in the core's own types, built on the
// loop's goroutine and read anywhere after. They share with the live state
// only records the core never modifies in place (it replaces them: specs,
// task records, outputs, histories), so they may be read and encoded off
// the loop. The API's wire views (internal/http/apitypes) are built from
// them outside the core.

// StatusCounts counts tasks by status, indexed by Status.
type StatusCounts [numStatuses]int

// Of returns the count of status s.
func (c *StatusCounts) Of(s Status) int { return c[s] }

// DAGSummary is a DAG as lists show it.
type DAGSummary struct {
	ID              string
	Name            string
	Status          DAGStatus
	Run             int
	SubmittedAt     time.Time
	FinishedAt      *time.Time
	TaskCount       int
	Counts          StatusCounts // its tasks by status
	CancelRequested bool
}

// DAGView is one DAG with every task's live state.
type DAGView struct {
	DAGSummary
	Params    model.Params
	Scheduled *model.ScheduledRun
	Tasks     []TaskView
}

// TaskView is a task's spec and runtime state together.
type TaskView struct {
	ID             string
	Kind           model.Kind
	Status         Status
	Attempts       int
	Retries        int
	MaxRetries     int
	Priority       int
	DependsOn      []string
	Worker         string
	StartedAt      *time.Time
	FinishedAt     *time.Time
	RetryAt        *time.Time
	DurationMs     *int64
	ExitCode       *int
	Error          string
	OutputTail     string
	Event          string
	Cascade        bool
	Cause          string
	Outputs        model.Outputs
	History        []AttemptSummary
	HistoryOmitted int
	// Waiting says why a ready task is not running yet, when something
	// other than its turn holds it.
	Waiting     string
	TriggerRule model.TriggerRule
	When        string
	Role        string // "task", "handler" or "notification"
	Skipped     string // why a skipped task was
	// Map is set on a map group, Instance on one of its instances
	// (mapview.go).
	Map      *MapGroup
	Instance *MapInstance
	Spec     model.Task
}

func (d *dagRun) summary() DAGSummary {
	s := DAGSummary{ID: d.id, Name: d.rec.Name, Status: d.rec.Status, Run: d.rec.Run,
		SubmittedAt: d.rec.SubmittedAt, FinishedAt: d.rec.FinishedAt, TaskCount: len(d.tasks) + d.instances,
		CancelRequested: d.rec.CancelRequested}
	for st, n := range d.counts {
		s.Counts[st] = int(n)
	}
	return s
}

// roleNames are the roles as views spell them (TaskView.Role).
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
		v.History = r.History
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

// DAGQuery selects DAGs, newest first.
type DAGQuery struct {
	Status DAGStatus // only DAGs in this status; "" any
	Limit  int       // at most this many; 0 no limit
	// Keep, when set, is asked about each DAG that passes Status, newest
	// first, and selects those it returns true for. It runs where the
	// query does (the engine's loop): it must be quick and must not block.
	Keep func(*DAGSummary) bool
}

// DAGs lists the DAGs q selects, newest first. Only the DAGs selected are
// summarised.
func (c *Core) DAGs(q DAGQuery) []DAGSummary {
	out := []DAGSummary{}
	for _, d := range c.newestFirst() {
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
		if s, ok := q.pick(d); ok {
			out = append(out, s)
		}
	}
	return out
}

// pick summarises d if q selects it (status first: only the DAGs selected
// are summarised).
func (q *DAGQuery) pick(d *dagRun) (DAGSummary, bool) {
	if q.Status != "" && d.rec.Status != q.Status {
		return DAGSummary{}, false
	}
	s := d.summary()
	if q.Keep != nil && !q.Keep(&s) {
		return DAGSummary{}, false
	}
	return s, true
}

// newestFirst returns the DAGs in the order lists show them: by the
// revision that created them, newest first.
func (c *Core) newestFirst() []*dagRun {
	out := make([]*dagRun, 0, len(c.dags))
	for _, d := range c.dags {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
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

// StatusCounts returns the number of tasks in each status over all DAGs,
// without allocating.
func (c *Core) StatusCounts() StatusCounts { return c.counts }

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
