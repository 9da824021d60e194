package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/tools/drill"
)

func newDrillCmd() *cobra.Command {
	cmd := drillCommand("drill", true)
	cmd.Short = "Fault drills against a local cluster: kill or stop the leader, kill an etcd member, lose a node"
	cmd.Long = `drill runs --count drills of one --fault against a cluster whose processes run
on this host (such as test/cluster.sh's), under a DAG of shell tasks that
record every run, and checks afterwards that no task was lost or ran twice.

  --fault kill          SIGKILL the scheduler leader, measure the takeover (the
                        signal to another replica's first committed write),
                        restart it (--restart). The same as 'orion drill
                        kill-leader'.
  --fault stop          SIGSTOP the leader for --stop-for (default 2s, longer
                        than its 1 s lease; keep it under the replicas' orphan
                        grace, 5 s by default), measure the takeover, SIGCONT
                        it and wait until it follows as a standby. Its sockets
                        stay open: what a hung process or a partition looks
                        like to the others. Nothing is excused: its attempts
                        must be adopted, not run again. Meanwhile clients
                        submit DAGs without an id through the standbys every
                        20 ms: each must be answered (2xx, or 503 with
                        Retry-After) and make one DAG; the slowest answer is
                        reported.
  --fault etcd-member   SIGKILL one 'orion etcd' member (--member leader, the
                        raft leader; follower; or a name) under a trickle of
                        one-task DAGs every 20 ms (one refused is sent again
                        20 ms later to the next replica, never after a
                        Retry-After), report the write stall (the longest gap
                        between acknowledged submissions from the kill on),
                        restart the member (--restart script runs
                        test/cluster.sh restart NAME) and wait until it is
                        healthy. The cluster needs 3 or more members.
  --fault node          SIGKILL the scheduler leader and etcd's raft leader at
                        the same moment, as the loss of a machine that ran both
                        does, under the same trickle: report the takeover and
                        the write stall, then restart the member and the
                        replica (--restart). The raft leader is looked up
                        before every drill. Needs 3 or more 'orion etcd'
                        members on this host, as test/cluster.sh runs them.
  --fault partition     refused: the processes of a running local cluster
                        share the host's loopback, so none can be cut off
                        alone. 'make drills' runs the partition drill on a
                        cluster it starts in network namespaces it creates.

Every process is proven local before it is signalled: its pid (from the
cluster endpoint) runs 'orion server' or 'orion etcd' here and owns the socket
of its API or client URL. Every wait is bounded. The exit code is 0 only when
no task was lost or duplicated and every drill measured its figure.`
	cmd.Example = `  test/cluster.sh up
  orion drill --fault kill --server http://127.0.0.1:24081,http://127.0.0.1:24082,http://127.0.0.1:24083 --count 20
  orion drill --fault stop --stop-for 2s --server http://127.0.0.1:24081 --count 3
  orion drill --fault etcd-member --member leader --restart script --server http://127.0.0.1:24081 --count 3 --json
  orion drill --fault node --server http://127.0.0.1:24081,http://127.0.0.1:24082,http://127.0.0.1:24083 --count 10`
	cmd.AddCommand(newDrillKillLeaderCmd())
	return cmd
}

func newDrillKillLeaderCmd() *cobra.Command {
	cmd := drillCommand("kill-leader", false)
	cmd.Short = "SIGKILL the scheduler leader repeatedly; measure takeover, check no task is lost or run twice (orion drill --fault kill)"
	cmd.Long = `kill-leader runs --count drills against a cluster whose replicas run on this
host (such as test/cluster.sh's). Each drill:

  1. finds the leader through the cluster endpoint and checks that its pid is
     an "orion server" process here that serves the leader's API port
     (anything else is refused: nothing is killed);
  2. submits a DAG of --tasks shell tasks in parallel chains (a fixed id per
     drill) and waits until one task has succeeded and others run; every
     attempt appends "DAG/TASK ATTEMPT PPID" to WORK-DIR/runs.log;
  3. saves the leader's command line, working directory and environment
     from /proc, then SIGKILLs it;
  4. polls the other replicas every 5 ms until one leads with a committed
     write: takeover = its first_commit_at minus the kill time (15 s bound);
  5. restarts the killed replica (--restart auto: the saved command, cwd and
     environment, detached, output appended to its old log file; script:
     test/cluster.sh restart NAME; none: leave it) and waits until it answers;
  6. waits for the drill's DAG (2 m bound) and accounts it: lost = tasks not
     succeeded; duplicates = tasks that ran again after a run on a worker that
     stayed alive. Reruns after the killed replica's own slots died are
     counted apart: at-least-once allows them.

After the last drill every drill DAG is accounted again from the final
runs.log; that recount gives the totals. The exit code is 0 only when no
task was lost or duplicated and every takeover was measured. With --json the
per-drill lines go to stderr and stdout gets one JSON object.

Workers must run on this host: the tasks write to WORK-DIR. With
--restart auto, a replica started by test/cluster.sh has its pid file
updated, so "test/cluster.sh down" still stops it.`
	cmd.Example = `  test/cluster.sh up
  orion drill kill-leader --server http://127.0.0.1:24081,http://127.0.0.1:24082,http://127.0.0.1:24083 --count 20
  orion drill kill-leader --server http://127.0.0.1:24081 --count 5 --restart script --json`
	return cmd
}

// drillCommand is a drill command: `orion drill` itself (withFault: its
// --fault, --stop-for and --member) or `orion drill kill-leader` (kill).
func drillCommand(use string, withFault bool) *cobra.Command {
	var (
		o       drill.Options
		restart string
		fault   string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:  use,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SilenceUsage = true
			for _, s := range strings.Split(flagOrEnv(cmd, flagServer, EnvServer, ""), ",") {
				if s = client.NormalizeURL(s); s != "" {
					o.Servers = append(o.Servers, s)
				}
			}
			if len(o.Servers) == 0 {
				return errors.New("--server: give the API URL of at least one replica (or set ORION_SERVER)")
			}
			o.Token = strings.TrimSpace(flagOrEnv(cmd, flagToken, EnvToken, ""))
			tc, err := clientTLS(cmd)
			if err != nil {
				return err
			}
			o.TLS = tc
			m, err := drill.ParseRestartMode(restart)
			if err != nil {
				return err
			}
			o.Restart = m
			if withFault {
				if o.Fault, err = drill.ParseFault(fault); err != nil {
					return err
				}
			}
			o.Out, o.Log = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if asJSON {
				o.Out = cmd.ErrOrStderr()
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, runErr := drill.Run(ctx, o)
			if rep != nil {
				if asJSON {
					b, err := json.Marshal(rep)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), string(b))
				} else {
					rep.Print(cmd.OutOrStdout())
				}
			}
			switch {
			case runErr != nil && rep != nil:
				return fmt.Errorf("drill stopped early: %w; %s", runErr, rep.Verdict)
			case runErr != nil:
				return runErr
			case !rep.OK:
				return fmt.Errorf("drill failed: %s", strings.TrimPrefix(rep.Verdict, "FAIL: "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.String(flagServer, "", "comma-separated API URLs of the replicas (env ORION_SERVER)")
	f.IntVar(&o.Count, "count", 1, "drills to run")
	f.DurationVar(&o.Interval, "interval", 2*time.Second, "pause between drills")
	f.IntVar(&o.Tasks, "tasks", 40, "shell tasks per drill DAG")
	f.StringVar(&o.WorkDir, "work-dir", "", "directory for runs.log and logs (default: a new orion-drill-* directory under $TMPDIR)")
	f.StringVar(&restart, "restart", string(drill.RestartAuto), "how to bring the killed replica back: auto, script or none")
	f.StringVar(&o.ClusterScript, "cluster-script", "", "test/cluster.sh to run with --restart script (default: found next to the working directory or the binary)")
	f.DurationVar(&o.TakeoverTimeout, "takeover-timeout", 15*time.Second, "how long a new leader may take to commit before the drill counts as failed")
	f.DurationVar(&o.SettleTimeout, "settle-timeout", 2*time.Minute, "how long a drill DAG may take to finish after the kill")
	f.DurationVar(&o.RestartTimeout, "restart-timeout", time.Minute, "how long the restarted replica may take to answer")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout (per-drill lines go to stderr)")
	if withFault {
		f.StringVar(&fault, "fault", string(drill.FaultKill), "kill, stop, etcd-member or node (partition: see above)")
		f.DurationVar(&o.StopFor, "stop-for", 2*time.Second, "--fault stop: how long the leader stays stopped (at least 1.5s)")
		f.StringVar(&o.Member, "member", "leader", "--fault etcd-member: leader (etcd's raft leader), follower or a member name")
	}
	return cmd
}
