package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// Environment fallbacks of `orion worker`, shared with the client commands.
const (
	envWorkerServer = "ORION_SERVER"
	envWorkerToken  = "ORION_AUTH_TOKEN"
)

// workerDrainTimeout bounds how long a stopping worker tries to hand the
// Cancelled results of its running attempts to the leader.
const workerDrainTimeout = 3 * time.Second

func newWorkerCommand() *cobra.Command {
	var (
		slots     int
		name      string
		logDir    string
		logLevel  string
		logFormat string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a standalone worker: execute tasks dispatched by the cluster's leader",
		Long: `A worker runs tasks for the cluster: it keeps one stream to the leader replica,
runs the attempts the leader dispatches on --slots local slots and reports
their results. It follows the leader across failovers (learning the other
replicas from the one it reaches), and tells a new leader what it is running,
so running tasks are adopted rather than started again.

On SIGTERM or SIGINT the worker cancels its running attempts (the leader
re-queues them without consuming a retry) and exits.`,
		Example: `  # Two replicas, four slots, a token
  orion worker --server http://10.0.0.1:8080,http://10.0.0.2:8080 --slots 4 --token "$TOKEN"

  # Server and token from the environment
  ORION_SERVER=http://10.0.0.1:8080 ORION_AUTH_TOKEN=... orion worker --name gpu-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			servers, err := workerServers(flagOrEnvValue(cmd, "server", envWorkerServer, "http://127.0.0.1:8080"))
			if err != nil {
				return err
			}
			token := strings.TrimSpace(flagOrEnvValue(cmd, "token", envWorkerToken, ""))
			if slots <= 0 {
				return fmt.Errorf("--slots %d: must be ≥ 1", slots)
			}
			if name == "" {
				h, err := os.Hostname()
				if err != nil || h == "" {
					h = "worker"
				}
				name = h
			}
			if strings.ContainsAny(name, "/ \t\n") {
				return fmt.Errorf("--name %q: no slashes or spaces", name)
			}
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			defer log.Sync()
			return runWorker(servers, token, name, slots, logDir, log)
		},
	}
	f := cmd.Flags()
	// Its own --server and --token (they shadow the root's persistent
	// flags of the same name, with help that fits a worker).
	f.String("server", "", "comma-separated API URLs of the replicas (env "+envWorkerServer+"; default http://127.0.0.1:8080); the worker learns the others from the one it reaches")
	f.String("token", "", "bearer token of the API (env "+envWorkerToken+")")
	f.IntVar(&slots, "slots", runtime.NumCPU(), "attempts run at once")
	f.StringVar(&name, "name", "", "worker name; its id is NAME/PID-RANDOM, new at each start (default: host name)")
	f.StringVar(&logDir, "log-dir", "", "where attempt logs are kept (default <tmp>/orion-logs)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "console", "console or json")
	return cmd
}

// flagOrEnvValue returns the flag's value if it was given, else the
// environment variable if set, else the flag's default (or def when the
// flag does not exist or has an empty default).
func flagOrEnvValue(cmd *cobra.Command, name, env, def string) string {
	f := cmd.Flag(name)
	if f != nil && f.Changed {
		return f.Value.String()
	}
	if v, ok := os.LookupEnv(env); ok && strings.TrimSpace(v) != "" {
		return v
	}
	if f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return def
}

func workerServers(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--server %q: want http://host:port", s)
		}
		out = append(out, strings.TrimRight(s, "/"))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--server: no URL given")
	}
	return out, nil
}

// workerID names this process: a restarted worker is a new worker, so the
// attempts of the one that died become orphans rather than being adopted.
func workerID(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d-%s", name, os.Getpid(), hex.EncodeToString(b[:]))
}

func runWorker(servers []string, token, name string, slots int, logDir string, log *zap.Logger) error {
	for _, s := range servers {
		if u, err := url.Parse(s); err == nil && u.Scheme == "http" && token != "" && !config.IsLoopbackHost(u.Hostname()) {
			log.Warn("the token travels unencrypted to a non-loopback server; use https", zap.String("server", s))
		}
	}
	id := workerID(name)
	exec, err := executor.NewLocal(executor.LocalConfig{ID: id, Slots: slots, LogDir: logDir, Logger: log.Named("executor")})
	if err != nil {
		return err
	}
	dialer := workerstream.NewHTTPDialer(servers, token, nil)
	agent := workerstream.NewAgent(workerstream.AgentConfig{
		Exec: exec,
		Dial: dialer.Dial,
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
	log.Info("orion worker started", zap.String("id", id), zap.Int("slots", slots),
		zap.String("log_dir", exec.LogDir()), zap.Strings("servers", servers))

	select {
	case <-sig.Done():
	case err := <-done: // only on a configuration error
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
