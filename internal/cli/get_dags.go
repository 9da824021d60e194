package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
)

func newGetDAGsCmd() *cobra.Command {
	var (
		status string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "dags",
		Short: "List DAGs, newest first",
		Long: `List DAGs, newest first, with their task counts.

SUBMITTED is the age of the submission; DURATION runs from submission to the
end, or to now for a DAG still running.`,
		Example: `  # Every DAG the server holds
  orion get dags

  # The ten most recent failures
  orion get dags --status failed --limit 10

  # As JSON, for scripts
  orion get dags -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want 0 or more", limit)
			}
			list, err := c.ListDAGs(cmd.Context(), status, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, list)
			}
			if len(list.DAGs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No DAGs found.")
				return nil
			}
			tw := newTable(out)
			row(tw, "ID", "NAME", "STATUS", "TASKS", "SUCCEEDED", "FAILED", "SUBMITTED", "DURATION")
			for i := range list.DAGs {
				s := &list.DAGs[i]
				row(tw, s.ID, truncate(s.Name, 40), s.Status, fmt.Sprint(s.TaskCount),
					fmt.Sprint(s.Counts[client.StatusSucceeded]), fmt.Sprint(s.Counts[client.StatusFailed]),
					formatAge(s.SubmittedAt), dagDuration(s))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only DAGs in this status: running, succeeded, failed or cancelled")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many DAGs (0: the server's default)")
	return cmd
}
