package engine

import (
	"context"

	"github.com/orion-sched/orion/internal/core"
)

// The read model. Readers (the API, the seed API, the demo controls, the
// schedule firer) never touch the core: they call these typed reads, each of
// which returns copies in the core's own types (sharing only records the
// core replaces rather than modifies, see core.DAGSummary) with the revision
// they reflect. Each reader declares the few it uses as a narrow interface.
//
// Reads that select from the state run on the loop, as every change does,
// so what they return is one revision's state; the revision alone, which
// every answer to a write carries and is asked at a high rate, is published
// by the loop as it applies entries and read without it.

// Rev returns the revision this replica has applied (the log's, through its
// last entry applied).
func (e *Engine) Rev() int64 { return e.rev.Load() }

// publishRev publishes the core's revision to Rev; the loop calls it
// wherever the core's revision moves (apply, restore).
func (e *Engine) publishRev() { e.rev.Store(e.c.Rev()) }

// read runs fn on the loop and returns what it returned. Its result is
// read only once fn has run: a read whose ctx ends first returns the zero
// value, while fn, already queued, may still run.
func read[T any](e *Engine, ctx context.Context, fn func() T) (T, error) {
	var (
		out  T
		zero T
	)
	ran := make(chan struct{})
	if err := e.do(ctx, func() { out = fn(); close(ran) }); err != nil {
		return zero, err
	}
	if err := e.await(ctx, ran); err != nil {
		return zero, err
	}
	return out, nil
}

// revised is a read's value with the revision it reflects.
type revised[T any] struct {
	v   T
	rev int64
}

// DAGs lists the DAGs q selects, newest first, at the revision returned:
// from the index the loop keeps, so a page costs the DAGs it passes.
func (e *Engine) DAGs(ctx context.Context, q core.DAGQuery) ([]core.DAGSummary, int64, error) {
	r, err := read(e, ctx, func() revised[[]core.DAGSummary] {
		return revised[[]core.DAGSummary]{e.c.DAGsFrom(q, e.bigReads.all()), e.c.Rev()}
	})
	return r.v, r.rev, err
}

// DAGViews returns the DAGs q selects with their tasks, newest first, at
// the revision returned.
func (e *Engine) DAGViews(ctx context.Context, q core.DAGQuery) ([]*core.DAGView, int64, error) {
	r, err := read(e, ctx, func() revised[[]*core.DAGView] {
		var views []*core.DAGView
		for _, s := range e.c.DAGsFrom(q, e.bigReads.all()) {
			if v, ok := e.c.DAG(s.ID); ok {
				views = append(views, v)
			}
		}
		return revised[[]*core.DAGView]{views, e.c.Rev()}
	})
	return r.v, r.rev, err
}

// DAG returns one DAG with its tasks (nil when this replica holds no DAG
// id), at the revision returned.
func (e *Engine) DAG(ctx context.Context, id string) (*core.DAGView, int64, error) {
	r, err := read(e, ctx, func() revised[*core.DAGView] {
		v, _ := e.c.DAG(id)
		return revised[*core.DAGView]{v, e.c.Rev()}
	})
	return r.v, r.rev, err
}

// TaskRead is what Task reads: the task (nil when there is none), whether
// its DAG exists (to say which of the two is missing), and the revision.
type TaskRead struct {
	View     *core.TaskView
	DAGFound bool
	Rev      int64
}

// Task returns one task of a DAG.
func (e *Engine) Task(ctx context.Context, dagID, taskID string) (TaskRead, error) {
	return read(e, ctx, func() TaskRead {
		r := TaskRead{Rev: e.c.Rev()}
		r.View, r.DAGFound = e.c.Task(dagID, taskID)
		if !r.DAGFound {
			_, r.DAGFound = e.c.Summary(dagID)
		}
		return r
	})
}

// DAGState returns a DAG's status and run without building its view; ok is
// false when this replica holds no DAG id.
func (e *Engine) DAGState(ctx context.Context, id string) (core.DAGStatus, int, bool, error) {
	type state struct {
		st  core.DAGStatus
		run int
		ok  bool
	}
	r, err := read(e, ctx, func() state {
		st, run, ok := e.c.DAGState(id)
		return state{st, run, ok}
	})
	return r.st, r.run, r.ok, err
}

// Counts returns the number of tasks in each status over all DAGs, at the
// revision returned. It reads the loop's counters, not the status the loop
// publishes every 250 ms: a client just told 201 sees its tasks counted.
func (e *Engine) Counts(ctx context.Context) (core.StatusCounts, int64, error) {
	r, err := read(e, ctx, func() revised[core.StatusCounts] {
		return revised[core.StatusCounts]{e.c.StatusCounts(), e.c.Rev()}
	})
	return r.v, r.rev, err
}

// InstancesRead is what Instances reads: a page of a map group's instances
// (nil when there is none), whether the DAG and the task exist (to say
// which is missing, or that the task is not a group), and the revision.
type InstancesRead struct {
	List      *core.InstanceList
	DAGFound  bool
	TaskFound bool
	Rev       int64
}

// Instances returns a page of a map group's instances from offset, at
// most limit (core.Instances).
func (e *Engine) Instances(ctx context.Context, dagID, taskID string, offset, limit int) (InstancesRead, error) {
	return read(e, ctx, func() InstancesRead {
		r := InstancesRead{Rev: e.c.Rev()}
		if r.List, r.TaskFound = e.c.Instances(dagID, taskID, offset, limit); r.TaskFound {
			r.DAGFound = true
			return r
		}
		_, r.DAGFound = e.c.Summary(dagID)
		tv, _ := e.c.Task(dagID, taskID)
		r.TaskFound = tv != nil
		return r
	})
}
