package core

import (
	"errors"
	"fmt"
	"iter"
	"sort"
	"strconv"
	"strings"
)

// Reads of big DAGs: a DAG's head (its summary and its first tasks, not
// all of them), its tasks a page at a time, and its DAGs listed from an
// index kept outside the core. Each costs what it returns, plus a bounded
// scan where a filter skips tasks: none copies the whole DAG.

// MaxViewTasks bounds the tasks a DAG's head lists (DAGHead): the
// max_tasks_per_dag of the releases before big DAGs, so that a client of
// those DAGs sees every task as before.
const MaxViewTasks = 1000

// Task pages (TaskPage): the default and the most one page lists, and the
// most entries one page examines. A filtered page may so hold fewer tasks
// than its limit, even none, and still say where the next one starts; a map
// group whose counts show no instance in the statuses asked is skipped as
// one entry.
const (
	DefaultTaskPage = 100
	MaxTaskPage     = 1000
	TaskPageScan    = 20000
)

// DAGHead returns one DAG with at most limit of its tasks (MaxViewTasks
// when limit is below 0 or above it), in submission order, and whether
// some were left out.
func (c *Core) DAGHead(id string, limit int) (v *DAGView, truncated bool, ok bool) {
	d := c.dags[id]
	if d == nil {
		return nil, false, false
	}
	if limit < 0 || limit > MaxViewTasks {
		limit = MaxViewTasks
	}
	n := min(len(d.tasks), limit)
	v = &DAGView{DAGSummary: d.summary(), Params: d.rec.Params, Scheduled: d.rec.Scheduled, Tasks: make([]TaskView, n)}
	for i := range n {
		v.Tasks[i] = d.tasks[i].view()
		v.Tasks[i].Waiting = c.waitReason(&d.tasks[i])
	}
	return v, n < len(d.tasks), true
}

// StatusSet is a set of statuses; the zero set selects every status.
type StatusSet uint16

// Add adds s to the set.
func (m StatusSet) Add(s Status) StatusSet { return m | 1<<s }

// Has reports whether the set selects s.
func (m StatusSet) Has(s Status) bool { return m == 0 || m&(1<<s) != 0 }

// any reports whether counts hold a task the set selects.
func (m StatusSet) any(counts *[numStatuses]int32) bool {
	for s := Status(0); s < numStatuses; s++ {
		if counts[s] > 0 && m.Has(s) {
			return true
		}
	}
	return false
}

// TaskCursor is where a walk of a DAG's tasks stands: at task Task (an
// index in submission order) itself when Instance is 0, else at its
// instance Instance-1. Its text (String, ParseTaskCursor) is what the API
// hands out.
type TaskCursor struct {
	Task     int32
	Instance int32
}

func (k TaskCursor) String() string {
	return strconv.Itoa(int(k.Task)) + "." + strconv.Itoa(int(k.Instance))
}

// ParseTaskCursor reads a cursor String wrote.
func ParseTaskCursor(s string) (TaskCursor, error) {
	a, b, ok := strings.Cut(s, ".")
	i, err1 := strconv.ParseInt(a, 10, 32)
	j, err2 := strconv.ParseInt(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || i < 0 || j < 0 {
		return TaskCursor{}, fmt.Errorf("cursor %q is not one a page of tasks handed out", s)
	}
	return TaskCursor{Task: int32(i), Instance: int32(j)}, nil
}

// TaskQuery selects a page of a DAG's tasks.
type TaskQuery struct {
	Statuses StatusSet
	// Group, when set, names a map group: only its instances are listed.
	Group string
	// Members, when set, lists the only tasks to walk, by index, ascending
	// (a shape node's, Shape), each with its instances.
	Members []int32
	From    TaskCursor
	Limit   int // at most MaxTaskPage; 0: DefaultTaskPage
}

// TaskPageResult is a page of a DAG's tasks; Next is where the next page
// starts, nil when the walk is over.
type TaskPageResult struct {
	Tasks []TaskView
	Next  *TaskCursor
}

// ErrNoGroup answers a TaskQuery whose Group is not a map group of the DAG.
var ErrNoGroup = errors.New("not a map group")

// TaskPage returns a page of a DAG's tasks in submission order, each map
// group followed by its instances, from q.From; ok is false when there is
// no DAG id. It examines at most TaskPageScan entries.
func (c *Core) TaskPage(id string, q TaskQuery) (*TaskPageResult, bool, error) {
	d := c.dags[id]
	if d == nil {
		return nil, false, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultTaskPage
	}
	limit = min(limit, MaxTaskPage)
	out := &TaskPageResult{Tasks: []TaskView{}}
	scan := TaskPageScan
	// take adds t when it is selected; it returns false once the page is
	// full or its scan spent, with out.Next at at.
	take := func(t *task, at TaskCursor) bool {
		if len(out.Tasks) == limit || scan == 0 {
			out.Next = &at
			return false
		}
		scan--
		if q.Statuses.Has(t.status) {
			v := t.view()
			v.Waiting = c.waitReason(t)
			out.Tasks = append(out.Tasks, v)
		}
		return true
	}
	// walkInstances walks group i's instances from j.
	walkInstances := func(i int32, j int32) bool {
		g := d.groups[i]
		if g == nil {
			return true
		}
		if q.Statuses != 0 && !q.Statuses.any(&g.counts) {
			if scan == 0 {
				out.Next = &TaskCursor{Task: i, Instance: j + 1}
				return false
			}
			scan--
			return true
		}
		for ; int(j) < len(g.inst); j++ {
			if !take(&g.inst[j], TaskCursor{Task: i, Instance: j + 1}) {
				return false
			}
		}
		return true
	}
	if q.Group != "" {
		i, ok := d.indexOf(q.Group)
		if !ok || !isGroup(&d.tasks[i]) {
			return nil, true, ErrNoGroup
		}
		if q.From.Task != i {
			q.From = TaskCursor{Task: i, Instance: 1}
		}
		walkInstances(i, max(q.From.Instance-1, 0))
		return out, true, nil
	}
	// walk walks task i from instance j (0: the task itself first).
	walk := func(i int32, j int32) bool {
		if j == 0 {
			if !take(&d.tasks[i], TaskCursor{Task: i}) {
				return false
			}
			j = 1
		}
		return walkInstances(i, j-1)
	}
	if q.Members != nil {
		k := sort.Search(len(q.Members), func(k int) bool { return q.Members[k] >= q.From.Task })
		for ; k < len(q.Members); k++ {
			i, j := q.Members[k], int32(0)
			if int(i) >= len(d.tasks) {
				break
			}
			if i == q.From.Task {
				j = q.From.Instance
			}
			if !walk(i, j) {
				break
			}
		}
		return out, true, nil
	}
	for i := q.From.Task; int(i) < len(d.tasks); i++ {
		j := int32(0)
		if i == q.From.Task {
			j = q.From.Instance
		}
		if !walk(i, j) {
			break
		}
	}
	return out, true, nil
}

// DAGSeq returns the revision that created DAG id: with its id, what tells
// it from an earlier DAG of the same id.
func (c *Core) DAGSeq(id string) (int64, bool) {
	d := c.dags[id]
	if d == nil {
		return 0, false
	}
	return d.seq, true
}

// DAGOrder yields every DAG's id with its DAGSeq, in no order: what an
// index of the DAGs is built from.
func (c *Core) DAGOrder() iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		for id, d := range c.dags {
			if !yield(id, d.seq) {
				return
			}
		}
	}
}

// DAGsFrom lists the DAGs q selects among those newest yields, newest
// first, with the DAGSeq it knew them by; an id whose DAG is gone, or is
// another DAG now (its seq differs), is passed over. It costs the DAGs
// it passes, not every DAG held.
func (c *Core) DAGsFrom(q DAGQuery, newest iter.Seq2[string, int64]) []DAGSummary {
	out := []DAGSummary{}
	for id, seq := range newest {
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
		if d := c.dags[id]; d != nil && d.seq == seq {
			if s, ok := q.pick(d); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
