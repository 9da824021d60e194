// Command orion is Orion's one binary: the server replica, the client
// commands and the benchmark.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/cli"
)

func main() {
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
	cli.AddGlobalFlags(root)
	root.AddCommand(newServerCommand(), newEtcdCommand(), newWorkerCommand(), newDrillCommand(), newBenchCommand())
	cli.AddClientCommands(root)
	os.Exit(cli.Execute(context.Background(), root))
}
