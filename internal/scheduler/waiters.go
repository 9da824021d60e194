package scheduler

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
)

// waiter is an API call waiting for its DAG entry to be committed and applied.
type waiter struct {
	kind    waitKind
	created bool // submit: this call's proposal created the DAG
	ch      chan waitResult
}

type waitResult struct {
	created bool
	status  core.DAGStatus
	err     error
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
		case en.Delete:
			r.err = &core.Error{Code: "not_found", Msg: "DAG " + en.DAG + " was deleted"}
		case w.kind == waitSubmit:
			r.created, r.status = w.created, en.D.Status
		case w.kind == waitCancel:
			r.status = en.D.Status
			if en.D.Status.Terminal() && en.D.Status != core.DAGCancelled {
				r.err = &core.Error{Code: "conflict", Msg: fmt.Sprintf("DAG %s %s before it could be cancelled", en.DAG, en.D.Status)}
			}
			done = en.D.Status.Terminal()
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

func (e *Engine) failWaiters(err error) {
	for id, ws := range e.waiters {
		for _, w := range ws {
			w.ch <- waitResult{err: err}
		}
		delete(e.waiters, id)
	}
}
