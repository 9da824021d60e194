package cli

import "github.com/spf13/cobra"

func newGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show DAGs and tasks",
		Long:  `Show DAGs and tasks: a list of DAGs, one DAG with its tasks, or one task in detail.`,
		Example: `  orion get dags --status running
  orion get dag 20260102-150405-a1b2c3
  orion get task 20260102-150405-a1b2c3/extract`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newGetDAGsCmd(), newGetDAGCmd(), newGetTaskCmd())
	return cmd
}
