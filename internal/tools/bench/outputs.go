package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// outputsChainDAG is a chain of n shell tasks, each publishing an output
// (a line to $ORION_OUTPUTS) that the next one's command reads through a
// template, as a value handed from task to task does.
func outputsChainDAG(id string, n int) *model.DAG {
	d := chain(id, n)
	for i := range d.Tasks {
		t := &d.Tasks[i]
		t.Kind, t.Command = model.KindShell, `echo v=1 > "$ORION_OUTPUTS"`
		if i > 0 {
			t.Command = `echo "v={{ tasks.t` + strconv.Itoa(i-1) + `.outputs.v }}" > "$ORION_OUTPUTS"`
		}
	}
	d.Normalize()
	return d
}

// outputsPhase measures what handing a value from task to task costs: a
// chain of shell tasks that each publish an output the next one reads,
// against chains of plain shell tasks (`true`) run just before (the shell
// phase) and just after it. The difference per step is one output's round
// trip: the task writing its file, the executor reading it, the leader
// checking and committing it with the success, and the template of the
// next task rendered from it.
func (r *clusterRun) outputsPhase(ctx context.Context) error {
	o, res, c := r.o, r.res, r.c
	n := o.ShellChain
	run := func(name string, d *model.DAG) (float64, error) {
		body, err := json.Marshal(d)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		r.submitted = append(r.submitted, d.ID)
		if err := submitAll(ctx, c, [][]byte{body}, 1); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		t, end, err := waitDAGs(ctx, c, []string{d.ID}, start, o.Timeout, o.Poll, o.Log)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if t.Succeeded != n {
			return 0, fmt.Errorf("%s: %d of %d tasks succeeded", name, t.Succeeded, n)
		}
		return ms(end.Sub(start)) / float64(n), nil
	}
	fmt.Fprintf(o.Log, "outputs chain: %d shell tasks, each reading the output of the one before...\n", n)
	out, err := run("outputs chain", outputsChainDAG(o.RunID+"-outputs", n))
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "outputs chain: a plain shell chain again, to compare...\n")
	plain, err := run("shell chain after outputs", shellChainDAG(o.RunID+"-shell2", n))
	if err != nil {
		return err
	}
	res.OutputsChainMsPerStep = out
	res.OutputRoundTripMs = out - (res.ShellChainMsPerStep+plain)/2
	return nil
}
