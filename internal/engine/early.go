package engine

import (
	"crypto/rand"
	"maps"
	"slices"
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
//     confirmed this term on its current stream (joined; a worker of an
//     earlier version never does). A deposed leader cannot commit one, and
//     a stream that drops loses the admission until the next confirmation.
//  2. Barrier. A new leader reads the workers the term before listed and
//     dispatches nothing until each has joined it, or the orphan grace has
//     passed (a worker silent that long is presumed dead, as for adoption).
//     A worker's hello lists what it runs and the results nobody
//     acknowledged; attempts the log never saw are adopted (core.Adopt).
//     Its own term record lists them until then, so a leader that dies
//     during the barrier hands them on. Only those workers, and only
//     until they confirm this term, may claim an attempt the log does not
//     show (core.AdmittedBefore); any other worker holds only what the
//     log gave it.
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

// onEarlyJoin admits a standalone worker that confirmed this term on its
// current stream: it is listed in the next term record, and gets early
// attempts once that record commits.
func (e *Engine) onEarlyJoin(id string) {
	e.joinSeq[id] = e.commitSeq
	e.admitted[id] = true
	e.wantRecord()
}

// revokeEarly stops early attempts to a worker that opened a new stream:
// it must confirm this term on it first. A restarted worker has forgotten
// the terms it joined, and could be talking to a deposed leader.
func (e *Engine) revokeEarly(id string) {
	delete(e.joinSeq, id)
	e.c.AllowEarly(id, false)
}

// wantRecord asks for the term record to be written again (its workers
// changed). While etcd is full it waits: a put would be refused, and would
// hold back the deletes that free space (storagefull.go).
func (e *Engine) wantRecord() {
	e.recordVer++
	e.recordWanted = true
	e.takeRecordWish()
}

// takeRecordWish makes a wanted term record due once etcd has room.
func (e *Engine) takeRecordWish() {
	if e.recordWanted && !e.full.active() {
		e.recordWanted = false
		e.termRecordDue = true
	}
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
	e.admitted = maps.Clone(e.awaiting) // listed until they join or are presumed dead
	// The only workers that may hold attempts the log does not show:
	// their hellos may claim them until they confirm this term.
	e.claimable = maps.Clone(e.awaiting)
	e.joinSeq = make(map[string]uint64)
	e.recordVer++
	e.recordWanted = false // the term's first record is due anyway
	if e.incarnation == "" {
		e.incarnation = newIncarnation()
	}
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
	for id := range e.awaiting {
		// It never confirmed this term, so this term sent it nothing
		// early: it leaves the list at once.
		delete(e.admitted, id)
	}
	e.awaiting = nil
	e.m.AwaitedWorkers.Set(0)
	e.wantRecord()
}

// newIncarnation names a keyspace's history (store.TermRecord.Incarnation).
func newIncarnation() string { return rand.Text() }

func (e *Engine) awaitingList() []string { return slices.Sorted(maps.Keys(e.awaiting)) }

// shrinkAdmitted drops from the list the workers that have left, and those
// of the term before that never joined once the barrier is over, and
// reports whether it dropped any. Call it only when a transaction takes the
// last pending entry, or when nothing is pending or in flight: every early
// attempt sent to them is then in that transaction or before it, and the
// record goes in it or after it.
func (e *Engine) shrinkAdmitted() bool {
	changed := false
	for id := range e.admitted {
		if _, joined := e.execs[id]; !joined && !e.awaiting[id] {
			delete(e.admitted, id)
			changed = true
		}
	}
	if changed {
		e.wantRecord()
	}
	return changed
}

// admittedList is the term record's Workers.
func (e *Engine) admittedList() []string { return slices.Sorted(maps.Keys(e.admitted)) }

// onRecordCommitted lets the workers that the committed term record lists,
// and that joined before its transaction began, have early attempts.
func (e *Engine) onRecordCommitted(cr commitResult) {
	if cr.recordVer == e.recordVer {
		e.termRecordDue = false
	}
	for id, seq := range e.joinSeq {
		if seq <= cr.seq && slices.Contains(cr.record.Workers, id) {
			e.c.AllowEarly(id, true)
			delete(e.joinSeq, id)
		}
	}
}
