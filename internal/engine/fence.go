package engine

import (
	"context"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/store"
)

// LeaderFence returns the fence of this replica's term while it leads (its
// state caught up and its core leading), for the writes kept beside the
// log that must be fenced like its entries (schedules and their cursors);
// ErrNotLeader otherwise.
func (e *Engine) LeaderFence(ctx context.Context) (store.Fence, error) {
	var (
		f  store.Fence
		ok bool
	)
	err := e.Query(ctx, func(c *core.Core) {
		if e.term != nil && c.IsLeader() {
			f, ok = e.term.Fence(), true
		}
	})
	if err != nil {
		return store.Fence{}, err
	}
	if !ok {
		return store.Fence{}, ErrNotLeader
	}
	return f, nil
}
