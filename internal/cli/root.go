package cli

import "github.com/spf13/cobra"

// NewRoot is the orion command: the persistent flags of the client commands
// and every command. Run it with Execute.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "orion",
		Short: "Orion: a highly-available DAG task scheduler on etcd",
		Long: `Orion runs DAGs of tasks: each task starts once its dependencies succeed, by
priority, with retries, timeouts and a failure cascade. Every state change is
committed to etcd before it is applied, so etcd's history is the scheduler's
write-ahead log.

Start a single node with an embedded etcd:   orion server
Submit a DAG and watch it run:               orion submit -f dag.yaml --wait`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	AddGlobalFlags(root)
	root.AddCommand(newServerCmd(), newEtcdCmd(), newWorkerCmd(), newTokenCmd(), newDrillCmd(), newBenchCmd(), newTestTaskCmd())
	AddClientCommands(root)
	return root
}
