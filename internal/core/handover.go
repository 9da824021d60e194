package core

import (
	"github.com/orion-sched/orion/internal/model"
)

// Hand-over: the attempts that outlive their worker.
//
// A shell attempt dies with its worker, so an attempt whose worker is gone
// is an orphan: it goes back to ready and runs again as a new attempt
// (requeueOrphan). A pod task's attempt is a pod, which outlives the
// worker that created and followed it: running it again would make a
// second pod beside one that may still be running. So an orphaned pod
// attempt keeps its number and is handed over instead: the leader
// proposes a record that moves the task from running to running, same
// attempt, on another worker, event "handover", and once it is committed
// dispatches the same attempt to that worker, which finds the pod by name
// (create-if-absent: the name is a function of the attempt) and follows it
// to its end. The transition table admits running → running only as such
// a record (checkTask), so leader and standby apply it alike.
//
// Which attempts wait for a worker, and which worker takes each, is the
// leader's volatile knowledge like the ready queue: a new leader rebuilds
// it from the log (a running attempt nobody reports within the orphan
// grace) and the record says who holds the attempt.
//
// A cancelled DAG whose pod attempt has no worker is not cancelled past it:
// nobody would delete the pod. The attempt is handed over with Stop set
// (the worker deletes the pod if there is one and creates none), and the
// task's cancellation is proposed once a worker holds it.

// A pod attempt can also be cancelled by a record applied after its worker
// left (the cancellation was in flight), or its worker leave once told to
// cancel it and before it reported that it had. The task is cancelled
// already; its pod is not deleted. Such an attempt is queued as a clean-up:
// the next pod worker with a free slot is sent it with Stop, and deletes
// its pod. No record is needed: deleting by name is idempotent, and a
// clean-up that two workers run, or that finds no pod, does no harm. The
// queue is the leader's alone: a new leader does not know it (the pod then
// runs until its deadline).

// maxCleanups bounds the clean-ups waiting for a worker. Past it the oldest
// is dropped: its pod runs until its deadline (the task's timeout).
const maxCleanups = 10000

// cleanup is a cancelled pod attempt whose pod waits to be deleted.
type cleanup struct {
	t        *task
	id       model.AttemptID
	requires map[string]string
	dispatch Effect // its Worker set when sent
}

// podWorker is what a pod attempt requires of its worker at least.
var podWorker = map[string]string{model.PodsLabel: "true"}

// cleanUp queues the deletion of the pod of t's current attempt, cancelled
// while no worker holds it.
func (c *Core) cleanUp(t *task) {
	if len(c.cleanups) >= maxCleanups {
		c.cleanups[0] = cleanup{}
		c.cleanups = c.cleanups[1:]
	}
	d := c.handoverDispatch(t, "")
	d.Attempt.Stop = true
	c.cleanups = append(c.cleanups, cleanup{t: t, id: t.attemptID(), requires: t.spec().Requires(), dispatch: d})
}

// scheduleCleanups sends the queued clean-ups, oldest first, to pod
// workers with a free slot. Each holds its slot until its worker reports.
func (c *Core) scheduleCleanups() int {
	n := 0
	kept := c.cleanups[:0]
	full := false
	for _, cu := range c.cleanups {
		var w *worker
		if !full {
			if w = c.pickWorker(cu.requires); w == nil {
				full = c.pickWorker(podWorker) == nil
			} else if _, busy := w.attempts[cu.id]; busy {
				w = nil // already sent there, not reported yet
			}
		}
		if w == nil {
			kept = append(kept, cu)
			continue
		}
		w.busy++
		w.attempts[cu.id] = cu.t
		cu.dispatch.Worker = w.id
		c.effects = append(c.effects, cu.dispatch)
		n++
	}
	clear(c.cleanups[len(kept):])
	c.cleanups = kept
	return n
}

// isPod reports whether t's attempts are pods.
func isPod(t *task) bool { return t.spec().Kind == model.KindPod }

// loseAttempt is requeueOrphan for a pod attempt: it waits for another
// worker (Schedule hands it over) instead of running again.
func (c *Core) loseAttempt(t *task) {
	c.stats.Orphans++
	c.releaseAttempt(t.attemptID(), t.rec.Worker)
	if !t.homeless {
		t.homeless = true
		c.handovers = append(c.handovers, t)
	}
}

// handoverable reports whether t still waits to be handed over.
func (c *Core) handoverable(t *task) bool {
	return t.homeless && t.status == Running && !t.inflight && !t.dag.deleted && !t.dag.inflight && !c.attemptAlive(t)
}

// scheduleHandovers hands the pod attempts that lost their worker to
// workers with a free slot and the labels they require, oldest first. They
// go before ready tasks: they are running already, and hold their limits.
func (c *Core) scheduleHandovers() int {
	if len(c.handovers) == 0 {
		return c.scheduleCleanups()
	}
	n := 0
	kept := c.handovers[:0]
	full := false
	for _, t := range c.handovers {
		if !c.handoverable(t) {
			if t.homeless && t.status == Running && !t.dag.deleted && (t.inflight || t.dag.inflight) {
				kept = append(kept, t) // decided once what is in flight applies
			} else {
				t.homeless = false
			}
			continue
		}
		var w *worker
		if !full {
			if w = c.pickWorker(t.spec().Requires()); w == nil {
				// Others may want other labels; none gets a worker once
				// no pod worker has a free slot.
				full = c.pickWorker(podWorker) == nil
			}
		}
		if w == nil {
			kept = append(kept, t)
			continue
		}
		if w.id == t.rec.Worker {
			// The worker the log names gave the attempt up and is the one
			// free now: it takes it again, and the log already says so.
			t.homeless = false
			w.busy++
			w.attempts[t.attemptID()] = t
			c.effects = append(c.effects, c.handoverDispatch(t, w.id))
			if toCancel(t) {
				// Its cancellation waited for a worker to hold it, as
				// after a hand-over record (handedOver).
				c.reconcileTask(t)
			}
		} else {
			c.proposeHandover(t, w)
		}
		n++
	}
	clear(c.handovers[len(kept):])
	c.handovers = kept
	return n + c.scheduleCleanups()
}

// proposeHandover proposes that t's running attempt continue on w,
// reserving one of w's slots until the record is applied.
func (c *Core) proposeHandover(t *task, w *worker) {
	rec := c.nextRecord(t)
	rec.Status, rec.Event = Running, "handover"
	rec.Error = "worker " + t.rec.Worker + " lost the attempt; " + w.id + " adopts its pod"
	rec.Worker = w.id
	w.busy++
	t.homeless = false
	t.handingOver, t.reserved = true, w
	c.proposeTask(t, rec)
}

// handedOver is the leader's reaction to an applied hand-over record: the
// attempt goes to its new worker, to be adopted by name (or, in a
// cancelled DAG, to have its pod deleted).
func (c *Core) handedOver(t *task) {
	reserved := t.reserved
	t.handingOver, t.reserved = false, nil
	w := c.workers[t.rec.Worker]
	if w == nil {
		if reserved != nil {
			reserved.busy--
		}
		// Gone while the record was being committed: wait for the next.
		c.loseAttempt(t)
		return
	}
	if w != reserved {
		w.busy++ // rejoined since the slot was reserved
		if reserved != nil {
			reserved.busy--
		}
	}
	w.attempts[t.attemptID()] = t
	c.effects = append(c.effects, c.handoverDispatch(t, w.id))
}

// handoverDispatch is the dispatch of t's current attempt to w, which
// adopts its pod (or deletes it, in a cancelled DAG).
func (c *Core) handoverDispatch(t *task, worker string) Effect {
	// The attempt's spec as it was first sent: its templates rendered
	// again over the same committed values (a pure function of them), so
	// that a worker which must still create the pod creates the same one.
	spec := t.spec()
	if s, err := c.attemptSpec(t); err == nil {
		spec = s
	}
	return Effect{Kind: EffectDispatch, Worker: worker,
		Attempt: model.Attempt{AttemptID: t.attemptID(), Submission: t.dag.seq, Spec: *spec, MaxOutputBytes: c.cfg.MaxOutputBytes,
			Handover: true, Stop: toCancel(t)}}
}

// abandonHandover gives up t's hand-over proposal, which will never apply.
func (c *Core) abandonHandover(t *task) {
	if w := t.reserved; w != nil {
		w.busy--
	}
	t.handingOver, t.reserved = false, nil
}

// checkHandover validates a running → running record: only a hand-over of
// a pod task's current attempt to another worker.
func checkHandover(e *Entry, t *task) error {
	rec := e.T
	switch {
	case rec.Event != "handover":
		return applyErr(e, "a record cannot move a task from running to running except to hand its attempt over (event %q)", rec.Event)
	case !isPod(t):
		return applyErr(e, "hand-over of a %s task: only a pod task's attempt outlives its worker", t.spec().Kind)
	case rec.Attempt != t.attempt():
		return applyErr(e, "hand-over of attempt %d, latest is %d", rec.Attempt, t.attempt())
	case rec.Worker == "" || rec.Worker == t.rec.Worker:
		return applyErr(e, "hand-over to worker %q, which holds the attempt already", rec.Worker)
	}
	return nil
}

// Recorded reports whether the log records worker's result as attempt id's
// end: the task's latest record is that attempt's, on that worker, and its
// event is the attempt's end (succeed, fail, timeout). Once it is, no
// worker will be given the attempt again, and its worker may clean up after
// it (delete a pod task's pod). A result the log did not take (stale,
// another worker's, moot in a cancelled DAG) is not recorded.
func (c *Core) Recorded(worker string, id model.AttemptID) bool {
	t := c.lookup(id.DAG, id.Task)
	if t == nil || t.rec == nil || t.rec.Attempt != id.Attempt || t.rec.Worker != worker {
		return false
	}
	switch t.rec.Event {
	case "succeed", "fail", "timeout":
		return true
	}
	return false
}

// toCancel reports whether t is to be cancelled: its DAG is, or its DAG's
// cancellation is requested and t is one of the DAG file's tasks (its
// handlers still run).
func toCancel(t *task) bool {
	return t.dag.rec.Status == DAGCancelled || t.dag.rec.Status == DAGRunning && ordinaryStopped(t)
}
