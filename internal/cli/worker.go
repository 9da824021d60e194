package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/tlsfiles"
	"github.com/orion-sched/orion/internal/kube"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/worker/executor/pod"
	"github.com/orion-sched/orion/internal/workerstream"
)

// workerDrainTimeout bounds how long a stopping worker tries to hand its
// last results (those of attempts that finished while it drained, and the
// Cancelled ones of those it then stopped) to the leader.
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
	labels := cfg.Labels
	var pods *pod.Runner
	if cfg.Pods {
		client, err := kube.InCluster(cfg.PodNamespace)
		if err != nil {
			return fmt.Errorf("--pods: %w", err)
		}
		pods = pod.New(pod.Config{Client: client, StuckTimeout: cfg.PodStuckTimeout, DeleteSucceeded: cfg.PodDeleteSucceeded,
			DeleteFailed: cfg.PodDeleteFailed, GCAfter: cfg.PodGCAfter, Logger: log.Named("pods")})
		// It runs pod tasks: the leader sends them only to workers that
		// say so (every pod task requires the label).
		labels = maps.Clone(labels)
		if labels == nil {
			labels = model.Labels{}
		}
		labels[model.PodsLabel] = "true"
		log.Info("running pod tasks", zap.String("namespace", client.Namespace()))
	}
	lc := executor.LocalConfig{ID: id, Slots: slots, LogDir: cfg.LogDir, Logger: log.Named("executor"), SecretsDir: cfg.SecretsDir}
	if pods != nil {
		lc.Pods = pods
	}
	exec, err := executor.NewLocal(lc)
	if err != nil {
		return err
	}
	var hc *http.Client
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		tc, err := tlsfiles.ClientFiles(cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		hc = &http.Client{Transport: t}
	}
	dialer := workerstream.NewHTTPDialer(servers, cfg.Token, hc)
	agent := workerstream.NewAgent(workerstream.AgentConfig{
		Exec:   exec,
		Dial:   dialer.Dial,
		Labels: labels,
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
	if pods != nil {
		go pods.Sweep(runCtx, min(cfg.PodGCAfter/4, 5*time.Minute))
	}
	log.Info("orion worker started", zap.String("id", id), zap.Int("slots", slots), zap.Stringer("labels", labels),
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
	// Drain: no new attempts (the leader hears it at once), and those
	// running get drain_timeout to finish, so that a rolling update of
	// workers runs nothing twice that could finish in time.
	agent.StopTaking()
	exec.StopTaking()
	others, podAttempts := exec.Running()
	log.Info("draining: taking no new attempts, letting the running ones finish",
		zap.Int("running", others), zap.Int("pod_tasks", podAttempts), zap.Duration("drain_timeout", cfg.DrainTimeout))
	dctx, cancelDrain := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	if err := exec.WaitIdle(dctx); err != nil {
		others, _ = exec.Running()
		log.Warn("drain timeout: cancelling the attempts still running (the leader re-queues them)", zap.Int("running", others))
	}
	cancelDrain()
	// What still runs reports Cancelled and is re-queued; pod tasks' pods
	// are left running, for the worker the leader hands them to.
	_ = exec.Close()
	// Every result, those of the attempts that finished while draining
	// among them, goes to the leader before the worker exits.
	hctx, cancelHand := context.WithTimeout(context.Background(), workerDrainTimeout)
	if err := agent.Drain(hctx); err != nil {
		log.Warn("could not hand every result to the leader before exiting; it will re-queue those attempts when the worker is gone",
			zap.Error(err))
	}
	cancelHand()
	cancelRun()
	<-done
	log.Info("worker stopped", zap.String("id", id))
	return nil
}
