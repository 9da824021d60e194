package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// do runs fn on the loop goroutine.
func (e *Engine) do(ctx context.Context, fn func()) error {
	select {
	case e.reqs <- fn:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onLoop runs fn on the loop goroutine and returns once it has run; a
// call whose ctx ends first returns at once, and fn may still run.
func (e *Engine) onLoop(ctx context.Context, fn func()) error {
	ran := make(chan struct{})
	if err := e.do(ctx, func() { fn(); close(ran) }); err != nil {
		return err
	}
	return e.await(ctx, ran)
}

// await waits until ch is closed, the engine stops or ctx ends.
func (e *Engine) await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SubmitResult says whether a submission created the DAG.
type SubmitResult struct {
	ID      string
	Created bool // false: an identical DAG with this id already existed
}

// Submit proposes a DAG and returns once it is committed. d must be
// normalized and validated; an empty id gets a fresh one.
func (e *Engine) Submit(ctx context.Context, d *model.DAG) (SubmitResult, error) {
	if d.ID == "" {
		d.ID = dag.NewID(e.clock.Now())
	}
	// Measured here, off the loop and before the entry can join a batch: a
	// record etcd would refuse must fail alone, with a 413 that says why.
	// A large DAG is split into chunks here too (store.SplitSpec), so the
	// loop only hands them on.
	probe := core.Entry{DAG: d.ID, D: &core.DAGRecord{DAG: *d, Status: core.DAGRunning, Run: 1, SubmittedAt: e.clock.Now().UTC()}}
	err := store.SplitSpec(&probe, e.cfg.Limits)
	var cost int64
	if err == nil {
		cost, err = store.Measure(&probe, e.cfg.Limits)
	}
	if err != nil {
		var tl *store.TooLargeError
		if errors.As(err, &tl) {
			msg := tl.Error() + ": split it into smaller DAGs, or move large scripts into files the commands run"
			return SubmitResult{}, &dag.ValidationError{Code: dag.CodeTooLarge, Message: msg, Details: []string{msg}}
		}
		return SubmitResult{}, err
	}
	w := &waiter{kind: waitSubmit, ch: make(chan waitResult, 1)}
	err = e.do(ctx, func() {
		// A DAG known already is answered as before, full or not (an
		// idempotent retry of an accepted submission must not get 507).
		out, err := e.c.Known(d)
		if err == nil && out == 0 && e.c.IsLeader() {
			err = e.admitStorage("DAG "+d.ID, workCost(cost, d))
		}
		if err == nil && out == 0 {
			out, err = e.c.SubmitStored(d, probe.D.Spec, probe.Chunks, e.clock.Now())
		}
		switch {
		case err != nil:
			e.countRefusal(err)
			w.ch <- waitResult{err: err}
		case out == core.SubmitDuplicate:
			w.ch <- waitResult{}
		default:
			w.created = out == core.SubmitProposed
			e.waiters[d.ID] = append(e.waiters[d.ID], w)
		}
	})
	if err != nil {
		return SubmitResult{}, err
	}
	r, err := w.wait(ctx, e.done)
	return SubmitResult{ID: d.ID, Created: r.created}, err
}

// Cancel cancels a running DAG and returns once the cancellation is committed.
func (e *Engine) Cancel(ctx context.Context, id string) (core.DAGStatus, error) {
	return e.dagChange(ctx, id, waitCancel, func(id string, now time.Time) error {
		// Cancelling is idempotent: a DAG already cancelled (by this
		// request's first send to a leader that then froze, say) is
		// answered as cancelled.
		if st, _, ok := e.c.DAGState(id); ok && e.c.IsLeader() && st == core.DAGCancelled {
			return already{status: st}
		}
		return e.c.CancelDAG(id, now)
	})
}

// Retry starts a new run of a failed or cancelled DAG. run, when not 0,
// names the run to retry, which makes the retry idempotent: if the DAG is
// already in the next run, that retry was applied (a second send of the
// same request) and is answered with the DAG's status; if it is further
// on, or not there yet, the retry is refused as a conflict.
func (e *Engine) Retry(ctx context.Context, id string, run int) (core.DAGStatus, error) {
	return e.dagChange(ctx, id, waitRetry, func(id string, now time.Time) error {
		if st, cur, ok := e.c.DAGState(id); ok && e.c.IsLeader() && run > 0 && cur != run {
			if cur == run+1 {
				return already{status: st}
			}
			return &core.Error{Code: core.CodeConflict,
				Msg: fmt.Sprintf("DAG %s is in run %d (%s): run %d is not the one to retry", id, cur, st, run)}
		}
		if spec := e.c.RetrySpec(id); spec != nil && e.c.IsLeader() {
			// Its record is written now and when it ends again.
			if err := e.admitStorage("the retry of DAG "+id, workCost(int64(core.RecordBytes(spec)), spec)); err != nil {
				return err
			}
		}
		return e.c.RetryDAG(id, now)
	})
}

// already is what a change's function returns when the change was made
// before: the call is answered at once with status.
type already struct{ status core.DAGStatus }

func (already) Error() string { return "already done" }

// Delete deletes a finished DAG with all its tasks and returns once the
// deletion is committed. A DAG whose tasks are still stopping (just
// cancelled: `orion cancel X && orion delete X`) is deleted once they have
// stopped, within ctx; a deletion already asked for is waited for.
func (e *Engine) Delete(ctx context.Context, id string) error {
	for {
		_, err := e.dagChange(ctx, id, waitDelete, func(id string, now time.Time) error {
			if e.deleting[id] {
				return nil // wait for the deletion in flight
			}
			err := e.c.DeleteDAG(id, now)
			if err == nil {
				e.deleting[id] = true
			}
			return err
		})
		var ce *core.Error
		if !errors.As(err, &ce) || !ce.Stopping {
			return err
		}
		select {
		case <-e.clock.After(deleteRetryEvery):
		case <-ctx.Done():
			return err
		case <-e.done:
			return ErrStopped
		}
	}
}

// deleteRetryEvery is how often Delete asks again while a DAG's tasks stop.
const deleteRetryEvery = 50 * time.Millisecond

func (e *Engine) dagChange(ctx context.Context, id string, kind waitKind, fn func(string, time.Time) error) (core.DAGStatus, error) {
	w := &waiter{kind: kind, ch: make(chan waitResult, 1)}
	err := e.do(ctx, func() {
		if err := fn(id, e.clock.Now()); err != nil {
			if a, ok := err.(already); ok {
				w.ch <- waitResult{status: a.status}
				return
			}
			e.countRefusal(err)
			w.ch <- waitResult{err: err}
			return
		}
		e.waiters[id] = append(e.waiters[id], w)
	})
	if err != nil {
		return "", err
	}
	r, err := w.wait(ctx, e.done)
	return r.status, err
}

// countRefusal counts a request a global limit refused.
func (e *Engine) countRefusal(err error) {
	var le *core.LimitError
	if errors.As(err, &le) {
		e.m.Refused.WithLabelValues(le.Limit).Inc()
	}
}

// Leader asks etcd which node leads (any replica can answer); "" when none.
func (e *Engine) Leader(ctx context.Context) (string, error) {
	l, _, err := e.st.CurrentLeader(ctx)
	return l.Name, err
}
