package core

import (
	"fmt"
	"sort"

	"github.com/orion-sched/orion/internal/model"
)

// Worker pools and concurrency limits.
//
// A task may require worker labels (model.Task.Requires); a DAG may bound its
// running tasks (MaxActiveTasks); the policy may bound the running tasks of
// each pool (Config.PoolLimits, counted by the tasks' required pool label).
//
// Where each piece lives:
//   - Running counts are replicated state: d.counts[Running] and
//     c.poolRunning change only when committed records are applied, on every
//     replica alike (I1, I4). A new leader therefore starts from the counts
//     the log implies, attempts it has yet to see reported included, and a
//     limit holds across failover without any extra record.
//   - Worker labels and free slots are the leader's knowledge, an input like
//     the slot counts before them (AddWorker). Matching a task to a worker
//     happens in Schedule, on the leader only; its output is the dispatch
//     proposal, so the log still says who runs what.
//   - Dispatches proposed and not yet committed are reserved against the
//     limits (leader-only), so a burst of proposals cannot overshoot them.
//
// No head-of-line blocking: ready tasks are kept in classes, one heap per set
// of constraints (required labels, and the DAG when it has a limit). Every
// task of a class is placeable exactly when its head is, so Schedule takes
// the most urgent head among the classes and sets a class aside for the
// round as soon as its head cannot be placed; the other classes carry on in
// priority order. With no labels and no limits there is one class and the
// order is the one it always was.

// class is a set of ready tasks with the same constraints.
type class struct {
	key  string
	req  map[string]string // labels a worker must have; nil: any worker
	pool string            // req's pool label, which pool limits count by
	dag  *dagRun           // the DAG, when its max_active_tasks (or a map's max_active) bounds the class
	grp  *group            // the map group, when its max_active bounds the class
	q    readyQueue
}

// classOf returns (creating it) the class a task is queued in.
func (c *Core) classOf(t *task) *class {
	if t.cls != nil {
		return t.cls
	}
	var (
		req     map[string]string
		pool    string
		limited bool
		g       *group
	)
	if !t.dag.plain {
		s := t.spec()
		req, pool = s.Requires(), s.PoolName()
		limited = t.dag.rec.MaxActiveTasks > 0
		g = limitedGroup(t)
	}
	key := ""
	if len(req) > 0 || limited || g != nil {
		key = model.FormatLabels(req)
		if limited || g != nil {
			key += "\x00" + t.dag.id
		}
		if g != nil {
			// A map's max_active bounds its instances: a class of their own.
			key += "\x00" + t.dag.tasks[g.idx].id()
		}
	}
	cl := c.classes[key]
	if cl == nil {
		cl = &class{key: key, req: req, pool: pool, grp: g}
		if limited || g != nil {
			cl.dag = t.dag
			t.dag.classes = append(t.dag.classes, cl)
		}
		if c.classes == nil {
			c.classes = make(map[string]*class)
		}
		c.classes[key] = cl
		c.classList = append(c.classList, cl)
	}
	t.cls = cl
	return cl
}

// enqueue puts a ready task in its class's queue (leader only).
func (c *Core) enqueue(t *task) {
	if !t.dag.plain && isGroup(t) {
		c.expandGroup(t) // a map group runs no attempt: it expands
		return
	}
	cl := c.classOf(t)
	if c.bulk {
		if cl.key == "" && cl.q == nil {
			// The class of tasks without constraints, most of them.
			cl.q = make(readyQueue, 0, c.counts[Ready])
		}
		cl.q.add(t) // ordered once BecomeLeader has queued them all
		return
	}
	cl.q.push(t)
}

// dropClasses forgets the classes of a deleted DAG.
func (c *Core) dropClasses(d *dagRun) {
	for _, cl := range d.classes {
		delete(c.classes, cl.key)
		for i, x := range c.classList {
			if x == cl {
				c.classList = append(c.classList[:i], c.classList[i+1:]...)
				break
			}
		}
	}
	d.classes = nil
}

// dispatchable reports whether a queued task may still be dispatched; the
// queues drop the others lazily (they are queued again when they become
// ready).
func dispatchable(t *task) bool {
	// A DAG record in flight can only be a cancellation here (completion
	// and retry leave no ready task): never dispatch past it.
	return t.status == Ready && !t.inflight && !t.dag.deleted && t.dag.rec.Status == DAGRunning && !t.dag.inflight &&
		!ordinaryStopped(t)
}

// head drops the stale entries at the top of a class's queue and returns the
// task at its head, or nil when none is left.
func (cl *class) head() *task {
	for cl.q.Len() > 0 {
		if t := cl.q[0]; dispatchable(t) {
			return t
		}
		cl.q.pop()
	}
	return nil
}

// classHeap orders the classes of one Schedule round by their heads.
type classHeap []*class

func (h classHeap) less(i, j int) bool { return less(h[i].q[0], h[j].q[0]) }

func (h *classHeap) push(cl *class) {
	*h = append(*h, cl)
	for i := len(*h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		(*h)[i], (*h)[p] = (*h)[p], (*h)[i]
		i = p
	}
}

func (h *classHeap) pop() *class {
	old := *h
	n := len(old) - 1
	top := old[0]
	old[0] = old[n]
	*h = old[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		(*h)[i], (*h)[m] = (*h)[m], (*h)[i]
		i = m
	}
	return top
}

// dagActive counts a DAG's running tasks plus its dispatches in flight.
func dagActive(d *dagRun) int { return int(d.counts[Running] - d.groupsRunning + d.reserved) }

// poolActive counts a pool's running tasks plus its dispatches in flight.
func (c *Core) poolActive(pool string) int { return c.poolRunning[pool] + c.poolReserved[pool] }

// limitReason says which limit keeps a class's tasks from running, or "".
// Reservations count only on the leader: a standby has none.
func (c *Core) limitReason(d *dagRun, pool string) string {
	if lim := d.rec.MaxActiveTasks; lim > 0 {
		if n := dagActive(d); n >= lim {
			return fmt.Sprintf("DAG at max_active_tasks: %d of %d running", n, lim)
		}
	}
	if lim := c.cfg.PoolLimits[pool]; pool != "" && lim > 0 {
		if n := c.poolActive(pool); n >= lim {
			return fmt.Sprintf("pool %s at its limit: %d of %d running (pool_limits)", pool, n, lim)
		}
	}
	return ""
}

// reserve counts a dispatch proposal against the limits until it commits.
func (c *Core) reserve(t *task) {
	t.dag.reserved++
	if t.grp != nil {
		t.grp.reserved++
	}
	if p := t.spec().PoolName(); p != "" {
		if c.poolReserved == nil {
			c.poolReserved = make(map[string]int)
		}
		c.poolReserved[p]++
	}
}

// unreserve ends a dispatch's reservation: it committed (the running count
// has it now) or its DAG was deleted.
func (c *Core) unreserve(t *task) {
	t.dag.reserved--
	if t.grp != nil {
		t.grp.reserved--
	}
	if p := t.spec().PoolName(); p != "" {
		if c.poolReserved[p]--; c.poolReserved[p] <= 0 {
			delete(c.poolReserved, p)
		}
	}
}

// countRunning keeps the replicated per-pool running counts as a task's
// status changes from from to to.
func (c *Core) countRunning(t *task, from, to Status) {
	if (from == Running) == (to == Running) || isGroup(t) {
		return
	}
	p := t.spec().PoolName()
	if p == "" {
		return
	}
	if to == Running {
		if c.poolRunning == nil {
			c.poolRunning = make(map[string]int)
		}
		c.poolRunning[p]++
		return
	}
	if c.poolRunning[p]--; c.poolRunning[p] <= 0 {
		delete(c.poolRunning, p)
	}
}

// pickWorker returns the least loaded worker with a free slot whose labels
// include req (any worker when req is empty); ties go to the worker that
// registered first. A task that requires no pool prefers a worker outside
// every pool (without a pool label): it takes a pool's slot only when no
// other worker has one free, so that it never leaves a task that needs the
// pool waiting while a plain slot stays free.
func (c *Core) pickWorker(req map[string]string) *worker {
	anyPool := req[model.PoolLabel] == ""
	var best *worker
	for _, w := range c.workerList {
		if w.busy >= w.slots || !w.labels.Matches(req) {
			continue
		}
		if best == nil {
			best = w
			continue
		}
		if anyPool {
			wp, bp := w.labels[model.PoolLabel] != "", best.labels[model.PoolLabel] != ""
			if wp != bp {
				if !wp {
					best = w
				}
				continue
			}
		}
		if w.busy*best.slots < best.busy*w.slots {
			best = w
		}
	}
	return best
}

// waitReason says why a ready task is not running, when something other
// than its turn in the queue holds it back: a limit (any replica can tell,
// from committed state) or its required labels (only the leader knows the
// workers; a standby names the requirement). "" otherwise.
func (c *Core) waitReason(t *task) string {
	if t.status != Ready || t.inflight { // in flight: being dispatched
		return ""
	}
	s := t.spec()
	reasons := c.limitReason(t.dag, s.PoolName())
	if r := groupFull(t); r != "" {
		if reasons != "" {
			reasons += "; "
		}
		reasons += r
	}
	if req := s.Requires(); len(req) > 0 {
		if r := c.labelReason(req); r != "" {
			if reasons != "" {
				reasons += "; "
			}
			reasons += r
		}
	}
	return reasons
}

func (c *Core) labelReason(req map[string]string) string {
	labels := model.FormatLabels(req)
	if !c.leader {
		return "needs a worker with labels " + labels
	}
	var matching, free int
	for _, w := range c.workerList {
		if w.slots > 0 && w.labels.Matches(req) {
			matching++
			if w.busy < w.slots {
				free++
			}
		}
	}
	switch {
	case matching == 0:
		return "no connected worker has labels " + labels
	case free == 0:
		return fmt.Sprintf("every worker with labels %s is busy (%d)", labels, matching)
	}
	return ""
}

// Pool is a pool's running count and limit, as the API shows it.
type Pool struct {
	Name    string `json:"name"`
	Running int    `json:"running"`
	Limit   int    `json:"limit,omitempty"` // 0: none
}

// Pools lists every pool that has a limit or a running task, by name.
func (c *Core) Pools() []Pool {
	names := map[string]bool{}
	for p := range c.poolRunning {
		names[p] = true
	}
	for p, lim := range c.cfg.PoolLimits {
		if lim > 0 {
			names[p] = true
		}
	}
	out := make([]Pool, 0, len(names))
	for p := range names {
		out = append(out, Pool{Name: p, Running: c.poolRunning[p], Limit: c.cfg.PoolLimits[p]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
