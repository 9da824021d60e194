// Package core is Orion's scheduling state machine. It has no goroutines, no
// clock, no I/O and no randomness: callers feed it committed log entries
// (Apply, on every replica) and, on the leader, observations (a worker's
// result, a timer that fired, a submission), and collect its outputs:
// proposals to commit to the log and effects to perform once they are
// committed. Modelled on go.etcd.io/raft's split between a pure state machine
// and the code that moves its messages.
//
// Invariant I1: state changes only by applying committed entries, on the
// leader exactly as on a standby. The leader never changes state when it
// proposes; it marks the task in flight so it does not propose twice.
package core

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// Config holds the scheduling policy. Zero fields take the defaults.
type Config struct {
	RetryBase   time.Duration // first retry waits 2×RetryBase; default 1 s
	RetryCap    time.Duration // no retry waits longer; default 30 s
	OrphanGrace time.Duration // how long a new leader waits for a worker to report an attempt; default 2 s
	// PoolLimits bounds the running tasks of each pool (tasks that require
	// the label pool=<name>); a pool absent or at 0 has no bound.
	PoolLimits map[string]int
	// MaxOutputBytes bounds a task's outputs (model.CheckOutputs); default
	// model.DefaultMaxOutputBytes. Attempts carry it to their workers.
	MaxOutputBytes int
	// MaxLiveDAGs bounds the DAGs running at once (submitted or retried, not
	// finished) and MaxLiveTasks the tasks of those DAGs (all of them,
	// finished or not, until their DAG finishes): a submission or retry past
	// either is refused (limits.go). 0: no bound.
	MaxLiveDAGs  int
	MaxLiveTasks int
	// MaxItems bounds a map group's instances (default
	// model.DefaultMaxItems) and MaxItemsBytes its items as its record
	// holds them (default 1 MiB; the server derives it from
	// etcd_max_request_bytes): an expansion past either fails its group
	// for good (mapgroup.go).
	MaxItems      int
	MaxItemsBytes int
}

func (c Config) withDefaults() Config {
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.RetryCap <= 0 {
		c.RetryCap = 30 * time.Second
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = 2 * time.Second
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = model.DefaultMaxOutputBytes
	}
	if c.MaxItems <= 0 {
		c.MaxItems = model.DefaultMaxItems
	}
	if c.MaxItemsBytes <= 0 {
		c.MaxItemsBytes = DefaultMaxItemsBytes
	}
	return c
}

// Backoff is the delay before retry number n (1-based): min(base·2^n, cap).
func (c Config) Backoff(n int) time.Duration {
	c = c.withDefaults()
	d := c.RetryBase
	for i := 0; i < n; i++ {
		d *= 2
		if d >= c.RetryCap {
			return c.RetryCap
		}
	}
	return d
}

// Core is the scheduling state of all DAGs. It is owned by one goroutine.
type Core struct {
	cfg    Config
	dags   map[string]*dagRun
	rev    int64            // highest revision applied
	counts [numStatuses]int // tasks per status over all DAGs
	// poolRunning counts running tasks per required pool label (see pools.go).
	poolRunning map[string]int
	// live counts the running DAGs and their tasks (limits.go).
	live liveCount

	// workerIDs interns the worker ids of applied records (intern.go): a
	// cache, not state.
	workerIDs map[string]string

	// Leader-only state below: volatile, never part of what replicas agree
	// on, dropped by StepDown.
	leader        bool
	bulk          bool // BecomeLeader is queueing the ready tasks (pools.go)
	now           time.Time
	outbox        []Entry
	effects       []Effect
	workers       map[string]*worker
	workerList    []*worker
	pendingSubmit map[string]*DAGRecord
	ahead         []*task // dependents of successes proposed since Schedule last ran
	judging       []*task // ready tasks whose conditions Schedule judges (rules.go)
	stats         Stats
	classes       map[string]*class // ready queues by constraints (pools.go)
	classList     []*class          // the same, in creation order
	poolReserved  map[string]int    // dispatches in flight per pool
	earlyOff      bool              // no early attempts at all (SuspendEarly)
	// unsealed holds the early dispatch records not yet taken into a
	// transaction, each with its task: the ones a success may be folded
	// into (Seal).
	unsealed map[*TaskRecord]*task
	// pendingLive counts the DAGs (and their tasks) proposed to run, by a
	// submission or a retry, whose record is not applied yet (limits.go).
	pendingLive liveCount
	// handovers are the pod attempts whose worker is gone, waiting for
	// another (handover.go).
	handovers []*task
	// cleanups are the cancelled pod attempts that no worker held, each
	// waiting for a pod worker to delete its pod (handover.go).
	cleanups []cleanup
}

type dagRun struct {
	id         string
	rec        *DAGRecord
	seq        int64 // revision that created the DAG: submission order, and identity (model.Attempt.Submission)
	tasks      []task
	index      taskIndex // by id, the DAG's tasks (index.go)
	deps       edges     // each task's dependencies, by position
	dependents edges     // and the tasks that depend on it
	remaining  int       // tasks not in a terminal status
	counts     [numStatuses]int32
	deleted    bool

	// Trigger rules, handlers and notifications (rules.go). d.tasks holds
	// the DAG file's tasks first, in order, then its handlers, then its
	// notifications: their specs are in hooks, built once from the record.
	nTasks, nHandlers int32
	hooks             []model.Task
	byRole            [numRoles][numStatuses]int32
	// contFailed counts the failed tasks of each role whose
	// continue_on_failure makes their failure count as a success.
	contFailed [numRoles]int32
	conds      map[int32]*expr.Program // compiled `when:` conditions, by task, as evaluated
	// readsNothing: no task reads another's state (exprenv.go). plain:
	// besides, no task has a condition, a for_each or required labels,
	// and the DAG no max_active_tasks: its ready tasks queue in the class
	// without constraints as they are (BecomeLeader passes a million of
	// them without reading a spec). onePrio: every task has priority prio.
	readsNothing, plain, onePrio bool
	prio                         int
	// awaiting: leader: ready tasks whose condition or templates read a
	// task that has not ended yet (rules.go, readsUnended), by the
	// position of the first such task: its end looks at them again.
	awaiting map[int32][]*task

	inflight   bool     // leader: a proposal for the DAG record is being committed
	retrying   bool     // leader: that proposal is a retry, counted in pendingLive
	wantCancel bool     // leader: cancel once the in-flight proposal is applied
	reserved   int32    // leader: dispatches proposed and not yet applied
	classes    []*class // leader: the classes bound to this DAG's max_active_tasks
	parked     bool     // leader: the store refused its record in flight (Poisoned)

	// Leader caches of what templates read (exprenv.go), derived from
	// committed records, never stored.
	tpls    []*taskTemplates         // compiled templates by task, built at first dispatch
	params  map[string]any           // the parameters, decoded
	outputs map[int32]decodedOutputs // tasks' outputs, decoded

	// Map groups (mapgroup.go): the expanded groups by task index, with
	// their instances, and how many groups are running (expanded, not
	// ended), which max_active_tasks does not count.
	forEach       map[int32]*expr.Program // leader: compiled for_each expressions, by task
	groups        map[int32]*group
	groupsRunning int32
	instances     int // instances of all groups: live counts them with the DAG's tasks
}

type task struct {
	// Pointers first, then the 32-bit counters, then the flags: the
	// struct is held once per task of every live DAG (a million of them
	// on a loaded replica), so its padding is kept at none.
	dag   *dagRun
	rec   *TaskRecord   // latest applied record; nil until the task first runs
	cls   *class        // leader: the class it queues in, once known
	stash *model.Result // leader: a result that arrived while inflight
	// reserved: leader: the worker whose slot the dispatch holds.
	reserved *worker
	// early is the leader's dispatch proposal of an attempt already sent
	// to its worker (see Core.AllowEarly). Until the engine takes it into a
	// transaction (Seal) a success reported for the attempt is written into
	// it, so the task costs one record instead of two.
	early *TaskRecord
	// grp is the map group of a mapped instance (nil for any other task)
	// and ii its index in it; its id, "process[3]", is the group's
	// (group.ids; mapgroup.go). An instance's idx is its group's: it
	// shares the group's spec, role and templates, never its dependencies.
	grp *group
	// readyAt: leader: when the task became ready (metrics), in Unix
	// nanoseconds (0: not known): a time.Time would take three times the
	// room in every task.
	readyAt int64

	idx     int32
	waiting int32 // dependencies that have not succeeded (or failed with continue_on_failure)
	bad     int32 // dependencies that ended failed for it: failed, upstream_failed or cancelled
	skipped int32 // dependencies that ended skipped
	ii      int32
	// expanding: leader: the instances of this group's expansion in
	// flight, counted in Core.pendingLive until its record applies.
	expanding int32

	status      Status
	queued      bool // in its class's ready queue
	inflight    bool // leader: a proposal for this task is being committed
	dispatching bool // leader: that proposal is our dispatch
	// homeless: leader: a pod attempt whose worker is gone, in
	// Core.handovers; handingOver: the proposal in flight hands it over to
	// the worker reserved (handover.go); ended: a pod attempt whose
	// worker reported its end, or was told to stop it, while its record
	// was in flight: a cancellation applied next needs no clean-up.
	homeless, handingOver, ended bool
	awaiting                     bool // leader: in its DAG's awaiting list
}

// setReadyAt and readyTime keep when a task became ready.
func (t *task) setReadyAt(now time.Time) {
	t.readyAt = 0
	if !now.IsZero() {
		t.readyAt = now.UnixNano()
	}
}

func (t *task) readyTime() time.Time {
	if t.readyAt == 0 {
		return time.Time{}
	}
	return time.Unix(0, t.readyAt).UTC()
}

func (t *task) spec() *model.Task {
	if d := t.dag; t.idx >= d.nTasks {
		return &d.hooks[t.idx-d.nTasks]
	}
	return &t.dag.rec.Tasks[t.idx]
}

func (t *task) id() string {
	if t.grp != nil {
		return t.grp.ids[t.ii]
	}
	return t.spec().ID
}

// attempt is the number of the latest attempt, 0 before the first.
func (t *task) attempt() int {
	if t.rec == nil {
		return 0
	}
	return t.rec.Attempt
}

// retries counts the retries consumed in the DAG's current run.
func (t *task) retries() int {
	if t.rec == nil || t.rec.Run != t.dag.rec.Run {
		return 0
	}
	return t.rec.Retries
}

// sentEarly reports whether the attempt of that number on that worker was
// sent with t's dispatch proposal, whose record is not applied yet.
func (t *task) sentEarly(attempt int, worker string) bool {
	return t.early != nil && t.early.Attempt == attempt && t.early.Worker == worker
}

// isEarly reports whether rec is the task's early dispatch proposal (or its
// success folded into it), as committed: the leader applies its own
// proposal, a test its JSON round trip.
func (t *task) isEarly(rec *TaskRecord) bool {
	e := t.early
	return e != nil && (rec == e || rec.Attempt == e.Attempt && rec.Worker == e.Worker && rec.Status == e.Status && rec.Event == e.Event)
}

func (t *task) attemptID() model.AttemptID {
	return model.AttemptID{DAG: t.dag.id, Task: t.id(), Attempt: t.attempt()}
}

// New returns an empty core.
func New(cfg Config) *Core {
	return &Core{cfg: cfg.withDefaults(), dags: make(map[string]*dagRun)}
}

// Config returns the policy in force.
func (c *Core) Config() Config { return c.cfg }

// Rev is the highest revision applied.
func (c *Core) Rev() int64 { return c.rev }

// ApplyError reports an entry the state machine refuses: an illegal
// transition or a record that does not fit the DAG. On a correct leader it
// never happens; hand-written etcd values can cause it.
type ApplyError struct {
	Entry string
	Msg   string
}

func (e *ApplyError) Error() string { return e.Entry + ": " + e.Msg }

func applyErr(e *Entry, format string, args ...any) error {
	name := e.DAG
	if e.Task != "" {
		name += "/" + e.Task
	}
	return &ApplyError{Entry: fmt.Sprintf("%s@%d", name, e.Rev), Msg: fmt.Sprintf(format, args...)}
}

// Apply applies one committed entry. It validates before it mutates, so an
// entry that returns an error leaves the state as it was.
func (c *Core) Apply(e *Entry) error {
	if e.Rev > c.rev {
		c.rev = e.Rev
	}
	if e.Task != "" {
		return c.applyTask(e)
	}
	if e.Delete {
		c.applyDelete(e)
		return nil
	}
	return c.applyDAG(e)
}

func (c *Core) applyDelete(e *Entry) {
	d := c.dags[e.DAG]
	if d == nil {
		return
	}
	d.each(func(t *task) {
		c.counts[t.status]--
		c.countRunning(t, t.status, Pending)
		if t.dispatching {
			c.unreserve(t)
			t.dispatching = false
		}
		if t.handingOver {
			c.abandonHandover(t)
		}
		if c.leader && t.early != nil {
			c.cancelEarly(t) // its dispatch record now cannot apply
		}
		if c.leader {
			c.settleExpansion(t)
		}
		if c.leader && t.status == Running && t.rec != nil {
			c.releaseAttempt(t.attemptID(), t.rec.Worker)
			if !isGroup(t) {
				c.effects = append(c.effects, Effect{Kind: EffectCancel, Worker: t.rec.Worker, ID: t.attemptID()})
			}
		}
	})
	if d.rec.Status == DAGRunning {
		c.live.add(d, -1) // deleted by hand while running
	}
	c.settleRetry(d)
	d.deleted = true
	c.dropClasses(d)
	delete(c.dags, e.DAG)
}

func (c *Core) applyDAG(e *Entry) error {
	rec := e.D
	if rec == nil {
		return applyErr(e, "DAG entry without a record")
	}
	d := c.dags[e.DAG]
	if d == nil {
		if rec.Status != DAGRunning || rec.Run != 1 || rec.CancelRequested {
			return applyErr(e, "a new DAG must be running in run 1, got %s in run %d", rec.Status, rec.Run)
		}
		d, err := newDAGRun(e.DAG, rec, e.Rev)
		if err != nil {
			return applyErr(e, "%v", err)
		}
		c.dags[e.DAG] = d
		c.live.add(d, 1)
		c.counts[Pending] += len(d.tasks)
		if c.leader {
			// Counted live now: before its tasks become ready, which may
			// propose a map group's expansion that counts the live tasks.
			if p := c.pendingSubmit[e.DAG]; p != nil {
				delete(c.pendingSubmit, e.DAG)
				c.pendingLive.subSpec(&p.DAG)
			}
		}
		for i := range d.tasks[:d.nTasks] {
			if t := &d.tasks[i]; len(d.depsOf(int32(i))) == 0 {
				c.setStatus(t, Ready) // no dependency: every rule says run
			}
		}
		if c.leader {
			c.reconcileDAG(d)
		}
		return nil
	}

	if !sameSpec(&d.rec.DAG, &rec.DAG) {
		return applyErr(e, "DAG record's tasks differ from the DAG submitted under this id")
	}
	if len(rec.Tasks) > 0 && &rec.Tasks[0] != &d.rec.Tasks[0] {
		// The same tasks, decoded again: keep one copy (index.go).
		rec.Tasks = d.rec.Tasks
	}
	from, to := d.rec.Status, rec.Status
	if from == to && rec.Run == d.rec.Run {
		if d.rec.CancelRequested && !rec.CancelRequested {
			return applyErr(e, "a DAG's cancellation cannot be withdrawn")
		}
		// A cancellation requested (with what runs at the DAG's end still
		// to run), or a re-put of the same state (by hand, say), which
		// changes nothing.
		requested := rec.CancelRequested && !d.rec.CancelRequested
		d.rec = rec
		if c.leader {
			c.settleRetry(d)
			d.inflight = false
			if requested {
				d.each(func(t *task) {
					if t.idx < d.nTasks {
						c.reconcileTask(t)
					}
				})
			}
			// The queues dropped the DAG's ready tasks while its record
			// was in flight (dispatchable), and their conditions wait
			// for it (conditionDue): those that may still run, its
			// handlers and notifications, go back.
			d.each(func(t *task) {
				if dispatchable(t) {
					c.becameReady(t)
				}
			})
			c.reconcileDAG(d)
		}
		return nil
	}
	if !dagAllowed(from, to) {
		return applyErr(e, "DAG cannot go from %s to %s", from, to)
	}
	switch to {
	case DAGRunning:
		if rec.Run != d.rec.Run+1 {
			return applyErr(e, "a retry must start run %d, got %d", d.rec.Run+1, rec.Run)
		}
		if d.remaining != 0 {
			return applyErr(e, "cannot retry while %d tasks are not finished", d.remaining)
		}
		if rec.CancelRequested {
			return applyErr(e, "a retry cannot start cancelled")
		}
	default:
		if rec.Run != d.rec.Run {
			return applyErr(e, "a %s record for run %d, DAG is in run %d", to, rec.Run, d.rec.Run)
		}
	}
	switch to {
	case DAGSucceeded:
		if d.remaining != 0 || d.end() != DAGSucceeded {
			return applyErr(e, "DAG cannot succeed with %d tasks unfinished and %d failed", d.remaining, d.failures(roleTask)+d.failures(roleHandler))
		}
	case DAGFailed:
		if d.remaining != 0 || d.end() == DAGSucceeded {
			return applyErr(e, "DAG cannot fail while %d tasks are unfinished or none failed", d.remaining)
		}
	}
	d.rec = rec
	if c.leader {
		c.settleRetry(d) // whatever applied, the DAG's proposal is over
	}
	switch {
	case to.Terminal() && !from.Terminal():
		c.live.add(d, -1)
	case !to.Terminal() && from.Terminal():
		c.live.add(d, 1)
	}
	if to.Terminal() {
		d.wantCancel = false // a cancel asked for while the DAG finished is moot
	}
	if to == DAGRunning {
		c.resetForRetry(d)
	}
	if c.leader {
		d.inflight = false
		// A cancellation cancels every unfinished task; a retry may find
		// tasks its rules skip (or fail) at once.
		if to == DAGCancelled || to == DAGRunning {
			d.each(c.reconcileTask)
		}
		if to == DAGRunning {
			// A map group made ready by the retry was looked at while the
			// retry's record was in flight: it expands now.
			for i := range d.tasks[:d.nTasks] {
				if t := &d.tasks[i]; isGroup(t) && dispatchable(t) {
					c.becameReady(t)
				}
			}
		}
		c.reconcileDAG(d)
	}
	return nil
}

// resetForRetry starts a DAG's new run: every task that did not succeed goes
// back to pending, keeping its attempt counter so attempt ids never repeat;
// so do its handlers and notifications, which run at each end.
func (c *Core) resetForRetry(d *dagRun) {
	// A map group's instances are kept as they ended, with their items:
	// those that did not succeed run again when the group expands again
	// (mapgroup.go), and not if it does not.
	for i := range d.tasks {
		if t := &d.tasks[i]; t.status != Succeeded || t.idx >= d.nTasks {
			c.setStatus(t, Pending)
		}
	}
	c.recomputeReadiness(d)
}

// recomputeReadiness recounts each task's dependencies by outcome and moves
// the pending tasks whose trigger rule says run to ready.
func (c *Core) recomputeReadiness(d *dagRun) {
	for i := range d.tasks[:d.nTasks] {
		t := &d.tasks[i]
		deps := d.depsOf(int32(i))
		t.waiting, t.bad, t.skipped = int32(len(deps)), 0, 0
		for _, j := range deps {
			t.count(d.tasks[j].outcome())
		}
	}
	for i := range d.tasks {
		if t := &d.tasks[i]; t.status == Pending && c.verdict(t) == run {
			c.setStatus(t, Ready)
		}
	}
}

func newDAGRun(id string, rec *DAGRecord, seq int64) (*dagRun, error) {
	if len(rec.Tasks) == 0 {
		return nil, fmt.Errorf("DAG has no tasks")
	}
	handlers := rec.Handlers()
	hooks := make([]model.Task, 0, len(handlers)+len(rec.Notify))
	for _, h := range handlers {
		s := *h.Task
		s.ID = h.ID
		hooks = append(hooks, s)
	}
	for i := range rec.Notify {
		hooks = append(hooks, notifySpec(&rec.Notify[i], i))
	}
	n := len(rec.Tasks) + len(hooks)
	if cap(rec.Tasks) > len(rec.Tasks) {
		// A decoder grows the slice as it reads: up to twice the room
		// of a task spec (384 bytes), held as long as the DAG lives.
		rec.Tasks = append(make([]model.Task, 0, len(rec.Tasks)), rec.Tasks...)
	}
	internSpec(rec.Tasks)
	d := &dagRun{
		id:        id,
		rec:       rec,
		seq:       seq,
		tasks:     make([]task, n),
		index:     newTaskIndex(n),
		remaining: n,
		nTasks:    int32(len(rec.Tasks)),
		nHandlers: int32(len(handlers)),
		hooks:     hooks,
	}
	d.counts[Pending] = int32(n)
	d.byRole[roleTask][Pending] = d.nTasks
	d.byRole[roleHandler][Pending] = d.nHandlers
	d.byRole[roleNotify][Pending] = int32(len(rec.Notify))
	for i := range d.tasks {
		t := &d.tasks[i]
		t.dag, t.idx = d, int32(i)
		if !d.addIndex(int32(i)) {
			return nil, fmt.Errorf("duplicate task id %q", t.id())
		}
	}
	// Dependencies in one flat list, dependants in another (index.go).
	edgesN := 0
	for i := range rec.Tasks {
		edgesN += len(rec.Tasks[i].DependsOn)
	}
	d.deps = edges{start: make([]int32, n+1), list: make([]int32, 0, edgesN)}
	d.dependents = edges{start: make([]int32, n+1), list: make([]int32, edgesN)}
	for i := range rec.Tasks {
		spec := &rec.Tasks[i]
		d.deps.start[i] = int32(len(d.deps.list))
		for k, dep := range spec.DependsOn {
			j, ok := d.indexOf(dep)
			if !ok {
				return nil, fmt.Errorf("task %q depends on unknown task %q", spec.ID, dep)
			}
			// The dependency's own id: a decoded spec holds a copy of
			// each id per edge.
			spec.DependsOn[k] = d.tasks[j].id()
			d.deps.list = append(d.deps.list, j)
			d.dependents.start[j+1]++
		}
		d.tasks[i].waiting = int32(len(spec.DependsOn))
	}
	for i := len(rec.Tasks); i < n; i++ {
		d.deps.start[i+1] = int32(len(d.deps.list))
	}
	d.deps.start[len(rec.Tasks)] = int32(len(d.deps.list))
	for i := 1; i <= n; i++ {
		d.dependents.start[i] += d.dependents.start[i-1]
	}
	fill := make([]int32, n)
	for i := range rec.Tasks {
		for _, j := range d.depsOf(int32(i)) {
			d.dependents.list[d.dependents.start[j]+fill[j]] = int32(i)
			fill[j]++
		}
	}
	d.readsNothing = readsNothing(rec.Tasks)
	d.plain = d.readsNothing && rec.MaxActiveTasks == 0
	d.onePrio, d.prio = true, d.tasks[0].spec().Priority
	for i := range d.tasks {
		s := d.tasks[i].spec()
		if s.Priority != d.prio {
			d.onePrio = false
		}
		if s.When != "" || s.ForEach.IsSet() || len(s.Requires()) > 0 {
			d.plain = false
		}
	}
	return d, nil
}

func (c *Core) applyTask(e *Entry) error {
	d := c.dags[e.DAG]
	if d == nil {
		return applyErr(e, "unknown DAG")
	}
	t := d.find(e.Task)
	if t == nil {
		return applyErr(e, "DAG has no task %q", e.Task)
	}
	rec := e.T
	if rec == nil {
		return applyErr(e, "task entry without a record")
	}
	err := c.checkTask(e, t)
	var items []json.RawMessage
	if err == nil && isGroup(t) {
		items, err = c.checkExpand(e, t)
	}
	if err != nil {
		if c.leader && t.isEarly(rec) {
			c.refusedEarly(t)
		}
		return err
	}
	from, to := t.status, rec.Status
	prev := t.rec
	c.intern(rec)
	t.rec = rec
	c.setStatus(t, to)
	if items != nil {
		c.expanded(t, items)
	}
	if to.Terminal() {
		c.ended(t)
	}
	if c.leader {
		c.afterTaskApplied(t, from, prev)
	}
	return nil
}

// checkTask validates a task record against the task's state and the
// transition table, before anything changes.
func (c *Core) checkTask(e *Entry, t *task) error {
	d, rec := t.dag, e.T
	from, to := t.status, rec.Status
	// A record that starts an attempt: a dispatch, a dispatch and its
	// success in one record (ready → succeeded), or a dispatch that could
	// not be recorded and failed the task (ready → failed): its attempt
	// number is used up, as the attempt may have been sent.
	starts := to == Running && from != Running || from == Ready && (to == Succeeded || to == Failed)
	switch {
	case rec.Run != d.rec.Run:
		return applyErr(e, "record of run %d, DAG is in run %d", rec.Run, d.rec.Run)
	case !recordAllowed(from, to):
		return applyErr(e, "a record cannot move a task from %s to %s", from, to)
	case from == Running && to == Running:
		return checkHandover(e, t)
	case starts && rec.Attempt != t.attempt()+1:
		return applyErr(e, "%s of attempt %d after attempt %d", startName(to), rec.Attempt, t.attempt())
	case !starts && rec.Attempt != t.attempt():
		return applyErr(e, "%s record for attempt %d, latest is %d", to, rec.Attempt, t.attempt())
	case starts && d.rec.Status != DAGRunning:
		return applyErr(e, "%s in a %s DAG", startName(to), d.rec.Status)
	case starts && d.rec.CancelRequested && t.idx < d.nTasks:
		return applyErr(e, "%s of a task in a DAG being cancelled", startName(to))
	case (to == UpstreamFailed) != rec.Cascade:
		return applyErr(e, "cascade flag %v on a %s record", rec.Cascade, to)
	}
	return nil
}

// startName names a record that starts an attempt, for errors.
func startName(to Status) string {
	switch to {
	case Succeeded:
		return "dispatch and success"
	case Failed:
		return "dispatch and failure"
	}
	return "dispatch"
}

// setStatus is the only place a task's status changes; it keeps the counters
// and the ready queue in step and asserts the transition table.
func (c *Core) setStatus(t *task, s Status) {
	if !allowed(t.status, s) && !(t.status == s) {
		panic(fmt.Sprintf("core: %s/%s: illegal transition %s → %s", t.dag.id, t.id(), t.status, s))
	}
	d := t.dag
	c.counts[t.status]--
	wasTerminal := t.status.Terminal()
	c.countRunning(t, t.status, s)
	d.count(t, s)
	c.counts[s]++
	switch {
	case s.Terminal() && !wasTerminal:
		d.remaining--
		if len(d.awaiting) > 0 && c.leader && t.grp == nil {
			c.wakeAwaiting(d, t.idx)
		}
	case !s.Terminal() && wasTerminal:
		d.remaining++
	}
	if t.grp != nil && s.Terminal() && !wasTerminal {
		c.instanceEnded(t)
	}
	if s == Ready && c.leader {
		// Only the leader dispatches; a standby's queue would only grow.
		// BecomeLeader queues every ready task.
		c.becameReady(t)
	}
}

// Restore replaces the whole state with a snapshot read from etcd at one
// revision: DAG entries (Rev = the key's create revision) and task entries.
// It is what a cold start and a standby that fell behind compaction use; it
// yields the same state as applying the history that led to the snapshot.
func (c *Core) Restore(rev int64, dags, tasks []Entry) []error {
	if c.leader {
		panic("core: Restore on a leader; call StepDown first")
	}
	// The leader-side counters are kept: they count events, not state,
	// and must not run backwards.
	*c = Core{cfg: c.cfg, dags: make(map[string]*dagRun, len(dags)), rev: rev, stats: c.stats}
	var errs []error
	sort.SliceStable(dags, func(i, j int) bool { return dags[i].Rev < dags[j].Rev })
	for k := range dags {
		e := &dags[k]
		if e.D == nil {
			continue
		}
		d, err := newDAGRun(e.DAG, e.D, e.Rev)
		if err != nil {
			errs = append(errs, applyErr(e, "%v", err))
			continue
		}
		c.dags[e.DAG] = d
		c.counts[Pending] += len(d.tasks)
		if d.rec.Status == DAGRunning {
			c.live.add(d, 1)
		}
	}
	// The DAG's own tasks first, then the instances of the groups their
	// records expanded (mapgroup.go), whatever order the keys came in.
	var instances []*Entry
	restore := func(e *Entry, t *task) {
		d := t.dag
		c.intern(e.T)
		t.rec = e.T
		s := e.T.Status
		switch {
		case t.grp != nil:
			// Reset only by its group's expansion in this run.
			if g := &d.tasks[t.idx]; e.T.Run < d.rec.Run && s != Succeeded && g.rec != nil && g.rec.Expanded == d.rec.Run {
				s = Pending
			}
		case e.T.Run < d.rec.Run && (s != Succeeded || t.idx >= d.nTasks):
			s = Pending // reset by the DAG's retry
		}
		c.forceStatus(t, s)
	}
	for k := range tasks {
		e := &tasks[k]
		d := c.dags[e.DAG]
		if d == nil || e.T == nil {
			errs = append(errs, applyErr(e, "task of unknown DAG"))
			continue
		}
		i, ok := d.indexOf(e.Task)
		if !ok {
			if _, _, inst := model.ParseInstanceID(e.Task); inst {
				instances = append(instances, e)
				continue
			}
			errs = append(errs, applyErr(e, "DAG has no task %q", e.Task))
			continue
		}
		t := &d.tasks[i]
		if isGroup(t) && len(e.T.Items) > 0 {
			items, err := splitItems(e.T.Items)
			if err != nil || len(items) == 0 {
				errs = append(errs, applyErr(e, "a map group's items do not read: %v", err))
			} else {
				c.materialize(t, e.T.Items, items)
			}
		}
		restore(e, t)
	}
	for _, e := range instances {
		t := c.dags[e.DAG].instance(e.Task)
		if t == nil {
			errs = append(errs, applyErr(e, "DAG has no task %q", e.Task))
			continue
		}
		restore(e, t)
	}
	for _, d := range c.dags {
		c.recomputeReadiness(d)
		for _, g := range d.groups {
			if r := d.tasks[g.idx].rec; r == nil || r.Expanded != d.rec.Run {
				continue // not expanded in this run (yet)
			}
			for i := range g.inst {
				if it := &g.inst[i]; it.status == Pending {
					c.setStatus(it, Ready) // as the expansion's apply made them
				}
			}
		}
	}
	return errs
}

// forceStatus sets a restored status without the transition check: a
// snapshot is a state, not a step.
func (c *Core) forceStatus(t *task, s Status) {
	d := t.dag
	c.counts[t.status]--
	if s.Terminal() && !t.status.Terminal() {
		d.remaining--
	}
	c.countRunning(t, t.status, s)
	d.count(t, s)
	c.counts[s]++
}
