package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newLogsCmd() *cobra.Command {
	var attempt int
	cmd := &cobra.Command{
		Use:   "logs DAG/TASK",
		Short: "Print a task's log",
		Long: `Print the log (stdout and stderr) of a task's attempt, the latest unless
--attempt says otherwise. The task is named DAG/TASK or DAG TASK.`,
		Example: `  # The latest attempt
  orion logs 20260102-150405-a1b2c3/extract

  # The first attempt of a task that was retried
  orion logs nightly-etl load --attempt 1`,
		Args: taskRefArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dagID, taskID, _ := splitTaskRef(args)
			if attempt < 0 {
				return fmt.Errorf("--attempt %d: want 1 or more (0: the latest)", attempt)
			}
			c, _, err := setup(cmd)
			if err != nil {
				return err
			}
			return c.TaskLog(cmd.Context(), dagID, taskID, attempt, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number, from 1 (0: the latest)")
	return cmd
}
