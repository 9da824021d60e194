package executor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// runSleep waits Duration (ending early on cancel or timeout) and then fails
// with probability Fail. Its log has one line for the sleep and one for an
// injected failure.
func (l *Local) runSleep(ctx context.Context, a model.Attempt, r *model.Result) {
	d := a.Spec.Duration.D()
	f, err := l.createLog(a.AttemptID)
	if err != nil {
		r.Outcome, r.Error = model.Failed, "open log: "+err.Error()
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "sleep %s\n", d)
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if classify(ctx, r) {
		fmt.Fprintf(f, "orion: %s\n", r.Error)
		return
	}
	if p := float64(a.Spec.Fail); p > 0 && rand.Float64() < p {
		r.Outcome, r.Error = model.Failed, fmt.Sprintf("injected failure (fail probability %g)", p)
		fmt.Fprintf(f, "orion: %s\n", r.Error)
		r.OutputTail = r.Error
		return
	}
	r.Outcome = model.Succeeded
}
