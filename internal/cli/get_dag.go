package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newGetDAGCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dag ID",
		Short: "Show a DAG and its tasks",
		Long: `Show a DAG: its status and run, then one line per task with its
latest attempt. ERROR is shortened; use 'orion get task' for all of it. A
ready task that waits for a worker with its labels, or for a DAG or pool
limit, says so there ("waiting: ..."). The DAG's parameters are listed with
the values its runs use, and a scheduled run's tick and data interval.
'orion get task' shows a task's outputs.`,
		Example: `  orion get dag 20260102-150405-a1b2c3
  orion get dag nightly-etl -o json`,
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
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, d)
			}
			hw := newTable(out)
			row(hw, "ID:", d.ID)
			row(hw, "Name:", d.Name)
			row(hw, "Status:", d.Status)
			row(hw, "Run:", fmt.Sprint(d.Run))
			row(hw, "Submitted:", formatTime(&d.SubmittedAt))
			row(hw, "Finished:", formatTime(d.FinishedAt))
			row(hw, "Duration:", dagDuration(&d.DAGSummary))
			row(hw, "Tasks:", fmt.Sprintf("%d (%s)", len(d.Tasks), formatCounts(d.Counts)))
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
			tw := newTable(out)
			row(tw, "TASK", "KIND", "STATUS", "ATTEMPTS", "WORKER", "DURATION", "EXIT", "ERROR")
			for i := range d.Tasks {
				t := &d.Tasks[i]
				errText := truncate(t.Error, 60)
				if t.Waiting != "" { // a ready task held back: say why
					errText = truncate("waiting: "+t.Waiting, 100)
				}
				row(tw, t.ID, string(t.Kind), t.Status, fmt.Sprint(t.Attempts), t.Worker,
					taskDuration(t), exitCode(t.ExitCode), errText)
			}
			return tw.Flush()
		},
	}
}
