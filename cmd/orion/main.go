// Command orion is Orion's one binary: the server replica, the worker, the
// etcd member, the client commands, the drill and the benchmark. Every
// command lives in internal/cli; this is only its entry point.
package main

import (
	"context"
	"os"

	"github.com/orion-sched/orion/internal/cli"
)

func main() {
	os.Exit(cli.Execute(context.Background(), cli.NewRoot()))
}
