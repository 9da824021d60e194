package engine

import (
	"context"

	"github.com/orion-sched/orion/internal/store"
)

// LeaderFence returns the fence of this replica's term while it leads (its
// state caught up and its core leading), for the writes kept beside the
// log that must be fenced like its entries (schedules and their cursors);
// ErrNotLeader otherwise.
func (e *Engine) LeaderFence(ctx context.Context) (store.Fence, error) {
	f, err := read(e, ctx, func() *store.Fence {
		if e.term != nil && e.c.IsLeader() {
			f := e.term.Fence()
			return &f
		}
		return nil
	})
	if err != nil {
		return store.Fence{}, err
	}
	if f == nil {
		return store.Fence{}, ErrNotLeader
	}
	return *f, nil
}
