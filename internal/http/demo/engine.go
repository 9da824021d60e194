package demo

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/model"
)

// EngineRef is a replica's current engine. A demo crash drops the engine
// in place and a recovery starts a fresh one reading etcd, while the
// process, its API and its page connections stay up: everything that
// serves requests holds the ref, never an engine, so it follows the swap.
type EngineRef struct {
	p atomic.Pointer[engine.Engine]
}

// Get returns the current engine.
func (r *EngineRef) Get() *engine.Engine { return r.p.Load() }

// Set makes eng the current engine.
func (r *EngineRef) Set(eng *engine.Engine) { r.p.Store(eng) }

func (r *EngineRef) Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error) {
	return r.Get().Submit(ctx, d)
}
func (r *EngineRef) Cancel(ctx context.Context, id string) (core.DAGStatus, error) {
	return r.Get().Cancel(ctx, id)
}
func (r *EngineRef) Retry(ctx context.Context, id string, run int) (core.DAGStatus, error) {
	return r.Get().Retry(ctx, id, run)
}
func (r *EngineRef) Delete(ctx context.Context, id string) error {
	return r.Get().Delete(ctx, id)
}
func (r *EngineRef) DAGs(ctx context.Context, q core.DAGQuery) ([]core.DAGSummary, int64, error) {
	return r.Get().DAGs(ctx, q)
}
func (r *EngineRef) DAGViews(ctx context.Context, q core.DAGQuery) ([]*core.DAGView, int64, error) {
	return r.Get().DAGViews(ctx, q)
}
func (r *EngineRef) DAG(ctx context.Context, id string) (*core.DAGView, int64, error) {
	return r.Get().DAG(ctx, id)
}
func (r *EngineRef) DAGHead(ctx context.Context, id string, limit int) (engine.HeadRead, error) {
	return r.Get().DAGHead(ctx, id, limit)
}
func (r *EngineRef) Tasks(ctx context.Context, id string, q engine.TasksQuery) (engine.TasksRead, error) {
	return r.Get().Tasks(ctx, id, q)
}
func (r *EngineRef) Task(ctx context.Context, dagID, taskID string) (engine.TaskRead, error) {
	return r.Get().Task(ctx, dagID, taskID)
}
func (r *EngineRef) Instances(ctx context.Context, dagID, taskID string, offset, limit int) (engine.InstancesRead, error) {
	return r.Get().Instances(ctx, dagID, taskID, offset, limit)
}
func (r *EngineRef) DAGState(ctx context.Context, id string) (core.DAGStatus, int, bool, error) {
	return r.Get().DAGState(ctx, id)
}
func (r *EngineRef) Counts(ctx context.Context) (core.StatusCounts, int64, error) {
	return r.Get().Counts(ctx)
}
func (r *EngineRef) Rev() int64 { return r.Get().Rev() }
func (r *EngineRef) WaitApplied(ctx context.Context, rev int64) error {
	return r.Get().WaitApplied(ctx, rev)
}
func (r *EngineRef) Status() *engine.Status                     { return r.Get().Status() }
func (r *EngineRef) Leader(ctx context.Context) (string, error) { return r.Get().Leader(ctx) }

// Replica is the Scheduler of a running `orion server`: it crashes and
// recovers the engine Ref holds.
type Replica struct {
	Ref *EngineRef
	// NewEngine builds an engine wired like the first one.
	NewEngine func() *engine.Engine
	// Run runs an engine until it stops; Recover calls it on a goroutine
	// of its own.
	Run func(*engine.Engine)
}

// Crash drops the engine as kill -9 would: in-memory state gone, session
// abandoned without resigning. The worker streams drop too, as they would
// with the process, so workers and standbys see the leader die.
func (r Replica) Crash() error {
	r.Ref.Get().Crash() // a leader's OnLeading(false) drops the worker streams
	return nil
}

// Recover starts a fresh engine that rebuilds its state from etcd; it
// returns once that state is loaded.
func (r Replica) Recover(ctx context.Context) error {
	select {
	case <-r.Ref.Get().Done():
	default:
		return errors.New("the scheduler is running: nothing to recover")
	}
	eng := r.NewEngine()
	r.Ref.Set(eng)
	go r.Run(eng)
	for !eng.Status().Loaded {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-eng.Done():
			return errors.New("engine stopped while loading")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Status reports a stopped engine as not running, and a running one with
// its node, role and applied revision.
func (r Replica) Status() Status {
	eng := r.Ref.Get()
	select {
	case <-eng.Done():
		return Status{}
	default:
	}
	st := eng.Status()
	return Status{Running: st.Loaded, Detail: map[string]any{"node": st.Node, "leader": st.Leader, "applied_revision": st.AppliedRev}}
}
