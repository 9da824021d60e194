package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/http/apitypes"
)

// A DAG of more tasks than the API lists at once (apitypes.MaxViewTasks)
// is summarised: its groups, its failed tasks, then those running, longest
// first, a screenful in all; --all pages through every task.

// defaultBigRows is the tasks a big DAG's summary lists: a screenful.
const defaultBigRows = 20

// maxRunningRead bounds the running tasks read to find the longest
// running: a DAG runs at most as many as its workers' slots.
const maxRunningRead = 10 * apitypes.MaxTaskPage

// maxGroupRows bounds the groups a big DAG's summary lists.
const maxGroupRows = 10

// allTasks replaces d's tasks with every one of its tasks (map instances
// are left to 'orion get task DAG GROUP', as for a small DAG).
func allTasks(ctx context.Context, c *client.Client, d *client.DAG) error {
	tasks := make([]client.Task, 0, d.TaskCount)
	err := c.EachTask(ctx, d.ID, client.TaskQuery{Limit: apitypes.MaxTaskPage}, func(t *client.Task) bool {
		if t.Instance == nil {
			tasks = append(tasks, *t)
		}
		return true
	})
	if err != nil {
		return err
	}
	d.Tasks, d.TasksTruncated = tasks, false
	return nil
}

// printBigDAG prints a big DAG's groups, then its failed tasks, then its
// running ones, longest running first: rows tasks at most.
func printBigDAG(ctx context.Context, out io.Writer, c *client.Client, d *client.DAG, rows int) error {
	rows = max(rows, 1)
	if s := d.Shape; s != nil {
		if err := printGroups(out, s); err != nil {
			return err
		}
	}
	listed := 0
	failed, err := collect(ctx, c, d.ID, []string{client.StatusFailed}, rows)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "Failed (%s):\n", shown(len(failed), d.Counts[client.StatusFailed]))
		if err := printTasks(out, failed); err != nil {
			return err
		}
		fmt.Fprintln(out)
		listed += len(failed)
	}
	active := d.Counts[client.StatusRunning] + d.Counts[client.StatusRetrying]
	if left := rows - len(failed); left > 0 && active > 0 {
		running, err := collect(ctx, c, d.ID, []string{client.StatusRunning, client.StatusRetrying}, maxRunningRead)
		if err != nil {
			return err
		}
		// Longest running first: the earliest started.
		sort.SliceStable(running, func(i, j int) bool {
			a, b := running[i].StartedAt, running[j].StartedAt
			return a != nil && (b == nil || a.Before(*b))
		})
		running = running[:min(left, len(running))]
		fmt.Fprintf(out, "Running, longest first (%s):\n", shown(len(running), active))
		if err := printTasks(out, running); err != nil {
			return err
		}
		fmt.Fprintln(out)
		listed += len(running)
	}
	fmt.Fprintf(out, "%d of %d tasks listed: 'orion get dag %s --all' lists every task, 'orion get task %s GROUP' a map group's instances.\n",
		listed, d.TaskCount, d.ID, d.ID)
	return nil
}

// collect reads at most n tasks in the statuses given.
func collect(ctx context.Context, c *client.Client, id string, statuses []string, n int) ([]client.Task, error) {
	var out []client.Task
	err := c.EachTask(ctx, id, client.TaskQuery{Statuses: statuses, Limit: min(n, apitypes.MaxTaskPage)}, func(t *client.Task) bool {
		out = append(out, *t)
		return len(out) < n
	})
	return out, err
}

func shown(n, of int) string {
	if n < of {
		return fmt.Sprintf("%d of %d", n, of)
	}
	return fmt.Sprint(of)
}

// printGroups lists the shape's nodes that stand for more than one task:
// map groups and tasks collapsed.
func printGroups(out io.Writer, s *client.Shape) error {
	tw := newTable(out)
	n, more := 0, 0
	for i := range s.Nodes {
		nd := &s.Nodes[i]
		if nd.Kind == apitypes.ShapeTask {
			continue
		}
		if n == maxGroupRows {
			more++
			continue
		}
		if n == 0 {
			row(tw, "GROUP", "LEVEL", "TASKS", "STATUS")
		}
		n++
		what := fmt.Sprint(nd.Tasks)
		if nd.Kind == apitypes.ShapeMap {
			what = "map"
		}
		level := fmt.Sprint(nd.Level)
		if nd.Levels > 1 {
			level = fmt.Sprintf("%d-%d", nd.Level, nd.Level+nd.Levels-1)
		}
		name := nd.ID
		if nd.Kind == apitypes.ShapeTasks {
			name += " (" + strings.Join(nd.Sample, ", ")
			if nd.Tasks > len(nd.Sample) {
				name += ", ..."
			}
			name += ")"
		}
		row(tw, name, level, what, formatCounts(nd.Counts))
	}
	if n == 0 {
		return nil
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(out, "(%d more groups: orion get dag -o json shows the whole shape)\n", more)
	}
	fmt.Fprintln(out)
	return nil
}
