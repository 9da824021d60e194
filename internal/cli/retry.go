package cli

import (
	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
)

func newRetryCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "retry DAG",
		Short: "Run a failed or cancelled DAG again",
		Long: `Start a new run of a failed or cancelled DAG: tasks that succeeded keep
their result, the others run again from scratch.`,
		Example: `  orion retry 20260102-150405-a1b2c3

  # Then follow it
  orion get dag 20260102-150405-a1b2c3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAction(cmd, args[0], (*client.Client).Retry)
		},
	}
}
