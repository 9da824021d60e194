package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/tlsfiles"
	"github.com/orion-sched/orion/internal/kube"
	"github.com/orion-sched/orion/internal/worker/executor/pod"
	"github.com/orion-sched/orion/internal/workerstream"
)

// StartWorker starts `orion worker` from its settings: its slots, pod tasks
// with --pods, and a stream to whichever replica leads. Stop drains it.
func StartWorker(cfg config.Worker, log *zap.Logger) (*Agent, error) {
	wc, err := WorkerConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	a, err := New(wc)
	if err != nil {
		return nil, err
	}
	a.Start(context.Background())
	log.Info("orion worker started", zap.String("id", a.ID()), zap.Int("slots", cfg.Slots), zap.Stringer("labels", a.Labels()),
		zap.String("log_dir", a.Local().LogDir()), zap.Strings("servers", cfg.Servers))
	return a, nil
}

// WorkerConfig is a standalone worker's Config: a fresh id, a Kubernetes
// client with --pods, and a dialer over the replicas' API URLs that learns
// the others from the leader.
func WorkerConfig(cfg config.Worker, log *zap.Logger) (Config, error) {
	for _, s := range cfg.Servers {
		if u, err := url.Parse(s); err == nil && u.Scheme == "http" && cfg.Token != "" && !config.IsLoopbackHost(u.Hostname()) {
			log.Warn("the token travels unencrypted to a non-loopback server; use https", zap.String("server", s))
		}
	}
	wc := Config{ID: workerID(cfg.Name), Slots: cfg.Slots, LogDir: cfg.LogDir, SecretsDir: cfg.SecretsDir, Labels: cfg.Labels,
		DrainTimeout: cfg.DrainTimeout, Logger: log}
	if cfg.Pods {
		client, err := kube.InCluster(cfg.PodNamespace)
		if err != nil {
			return Config{}, fmt.Errorf("--pods: %w", err)
		}
		wc.Pods = pod.New(pod.Config{Client: client, StuckTimeout: cfg.PodStuckTimeout, DeleteSucceeded: cfg.PodDeleteSucceeded,
			DeleteFailed: cfg.PodDeleteFailed, GCAfter: cfg.PodGCAfter, Logger: log.Named("pods")})
		wc.PodSweepEvery = min(cfg.PodGCAfter/4, 5*time.Minute)
		log.Info("running pod tasks", zap.String("namespace", client.Namespace()))
	}
	var hc *http.Client
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		tc, err := tlsfiles.ClientFiles(cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return wc, err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		hc = &http.Client{Transport: t}
	}
	dialer := workerstream.NewHTTPDialer(cfg.Servers, cfg.Token, hc)
	wc.Dial = dialer.Dial
	// The leader's list of replicas: with it, a worker given only the
	// replica that dies (or a Service that maps to it) still finds the
	// next leader.
	wc.OnPeers = func(peers []workerstream.Peer) {
		dialer.SetPeers(peers)
		log.Debug("replicas known", zap.Any("peers", peers))
	}
	return wc, nil
}

// workerID names this process: a restarted worker is a new worker, so the
// attempts of the one that died become orphans rather than being adopted.
func workerID(name string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d-%s", name, os.Getpid(), hex.EncodeToString(b[:]))
}
