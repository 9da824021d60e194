package core

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"reflect"
	"sort"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// EffectKind says what the leader must do once the entries it proposed are
// committed and applied.
type EffectKind uint8

const (
	EffectDispatch EffectKind = iota + 1 // start Attempt on Worker
	EffectCancel                         // cancel attempt ID on Worker
	EffectTimer                          // call Fire(Timer) at At
)

// Effect is an output of the core. Effects are produced while applying
// committed entries (or for cancellations of attempts whose cancellation is
// committed), never for proposals, with one exception: a dispatch to a
// worker allowed early attempts (AllowEarly) is sent with its proposal. The
// log may then not know an attempt a worker runs, until the record commits;
// the engine keeps that safe (see AllowEarly).
type Effect struct {
	Kind    EffectKind
	Worker  string
	Attempt model.Attempt   // EffectDispatch
	ID      model.AttemptID // EffectCancel, EffectTimer
	Timer   TimerKind       // EffectTimer
	At      time.Time       // EffectTimer
	ReadyAt time.Time       // EffectDispatch: when the task became ready
	// Release (EffectCancel): the worker lets the attempt go rather than
	// stop it: it is another worker's now, or being handed over. A pod
	// it follows keeps running; anything else stops as on a cancel.
	Release bool
}

// TimerKind names what a timer is for.
type TimerKind uint8

const (
	TimerRetry  TimerKind = iota + 1 // a retrying task's backoff is over
	TimerOrphan                      // a new leader's grace for an attempt ran out
)

// Stats counts leader-side events the log does not show. It is comparable,
// so that a caller can tell cheaply whether anything was counted.
type Stats struct {
	StaleResults int64 // results for attempts that are no longer current
	// UnheldResults counts results for attempts their worker does not
	// hold: never dispatched to it, another worker's, or of a task the
	// leader does not know (see ReportUnheld).
	UnheldResults int64
	Orphans       int64 // attempts re-queued because their worker vanished
	// RefusedClaims counts the attempts workers' hellos listed and Adopt
	// refused (cancelled on the worker), by verdict (a Claim).
	RefusedClaims [numClaims]int64
}

type worker struct {
	id       string
	slots    int
	labels   model.Labels
	busy     int
	attempts map[model.AttemptID]*task
	early    bool // attempts go out with their dispatch proposal (AllowEarly)
	// before: the term before's record admitted it to early attempts, so
	// its hello may list attempts whose dispatch never committed
	// (AdmittedBefore).
	before bool
}

// IsLeader reports whether the core acts as leader.
func (c *Core) IsLeader() bool { return c.leader }

// BecomeLeader turns this replica's core into the leader's. The state is the
// committed state every replica has; what is added is volatile bookkeeping,
// rebuilt from that state: timers for retrying tasks, grace timers for running
// attempts whose worker has not reported, and the proposals a leader that
// died may have left unmade (cascades, cancellations, DAG completions).
// Register the workers known to be alive (AddWorker) before calling it.
func (c *Core) BecomeLeader(now time.Time) {
	if c.leader {
		return
	}
	c.leader = true
	c.now = now
	if c.workers == nil {
		c.workers = make(map[string]*worker)
	}
	c.pendingSubmit = make(map[string]*DAGRecord)
	// The ready tasks, up to a million of them, go into their queues
	// unordered, and each queue is ordered once at the end: a takeover's
	// cost is linear in the live tasks, and small per task (see
	// BenchmarkScaleTakeover).
	c.bulk = true
	for _, d := range c.dagsInQueueOrder() {
		if d.remaining == 0 {
			// Every task ended: nothing below would act on one of them
			// (a finished DAG kept until retention deletes it).
			c.reconcileDAG(d)
			continue
		}
		quiet := d.rec.Status == DAGRunning && !d.rec.CancelRequested
		d.each(func(t *task) {
			if quiet && untouched(t) {
				return // most of a big DAG's pending tasks: nothing to do
			}
			switch t.status {
			case Ready:
				c.becameReady(t)
			case Retrying:
				c.armRetry(t)
			case Running:
				if !isGroup(t) { // a group runs no attempt of its own
					c.effects = append(c.effects, Effect{Kind: EffectTimer, Timer: TimerOrphan, ID: t.attemptID(), At: now.Add(c.cfg.OrphanGrace)})
				}
			}
			c.reconcileTask(t)
		})
		c.reconcileDAG(d)
	}
	c.bulk = false
	for _, cl := range c.classList {
		if !cl.q.sorted() {
			cl.q.heapify()
		}
	}
}

// untouched reports whether t is one of its DAG file's tasks, pending with
// dependencies none of which has ended: every trigger rule says wait, so
// in a running DAG that no cancellation stops there is nothing to propose
// for it. It reads no spec, so a takeover passes such tasks cheaply.
func untouched(t *task) bool {
	d := t.dag
	return t.status == Pending && t.grp == nil && t.idx < d.nTasks && t.bad == 0 && t.skipped == 0 &&
		t.waiting > 0 && t.waiting == d.deps.start[t.idx+1]-d.deps.start[t.idx]
}

// dagsInQueueOrder lists the DAGs in the order the ready queues take them
// (by submission, then id: see less). BecomeLeader walks them so: when
// each DAG's tasks share a priority, as most do, every queue is built in
// order, a heap already, and costs one comparison a task to check.
func (c *Core) dagsInQueueOrder() []*dagRun {
	list := make([]*dagRun, 0, len(c.dags))
	for _, d := range c.dags {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].seq != list[j].seq {
			return list[i].seq < list[j].seq
		}
		return list[i].id < list[j].id
	})
	return list
}

// StepDown drops the leader's volatile state. The applied state stays: it
// holds only committed entries. Proposals not yet committed are forgotten;
// the caller should re-read the log, since some of them may have committed.
func (c *Core) StepDown() {
	c.leader = false
	c.outbox, c.effects, c.ahead = nil, nil, nil
	c.workers, c.workerList, c.pendingSubmit = nil, nil, nil
	c.classes, c.classList, c.poolReserved = nil, nil, nil
	c.unsealed, c.handovers, c.judging, c.cleanups = nil, nil, nil, nil
	c.pendingLive = liveCount{}
	for _, d := range c.dags {
		d.inflight, d.wantCancel, d.reserved, d.classes = false, false, 0, nil
		for _, list := range d.awaiting {
			for _, t := range list {
				t.awaiting = false
			}
		}
		d.awaiting = nil
		d.retrying, d.parked = false, false
		d.each(func(t *task) {
			t.inflight, t.dispatching, t.stash, t.reserved, t.queued, t.cls = false, false, nil, nil, false, nil
			t.early = nil
			t.homeless, t.handingOver, t.ended = false, false, false
			t.expanding = 0 // pendingLive is reset above
		})
		for _, g := range d.groups {
			g.reserved, g.cls = 0, nil
		}
		for _, tt := range d.tpls {
			if tt != nil && tt != noTemplates {
				tt.rendered, tt.renderedTask = nil, nil
			}
		}
	}
}

// AddWorker registers a live worker with its slot count and labels (or
// updates them). Only tasks whose required labels the worker has are
// dispatched to it.
//
// A worker whose id is longer than model.MaxWorkerIDBytes is not
// registered, so it gets no work: its id would be written into the record
// of every attempt it ran, past the records' bound.
func (c *Core) AddWorker(id string, slots int, labels model.Labels) {
	if len(id) > model.MaxWorkerIDBytes {
		return
	}
	if c.workers == nil {
		c.workers = make(map[string]*worker)
	}
	if w := c.workers[id]; w != nil {
		w.slots, w.labels = slots, labels
		return
	}
	w := &worker{id: id, slots: slots, labels: labels, attempts: make(map[model.AttemptID]*task)}
	c.workers[id] = w
	c.workerList = append(c.workerList, w)
}

// SuspendEarly stops (or resumes) early attempts to every worker: while
// etcd is full nothing can be recorded, and no attempt should run before
// its record can be written.
func (c *Core) SuspendEarly(off bool) { c.earlyOff = off }

// AllowEarly lets the leader send a registered worker its attempts when it
// proposes their dispatch, rather than once the dispatch record is
// committed; a success reported before that record goes into a transaction
// is then written into it (Seal), one record for the whole attempt instead
// of two. It does not apply to a dispatch proposed right behind its
// dependency's success (Schedule): that one is sent once committed, since a
// new leader could not adopt it before the success.
//
// The log then may not know an attempt a worker runs. The engine allows it
// only for a worker that a committed term record lists, and a new leader
// dispatches nothing until each worker listed by the term before has said
// hello, listing what it runs (Adopt), or the orphan grace has passed; a
// worker refuses the streams and attempts of a leader older than one it has
// joined.
func (c *Core) AllowEarly(id string, ok bool) {
	if w := c.workers[id]; w != nil {
		w.early = ok
	}
}

// EarlyAllowed reports whether AllowEarly holds for a registered worker.
func (c *Core) EarlyAllowed(id string) bool {
	w := c.workers[id]
	return w != nil && w.early
}

// AdmittedBefore says whether the term before's record admitted a
// registered worker to early attempts (AllowEarly). Only such a worker may
// hold an attempt the log does not show: one a leader before this one sent
// with its dispatch proposal and died before the record committed. Its
// hello may list one, and Adopt records its dispatch then; any other
// worker's claim of an attempt the log never gave it is refused. The
// engine admits the workers the term record lists until they confirm
// this term: from then on nothing of an older leader's reaches them.
func (c *Core) AdmittedBefore(id string, ok bool) {
	if w := c.workers[id]; w != nil {
		w.before = ok
	}
}

// Claim is Adopt's verdict on an attempt a worker's hello lists.
type Claim uint8

const (
	// ClaimHeld: the log (or this leader's own early dispatch) gives the
	// worker the attempt; it runs on, adopted.
	ClaimHeld Claim = iota + 1
	// ClaimRecorded: a leader before this one sent the attempt early and
	// its record never committed; its dispatch is proposed now.
	ClaimRecorded
	// The refusals: each attempt is cancelled on the worker.

	// ClaimStale: an attempt the log has moved past (finished, re-queued,
	// being replaced); a worker's unacknowledged result after a failover.
	ClaimStale
	// ClaimUnknown: no such DAG or task (deleted, or never submitted).
	ClaimUnknown
	// ClaimOtherWorker: the log gives the attempt to another worker.
	ClaimOtherWorker
	// ClaimNotDispatched: the log never dispatched the attempt, and it
	// cannot be an early attempt of the worker's: the worker was not
	// admitted to early attempts by the term before (AdmittedBefore), the
	// number is not the task's next, or the task is not ready.
	ClaimNotDispatched
	// ClaimLabels: an early attempt of a task that requires labels (a
	// pool) the worker does not have.
	ClaimLabels
	// ClaimLimit: an early attempt its DAG's max_active_tasks or its
	// pool's limit has no room for.
	ClaimLimit
	numClaims
)

var claimNames = [numClaims]string{ClaimHeld: "held", ClaimRecorded: "recorded", ClaimStale: "stale",
	ClaimUnknown: "unknown", ClaimOtherWorker: "other_worker", ClaimNotDispatched: "not_dispatched",
	ClaimLabels: "labels", ClaimLimit: "limit"}

// String names the verdict as the metric labels do.
func (v Claim) String() string {
	if v < numClaims && claimNames[v] != "" {
		return claimNames[v]
	}
	return "none"
}

// Adopted reports whether the worker keeps the attempt.
func (v Claim) Adopted() bool { return v == ClaimHeld || v == ClaimRecorded }

// Refusals lists the verdicts that refuse a claim, in order.
func Refusals() []Claim {
	return []Claim{ClaimStale, ClaimUnknown, ClaimOtherWorker, ClaimNotDispatched, ClaimLabels, ClaimLimit}
}

// Adopt judges an attempt that a live worker's hello lists, as it reports
// after a leader change or a reconnection: running, or finished with its
// result unacknowledged. A worker holds only what the log gave it: an
// attempt its committed dispatch record names it for (this worker id,
// this process or an earlier one under the id), or one this leader sent it
// early. Such an attempt is adopted, not run again. One that no record
// shows is accepted only as an early attempt of a leader before
// (AdmittedBefore), and only where the task's labels and limits allow it;
// its dispatch is then recorded. Everything else is cancelled on the
// worker and counted (Stats.RefusedClaims). It returns 0 on a replica
// that does not lead or for a worker not registered.
func (c *Core) Adopt(workerID string, id model.AttemptID) Claim {
	if !c.leader {
		return 0
	}
	w := c.workers[workerID]
	if w == nil {
		return 0
	}
	t := c.lookup(id.DAG, id.Task)
	if t != nil && t.sentEarly(id.Attempt, workerID) {
		// Sent before its dispatch record, which is still being committed.
		c.hold(w, id, t)
		return ClaimHeld
	}
	v := c.judgeClaim(w, t, id)
	switch v {
	case ClaimHeld:
		c.hold(w, id, t)
		if toCancel(t) {
			// Its cancellation waited for a worker to hold it (handover.go).
			c.reconcileTask(t)
		}
	case ClaimRecorded:
		// A leader before us sent this attempt with its dispatch proposal
		// and died (or was deposed) before the record committed: the
		// worker runs it, so record its dispatch now instead of running
		// the task again elsewhere.
		c.proposeAttempt(t, w, id.Attempt, nil, true, false)
	default:
		c.stats.RefusedClaims[v]++
		// A pod attempt that is the log's current one, held by another
		// worker or being handed over to one: this worker lets it go,
		// and the pod it follows runs on for its holder. Anything else
		// is stopped (a pod deleted): an attempt stale for another
		// reason (its cancellation in flight, say) has nobody else to
		// stop it, and once applied the cancellation would reach a
		// worker that has let it go.
		release := t != nil && !t.dag.deleted && isPod(t) && id.Attempt == t.attempt() && t.status == Running &&
			(v == ClaimOtherWorker || t.handingOver)
		if t != nil && !release && t.inflight && isPod(t) && id.Attempt == t.attempt() && t.rec.Worker == workerID {
			t.ended = true // its cancellation, in flight, needs no clean-up
		}
		c.effects = append(c.effects, Effect{Kind: EffectCancel, Worker: workerID, ID: id, Release: release})
	}
	return v
}

// judgeClaim checks a claimed attempt against the committed state (see
// Adopt); sentEarly has been ruled out.
func (c *Core) judgeClaim(w *worker, t *task, id model.AttemptID) Claim {
	switch {
	case t == nil || t.dag.deleted:
		return ClaimUnknown
	case id.Attempt < 1:
		return ClaimNotDispatched
	case id.Attempt == t.attempt() && t.rec.Worker != w.id:
		return ClaimOtherWorker
	case id.Attempt == t.attempt() && t.status == Running && !t.inflight:
		return ClaimHeld
	case id.Attempt <= t.attempt():
		// Finished, re-queued, or running with a proposal in flight (an
		// orphan requeue, typically: it is being replaced, so stop it
		// rather than let two run at once).
		return ClaimStale
	case id.Attempt != t.attempt()+1 || t.status != Ready || t.inflight || t.dag.rec.Status != DAGRunning || t.dag.inflight ||
		ordinaryStopped(t):
		return ClaimNotDispatched
	case !w.before, isGroup(t):
		return ClaimNotDispatched
	}
	s := t.spec()
	if !w.labels.Matches(s.Requires()) {
		return ClaimLabels
	}
	if c.limitReason(t.dag, s.PoolName()) != "" || groupFull(t) != "" {
		return ClaimLimit
	}
	return ClaimRecorded
}

// hold counts an adopted attempt among its worker's.
func (c *Core) hold(w *worker, id model.AttemptID, t *task) {
	if _, ok := w.attempts[id]; !ok {
		w.attempts[id] = t
		w.busy++
	}
}

// RemoveWorker forgets a worker that is gone; its attempts are re-queued
// without consuming a retry (at-least-once delivery).
func (c *Core) RemoveWorker(id string, now time.Time) {
	c.now = now
	if !c.leader {
		return
	}
	w := c.workers[id]
	if w == nil {
		return
	}
	delete(c.workers, id)
	for i, x := range c.workerList {
		if x == w {
			c.workerList = append(c.workerList[:i], c.workerList[i+1:]...)
			break
		}
	}
	if !c.leader {
		return
	}
	// Propose in a fixed order: the log should not depend on map order.
	ids := make([]model.AttemptID, 0, len(w.attempts))
	for aid := range w.attempts {
		ids = append(ids, aid)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	for _, aid := range ids {
		t := w.attempts[aid]
		switch {
		case t.status == Running && t.attempt() == aid.Attempt && !t.inflight && !t.dag.deleted:
			c.requeueOrphan(t, "worker "+id+" is gone")
		case isPod(t) && t.attempt() == aid.Attempt && (t.status == Cancelled || t.status == UpstreamFailed):
			// Told to delete its pod, and gone before it said it had.
			c.cleanUp(t)
		}
	}
}

// Workers returns each registered worker's slots and busy count.
func (c *Core) Workers() []WorkerView {
	out := make([]WorkerView, 0, len(c.workerList))
	for _, w := range c.workerList {
		out = append(out, WorkerView{ID: w.id, Slots: w.slots, Busy: w.busy, Labels: w.labels})
	}
	return out
}

// WorkerView is a worker as the API shows it.
type WorkerView struct {
	ID     string       `json:"id"`
	Slots  int          `json:"slots"`
	Busy   int          `json:"busy"`
	Labels model.Labels `json:"labels,omitempty"`
}

// SubmitOutcome says what Submit did.
type SubmitOutcome uint8

const (
	SubmitProposed  SubmitOutcome = iota + 1 // a new DAG was proposed
	SubmitPending                            // an identical DAG is being committed
	SubmitDuplicate                          // an identical DAG was already accepted
)

// Submit proposes a new DAG. The spec must be normalized and validated, with
// its ID set. A DAG with the same id and the same content is not submitted
// twice; the same id with other content is a conflict.
func (c *Core) Submit(spec *model.DAG, now time.Time) (SubmitOutcome, error) {
	return c.SubmitStored(spec, nil, nil, now)
}

// SubmitStored is Submit for a DAG whose tasks the store writes apart:
// ref goes in its record and chunks in its entry (store.SplitSpec). Both
// nil: Submit.
func (c *Core) SubmitStored(spec *model.DAG, ref *SpecRef, chunks []string, now time.Time) (SubmitOutcome, error) {
	c.now = now
	if !c.leader {
		return 0, ErrNotLeader
	}
	if out, err := c.Known(spec); out != 0 || err != nil {
		return out, err
	}
	if err := c.admit(spec.ID, len(spec.Tasks)); err != nil {
		return 0, err
	}
	rec := &DAGRecord{DAG: *spec, Spec: ref, Status: DAGRunning, Run: 1, SubmittedAt: now.UTC()}
	c.pendingSubmit[spec.ID] = rec
	c.pendingLive.addSpec(spec)
	c.outbox = append(c.outbox, Entry{DAG: spec.ID, D: rec, Chunks: chunks})
	return SubmitProposed, nil
}

// Known answers a submission of a DAG whose id the leader knows already, as
// Submit would: SubmitDuplicate or SubmitPending for the same content, a
// conflict for other content. It returns 0 and nil for a new id (or on a
// standby), which Submit then admits or refuses.
func (c *Core) Known(spec *model.DAG) (SubmitOutcome, error) {
	if !c.leader {
		return 0, nil
	}
	if d := c.dags[spec.ID]; d != nil {
		if sameSpec(&d.rec.DAG, spec) {
			return SubmitDuplicate, nil
		}
		return 0, &Error{Code: CodeConflict, Msg: "DAG " + spec.ID + " already exists with different content"}
	}
	if p := c.pendingSubmit[spec.ID]; p != nil {
		if sameSpec(&p.DAG, spec) {
			return SubmitPending, nil
		}
		return 0, &Error{Code: CodeConflict, Msg: "DAG " + spec.ID + " is being submitted with different content"}
	}
	return 0, nil
}

// WithdrawSubmit forgets the proposal of DAG id when etcd refused it without
// applying it (a record too large for one request): it never entered the
// log, so a later submission with this id is judged afresh. It reports
// whether such a proposal was pending.
func (c *Core) WithdrawSubmit(id string) bool {
	p := c.pendingSubmit[id]
	if p == nil {
		return false
	}
	delete(c.pendingSubmit, id)
	c.pendingLive.subSpec(&p.DAG)
	return true
}

// sameSpec reports whether two DAG specs encode to the same JSON: the same
// DAG, whatever the spelling of empty fields.
func sameSpec(a, b *model.DAG) bool {
	if a.ID == b.ID && a.Name == b.Name && len(a.Tasks) == len(b.Tasks) && len(a.Tasks) > 0 && &a.Tasks[0] == &b.Tasks[0] {
		return true // the leader's own records share the submitted task list
	}
	// Equal values encode equally. A standby compares every DAG record it
	// applies after the submission (the DAG's end, a retry) with the one it
	// holds, both decoded from etcd, so they are equal but not shared:
	// encoding both, as below, was a seventh of a standby's CPU under load.
	if reflect.DeepEqual(a, b) {
		return true
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// CancelDAG asks for a running DAG to be cancelled: the DAG record first, then
// every unfinished task, whose running attempts are killed.
//
// A DAG with handlers or notifications is cancelled in two steps, as Argo
// stops a workflow: the first request makes its record cancel_requested
// (still running), its tasks are cancelled, and then what runs at its end
// runs (on_exit, the notifications sent on cancelled); once all of it has
// ended, the record becomes cancelled. A second request, while that runs,
// cancels it too (Argo's terminate).
func (c *Core) CancelDAG(id string, now time.Time) error {
	d, err := c.requested(id, now)
	if err != nil {
		return err
	}
	if d.rec.Status.Terminal() {
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " already " + string(d.rec.Status)}
	}
	d.wantCancel = true
	c.reconcileDAG(d)
	return nil
}

// requested finds the DAG a request (cancel, retry, delete) names, on the
// leader.
func (c *Core) requested(id string, now time.Time) (*dagRun, error) {
	c.now = now
	if !c.leader {
		return nil, ErrNotLeader
	}
	d := c.dags[id]
	if d == nil {
		return nil, &Error{Code: CodeNotFound, Msg: "no DAG " + id}
	}
	if d.parked {
		return nil, &Error{Code: CodeConflict, Msg: "etcd refused DAG " + id + "'s record as too large (the members' " +
			"--max-request-bytes is below etcd_max_request_bytes): the DAG stays as it is until the next leader; raise their limit"}
	}
	return d, nil
}

// RetryDAG starts a new run of a failed or cancelled DAG: tasks that did not
// succeed run again with fresh retry budgets.
func (c *Core) RetryDAG(id string, now time.Time) error {
	d, err := c.requested(id, now)
	if err != nil {
		return err
	}
	switch {
	case d.rec.Status == DAGRunning:
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " is still running"}
	case d.rec.Status == DAGSucceeded:
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " succeeded: nothing to retry"}
	case d.remaining != 0 || d.inflight:
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " is still stopping its tasks; try again", Stopping: true}
	}
	if err := c.admit(id, len(d.tasks)+d.instances); err != nil {
		return err // a retry runs the DAG again: admitted as a submission is
	}
	c.proposeRetryLive(d)
	rec := *d.rec
	rec.Status, rec.Run, rec.FinishedAt, rec.CancelRequested = DAGRunning, d.rec.Run+1, nil, false
	d.wantCancel = false
	c.proposeDAG(d, &rec)
	return nil
}

// DeleteDAG proposes the deletion of a finished DAG with all its tasks, as
// retention would later. A running DAG is refused: its tasks may be on
// workers, and deleting it would hide their results; cancel it first.
func (c *Core) DeleteDAG(id string, now time.Time) error {
	d, err := c.requested(id, now)
	if err != nil {
		return err
	}
	switch {
	case !d.rec.Status.Terminal():
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " is " + string(d.rec.Status) + ": cancel it before deleting it"}
	case d.remaining != 0 || c.onWorkers()[d]:
		// A cancelled attempt still on its worker: deleted now, the DAG's
		// id could be submitted again and its first attempts would take
		// the ids of attempts still running (attempt numbers start over),
		// their late results taken for the new ones'.
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " is still stopping its tasks; try again", Stopping: true}
	case d.inflight:
		return &Error{Code: CodeConflict, Msg: "DAG " + id + " is being retried or deleted; try again", Stopping: true}
	}
	c.proposeDelete(d)
	return nil
}

// onWorkers returns the DAGs with an attempt on a worker: sent and not yet
// reported, whatever its task's status.
func (c *Core) onWorkers() map[*dagRun]bool {
	out := make(map[*dagRun]bool)
	for _, w := range c.workerList {
		for _, t := range w.attempts {
			out[t.dag] = true
		}
	}
	return out
}

// proposeDelete proposes the deletion of d, whose tasks have all stopped.
func (c *Core) proposeDelete(d *dagRun) {
	d.inflight = true
	c.outbox = append(c.outbox, Entry{DAG: d.id, Delete: true, Records: d.recorded()})
}

// recorded lists the ids of d's tasks and instances that have a record.
func (d *dagRun) recorded() []string {
	var ids []string
	for i := range d.tasks {
		if t := &d.tasks[i]; t.rec != nil {
			ids = append(ids, t.id())
		}
	}
	for _, g := range d.groups {
		for i := range g.inst {
			if t := &g.inst[i]; t.rec != nil {
				ids = append(ids, t.id())
			}
		}
	}
	sort.Strings(ids) // the groups' map has no order; etcd's keys sort so
	return ids
}

// Expire proposes the deletion of DAGs that finished before cutoff.
func (c *Core) Expire(cutoff time.Time) int {
	if !c.leader {
		return 0
	}
	n := 0
	var busy map[*dagRun]bool
	for _, id := range c.sortedDAGIDs() {
		d := c.dags[id]
		if d.rec.Status.Terminal() && d.remaining == 0 && !d.inflight && d.rec.FinishedAt != nil && d.rec.FinishedAt.Before(cutoff) {
			if busy == nil {
				busy = c.onWorkers()
			}
			if busy[d] {
				continue // a cancelled attempt still on its worker (DeleteDAG)
			}
			c.proposeDelete(d)
			n++
		}
	}
	return n
}

// ExpireOldest proposes the deletion of up to n finished DAGs ahead of
// their retention, those that finished first first (then by id), and
// returns their ids: what the leader does while etcd's database is above
// its admission limit.
func (c *Core) ExpireOldest(n int) []string {
	if !c.leader || n <= 0 {
		return nil
	}
	// The n that finished first, kept in a heap whose top is the latest
	// of them: a pass costs one walk of the DAGs, not a sort of them all.
	busy := c.onWorkers()
	h := &finishedHeap{}
	for _, d := range c.dags {
		if !d.rec.Status.Terminal() || d.remaining != 0 || d.inflight || busy[d] {
			continue // busy: a cancelled attempt still on its worker (DeleteDAG)
		}
		switch {
		case h.Len() < n:
			heap.Push(h, d)
		case finishedBefore(d, (*h)[0]):
			(*h)[0] = d
			heap.Fix(h, 0)
		}
	}
	oldest := []*dagRun(*h)
	sort.Slice(oldest, func(i, j int) bool { return finishedBefore(oldest[i], oldest[j]) })
	ids := make([]string, 0, len(oldest))
	for _, d := range oldest {
		c.proposeDelete(d)
		ids = append(ids, d.id)
	}
	return ids
}

// finishedBefore orders finished DAGs by their finish time, then id; one
// whose finish time was lost (written by hand) comes first.
func finishedBefore(x, y *dagRun) bool {
	a, b := x.rec.FinishedAt, y.rec.FinishedAt
	switch {
	case a == nil || b == nil:
		if (a == nil) != (b == nil) {
			return a == nil
		}
	case !a.Equal(*b):
		return a.Before(*b)
	}
	return x.id < y.id
}

// finishedHeap is a max-heap of finished DAGs by finishedBefore.
type finishedHeap []*dagRun

func (h finishedHeap) Len() int           { return len(h) }
func (h finishedHeap) Less(i, j int) bool { return finishedBefore(h[j], h[i]) }
func (h finishedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *finishedHeap) Push(x any)        { *h = append(*h, x.(*dagRun)) }
func (h *finishedHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

// Reported says what Report did with a result.
type Reported uint8

const (
	// ReportDecided: the result is taken; the record it makes is
	// proposed (or it was moot: its DAG is being cancelled).
	ReportDecided Reported = iota + 1
	// ReportHeld: it waits for the task's record in flight to apply
	// (Holds): it is not durable before the record it then becomes.
	ReportHeld
	// ReportStale: for an attempt of the worker's that the log has moved
	// past (a repeat, a re-queued or cancelled attempt): dropped, moot.
	ReportStale
	// ReportUnheld: for an attempt the worker does not hold: never
	// dispatched to it, another worker's, or of a task the leader does
	// not know (never submitted, or deleted): dropped, moot.
	ReportUnheld
)

// Report takes a worker's result for an attempt. Only a result for an
// attempt its worker holds (as the log, or this leader's early dispatch,
// says) changes anything; the others are counted (Stats) and dropped. It
// returns 0 on a replica that does not lead.
func (c *Core) Report(r model.Result, now time.Time) Reported {
	c.now = now
	if !c.leader {
		return 0
	}
	checkOutputs(&r, c.cfg.MaxOutputBytes)
	held := c.releaseAttempt(r.AttemptID, r.Worker)
	t := c.lookup(r.DAG, r.Task)
	if t != nil && t.sentEarly(r.Attempt, r.Worker) {
		// The attempt's dispatch record is not committed yet.
		if c.foldable(t) && r.Outcome == model.Succeeded && t.dag.rec.Status == DAGRunning && !t.dag.inflight {
			c.fold(t, r)
			return ReportDecided
		}
		t.stash = &r // decided once the dispatch record is applied
		return ReportHeld
	}
	switch {
	case t == nil || t.dag.deleted || r.Attempt < 1 || r.Attempt > t.attempt() ||
		r.Attempt == t.attempt() && t.rec.Worker != r.Worker && !held: // held: a pod's clean-up
		c.stats.UnheldResults++
		return ReportUnheld
	case t.status != Running || t.attempt() != r.Attempt:
		c.stats.StaleResults++
		return ReportStale
	case t.inflight:
		t.stash = &r
		return ReportHeld
	}
	c.decide(t, r)
	return ReportDecided
}

// Holds reports whether a result for attempt id waits for its task's
// record in flight to be applied (it is decided then). Such a result is
// not durable yet, even once everything proposed so far has committed: its
// acknowledgement must wait for the record it becomes.
func (c *Core) Holds(id model.AttemptID) bool {
	t := c.lookup(id.DAG, id.Task)
	return t != nil && t.stash != nil && t.stash.AttemptID == id
}

// decide turns the result of the current attempt into the task's next record.
func (c *Core) decide(t *task, r model.Result) {
	if t.dag.rec.Status != DAGRunning {
		// The DAG is cancelled; its cancellation record wins. A task it
		// did not reach is a pod attempt that waited for a worker to
		// delete its pod (handover.go): its worker has just let it end.
		if t.dag.rec.Status == DAGCancelled && !t.dag.deleted {
			c.proposeCancel(t)
			t.ended = isPod(t)
		}
		return
	}
	rec := c.nextRecord(t)
	c.setResult(rec, r)
	switch r.Outcome {
	case model.Succeeded:
		rec.Status, rec.Event = Succeeded, "succeed"
	case model.Cancelled:
		if isPod(t) {
			// Its pod may be running: another worker adopts it.
			c.loseAttempt(t)
			return
		}
		// The worker gave the attempt up without being asked (it is shutting
		// down): run it again without consuming a retry.
		rec.Status, rec.Event = Ready, "requeue"
	default:
		rec.Event = "fail"
		if r.Outcome == model.TimedOut {
			rec.Event = "timeout"
		}
		if n := t.retries(); n < t.spec().MaxRetries {
			rec.Status, rec.Retries = Retrying, n+1
			rec.RetryAt = timePtr(c.now.Add(c.cfg.Backoff(n + 1)))
		} else {
			rec.Status = Failed
		}
	}
	rec.Outcome = rec.Event
	c.proposeTask(t, rec)
	if rec.Status == Succeeded {
		c.noteAhead(t)
	}
}

// setResult writes what a worker reported of an attempt into its record.
func (c *Core) setResult(rec *TaskRecord, r model.Result) {
	finished := r.FinishedAt
	if y := finished.Year(); y < 0 || y > 9999 {
		// The worker's clock is wrong: RFC 3339, the records' time
		// format, cannot hold the year, and the store would refuse the
		// record. The leader's own time stands in.
		finished = c.now
	}
	rec.FinishedAt = timePtr(finished)
	rec.OutputTail = r.OutputTail
	rec.Error = r.Error
	rec.Outputs = r.Outputs // a success's (checkOutputs)
	if r.ExitCode >= 0 {
		ec := r.ExitCode
		rec.ExitCode = &ec
	}
}

// fold writes a success into the dispatch record of its attempt, which is
// proposed and not yet sent: ready → succeeded in one record.
func (c *Core) fold(t *task, r model.Result) {
	rec := t.early
	c.setResult(rec, r)
	bound(rec) // proposed before its result was written in
	rec.Status, rec.Event, rec.Outcome = Succeeded, "succeed", "succeed"
	c.noteAhead(t)
}

// Seal tells the core that these proposals were taken into a transaction:
// their records are encoded and can no longer change. A result for an
// attempt whose dispatch record is sealed waits for it to be applied. It
// costs nothing while no early dispatch record waits (a single node).
func (c *Core) Seal(entries []Entry) {
	if len(c.unsealed) == 0 {
		return
	}
	for i := range entries {
		delete(c.unsealed, entries[i].T)
	}
}

// foldable reports whether t's early dispatch record may still take its
// attempt's success: proposed, not sealed.
func (c *Core) foldable(t *task) bool { return t.early != nil && c.unsealed[t.early] == t }

// clearEarly forgets t's early dispatch record: applied, refused, or its
// DAG gone.
func (c *Core) clearEarly(t *task) {
	if t.early != nil {
		delete(c.unsealed, t.early)
		t.early = nil
	}
}

// cancelEarly stops the attempt sent with t's early dispatch record, which
// will never apply, and frees its slot.
func (c *Core) cancelEarly(t *task) {
	id := model.AttemptID{DAG: t.dag.id, Task: t.id(), Attempt: t.early.Attempt}
	c.releaseAttempt(id, t.early.Worker)
	c.effects = append(c.effects, Effect{Kind: EffectCancel, Worker: t.early.Worker, ID: id})
	c.clearEarly(t)
}

// refusedEarly cleans up after the state machine refused the dispatch
// record of an attempt already sent (a hand-written record got in first,
// say): the attempt is stopped, and the task queued again if still ready.
func (c *Core) refusedEarly(t *task) {
	c.cancelEarly(t)
	t.stash, t.inflight = nil, false
	if t.dispatching {
		c.endDispatch(t)
	}
	if t.status == Ready {
		c.enqueue(t)
	}
}

// Fire handles a timer that the engine armed for an Effect.
func (c *Core) Fire(kind TimerKind, id model.AttemptID, now time.Time) {
	c.now = now
	if !c.leader {
		return
	}
	t := c.lookup(id.DAG, id.Task)
	if t == nil || t.inflight || t.attempt() != id.Attempt || isGroup(t) {
		return
	}
	switch kind {
	case TimerRetry:
		if t.status == Retrying && t.dag.rec.Status == DAGRunning {
			rec := c.nextRecord(t)
			rec.Status, rec.Event, rec.RetryAt = Ready, "retry", nil
			c.proposeTask(t, rec)
		}
	case TimerOrphan:
		if t.status == Running && !c.attemptAlive(t) {
			c.requeueOrphan(t, "no worker reported attempt within the grace period")
		}
	}
}

func (c *Core) attemptAlive(t *task) bool {
	w := c.workers[t.rec.Worker]
	if w == nil {
		return false
	}
	_, ok := w.attempts[t.attemptID()]
	return ok
}

func (c *Core) requeueOrphan(t *task, why string) {
	if isPod(t) {
		c.loseAttempt(t) // its pod outlives the worker: hand it over
		return
	}
	c.stats.Orphans++
	c.releaseAttempt(t.attemptID(), t.rec.Worker)
	rec := c.nextRecord(t)
	rec.Status, rec.Event, rec.Outcome, rec.Error = Ready, "orphan", "orphan", why
	c.proposeTask(t, rec)
}

// Schedule dispatches ready tasks, highest priority first, while workers have
// free slots, each to a worker with the labels it requires, within the DAG
// and pool limits (pools.go). Call it after applying a batch and after
// results free slots.
//
// Besides the ready tasks it considers the dependents that successes
// proposed since the last call will make ready (noteAhead), in one priority
// order with them. Such a dependent's dispatch is proposed right behind the
// success, usually into the same transaction: applied in order, the success
// makes it ready and the next entry dispatches it, on a standby as on the
// leader. A chain step then costs one commit instead of two (the result's,
// then the dispatch's). If the success is not committed, neither is the
// dispatch: a transaction is atomic, and after a failed one the leader
// re-reads the log before it writes again. A dependent not dispatched now
// becomes ready when the success is applied, as any other.
func (c *Core) Schedule(now time.Time) int {
	c.now = now
	if !c.leader {
		return 0
	}
	if len(c.judging) > 0 {
		c.judgeConditions()
	}
	n := c.scheduleHandovers()
	ahead := c.ahead
	c.ahead = c.ahead[:0]
	sort.SliceStable(ahead, func(i, j int) bool { return less(ahead[i], ahead[j]) })
	var round classHeap
	for _, cl := range c.classList {
		if cl.head() != nil {
			round.push(cl)
		}
	}
	for len(round) > 0 || len(ahead) > 0 {
		w := c.pickWorker(nil)
		if w == nil {
			break // no free slot anywhere
		}
		for len(ahead) > 0 && !aheadReady(ahead[0]) {
			ahead = ahead[1:]
		}
		if len(ahead) > 0 && (len(round) == 0 || less(ahead[0], round[0].q[0])) {
			t := ahead[0]
			ahead = ahead[1:]
			s := t.spec()
			if c.limitReason(t.dag, s.PoolName()) != "" {
				continue // it queues when the success is applied
			}
			if req := s.Requires(); len(req) > 0 {
				if w = c.pickWorker(req); w == nil {
					continue
				}
			}
			t.setReadyAt(now)
			// Rendered once its dispatch is applied, right behind the
			// success (render.go).
			c.proposeDispatch(t, w, nil, false)
			n++
			continue
		}
		if len(round) == 0 {
			break
		}
		cl := round.pop()
		t := cl.q[0]
		if cl.dag != nil || cl.pool != "" {
			if c.limitReason(t.dag, cl.pool) != "" {
				continue // the class waits for this round
			}
		}
		if len(cl.req) > 0 {
			if w = c.pickWorker(cl.req); w == nil {
				continue
			}
		}
		if cl.grp != nil && groupFull(t) != "" {
			continue // the class waits for this round
		}
		cl.q.pop()
		if spec, err := c.attemptSpec(t); err != nil {
			c.proposeRenderFailure(t, err)
		} else {
			// Not a pod task's early: its pod takes seconds to start, and
			// an attempt the log does not know yet could meet a pod being
			// deleted under the same name.
			c.proposeDispatch(t, w, spec, w.early && !c.earlyOff && !isPod(t))
			n++
		}
		if cl.head() != nil {
			round.push(cl)
		}
	}
	return n
}

// proposeDispatch proposes that t's next attempt run on w, reserving one of
// w's slots, and t's place under its limits, until the record is committed.
// An early dispatch sends the attempt now (AllowEarly). spec is the
// attempt's rendered spec (attemptSpec), or nil to render it once the
// dispatch is applied.
func (c *Core) proposeDispatch(t *task, w *worker, spec *model.Task, early bool) {
	if spec != nil && spec != t.spec() && !early {
		// Kept for the dispatch effect, made once the record is applied.
		tt := t.dag.templates(t)
		tt.rendered, tt.renderedFor, tt.renderedRun, tt.renderedTask = spec, t.attempt()+1, t.dag.rec.Run, t
	}
	c.proposeAttempt(t, w, t.attempt()+1, spec, early, early)
}

// proposeAttempt proposes the dispatch record of attempt on w. An early one
// may take the attempt's success until sealed; send says the attempt must
// be sent, with spec (it is not when a worker reported it running: Adopt).
func (c *Core) proposeAttempt(t *task, w *worker, attempt int, spec *model.Task, early, send bool) {
	rec := c.nextRecord(t)
	c.keepHistory(t, rec)
	rec.Status, rec.Event, rec.Outcome = Running, "dispatch", ""
	rec.Attempt = attempt
	rec.Worker = w.id
	rec.StartedAt = timePtr(c.now)
	rec.FinishedAt, rec.ExitCode, rec.Error, rec.OutputTail, rec.RetryAt = nil, nil, "", "", nil
	w.busy++
	t.dispatching, t.reserved = true, w
	c.reserve(t)
	c.proposeTask(t, rec)
	if !early {
		return
	}
	t.early = rec
	if c.unsealed == nil {
		c.unsealed = make(map[*TaskRecord]*task)
	}
	c.unsealed[rec] = t
	id := model.AttemptID{DAG: t.dag.id, Task: t.id(), Attempt: attempt}
	w.attempts[id] = t
	if send {
		c.effects = append(c.effects, Effect{Kind: EffectDispatch, Worker: w.id, ReadyAt: t.readyTime(),
			Attempt: model.Attempt{AttemptID: id, Submission: t.dag.seq, Spec: c.hookSpec(t, spec), MaxOutputBytes: c.cfg.MaxOutputBytes}})
	}
}

// noteAhead remembers the dependents that t's proposed success will make
// ready, so that Schedule may dispatch them right behind it (see Schedule).
// Only a dependent with the default rule and no condition qualifies: a
// condition reads committed state, and the success is not committed yet.
func (c *Core) noteAhead(t *task) {
	if t.grp != nil {
		return // an instance has no dependants: its group's end has
	}
	d := t.dag
	for _, j := range d.dependentsOf(t.idx) {
		dep := &d.tasks[j]
		if dep.status == Pending && !dep.inflight && dep.waiting == 1 && dep.bad == 0 && dep.skipped == 0 {
			// Not a map group: its expansion reads the success, so it
			// waits for it to apply.
			if s := dep.spec(); s.TriggerRule == "" && s.When == "" && !s.ForEach.IsSet() && !c.readsUnended(dep, t) {
				c.ahead = append(c.ahead, dep)
			}
		}
	}
}

// aheadReady reports whether dep can still be dispatched ahead: its last
// dependency's success is proposed, not yet applied, and nothing else is
// in flight for it or its DAG.
func aheadReady(dep *task) bool {
	d := dep.dag
	return dep.status == Pending && !dep.inflight && dep.waiting == 1 &&
		!d.deleted && !d.inflight && d.rec.Status == DAGRunning && !d.rec.CancelRequested
}

// endDispatch ends t's dispatch proposal, applied or abandoned: its place
// under its limits is given back, and the worker whose slot it reserved is
// returned.
func (c *Core) endDispatch(t *task) *worker {
	w := t.reserved
	t.dispatching, t.reserved = false, nil
	c.unreserve(t)
	return w
}

// releaseAttempt frees the slot of attempt id on workerID, and reports
// whether the worker held it.
func (c *Core) releaseAttempt(id model.AttemptID, workerID string) bool {
	if w := c.workers[workerID]; w != nil {
		if _, ok := w.attempts[id]; ok {
			delete(w.attempts, id)
			w.busy--
			return true
		}
	}
	return false
}

// afterTaskApplied is the leader's reaction to a committed task record.
func (c *Core) afterTaskApplied(t *task, from Status, prev *TaskRecord) {
	rec := t.rec
	if t.early != nil && !t.isEarly(rec) {
		// A record not ours (written by hand) got in before the dispatch
		// of the attempt sent early: that one is still to be applied, or
		// refused (refusedEarly).
		return
	}
	t.inflight = false
	c.settleExpansion(t)
	ended := t.ended
	t.ended = false
	early := t.early != nil
	c.clearEarly(t)
	dispatched := t.dispatching && (early || rec.Status == Running)
	var reserved *worker
	if dispatched {
		// Our dispatch applied (with its success, when early and folded).
		reserved = c.endDispatch(t)
	}
	switch rec.Status {
	case Running:
		if t.handingOver && rec.Event == "handover" {
			c.handedOver(t)
			break
		}
		if !dispatched {
			break
		}
		w := c.workers[rec.Worker]
		if early {
			// Sent with its proposal; its slot was taken then.
			if (w == nil || w.attempts[t.attemptID()] == nil) && t.stash == nil {
				// Its worker left while the record was being committed.
				c.requeueOrphan(t, "worker "+rec.Worker+" is gone")
				return
			}
		} else {
			if w == nil {
				// The worker vanished while its dispatch was being committed.
				c.requeueOrphan(t, "worker "+rec.Worker+" is gone")
				return
			}
			spec, err := c.attemptSpec(t)
			if err != nil {
				// Dispatched right behind its dependency's success, and
				// rendered now that the success is applied: the attempt
				// is not sent, its slot is free again.
				if w == reserved {
					w.busy--
				}
				c.failUnsent(t, err)
				return
			}
			if w != reserved {
				w.busy++ // the worker rejoined since the slot was reserved
			}
			id := t.attemptID()
			w.attempts[id] = t
			c.effects = append(c.effects, Effect{Kind: EffectDispatch, Worker: w.id, ReadyAt: t.readyTime(),
				Attempt: model.Attempt{AttemptID: id, Submission: t.dag.seq, Spec: c.hookSpec(t, spec), MaxOutputBytes: c.cfg.MaxOutputBytes}})
		}
	case Retrying:
		c.armRetry(t)
	case Cancelled, UpstreamFailed:
		if from == Running && prev != nil && !isGroup(t) {
			id := model.AttemptID{DAG: t.dag.id, Task: t.id(), Attempt: prev.Attempt}
			if w := c.workers[prev.Worker]; isPod(t) && !ended && (w == nil || w.attempts[id] == nil) {
				// Its worker left (or came back without it) while the
				// record was in flight: nobody would delete its pod.
				c.cleanUp(t)
			} else {
				c.effects = append(c.effects, Effect{Kind: EffectCancel, Worker: prev.Worker, ID: id})
			}
		}
	}
	if t.stash != nil {
		r := *t.stash
		t.stash = nil
		if t.status == Running && t.attempt() == r.Attempt && t.rec.Worker == r.Worker {
			c.decide(t, r)
		} else {
			c.stats.StaleResults++
		}
	}
	c.reconcileTask(t)
	if t.dag.remaining == 0 {
		c.reconcileDAG(t.dag)
	}
}

func (c *Core) armRetry(t *task) {
	at := c.now
	if t.rec.RetryAt != nil {
		at = *t.rec.RetryAt
	}
	c.effects = append(c.effects, Effect{Kind: EffectTimer, Timer: TimerRetry, ID: t.attemptID(), At: at})
}

func (c *Core) proposeCascade(t *task, cause string) {
	rec := c.nextRecord(t)
	rec.Status, rec.Event, rec.Cascade, rec.Cause = UpstreamFailed, "cascade", true, cause
	rec.FinishedAt = timePtr(c.now)
	c.proposeTask(t, rec)
}

// reconcileTask proposes what the committed state says must happen to a task
// and nobody has proposed yet. It makes the leader's work a function of the
// log, which is why a new leader can finish what a dead one started: a
// cascade or a cancellation cut short, a verdict of skip.
func (c *Core) reconcileTask(t *task) {
	if t.inflight || t.status.Terminal() || t.dag.deleted {
		return
	}
	d := t.dag
	switch {
	case d.rec.Status == DAGCancelled, d.rec.Status == DAGRunning && ordinaryStopped(t):
		if t.status == Running && isPod(t) && !isGroup(t) && !c.attemptAlive(t) {
			// Nobody would delete its pod: cancelled once a worker holds
			// the attempt (handover.go).
			return
		}
		c.proposeCancel(t)
	case d.rec.Status == DAGRunning && t.status == Pending:
		switch v, why := c.verdictWhy(t); v {
		case skip:
			c.proposeSkip(t, why)
		case upstreamFailed:
			c.proposeCascade(t, cascadeCause(t))
		}
	case d.rec.Status == DAGRunning && t.status == Running && t.grp == nil:
		if g := d.groups[t.idx]; g != nil && g.left() == 0 && isGroup(t) {
			c.proposeGroupEnd(t, g)
		}
	}
}

// proposeCancel proposes t's cancellation, its DAG being cancelled.
func (c *Core) proposeCancel(t *task) {
	rec := c.nextRecord(t)
	rec.Status, rec.Event = Cancelled, "cancel"
	rec.FinishedAt = timePtr(c.now)
	if t.status == Running {
		rec.Error = "" // a running attempt's is a hand-over's note
	}
	c.proposeTask(t, rec)
}

// reconcileDAG proposes a DAG's cancellation or its final status.
func (c *Core) reconcileDAG(d *dagRun) {
	if d.inflight || d.deleted || d.rec.Status != DAGRunning {
		return
	}
	rec := *d.rec
	switch {
	case d.wantCancel:
		d.wantCancel = false
		if d.rec.HasHooks() && !d.rec.CancelRequested {
			rec.CancelRequested = true // still running: what runs at its end runs
			c.proposeDAG(d, &rec)
			return
		}
		rec.Status = DAGCancelled
	case d.remaining == 0:
		rec.Status = d.end()
	default:
		return
	}
	rec.FinishedAt = timePtr(c.now)
	c.proposeDAG(d, &rec)
}

func (c *Core) proposeDAG(d *dagRun, rec *DAGRecord) {
	d.inflight = true
	c.outbox = append(c.outbox, Entry{DAG: d.id, D: rec})
}

func (c *Core) proposeTask(t *task, rec *TaskRecord) {
	bound(rec)
	t.inflight = true
	c.outbox = append(c.outbox, Entry{DAG: t.dag.id, Task: t.id(), T: rec})
}

// nextRecord starts a task's next record from its current one.
func (c *Core) nextRecord(t *task) *TaskRecord {
	var rec TaskRecord
	if t.rec != nil {
		rec = *t.rec
	}
	rec.Run = t.dag.rec.Run
	rec.Retries = t.retries()
	rec.Cascade, rec.Cause = false, ""
	rec.Outputs = nil // only a success carries outputs: its own
	return &rec
}

func summarize(r *TaskRecord) AttemptSummary {
	outcome := r.Outcome
	if outcome == "" {
		outcome = r.Event
	}
	return AttemptSummary{Attempt: r.Attempt, Worker: r.Worker, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		Outcome: outcome, ExitCode: r.ExitCode, Error: model.CutMiddle(r.Error, model.MaxHistoryErrorBytes)}
}

func timePtr(t time.Time) *time.Time {
	u := t.UTC()
	return &u
}

// TakeProposals removes and returns up to max proposals (all when max ≤ 0),
// oldest first.
func (c *Core) TakeProposals(max int) []Entry {
	if max <= 0 || max >= len(c.outbox) {
		out := c.outbox
		c.outbox = nil
		return out
	}
	out := make([]Entry, max)
	copy(out, c.outbox)
	// Take from the front without moving the rest: a cascade or a
	// cancellation of a big DAG proposes a record per task at once, and
	// moving the remainder at each take cost O(outbox) per transaction.
	// The front's room is given back when append next reallocates.
	clear(c.outbox[:max])
	c.outbox = c.outbox[max:]
	return out
}

// PendingProposals is the number of proposals waiting for a commit.
func (c *Core) PendingProposals() int { return len(c.outbox) }

// TakeEffects removes and returns the effects produced so far, in a slice
// of their own (AppendEffects into none).
func (c *Core) TakeEffects() []Effect { return c.AppendEffects(nil) }

// AppendEffects appends the effects to dst, as TakeEffects returns them,
// and keeps the core's own slice for the next ones. A leader takes its
// effects after every event; with a dispatch per task, a fresh slice each
// time made them the largest share of what the leader allocated.
func (c *Core) AppendEffects(dst []Effect) []Effect {
	dst = append(dst, c.effects...)
	clear(c.effects) // they hold specs and ids; keep nothing alive
	c.effects = c.effects[:0]
	return dst
}

// Stats returns leader-side counters.
func (c *Core) Stats() Stats { return c.stats }

func (c *Core) lookup(dagID, taskID string) *task {
	d := c.dags[dagID]
	if d == nil {
		return nil
	}
	return d.find(taskID)
}
