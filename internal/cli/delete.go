package cli

import (
	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
)

func newDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete DAG",
		Short: "Delete a finished DAG and its tasks",
		Long: `Delete a finished DAG (succeeded, failed or cancelled) with all its tasks
and their records, as retention does once it expires them. A running DAG is
refused: cancel it first. A DAG just cancelled is deleted once its attempts
have stopped on their workers. The id can then be submitted again as a new
DAG.`,
		Example: `  orion delete 20260102-150405-a1b2c3

  # A running DAG
  orion cancel 20260102-150405-a1b2c3 && orion delete 20260102-150405-a1b2c3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAction(cmd, args[0], (*client.Client).Delete)
		},
	}
}
