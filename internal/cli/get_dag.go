package cli

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
)

func newGetDAGCmd() *cobra.Command {
	var all bool
	var rows int
	cmd := &cobra.Command{
		Use:   "dag ID",
		Short: "Show a DAG and its tasks",
		Long: `Show a DAG: its status and run, then one line per task with its
latest attempt. ERROR is shortened; use 'orion get task' for all of it. A
ready task that waits for a worker with its labels, or for a DAG or pool
limit, says so there ("waiting: ..."). A DAG with trigger rules, conditions,
handlers or notifications gets a RULE column: the task's trigger rule (and
"when" if it has a condition), or what a handler or notification is; a
skipped task says why (condition, trigger_rule, not_needed). The DAG's
parameters are listed with the values its runs use, and a scheduled run's
tick and data interval. 'orion get task' shows a task's outputs. A map
group (a task with for_each) is one line with its instances' counts by
status; 'orion get task DAG GROUP' lists its instances a page at a time
(--offset, --limit), and 'orion get task DAG "GROUP[3]"' shows one.

A DAG of more than 1000 tasks is summarised: its tasks by status, its
failed tasks first, then those running, longest first (--rows of them,
a screenful), and how many it left out. --all lists every task (map
instances stay with 'orion get task DAG GROUP'), paging through the API;
with -o json, --all gives the DAG with every task.`,
		Example: `  orion get dag 20260102-150405-a1b2c3
  orion get dag nightly-etl -o json
  orion get dag big-backfill --all`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			d, err := c.GetDAG(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if all && d.TasksTruncated {
				if err := allTasks(cmd.Context(), c, d); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, d)
			}
			hw := newTable(out)
			row(hw, "ID:", d.ID)
			row(hw, "Name:", d.Name)
			status := d.Status
			if d.CancelRequested && d.Status == client.DAGRunning {
				status += " (cancel requested: its handlers and notifications run, then it is cancelled)"
			}
			row(hw, "Status:", status)
			row(hw, "Run:", fmt.Sprint(d.Run))
			row(hw, "Submitted:", formatTime(&d.SubmittedAt))
			row(hw, "Finished:", formatTime(d.FinishedAt))
			row(hw, "Duration:", dagDuration(&d.DAGSummary))
			tasks := fmt.Sprint(len(d.Tasks))
			if d.TasksTruncated {
				tasks = fmt.Sprint(d.TaskCount)
			} else if n := mappedInstances(d.Tasks); n > 0 {
				tasks += fmt.Sprintf(" and %d mapped instances", n)
			}
			row(hw, "Tasks:", fmt.Sprintf("%s (%s)", tasks, formatCounts(d.Counts)))
			if s := d.Scheduled; s != nil {
				row(hw, "Scheduled:", fmt.Sprintf("%s, tick %s (interval %s to %s)", s.Schedule,
					s.Tick.UTC().Format(time.RFC3339), s.IntervalStart.UTC().Format(time.RFC3339), s.IntervalEnd.UTC().Format(time.RFC3339)))
			}
			if err := hw.Flush(); err != nil {
				return err
			}
			if len(d.Params) > 0 {
				fmt.Fprintln(out, "\nParams:")
				if err := printValues(out, d.Params); err != nil {
					return err
				}
			}
			fmt.Fprintln(out)
			if d.TasksTruncated {
				return printBigDAG(cmd.Context(), out, c, d, rows)
			}
			return printTasks(out, d.Tasks)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "list every task of a DAG of more than 1000 (paging through the API)")
	cmd.Flags().IntVar(&rows, "rows", defaultBigRows, "how many tasks a big DAG's summary lists")
	return cmd
}

// printTasks prints one line per task.
func printTasks(out io.Writer, tasks []client.Task) error {
	tw := newTable(out)
	rules := hasRules(tasks)
	head := []string{"TASK", "KIND", "STATUS", "ATTEMPTS", "WORKER", "DURATION", "EXIT", "ERROR"}
	if rules {
		head = slices.Insert(head, 3, "RULE")
	}
	row(tw, head...)
	for i := range tasks {
		t := &tasks[i]
		errText := truncate(t.Error, 60)
		if t.Waiting != "" { // a ready task held back: say why
			errText = truncate("waiting: "+t.Waiting, 100)
		}
		status := t.Status
		if t.Skipped != "" {
			status += " (" + t.Skipped + ")"
		}
		if m := t.Map; m != nil && (m.Expanded || t.Status == client.StatusPending || t.Status == client.StatusReady) {
			status += " " + mapText(m)
		}
		cells := []string{t.ID, string(t.Kind), status, fmt.Sprint(t.Attempts), t.Worker,
			taskDuration(t), exitCode(t.ExitCode), errText}
		if rules {
			cells = slices.Insert(cells, 3, ruleText(t))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// mapText is a map group's line: its instances by status, or that its
// items are not known yet.
func mapText(m *apitypes.MapGroup) string {
	if !m.Expanded {
		return "(map: not expanded yet)"
	}
	return fmt.Sprintf("(map of %d: %s)", m.Count, formatCounts(m.Counts))
}

// mappedInstances counts the instances of the DAG's map groups.
func mappedInstances(tasks []client.Task) int {
	n := 0
	for i := range tasks {
		if m := tasks[i].Map; m != nil {
			n += m.Count
		}
	}
	return n
}

// hasRules reports whether any task runs by something else than "all its
// dependencies succeeded": a rule, a condition, continue_on_failure, or a
// handler's or notification's role.
func hasRules(tasks []client.Task) bool {
	for i := range tasks {
		if t := &tasks[i]; ruleText(t) != string(model.AllSuccess) {
			return true
		}
	}
	return false
}

// ruleText says what a task runs by, in a few words.
func ruleText(t *client.Task) string {
	s := string(t.TriggerRule)
	switch t.Role {
	case roleHandler:
		s = "handler"
	case roleNotification:
		s = "notification"
	}
	if s == "" {
		s = string(model.AllSuccess)
	}
	if t.When != "" {
		s += " +when"
	}
	if t.Spec.ContinueOnFailure {
		s += " +continue"
	}
	return s
}

// The roles of a DAG's tasks, as the API spells them.
const (
	roleHandler      = "handler"
	roleNotification = "notification"
)
