package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/scheduler"
	"github.com/orion-sched/orion/internal/seedapi"
)

// engineRef is the replica's current engine. The demo's "pull the plug"
// crashes the engine in place and "recover" starts a fresh one reading
// etcd, while the process, its API and its page connections stay up.
type engineRef struct {
	p atomic.Pointer[scheduler.Engine]
}

func (r *engineRef) get() *scheduler.Engine { return r.p.Load() }

func (r *engineRef) Submit(ctx context.Context, d *model.DAG) (scheduler.SubmitResult, error) {
	return r.get().Submit(ctx, d)
}
func (r *engineRef) Cancel(ctx context.Context, id string) (core.DAGStatus, error) {
	return r.get().Cancel(ctx, id)
}
func (r *engineRef) Retry(ctx context.Context, id string) (core.DAGStatus, error) {
	return r.get().Retry(ctx, id)
}
func (r *engineRef) Query(ctx context.Context, fn func(*core.Core)) error {
	return r.get().Query(ctx, fn)
}
func (r *engineRef) WaitApplied(ctx context.Context, rev int64) error {
	return r.get().WaitApplied(ctx, rev)
}
func (r *engineRef) Status() *scheduler.Status                  { return r.get().Status() }
func (r *engineRef) Leader(ctx context.Context) (string, error) { return r.get().Leader(ctx) }

// Engine returns the replica's current engine.
func (s *Server) Engine() *scheduler.Engine { return s.ref.get() }

// runEngine runs an engine; a demo crash is not the process's end.
func (s *Server) runEngine(eng *scheduler.Engine) {
	if err := eng.Run(s.ectx); !errors.Is(err, scheduler.ErrCrashed) {
		s.engineCh <- err
	}
}

// demo implements the console's crash and recovery controls (demo mode).
type demo struct{ s *Server }

// Crash drops the engine as kill -9 would: in-memory state gone, session
// abandoned without resigning. The worker streams drop too, as they would
// with the process, so workers and standbys see the leader die.
func (d demo) Crash() error {
	d.s.ref.get().Crash() // a leader's OnLeading(false) drops the worker streams
	return nil
}

// Recover starts a fresh engine that rebuilds its state from etcd; it
// returns once that state is loaded.
func (d demo) Recover(ctx context.Context) error {
	select {
	case <-d.s.ref.get().Done():
	default:
		return errors.New("the scheduler is running: nothing to recover")
	}
	eng := d.s.newEngine()
	d.s.ref.p.Store(eng)
	go d.s.runEngine(eng)
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

func (d demo) Status() seedapi.DemoStatus {
	eng := d.s.ref.get()
	select {
	case <-eng.Done():
		return seedapi.DemoStatus{}
	default:
	}
	st := eng.Status()
	return seedapi.DemoStatus{Running: st.Loaded, Detail: map[string]any{"node": st.Node, "leader": st.Leader, "applied_revision": st.AppliedRev}}
}
