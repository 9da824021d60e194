package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/bench"
)

func newBenchCommand() *cobra.Command {
	var o bench.Options
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure durable throughput, chain latency, dispatch latency and memory against raw etcd",
		Long: `bench starts its own embedded etcd member and scheduler in this process and
measures, in one run: (a) the raw etcd ceiling (batched puts on the same
member), (b) durable throughput of independent noop tasks, (c) a chain of
tasks (ms per step), (d) dispatch latency ready→start at a fixed offered
load, (e) memory per retained task. The last line of --json output is one
JSON object.`,
		Example: `  orion bench
  orion bench --tasks 20000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Log = cmd.ErrOrStderr()
			res, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				out, _ := json.Marshal(res)
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return nil
			}
			res.Print(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Tasks, "tasks", 100000, "noop tasks in the throughput phase")
	f.IntVar(&o.DAGSize, "dag-size", 1000, "tasks per DAG in the throughput phase")
	f.IntVar(&o.Chain, "chain", 1000, "length of the chain phase")
	f.IntVar(&o.Rate, "rate", 2000, "offered load in tasks/s for the dispatch-latency phase")
	f.DurationVar(&o.LatencyFor, "latency-for", 5e9, "how long the dispatch-latency phase offers load")
	f.DurationVar(&o.EtcdSeconds, "etcd-for", 3e9, "how long the raw etcd phase runs")
	f.IntVar(&o.Slots, "slots", 4096, "executor slots (a noop holds one only until its result)")
	f.StringVar(&o.DataDir, "data-dir", "", "where the embedded etcd member writes (default: a temp dir, removed after)")
	f.StringVar(&o.ClientURL, "etcd-client-url", "", "embedded etcd client URL (default http://127.0.0.1:2379)")
	f.StringVar(&o.PeerURL, "etcd-peer-url", "", "embedded etcd peer URL (default http://127.0.0.1:2380)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
