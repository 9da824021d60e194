package engine

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// retry calls try until it succeeds or ctx ends, pausing between attempts on
// the engine's clock. It logs the first failure and every tenth after: an
// etcd without quorum fails every attempt for as long as it lasts. try
// bounds each attempt itself.
func retry[T any](ctx context.Context, clock Clock, pause time.Duration, log *zap.Logger, what string, try func(context.Context) (T, error)) (T, error) {
	for failures := 0; ; failures++ {
		v, err := try(ctx)
		if err == nil {
			return v, nil
		}
		if failures%10 == 0 {
			log.Warn(what+" failed; retrying", zap.Error(err), zap.Int("failures", failures+1))
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-clock.After(pause):
		}
	}
}
