package scheduler

import (
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"
)

// Early attempts: the leader sends a standalone worker its attempts with
// their dispatch proposals (core.AllowEarly), and a success that comes back
// before the dispatch record is sent is written into it, one record for the
// whole attempt instead of two. The log then may not know an attempt that a
// worker runs. Three rules keep every attempt known to the leader that
// could dispatch its task again:
//
//  1. Admission. A worker gets early attempts only once a term record that
//     lists it (store.TermRecord.Workers) has committed, fenced, after it
//     joined. A deposed leader cannot commit one.
//  2. Barrier. A new leader reads the workers the term before listed and
//     dispatches nothing until each has joined it, or the orphan grace has
//     passed (a worker silent that long is presumed dead, as for adoption).
//     A worker's hello lists what it runs and the results nobody
//     acknowledged; attempts the log never saw are adopted (core.Adopt).
//     Its own term record lists them until then, so a leader that dies
//     during the barrier hands them on.
//  3. Terms. A worker joins the new leader only after its stream to the
//     old one ended, and from then on refuses streams of older terms
//     (workerstream.Term): nothing a deposed leader sends can reach it.
//     The barrier counts a worker once it confirmed the new term (joined),
//     not at its hello.
//
// A worker leaves the list once it has left and every early attempt sent
// to it is in a transaction: the list shrinks only in a transaction that
// carries the last pending entry.

// barrierTimer is the timer kind that ends a barrier (the core's start at 1).
const barrierTimer = 0

// onEarlyJoin admits a standalone worker that joined: it is listed in the
// next term record, and gets early attempts once that record commits.
func (e *Engine) onEarlyJoin(id string) {
	if e.early[id] {
		return // admitted in this term, and joined again within its grace
	}
	e.joinSeq[id] = e.commitSeq
	if !e.admitted[id] {
		e.admitted[id] = true
	}
	e.recordVer++
	e.termRecordDue = true
}

// onConfirmed takes a worker's confirmation of this term, which ends the
// barrier's wait for it.
func (e *Engine) onConfirmed(id string) {
	if !e.awaiting[id] {
		return
	}
	delete(e.awaiting, id)
	e.m.AwaitedWorkers.Set(float64(len(e.awaiting)))
	if len(e.awaiting) == 0 {
		e.log.Info("every worker of the term before has joined; dispatching",
			zap.Duration("waited", e.clock.Now().Sub(e.barrierSince)))
	}
}

// startBarrier begins a term's barrier: the workers the term before
// listed, and those this replica listed if it leads on in the same term
// after a re-read, must join before anything is dispatched.
func (e *Engine) startBarrier(now time.Time) {
	e.awaiting = make(map[string]bool)
	for _, id := range e.prevWorkers {
		e.awaiting[id] = true
	}
	for id := range e.admitted {
		e.awaiting[id] = true
	}
	e.admitted = make(map[string]bool, len(e.awaiting))
	for id := range e.awaiting {
		e.admitted[id] = true // listed until they join or are presumed dead
	}
	e.early = make(map[string]bool)
	e.joinSeq = make(map[string]uint64)
	e.recordVer++
	if len(e.awaiting) == 0 {
		return
	}
	e.barrierSince = now
	e.m.AwaitedWorkers.Set(float64(len(e.awaiting)))
	e.timers.push(timerItem{at: now.Add(e.c.Config().OrphanGrace), kind: barrierTimer})
	e.resetTimer()
	e.log.Info("dispatching nothing until the workers of the term before join", zap.Strings("workers", e.awaitingList()))
}

// endBarrier gives up on the workers that have not joined within the
// orphan grace: they are presumed dead, and leave the term record.
func (e *Engine) endBarrier() {
	if len(e.awaiting) == 0 {
		return
	}
	e.log.Warn("workers of the term before did not join within the orphan grace; presumed dead, dispatching",
		zap.Strings("workers", e.awaitingList()), zap.Duration("waited", e.clock.Now().Sub(e.barrierSince)))
	e.awaiting = nil
	e.m.AwaitedWorkers.Set(0)
}

func (e *Engine) awaitingList() []string {
	out := make([]string, 0, len(e.awaiting))
	for id := range e.awaiting {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// shrinkAdmitted drops from the list the workers that have left, and those
// of the term before that never joined once the barrier is over. Call it
// only for a transaction that carries the last pending entry: every early
// attempt sent to them is then in it or before it.
func (e *Engine) shrinkAdmitted() {
	changed := false
	for id := range e.admitted {
		if _, joined := e.execs[id]; !joined && !e.awaiting[id] {
			delete(e.admitted, id)
			changed = true
		}
	}
	if changed {
		e.recordVer++
		e.termRecordDue = true
	}
}

// admittedList is the term record's Workers.
func (e *Engine) admittedList() []string {
	out := make([]string, 0, len(e.admitted))
	for id := range e.admitted {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// onRecordCommitted lets the workers that the committed term record lists,
// and that joined before its transaction began, have early attempts.
func (e *Engine) onRecordCommitted(cr commitResult) {
	if cr.recordVer == e.recordVer {
		e.termRecordDue = false
	}
	for id, seq := range e.joinSeq {
		if seq <= cr.seq && slices.Contains(cr.recordWorkers, id) {
			e.early[id] = true
			e.c.AllowEarly(id, true)
			delete(e.joinSeq, id)
		}
	}
}
