package engine

import (
	"context"
	"fmt"

	"github.com/orion-sched/orion/internal/core"
)

type waitKind uint8

const (
	waitSubmit waitKind = iota + 1
	waitCancel
	waitRetry
	waitDelete
)

// waiter is an API call waiting for its DAG entry to be committed and applied.
type waiter struct {
	kind    waitKind
	created bool // submit: this call's proposal created the DAG
	ch      chan waitResult
}

type waitResult struct {
	created         bool
	status          core.DAGStatus
	cancelRequested bool // cancel: the DAG's handlers run before it is cancelled
	err             error
}

func (w *waiter) wait(ctx context.Context, stopped <-chan struct{}) (waitResult, error) {
	select {
	case r := <-w.ch:
		return r, r.err
	case <-ctx.Done():
		return waitResult{}, ctx.Err()
	case <-stopped:
		return waitResult{}, ErrStopped
	}
}

// resolveWaiters answers the calls waiting on the DAG an applied entry
// changed. A waiter whose change has not happened yet keeps waiting (a cancel
// waits for the cancelled record, not for a completion proposed before it).
func (e *Engine) resolveWaiters(en *core.Entry) {
	ws := e.waiters[en.DAG]
	if len(ws) == 0 {
		return
	}
	keep := ws[:0]
	for _, w := range ws {
		r, done := waitResult{}, true
		switch {
		case en.Delete && w.kind == waitDelete:
		case en.Delete:
			r.err = &core.Error{Code: core.CodeNotFound, Msg: "DAG " + en.DAG + " was deleted"}
		case w.kind == waitDelete:
			done = false // a change committed before the deletion
		case w.kind == waitSubmit:
			r.created, r.status = w.created, en.D.Status
		case w.kind == waitCancel:
			// A DAG with handlers or notifications answers once its
			// cancellation is requested: its tasks are being cancelled,
			// and what runs at its end runs (core.CancelDAG).
			r.status, r.cancelRequested = en.D.Status, en.D.CancelRequested
			if en.D.Status.Terminal() && en.D.Status != core.DAGCancelled {
				r.err = &core.Error{Code: core.CodeConflict, Msg: fmt.Sprintf("DAG %s %s before it could be cancelled", en.DAG, en.D.Status)}
			}
			done = en.D.Status.Terminal() || en.D.CancelRequested
		case w.kind == waitRetry:
			r.status = en.D.Status
			done = en.D.Status == core.DAGRunning
		}
		if done {
			w.ch <- r
		} else {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		delete(e.waiters, en.DAG)
	} else {
		e.waiters[en.DAG] = keep
	}
}

// failWaitersOf answers every call waiting on DAG id with err.
func (e *Engine) failWaitersOf(id string, err error) {
	for _, w := range e.waiters[id] {
		w.ch <- waitResult{err: err}
	}
	delete(e.waiters, id)
}

func (e *Engine) failWaiters(err error) {
	for id, ws := range e.waiters {
		for _, w := range ws {
			w.ch <- waitResult{err: err}
		}
		delete(e.waiters, id)
	}
}

// revWaiter is a WaitApplied call.
type revWaiter struct {
	ctx  context.Context
	rev  int64
	done chan struct{}
}

// WaitApplied returns once this replica has applied the log through rev, so
// that what it answers next includes every write committed up to rev. A
// standby that forwarded a write to the leader waits here for the
// revision the leader answered with before it answers, so its client reads
// its own write from it (read-your-writes through any replica).
func (e *Engine) WaitApplied(ctx context.Context, rev int64) error {
	w := revWaiter{ctx: ctx, rev: rev, done: make(chan struct{})}
	err := e.do(ctx, func() {
		if e.appliedThrough() >= rev || e.leaderCaughtUp() {
			close(w.done)
			return
		}
		e.revWaiters = append(e.revWaiters, w)
		if e.watchCh != nil {
			// The revisions up to rev may hold nothing this replica
			// applies (another program's keys on a shared etcd): a
			// progress notification moves the watch past them. Off the
			// loop: it is a call into the etcd client.
			go func() { _ = e.st.RequestProgress(ctx) }()
		}
	})
	if err != nil {
		return err
	}
	return e.await(ctx, w.done)
}

// leaderCaughtUp reports a leader with no transaction in flight: it is the
// only writer of the log and applies each of its commits before anyone learns
// its revision, so it has applied every write that any revision stands for
// (a revision outside the log, such as another program's key, included).
func (e *Engine) leaderCaughtUp() bool { return e.c.IsLeader() && len(e.inflight) == 0 }

// appliedThrough is the revision through which this replica has applied the
// log: its last entry's, or a later one its watch has shown (events it does
// not apply, or a progress notification).
func (e *Engine) appliedThrough() int64 { return max(e.c.Rev(), e.seenRev) }

// resolveRevWaiters releases the WaitApplied calls whose revision is
// applied, and forgets those whose caller gave up.
func (e *Engine) resolveRevWaiters() {
	if len(e.revWaiters) == 0 {
		return
	}
	through := e.appliedThrough()
	keep := e.revWaiters[:0]
	for _, w := range e.revWaiters {
		switch {
		case w.rev <= through || e.leaderCaughtUp():
			close(w.done)
		case w.ctx.Err() == nil:
			keep = append(keep, w)
		}
	}
	clear(e.revWaiters[len(keep):])
	e.revWaiters = keep
}
