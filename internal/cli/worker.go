package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// workerDrainTimeout bounds how long a stopping worker tries to hand the
// Cancelled results of its running attempts to the leader.
const workerDrainTimeout = 3 * time.Second

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

On SIGTERM or SIGINT the worker cancels its running attempts (the leader
re-queues them without consuming a retry) and exits.

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
  ORION_SERVER=http://10.0.0.1:8080 ORION_AUTH_TOKEN=... orion worker --name gpu-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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

// workerID names this process: a restarted worker is a new worker, so the
// attempts of the one that died become orphans rather than being adopted.
func workerID(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d-%s", name, os.Getpid(), hex.EncodeToString(b[:]))
}

func runWorker(cfg config.Worker, log *zap.Logger) error {
	servers, slots := cfg.Servers, cfg.Slots
	for _, s := range servers {
		if u, err := url.Parse(s); err == nil && u.Scheme == "http" && cfg.Token != "" && !config.IsLoopbackHost(u.Hostname()) {
			log.Warn("the token travels unencrypted to a non-loopback server; use https", zap.String("server", s))
		}
	}
	id := workerID(cfg.Name)
	exec, err := executor.NewLocal(executor.LocalConfig{ID: id, Slots: slots, LogDir: cfg.LogDir, Logger: log.Named("executor")})
	if err != nil {
		return err
	}
	dialer := workerstream.NewHTTPDialer(servers, cfg.Token, nil)
	agent := workerstream.NewAgent(workerstream.AgentConfig{
		Exec:   exec,
		Dial:   dialer.Dial,
		Labels: cfg.Labels,
		// The leader's list of replicas: with it, a worker given only the
		// replica that dies (or a Service that maps to it) still finds the
		// next leader.
		OnPeers: func(peers []workerstream.Peer) {
			dialer.SetPeers(peers)
			log.Debug("replicas known", zap.Any("peers", peers))
		},
		Logger: log.Named("stream"),
	})

	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	done := make(chan error, 1)
	go func() { done <- agent.Run(runCtx) }()
	log.Info("orion worker started", zap.String("id", id), zap.Int("slots", slots), zap.Stringer("labels", cfg.Labels),
		zap.String("log_dir", exec.LogDir()), zap.Strings("servers", servers))

	select {
	case <-sig.Done():
	case err := <-done:
		// A configuration error, or the leader refused this worker (its
		// id, slots or labels): the same hello would be refused again,
		// so it exits with the leader's reason rather than reconnect.
		_ = exec.Close()
		return err
	}
	stop() // a second signal kills at once
	running := len(exec.InFlight())
	log.Info("shutting down: cancelling running attempts", zap.Int("running", running))
	_ = exec.Close() // running attempts report Cancelled: the leader re-queues them
	if running > 0 {
		dctx, cancel := context.WithTimeout(context.Background(), workerDrainTimeout)
		if err := agent.Drain(dctx); err != nil {
			log.Warn("could not hand every result to the leader before exiting; it will re-queue those attempts when the worker is gone",
				zap.Error(err))
		}
		cancel()
	}
	cancelRun()
	<-done
	log.Info("worker stopped", zap.String("id", id))
	return nil
}
