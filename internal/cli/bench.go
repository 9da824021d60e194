package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/tools/bench"
)

func newBenchCmd() *cobra.Command {
	var o bench.Options
	var asJSON, keep bool
	var servers, etcdEndpoints string
	var submitters, live, liveKills int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure durable throughput, chain latency, dispatch latency and memory against raw etcd",
		Long: `bench measures Orion as users run it, through its HTTP API, against a
baseline measured in the same run on the same etcd: raw batched puts.

Without --server, bench starts one ` + "`orion server`" + ` in this process, wired as the
command wires it (embedded etcd member, its own --slots behind the worker
hub, the API on a free loopback port), and measures: (a) the raw etcd
ceiling on that member, one and four transactions in flight, (b) durable
throughput of independent noop tasks submitted over HTTP by --submitters
clients, (c) a chain of noop tasks (ms per step), (d) a chain of
--shell-chain shell tasks running ` + "`true`" + `, next to the floor measured in the
same run (this process running /bin/sh -c true as many times in a row),
with Orion's own CPU per step (the process's, the task processes
excluded), (e) memory and etcd space per retained task, (f) the cost of
one output round trip: a shell chain whose every step publishes an output
the next one reads, against plain shell chains before and after it, (g)
run-time fan-out: a task publishes --fanout items and a map group of noop
tasks runs one per item, timed from the producer's success to the
expansion committed, the last instance dispatched and all completed, (h)
dispatch latency ready → start at a fixed offered load, and (i) with
--big-dag N: one DAG of N noop tasks, the time to accept it (POST → 2xx)
and to dispatch its first task, and its throughput against the same tasks
in 100 DAGs, measured just before it.

With --live N (cluster mode) bench then holds N tasks live: DAGs of
--dag-size whose root waits in a pool no worker serves, the rest pending
behind it. It reads each replica's RSS in /proc before and after (the
replicas must run on this host) and etcd's db in use, then runs
--live-kills kill -9 drills of the leader (as orion drill does, restarting
each killed replica at once): the takeover, and the killed replica's cold
load (its start → /readyz 200). It cancels the backlog at the end.

With --server (and --etcd-endpoints) bench measures a RUNNING cluster
instead: (a) on the cluster's own members (keys under /orion-bench/,
deleted after), then (b), (c), (d) (the floor runs here: it means
something when the workers run on this host; CPU is read from each
replica's and etcd member's /metrics; workers serve none), the etcd
space of (e), (f) and (g). The workers' slots bound how many noop
attempts are in flight; bench prints them. The DAGs it submits stay in the
cluster (ids bench-<time>-*).

Either way the ratio printed is (b) over the sequential etcd figure. The
last line of --json output is one JSON object.`,
		Example: `  orion bench
  orion bench --tasks 20000 --json
  orion bench --server http://127.0.0.1:24081,http://127.0.0.1:24082,http://127.0.0.1:24083 \
    --etcd-endpoints http://127.0.0.1:24001,http://127.0.0.1:24002,http://127.0.0.1:24003 --tasks 20000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if servers != "" || etcdEndpoints != "" {
				return runClusterBench(ctx, cmd, bench.ClusterOptions{
					Servers: bench.SplitURLs(servers), EtcdEndpoints: bench.SplitURLs(etcdEndpoints),
					Tasks: o.Tasks, DAGSize: o.DAGSize, Chain: o.Chain, ShellChain: o.ShellChain, FanOut: o.FanOut, Submitters: submitters,
					EtcdFor: o.EtcdFor, Timeout: timeout, Keep: keep,
					BigDAG: o.BigDAG, Live: live, LiveKills: liveKills,
				}, asJSON)
			}
			if live > 0 {
				return errors.New("--live: only with --server (it measures the leader and a standby of a running cluster, and kills its leader)")
			}
			if keep {
				return errors.New("--keep: only with --server (the in-process server's state goes with its data dir)")
			}
			o.Log = cmd.ErrOrStderr()
			o.Submitters = submitters
			res, err := bench.Run(ctx, o)
			if err != nil {
				return err
			}
			return printResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Tasks, "tasks", 100000, "noop tasks in the throughput phase")
	f.IntVar(&o.DAGSize, "dag-size", 1000, "tasks per DAG in the throughput phase")
	f.IntVar(&o.Chain, "chain", 1000, "length of the chain phase")
	f.IntVar(&o.ShellChain, "shell-chain", bench.DefaultShellChain, "length of the shell chain phase (each step runs `true`; the floor runs /bin/sh -c true as many times)")
	f.IntVar(&o.FanOut, "fanout", bench.DefaultFanOut, "mapped noop tasks of the fan-out phase (a for_each over a task's output; -1: no fan-out phase)")
	f.IntVar(&o.BigDAG, "big-dag", 0, "tasks of the big-DAG phase: one DAG of them against the same tasks in 100 DAGs (0: none; a multiple of 100)")
	f.IntVar(&live, "live", 0, "cluster mode: tasks held live (DAGs of --dag-size waiting behind a held root) to measure RSS and etcd bytes per live task, kill -9 takeover and a cold replica's load (0: none)")
	f.IntVar(&liveKills, "live-kills", bench.DefaultLiveKills, "cluster mode, with --live: kill -9 drills of the leader")
	f.IntVar(&o.Rate, "rate", 2000, "offered load in tasks/s for the dispatch-latency phase")
	f.DurationVar(&o.LatencyFor, "latency-for", 5e9, "how long the dispatch-latency phase offers load")
	f.DurationVar(&o.EtcdFor, "etcd-for", 3e9, "how long each raw etcd phase runs")
	f.IntVar(&o.Slots, "slots", bench.DefaultSlots, "the in-process server's own slots (a noop holds one only until its result)")
	f.StringVar(&o.DataDir, "data-dir", "", "the in-process server's data dir (default: a temp dir, removed after)")
	f.StringVar(&o.ClientURL, "etcd-client-url", "", "embedded etcd client URL (default: a free loopback port)")
	f.StringVar(&o.PeerURL, "etcd-peer-url", "", "embedded etcd peer URL (default: a free loopback port)")
	f.StringVar(&servers, "server", "", "cluster mode: comma-separated API URLs of a running cluster's replicas")
	f.StringVar(&etcdEndpoints, "etcd-endpoints", "", "cluster mode: comma-separated client URLs of the etcd members the cluster uses")
	f.IntVar(&submitters, "submitters", 4, "concurrent DAG submissions in the throughput phase")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "cluster mode: how long each phase may wait for its DAGs")
	f.BoolVar(&keep, "keep", false, "cluster mode: leave the run's DAGs in the cluster (by default they are deleted once measured)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// inProcessOnly are the flags that size the in-process server.
var inProcessOnly = []string{"rate", "latency-for", "slots", "data-dir", "etcd-client-url", "etcd-peer-url"}

func runClusterBench(ctx context.Context, cmd *cobra.Command, o bench.ClusterOptions, asJSON bool) error {
	if len(o.Servers) == 0 {
		return errors.New("--server: give the API URL of at least one replica of the cluster")
	}
	if len(o.EtcdEndpoints) == 0 {
		return errors.New("--etcd-endpoints: give the client URLs of the cluster's etcd members (the same the servers use)")
	}
	var bad []string
	for _, name := range inProcessOnly {
		if cmd.Flags().Changed(name) {
			bad = append(bad, "--"+name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: only for the in-process bench, not with --server", strings.Join(bad, ", "))
	}
	o.Token = strings.TrimSpace(flagOrEnv(cmd, flagToken, EnvToken, ""))
	tc, err := clientTLS(cmd)
	if err != nil {
		return err
	}
	o.TLS = tc
	o.Log = cmd.ErrOrStderr()
	res, err := bench.RunCluster(ctx, o)
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), res, asJSON)
}

// printResult writes a bench result as one JSON object, or as the report.
func printResult(w io.Writer, res interface{ Print(io.Writer) }, asJSON bool) error {
	if !asJSON {
		res.Print(w)
		return nil
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}
