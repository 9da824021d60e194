package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/worker/agent"
)

func newWorkerCmd() *cobra.Command {
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a standalone worker: execute tasks dispatched by the cluster's leader",
		Long: `A worker runs tasks for the cluster: it keeps one stream to the leader replica,
runs the attempts the leader dispatches on --slots local slots and reports
their results. It follows the leader across failovers (learning the other
replicas from the one it reaches), and tells a new leader what it is running,
so running tasks are adopted rather than started again.

On SIGTERM or SIGINT the worker drains: it takes no new attempts and lets
those it runs finish, for at most --drain-timeout; then it cancels what is
left (the leader re-queues it without consuming a retry) and exits. A second
signal exits at once.

With --pods, the worker also runs pod tasks (kind: pod) on the Kubernetes API
of the cluster it runs in: one pod per attempt, named after the attempt,
created if absent and followed to its end. A pod outlives its worker: when
the worker stops or dies, the leader hands the attempt to another worker,
which adopts the pod by name.

Settings are resolved like the server's: defaults, then the --config file
(or ORION_WORKER_CONFIG), then the environment, then flags. --server is
ORION_SERVER and --token ORION_AUTH_TOKEN, as for the client commands; every
other flag is ORION_WORKER_ and its name in upper case with underscores
(--slots is ORION_WORKER_SLOTS).`,
		Example: `  # Two replicas, four slots, a token
  orion worker --server http://10.0.0.1:8080,http://10.0.0.2:8080 --slots 4 --token "$TOKEN"

  # A GPU node: tasks with pool: gpu run only on workers labelled pool=gpu
  orion worker --server http://10.0.0.1:8080 --labels pool=gpu,zone=a

  # Server and token from the environment
  ORION_SERVER=http://10.0.0.1:8080 ORION_AUTH_TOKEN=... orion worker --name gpu-1

  # In a Kubernetes pod whose service account may create pods: pod tasks too
  orion worker --server http://orion:8080 --pods --pod-namespace jobs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hideCredentials()
			file, _ := cmd.Flags().GetString("config")
			cfg, _, err := config.LoadWorker(v, file)
			if err != nil {
				return err
			}
			log, err := newLogger(cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return err
			}
			defer log.Sync()
			return runWorker(cfg, log)
		},
	}
	config.BindWorkerFlags(cmd.Flags(), v)
	return cmd
}

// runWorker runs a worker until SIGTERM or SIGINT, then drains it
// (agent.Agent.Stop). A second signal exits at once.
func runWorker(cfg config.Worker, log *zap.Logger) error {
	w, err := agent.StartWorker(cfg, log)
	if err != nil {
		return err
	}
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-sig.Done():
	case <-w.Done():
		// A configuration error, or the leader refused this worker (its
		// id, slots or labels): the same hello would be refused again,
		// so it exits with the leader's reason rather than reconnect.
		_ = w.Close()
		return w.Err()
	}
	stop() // a second signal kills at once
	w.Stop()
	log.Info("worker stopped", zap.String("id", w.ID()))
	return nil
}
