package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
)

// DefaultFanOut is the fan-out phase's mapped tasks unless --fanout says
// otherwise: max_items' default.
const DefaultFanOut = model.DefaultMaxItems

// fanOutDAG is a shell task that publishes n items (0 .. n-1, a JSON array
// in one output) and a map group of noop tasks over them.
func fanOutDAG(id string, n int) *model.DAG {
	d := &model.DAG{ID: id, Name: id, Tasks: []model.Task{
		{ID: "produce", Kind: model.KindShell, Command: fmt.Sprintf(`echo "items=[$(seq -s, 0 %d)]" > "$ORION_OUTPUTS"`, n-1)},
		{ID: "fan", Kind: model.KindNoop, DependsOn: []string{"produce"}, ForEach: model.ForEach(`"{{ tasks.produce.outputs.items }}"`)},
	}}
	d.Normalize()
	return d
}

// fanOutPhase measures run-time fan-out through the API: from the
// producing task's success (its record's finish) to the group's
// expansion committed (the expand record's time), to the last of its n
// noop instances dispatched (the latest dispatch record), and to the
// group's end (all of them completed). Every instance costs the records
// of a noop task (a dispatch and its success, folded into one when sent
// early), so the figure is bounded by the same commit throughput as the
// throughput phase's tasks/s, plus one expansion of n items applied once.
func (r *clusterRun) fanOutPhase(ctx context.Context) error {
	o, res, c := r.o, r.res, r.c
	n := o.FanOut
	if n <= 0 {
		return nil
	}
	d := fanOutDAG(o.RunID+"-fanout", n)
	body, err := json.Marshal(d)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "fan-out: one task publishing %d items, a map group of %d noop tasks over them...\n", n, n)
	start := time.Now()
	r.submitted = append(r.submitted, d.ID)
	if err := submitAll(ctx, c, [][]byte{body}, 1); err != nil {
		return fmt.Errorf("fan-out: %w", err)
	}
	if _, _, err := waitDAGs(ctx, c, []string{d.ID}, start, o.Timeout, o.Poll, o.Log); err != nil {
		return fmt.Errorf("fan-out: %w", err)
	}
	produce, err := c.GetTask(ctx, d.ID, "produce")
	if err != nil {
		return fmt.Errorf("fan-out: %w", err)
	}
	group, err := c.GetTask(ctx, d.ID, "fan")
	if err != nil {
		return fmt.Errorf("fan-out: %w", err)
	}
	if group.Status != apitypes.StatusSucceeded || group.Map == nil || group.Map.Count != n || produce.FinishedAt == nil ||
		group.StartedAt == nil || group.FinishedAt == nil {
		return fmt.Errorf("fan-out: the group ended %s (%s) with %+v", group.Status, group.Error, group.Map)
	}
	var lastDispatch time.Time
	for off := 0; off < n; off += apitypes.MaxInstancePage {
		page, err := c.Instances(ctx, d.ID, "fan", off, apitypes.MaxInstancePage)
		if err != nil {
			return fmt.Errorf("fan-out: %w", err)
		}
		for i := range page.Instances {
			if s := page.Instances[i].StartedAt; s != nil && s.After(lastDispatch) {
				lastDispatch = *s
			}
		}
	}
	t0 := *produce.FinishedAt
	res.FanOut = n
	res.FanOutExpandMs = ms(group.StartedAt.Sub(t0))
	res.FanOutDispatchMs = ms(lastDispatch.Sub(t0))
	res.FanOutDoneMs = ms(group.FinishedAt.Sub(t0))
	if res.FanOutDoneMs > 0 {
		res.FanOutTasksPerSec = float64(n) / (res.FanOutDoneMs / 1000)
	}
	return nil
}
