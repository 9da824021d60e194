package engine

import (
	"context"

	"github.com/orion-sched/orion/internal/core"
)

// query runs fn on the loop with the core, for tests that look at state no
// typed read shows (the core's dump, the loop's own fields). Readers use
// the typed reads of reads.go.
func (e *Engine) query(ctx context.Context, fn func(c *core.Core)) error {
	return e.onLoop(ctx, func() { fn(e.c) })
}
