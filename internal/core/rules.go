package core

import (
	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// Trigger rules, conditions, handlers and notifications.
//
// A task runs when its trigger rule says so, judged from counters of its
// dependencies by outcome (waiting, bad, skipped) that every replica updates
// in O(1) per dependency as each one ends (ended): a DAG of any size costs
// the same per event. The verdict is one of
//
//   - run: the task becomes ready, a derived transition every replica makes
//     alike, exactly as "all dependencies succeeded" always did;
//   - skip or upstream_failed: the leader proposes a record saying so
//     (event trigger_rule, or a cascade record naming the failed task),
//     which every replica applies, and whose end is counted by the tasks
//     downstream in turn: skipped and upstream_failed spread one level at a
//     time, each level one record;
//   - wait.
//
// A ready task with a `when:` condition is judged by the leader before it
// is queued (becameReady): false proposes a skipped record (event
// condition), an error a failed one (it would fail again). A verdict of run
// never turns into another as more dependencies end (see verdict), so a
// replica that rebuilds its state from a snapshot (Restore) reaches the
// same derived statuses as one that applied the history.
//
// Handlers (on_success, on_failure, on_exit) and notifications are tasks of
// the DAG after its own (roles): a handler waits for every task of the DAG
// file, a notification for those and the handlers. Their implicit
// dependencies are counted per DAG (byRole), not listed per task.

// role is what a task of a DAG is: one of the DAG file's tasks, a handler or
// a notification.
type role uint8

const (
	roleTask role = iota
	roleHandler
	roleNotify
	numRoles
)

func (d *dagRun) role(idx int32) role {
	switch {
	case idx < d.nTasks:
		return roleTask
	case idx < d.nTasks+d.nHandlers:
		return roleHandler
	}
	return roleNotify
}

// count moves t to status s in the DAG's counters.
func (d *dagRun) count(t *task, s Status) {
	if g := t.grp; g != nil {
		// An instance counts in its group's counters and the DAG's
		// totals, not by role: its group's end stands for it there.
		d.counts[t.status]--
		g.counts[t.status]--
		t.status = s
		d.counts[s]++
		g.counts[s]++
		return
	}
	spec := t.spec()
	if spec.ForEach.IsSet() && (t.status == Running) != (s == Running) {
		if s == Running {
			d.groupsRunning++
		} else {
			d.groupsRunning--
		}
	}
	r := d.role(t.idx)
	cont := spec.ContinueOnFailure
	if t.status == Failed && cont {
		d.contFailed[r]--
	}
	d.counts[t.status]--
	d.byRole[r][t.status]--
	t.status = s
	d.counts[s]++
	d.byRole[r][s]++
	if s == Failed && cont {
		d.contFailed[r]++
	}
}

// left counts the tasks of a role not yet ended.
func (d *dagRun) left(r role) int32 {
	c := &d.byRole[r]
	return c[Pending] + c[Ready] + c[Running] + c[Retrying]
}

// failures counts the tasks of a role whose end fails the DAG: failed
// without continue_on_failure, upstream_failed or cancelled.
func (d *dagRun) failures(r role) int32 {
	c := &d.byRole[r]
	return c[Failed] - d.contFailed[r] + c[UpstreamFailed] + c[Cancelled]
}

// outcome is how the tasks of the given roles ended, as a DAG status:
// cancelled if any was cancelled, failed if any failed for the DAG,
// succeeded otherwise (skipped tasks and failures with continue_on_failure
// included). Call it once they have all ended.
func (d *dagRun) outcome(roles ...role) DAGStatus {
	var failed int32
	for _, r := range roles {
		if d.byRole[r][Cancelled] > 0 {
			return DAGCancelled
		}
		failed += d.failures(r)
	}
	if failed > 0 {
		return DAGFailed
	}
	return DAGSucceeded
}

// end is the status the DAG ends with once every task has ended: the
// outcome of its tasks and handlers. A notification's failure never
// changes it.
func (d *dagRun) end() DAGStatus { return d.outcome(roleTask, roleHandler) }

// depOutcome is how a dependency ended, as its dependants count it.
type depOutcome uint8

const (
	notEnded depOutcome = iota
	endedOK             // succeeded, or failed with continue_on_failure
	endedBad            // failed, upstream_failed or cancelled
	endedSkipped
)

func (t *task) outcome() depOutcome {
	switch t.status {
	case Succeeded:
		return endedOK
	case Failed:
		if t.spec().ContinueOnFailure {
			return endedOK
		}
		return endedBad
	case UpstreamFailed, Cancelled:
		return endedBad
	case Skipped:
		return endedSkipped
	}
	return notEnded
}

// count takes the end of one dependency into t's counters.
func (t *task) count(o depOutcome) {
	switch o {
	case endedOK:
		t.waiting--
	case endedBad:
		t.bad++
	case endedSkipped:
		t.skipped++
	}
}

// ended takes t's end into account, on every replica: its dependants count
// it and are judged again, and the DAG's handlers or notifications once
// what they wait for has ended.
func (c *Core) ended(t *task) {
	if t.grp != nil {
		return // its group ends once they all have (mapgroup.go)
	}
	d := t.dag
	o := t.outcome()
	for _, j := range d.dependentsOf(t.idx) {
		dt := &d.tasks[j]
		dt.count(o)
		c.judge(dt)
	}
	switch d.role(t.idx) {
	case roleTask:
		if d.left(roleTask) == 0 {
			c.judgeRole(d, roleHandler)
			if d.left(roleHandler) == 0 {
				c.judgeRole(d, roleNotify)
			}
		}
	case roleHandler:
		if d.left(roleTask) == 0 && d.left(roleHandler) == 0 {
			c.judgeRole(d, roleNotify)
		}
	}
}

func (c *Core) judgeRole(d *dagRun, r role) {
	lo, hi := d.nTasks, d.nTasks+d.nHandlers
	if r == roleNotify {
		lo, hi = hi, int32(len(d.tasks))
	}
	for i := lo; i < hi; i++ {
		c.judge(&d.tasks[i])
	}
}

// judge acts on a pending task's verdict: run makes it ready (every
// replica); skip and upstream_failed are the leader's to propose.
func (c *Core) judge(t *task) {
	if t.status != Pending {
		return
	}
	switch v, _ := c.verdictWhy(t); v {
	case run:
		c.setStatus(t, Ready)
	case skip, upstreamFailed:
		if c.leader {
			c.reconcileTask(t)
		}
	}
}

// verdictKind is what a task's trigger rule says of it.
type verdictKind uint8

const (
	wait verdictKind = iota
	run
	skip
	upstreamFailed
)

// Why a task is skipped: the event of its skipped record.
const (
	SkipCondition   = "condition"    // its when: was false
	SkipTriggerRule = "trigger_rule" // its trigger rule said skip
	SkipNotNeeded   = "not_needed"   // a handler or notification the DAG's end does not call for
)

func (c *Core) verdict(t *task) verdictKind {
	v, _ := c.verdictWhy(t)
	return v
}

// verdictWhy judges a task by its trigger rule and the outcomes of its
// dependencies so far; for skip it says why. Every verdict but wait is
// final whatever the other dependencies do next, so it does not depend on
// the order they end in: the verdicts taken before every dependency has
// ended (run for one_success and one_failed, upstream_failed for
// all_success and none_failed, skip for all_failed) follow from outcomes
// that never go away, and the others wait for every dependency. That also
// makes run stable, which Restore relies on: it judges from the final
// counts what replay judged along the way.
func (c *Core) verdictWhy(t *task) (verdictKind, string) {
	d := t.dag
	switch d.role(t.idx) {
	case roleHandler:
		if d.left(roleTask) > 0 {
			return wait, ""
		}
		out := d.outcome(roleTask)
		switch id := t.id(); {
		case id == model.OnExitID,
			id == model.OnSuccessID && out == DAGSucceeded,
			id == model.OnFailureID && out == DAGFailed:
			return run, ""
		}
		return skip, SkipNotNeeded
	case roleNotify:
		if d.left(roleTask) > 0 || d.left(roleHandler) > 0 {
			return wait, ""
		}
		if d.rec.Notify[t.idx-d.nTasks-d.nHandlers].Sends(string(d.end())) {
			return run, ""
		}
		return skip, SkipNotNeeded
	}
	if t.grp != nil {
		return run, "" // an instance runs once its group expanded
	}
	n := int32(len(d.depsOf(t.idx)))
	if n == 0 {
		return run, "" // Airflow's too: a rule judges dependencies, and there are none
	}
	ok, bad, skipped := n-t.waiting, t.bad, t.skipped
	done := ok+bad+skipped == n
	switch t.spec().Rule() {
	case model.AllSuccess:
		// A failure decides at once; a skip waits for the others, so
		// that a failure among them wins whatever the order they end in.
		switch {
		case bad > 0:
			return upstreamFailed, ""
		case ok == n:
			return run, ""
		case done:
			return skip, SkipTriggerRule
		}
	case model.AllDone:
		if done {
			return run, ""
		}
	case model.OneSuccess:
		switch {
		case ok > 0:
			return run, ""
		case done && bad > 0:
			return upstreamFailed, ""
		case done:
			return skip, SkipTriggerRule
		}
	case model.OneFailed:
		switch {
		case bad > 0:
			return run, ""
		case done:
			return skip, SkipTriggerRule
		}
	case model.NoneFailed:
		switch {
		case bad > 0:
			return upstreamFailed, ""
		case done:
			return run, ""
		}
	case model.AllFailed:
		switch {
		case ok > 0 || skipped > 0:
			return skip, SkipTriggerRule
		case bad == n:
			return run, ""
		}
	default:
		// Validation refuses an unknown rule; one written into etcd by
		// hand is read as all_done would be, rather than wait forever.
		if done {
			return run, ""
		}
	}
	return wait, ""
}

// cascadeCause names the task whose failure makes t upstream_failed: the
// first dependency that ended badly, or the task its own cascade names.
func cascadeCause(t *task) string {
	d := t.dag
	for _, j := range d.depsOf(t.idx) {
		dep := &d.tasks[j]
		if dep.outcome() == endedBad {
			if dep.status == UpstreamFailed && dep.rec != nil && dep.rec.Cause != "" {
				return dep.rec.Cause
			}
			return dep.id()
		}
	}
	return ""
}

// ordinaryStopped reports whether t is one of the DAG file's tasks in a DAG
// whose cancellation is requested: it may not start, and is cancelled.
func ordinaryStopped(t *task) bool { return t.dag.rec.CancelRequested && t.idx < t.dag.nTasks }

// becameReady queues a task that became ready, on the leader, or, if its
// `when:` condition is yet to be judged, sets it aside for Schedule to
// judge (judgeConditions).
func (c *Core) becameReady(t *task) {
	if t.awaiting {
		return // looked at again when one of the tasks it reads ends
	}
	t.setReadyAt(c.now)
	if j, ok := c.firstUnended(t, nil); ok {
		d := t.dag
		t.awaiting = true
		if d.awaiting == nil {
			d.awaiting = make(map[int32][]*task)
		}
		d.awaiting[j] = append(d.awaiting[j], t)
		return
	}
	if !t.dag.plain && t.spec().When != "" {
		c.judging = append(c.judging, t)
		return
	}
	c.enqueue(t)
}

// readsUnended reports whether t's condition or templates read a task
// (other than except) that has not ended. Such a read would depend on when
// it is made: under one_success or one_failed a task starts while other
// dependencies, and what they wait for, still run, and a condition judged
// then could be judged otherwise by a leader after a takeover, a template
// render a missing output. So t waits, ready, until every task it reads has
// ended; what it reads is then final. Handlers and notifications run once
// every task has ended.
func (c *Core) readsUnended(t *task, except *task) bool {
	_, ok := c.firstUnended(t, except)
	return ok
}

// firstUnended is readsUnended that also says which task (by position) it
// found unended first: t waits for that one's end (wakeAwaiting).
func (c *Core) firstUnended(t *task, except *task) (int32, bool) {
	d := t.dag
	if t.idx >= d.nTasks || d.readsNothing {
		return 0, false
	}
	unended := func(j int32) bool {
		r := &d.tasks[j]
		return r != except && r != t && !r.status.Terminal()
	}
	if t.spec().When != "" {
		if p, err := c.program(t); err == nil {
			for _, id := range p.Refs().Tasks {
				if j, ok := d.indexOf(id); ok && unended(j) {
					return j, true
				}
			}
		}
	}
	for _, id := range c.forEachRefs(t) {
		if j, ok := d.indexOf(id); ok && unended(j) {
			return j, true
		}
	}
	if tt := d.templates(t); tt != noTemplates {
		for _, j := range tt.tasks {
			if unended(j) {
				return j, true
			}
		}
	}
	return 0, false
}

// wakeAwaiting looks again at the tasks of d waiting for the end of its
// task at position j, which has just ended: each is queued, or waits for
// the next task it reads that has not ended. Only those are looked at, so
// a task's end costs what waits for it, however many others wait.
func (c *Core) wakeAwaiting(d *dagRun, j int32) {
	list := d.awaiting[j]
	delete(d.awaiting, j)
	for _, t := range list {
		t.awaiting = false
		if t.status == Ready && !d.deleted {
			c.becameReady(t)
		}
	}
}

// judgeConditions judges the conditions of the tasks set aside by
// becameReady: false proposes a skip, an error a failure, true queues the
// task. Schedule does it first, so that a verdict waits for no free slot;
// and not before, because a new leader schedules nothing until the workers
// of the term before have said what they run (the engine's barrier): an
// attempt that term sent with its dispatch proposal is adopted as it was
// judged, not judged again on later state and cancelled.
func (c *Core) judgeConditions() {
	list := c.judging
	c.judging = nil
	for _, t := range list {
		switch {
		case t.status != Ready || t.inflight || t.dag.deleted:
		case !c.conditionDue(t):
			c.enqueue(t) // judged already, or its DAG's record is in flight: see conditionDue
		default:
			switch ok, err := c.condition(t); {
			case err != nil:
				c.proposeConditionFailed(t, err)
			case !ok:
				c.proposeSkip(t, SkipCondition)
			default:
				c.enqueue(t)
			}
		}
	}
}

// conditionDue reports whether t's condition must be judged before it is
// queued: it has one, and no attempt of this run has started (a requeued
// or retried attempt was judged already). Not while a record of its DAG is
// in flight (a cancellation): a failure it proposed would start an attempt
// the cancellation forbids; the task is judged once that record is applied
// (applyDAG queues the DAG's ready tasks again).
func (c *Core) conditionDue(t *task) bool {
	d := t.dag
	return t.spec().When != "" && (t.rec == nil || t.rec.Run != d.rec.Run) && !t.inflight &&
		d.rec.Status == DAGRunning && !d.inflight && !ordinaryStopped(t)
}

// condition evaluates t's `when:` over the committed state.
func (c *Core) condition(t *task) (bool, error) {
	p, err := c.program(t)
	if err != nil {
		return false, err
	}
	return p.Bool(c.exprEnv(t))
}

// program returns t's compiled condition, compiling it once per DAG. It was
// compiled at submission; a record written by hand may still not compile.
func (c *Core) program(t *task) (*expr.Program, error) {
	return compiled(&t.dag.conds, t.idx, func() (string, error) { return t.spec().When, nil })
}

// compiled returns the program cached in *m for task idx, compiling the
// source src gives on first use (a DAG compiles each expression once on
// the leader, and never stores it).
func compiled(m *map[int32]*expr.Program, idx int32, src func() (string, error)) (*expr.Program, error) {
	if p := (*m)[idx]; p != nil {
		return p, nil
	}
	text, err := src()
	if err != nil {
		return nil, err
	}
	p, err := expr.Compile(text)
	if err != nil {
		return nil, err
	}
	if *m == nil {
		*m = make(map[int32]*expr.Program)
	}
	(*m)[idx] = p
	return p, nil
}

// proposeSkip proposes that t be skipped, saying why.
func (c *Core) proposeSkip(t *task, why string) {
	rec := c.nextRecord(t)
	rec.Status, rec.Event = Skipped, why
	// What an attempt of an earlier run left is history now, not this
	// record's: a skipped task ran nothing.
	rec.StartedAt, rec.ExitCode, rec.Error, rec.OutputTail, rec.Outcome = nil, nil, "", "", ""
	rec.FinishedAt = timePtr(c.now)
	c.proposeTask(t, rec)
}

// proposeConditionFailed fails a ready task whose condition cannot be
// evaluated: it would fail the same way again, so it fails for good, as an
// attempt that never reached a worker.
func (c *Core) proposeConditionFailed(t *task, err error) {
	rec := c.nextRecord(t)
	c.keepHistory(t, rec)
	rec.Status, rec.Event, rec.Outcome = Failed, "fail", "fail"
	rec.Attempt = t.attempt() + 1
	rec.Worker, rec.StartedAt, rec.ExitCode, rec.OutputTail, rec.RetryAt = "", nil, nil, "", nil
	rec.FinishedAt = timePtr(c.now)
	rec.Error = "when: " + err.Error()
	c.proposeTask(t, rec)
}
