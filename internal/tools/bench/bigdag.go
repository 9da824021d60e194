package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// BigDAGSplit is how many DAGs the big DAG's tasks are split into for the
// comparison: 100,000 tasks in one DAG against 100 DAGs of 1,000.
const BigDAGSplit = 100

// BigDAG is the big-DAG phase (--big-dag N): one DAG of N independent noop
// tasks submitted like any other, against the same N tasks in BigDAGSplit
// DAGs, measured in the same run. Null in JSON unless asked for.
type BigDAG struct {
	Tasks int `json:"tasks"`
	// AcceptMs: the POST of the one DAG, from sending it to its 2xx (the
	// submission is acknowledged once committed).
	AcceptMs float64 `json:"accept_ms"`
	// FirstDispatchMs: from sending the POST to its first task's dispatch
	// (the started_at of t0: ready tasks of one priority leave their
	// queue in submission order, so t0 goes first).
	FirstDispatchMs float64 `json:"first_dispatch_ms"`
	// TasksPerSec: N over the POST's start to the DAG's last task done.
	TasksPerSec float64 `json:"tasks_per_sec"`
	// SplitDAGs of SplitDAGSize tasks each: the same tasks, submitted by
	// the run's submitters, over their first POST to their last task done.
	SplitDAGs        int     `json:"split_dags"`
	SplitDAGSize     int     `json:"split_dag_size"`
	SplitTasksPerSec float64 `json:"split_tasks_per_sec"`
	// Ratio is TasksPerSec over SplitTasksPerSec (the goal: at least 0.8).
	Ratio float64 `json:"ratio"`
}

// bigDAGPhase runs the split DAGs, then the one big DAG, through the API.
// The split run goes first, so the big DAG meets a state at least as large
// as the split run met: any cost of a grown state counts against the big
// DAG, not for it.
func (r *clusterRun) bigDAGPhase(ctx context.Context) error {
	o := r.o
	n := o.BigDAG
	if n <= 0 {
		return nil
	}
	b := &BigDAG{Tasks: n, SplitDAGs: BigDAGSplit, SplitDAGSize: n / BigDAGSplit}
	fmt.Fprintf(o.Log, "big DAG: %d noop tasks in %d DAGs of %d, then in one DAG...\n", n, b.SplitDAGs, b.SplitDAGSize)
	ids := make([]string, b.SplitDAGs)
	bodies := make([][]byte, b.SplitDAGs)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-split-%03d", o.RunID, i)
		var err error
		if bodies[i], err = json.Marshal(independent(ids[i], b.SplitDAGSize)); err != nil {
			return err
		}
	}
	start := time.Now()
	r.submitted = append(r.submitted, ids...)
	if err := submitAll(ctx, r.c, bodies, o.Submitters); err != nil {
		return fmt.Errorf("big DAG, split: %w", err)
	}
	t, end, err := waitDAGs(ctx, r.c, ids, start, o.Timeout, o.Poll, o.Log)
	if err != nil {
		return fmt.Errorf("big DAG, split: %w", err)
	}
	b.SplitTasksPerSec = float64(t.Succeeded) / end.Sub(start).Seconds()

	id := o.RunID + "-big"
	body, err := json.Marshal(independent(id, n))
	if err != nil {
		return err
	}
	r.submitted = append(r.submitted, id)
	start = time.Now()
	if _, err := r.c.Submit(ctx, body, "application/json"); err != nil {
		return fmt.Errorf("big DAG: submitting %d tasks (%d bytes): %w", n, len(body), err)
	}
	b.AcceptMs = ms(time.Since(start))
	fmt.Fprintf(o.Log, "big DAG: %d tasks (%.1f MiB) accepted after %.0f ms; waiting for it to finish...\n", n, float64(len(body))/(1<<20), b.AcceptMs)
	t, end, err = waitDAGs(ctx, r.c, []string{id}, start, o.Timeout, o.Poll, o.Log)
	if err != nil {
		return fmt.Errorf("big DAG: %w", err)
	}
	if t.Succeeded != n {
		return fmt.Errorf("big DAG: %d of its %d tasks succeeded", t.Succeeded, n)
	}
	b.TasksPerSec = float64(n) / end.Sub(start).Seconds()
	first, err := r.c.GetTask(ctx, id, "t0")
	if err != nil {
		return fmt.Errorf("big DAG: %w", err)
	}
	if first.StartedAt == nil {
		return fmt.Errorf("big DAG: its task t0 has no start time")
	}
	b.FirstDispatchMs = ms(first.StartedAt.Sub(start))
	b.Ratio = safeDiv(b.TasksPerSec, b.SplitTasksPerSec)
	r.res.BigDAG = b
	return nil
}

func (b *BigDAG) print(w io.Writer) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "big DAG accepted\t%.1f ms\tone DAG of %d noop tasks: POST → 2xx (committed)\n", b.AcceptMs, b.Tasks)
	fmt.Fprintf(w, "big DAG first dispatch\t%.1f ms\tPOST → its first task dispatched\n", b.FirstDispatchMs)
	fmt.Fprintf(w, "big DAG throughput\t%.0f tasks/s\t%.2f× the same tasks in %d DAGs of %d (%.0f tasks/s; goal ≥ 0.8×)\n",
		b.TasksPerSec, b.Ratio, b.SplitDAGs, b.SplitDAGSize, b.SplitTasksPerSec)
}

// DefaultLiveKills is how many kill -9 drills the live-tasks phase runs.
const DefaultLiveKills = 5

// checkBigOptions refuses sizes the big phases cannot run.
func checkBigOptions(bigDAG, live int) error {
	if bigDAG < 0 || (bigDAG > 0 && (bigDAG < BigDAGSplit || bigDAG%BigDAGSplit != 0)) {
		return fmt.Errorf("--big-dag %d: want a multiple of %d (its tasks are also run in %d DAGs)", bigDAG, BigDAGSplit, BigDAGSplit)
	}
	if live < 0 || (live > 0 && live <= liveDrillTasks) {
		return fmt.Errorf("--live %d: want more than %d (a drill DAG of %d tasks counts among them)", live, liveDrillTasks, liveDrillTasks)
	}
	return nil
}
