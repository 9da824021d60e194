// Package server assembles one `orion server` replica: etcd (embedded or
// external), the local executor, the scheduling engine and the HTTP API.
package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/http/api"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/console"
	"github.com/orion-sched/orion/internal/http/demo"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/hijack"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/http/seedapi"
	"github.com/orion-sched/orion/internal/kubelabel"
	"github.com/orion-sched/orion/internal/leaderapart"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/schedule/firer"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// Server is a running replica.
type Server struct {
	Config   config.Server
	Member   *etcdmember.Member // nil with external etcd
	Client   *clientv3.Client
	Local    *executor.Local // nil with --slots 0
	Hub      *workerstream.Hub
	Events   *events.Hub
	Metrics  *metrics.Metrics
	HTTPAddr string // the address actually bound

	log       *zap.Logger
	route     *store.Route        // the leader's transactions to etcd's raft leader
	apart     *leaderapart.Keeper // etcd's raft leader off this node while leading; nil on one member
	view      *leaderView         // who leads, which replicas are registered
	agent     *workerstream.Agent
	labeler   *kubelabel.Labeler
	http      *http.Server
	cancel    context.CancelFunc
	ectx      context.Context
	ref       demo.EngineRef        // the running engine (a demo crash replaces it)
	firer     *firer.Firer          // fires schedule ticks while this replica leads
	space     *store.SpaceGauge     // etcd's space: admission, the writes' guard (store/space.go)
	newEngine func() *engine.Engine // builds an engine wired like the first
	engineCh  chan error
}

// Option adjusts how Start wires a replica without changing what it does.
type Option func(*options)

type options struct {
	dispatchObserver func(time.Duration)
}

// WithDispatchObserver has every attempt's ready → start latency passed to
// fn on the scheduling loop (fn must not block): `orion bench` collects raw
// samples with it, finer than the metric's histogram.
func WithDispatchObserver(fn func(time.Duration)) Option {
	return func(o *options) { o.dispatchObserver = fn }
}

// Start brings the replica up and returns once the API is listening. The
// engine loads its state and campaigns in the background.
func Start(ctx context.Context, cfg config.Server, log *zap.Logger, opts ...Option) (s *Server, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	srv := &Server{Config: cfg, log: log, Metrics: metrics.New(), engineCh: make(chan error, 1)}
	s = srv
	defer func() {
		// srv, not s: every error return sets s to nil.
		if err != nil {
			srv.closeResources()
		}
	}()
	if err := checkRecordBound(cfg); err != nil {
		return nil, err
	}
	// The API port first: a busy port is the commonest start failure, and
	// it must not cost an etcd member start or a new data dir.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, listenError(cfg.Listen, err)
	}
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}

	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		m, err := etcdmember.Start(ctx, etcdmember.Config{
			Name:                    cfg.Name,
			DataDir:                 filepath.Join(cfg.DataDir, "etcd"),
			ClientURL:               cfg.EmbeddedClientURL,
			PeerURL:                 cfg.EmbeddedPeerURL,
			HeartbeatMs:             cfg.EmbeddedHeartbeatMs,
			ElectionMs:              cfg.EmbeddedElectionMs,
			AutoCompactionMode:      "revision",
			AutoCompactionRetention: cfg.EmbeddedCompaction,
			QuotaBackendBytes:       cfg.EmbeddedQuotaBytes,
			MaxTxnOps:               max(uint(cfg.MaxTxnOps), etcdmember.DefaultMaxTxnOps),
			MaxRequestBytes:         uint(cfg.EtcdMaxRequestBytes),
			Logger:                  log,
			LogLevel:                cfg.EmbeddedEtcdLogLevel,
		})
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: %w", err)
		}
		s.Member = m
		endpoints = m.Endpoints()
		log.Info("embedded etcd member ready", zap.String("client_url", m.ClientURL()),
			zap.String("data_dir", filepath.Join(cfg.DataDir, "etcd")))
	}

	cc, err := etcdClientConfig(cfg, endpoints)
	if err != nil {
		return nil, err
	}
	if s.Client, err = newEtcdClient(cc, cfg.EtcdUsername); err != nil {
		return nil, err
	}
	s.route = store.NewRoute(s.Client, endpoints, memberDialer(cc), log.Named("commit-route"))
	if len(endpoints) > 1 {
		s.apart = leaderapart.New(leaderapart.Config{Client: s.Client, Node: cfg.NodeName, Dial: memberDialer(cc),
			HTTP:   &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: cc.TLS, Proxy: nil}},
			Logger: log.Named("apart"), Moved: func(o string) { s.Metrics.EtcdLeaderMoves.WithLabelValues(o).Inc() }})
	}

	// The replica's own slots: a local executor driven by an agent that
	// keeps a stream to the leader, like any worker's (an in-process pipe
	// when the leader is this replica). With no slots the stream is kept
	// anyway: it tells this replica at once when the leader dies.
	var own executor.Executor
	if cfg.Slots > 0 {
		logDir := cfg.TaskLogDir
		if logDir == "" {
			logDir = filepath.Join(cfg.DataDir, "logs")
		}
		s.Local, err = executor.NewLocal(executor.LocalConfig{
			ID:     WorkerID(cfg.Name),
			Slots:  cfg.Slots,
			LogDir: logDir,
			Logger: log.Named("executor"),
		})
		if err != nil {
			return nil, err
		}
		own = s.Local
	} else {
		own = newIdleExecutor(WorkerID(cfg.Name))
	}

	s.HTTPAddr = ln.Addr().String()
	apiURL, derived, err := advertisedURL(cfg.AdvertiseURL, cfg.Listen, s.HTTPAddr, net.InterfaceAddrs)
	if err != nil {
		return nil, err
	}
	if derived {
		log.Warn("listening on every address; advertising this host's address to other replicas and workers (set advertise_url to choose another)",
			zap.String("listen", cfg.Listen), zap.String("advertise_url", apiURL))
	}
	// The advertised name is one this replica serves by definition: other
	// replicas forward writes to it and workers dial it.
	served := append(slices.Clone(cfg.AllowedHosts), apiURL)
	if host, _, _ := net.SplitHostPort(cfg.Listen); !config.IsLoopbackHost(host) {
		ln = guard.LimitPerClient(ln, cfg.MaxConnsPerClient, s.Metrics.ConnsRefused.Inc)
		// Reachable from the network: the machine's own name is one clients
		// use, and no web page can make a browser resolve it.
		if name, err := os.Hostname(); err == nil {
			served = append(served, name)
		}
	}
	hosts := guard.NewHosts(served...)
	if hosts.Any() {
		log.Warn("allowed_hosts contains \"*\": any host name is served, so only auth_token stops a web page that rebinds its name to this address")
	}

	if cfg.KubeLeaderLabel != "" {
		s.labeler, err = kubelabel.FromEnv(cfg.KubeLeaderLabel, log.Named("kubelabel"), s.Metrics.KubeLabelErrors.Inc)
		if err != nil {
			return nil, err
		}
		s.labeler.Leading(false, "")
	}

	if cfg.OrphanGrace < workerstream.ReconnectBound {
		log.Warn("orphan_grace is shorter than a worker's reconnect bound: after a leader change, a task whose worker is alive but still reconnecting may run a second time",
			zap.Duration("orphan_grace", cfg.OrphanGrace), zap.Duration("reconnect_bound", workerstream.ReconnectBound))
	}
	view := newLeaderView(s.Client, log.Named("view"))
	s.view = view
	info := &clusterInfo{cli: s.Client, view: view}
	s.Hub = workerstream.NewHub(workerstream.HubConfig{
		Leader:         cfg.Name,
		StaleAfter:     cfg.StreamStaleAfter,
		ReconnectGrace: cfg.WorkerReconnectGrace,
		// A silent worker may be alive and running its attempts: it keeps
		// them as long as a new leader would wait for it.
		SilentGrace: max(cfg.WorkerReconnectGrace, cfg.OrphanGrace),
		Logger:      log.Named("hub"),
		MaxSlots:    cfg.WorkerMaxSlots,
		MaxWorkers:  cfg.MaxWorkers,
		MaxRate:     cfg.WorkerStreamMaxRate,
		OnRefused:   func(reason string) { s.Metrics.RefusedHellos.WithLabelValues(reason).Inc() },
		OnFlood:     s.Metrics.FloodedStreams.Inc,
		Redirect: func() (string, string) {
			addr, _ := view.LeaderAddr()
			return addr.Name, addr.APIURL
		},
	})
	info.workers = hubWorkers(s.Hub)
	view.onReplicas = hubPeers(s.Hub)

	// The live event stream: every replica publishes the entries it applies.
	s.Events = events.NewHub(events.Config{Dropped: s.Metrics.DroppedEvents, Node: cfg.Name,
		Snapshot:       newEventSnapshot(s),
		MaxSubscribers: cfg.MaxEventStreams, MaxSubscribersPerClient: cfg.MaxStreamsPerClient,
		Refused: s.Metrics.SubscribersRefused})
	s.Metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orion_event_subscribers",
		Help: "Event streams this replica serves (SSE, WebSocket, the seed's /ws)."}, func() float64 { return float64(s.Events.Subscribers()) }))

	limits := store.Limits{MaxOps: maxTxnOps(cfg), MaxRequest: cfg.EtcdMaxRequestBytes}
	limits.MaxBytes = min(store.DefaultLimits.MaxBytes, limits.RecordLimit())
	ectx, cancel := context.WithCancel(context.Background())
	s.ectx, s.cancel = ectx, cancel
	etcdStore := store.NewEtcd(s.Client)
	etcdStore.CommitThrough(s.route.KV())
	s.space = store.NewSpaceGauge(s.Client, 0)
	etcdStore.GuardWith(s.space)
	etcdStore.KnowLeaderFrom(view.ElectedLeader)
	s.firer = firer.NewFirer(firer.Config{
		Engine:    func() firer.Engine { return s.ref.Get() },
		Store:     etcdStore,
		Metrics:   metrics.NewSchedules(s.Metrics.Registry),
		BadValues: s.Metrics.BadValues,
		Logger:    log.Named("schedules"),
	})
	schedules := &firer.Service{Engine: func() firer.Engine { return s.ref.Get() }, Store: etcdStore, Firer: s.firer, Limits: limits,
		MaxSchedules: cfg.MaxSchedules, MinInterval: cfg.MinScheduleInterval, Refused: s.Metrics.Refused}
	setLimitGauges(s.Metrics, cfg)
	workerEvents := engine.HubWorkers(ectx, s.Hub.Events())
	s.newEngine = func() *engine.Engine {
		return engine.New(engine.Config{
			Node:             cfg.Name,
			APIURL:           apiURL,
			Core:             coreConfig(cfg),
			Limits:           limits,
			CommitPipeline:   commitPipeline(cfg),
			SessionTTL:       cfg.SessionTTL,
			Retention:        cfg.Retention,
			Logger:           log.Named("scheduler"),
			Metrics:          s.Metrics,
			Workers:          workerEvents,
			Results:          s.Hub.Results(),
			Observer:         s.Events.Observe,
			DispatchObserver: o.dispatchObserver,
			OnReload:         s.Events.Reset,
			LeaderAnswers:    view.leaderAnswers,
			Storage:          s.space,
			StorageAdmission: cfg.StorageAdmissionRatio,
			OnLeading: func(leading bool, term engine.Leading) {
				if leading {
					s.Hub.SetTerm(workerstream.Term{Incarnation: term.Incarnation, Fence: term.Fence.Rev})
				}
				s.Hub.SetLeading(leading)
				s.firer.SetLeading(leading)
				if s.apart != nil {
					s.apart.Leading(leading)
				}
				if s.labeler != nil {
					s.labeler.Leading(leading, term.Previous)
				}
			},
		}, etcdStore)
	}
	s.ref.Set(s.newEngine())

	s.agent = workerstream.NewAgent(workerstream.AgentConfig{
		Exec:         own,
		Dial:         replicaDialer(view, cfg.Name, s.Hub, cfg.AuthToken),
		Replica:      cfg.Name,
		Labels:       cfg.Labels,
		StaleAfter:   cfg.StreamStaleAfter,
		OnLeaderLost: func(leader string) { s.ref.Get().SuspectLeader(leader) },
		MinBackoff:   5 * time.Millisecond,
		MaxBackoff:   200 * time.Millisecond,
		Logger:       log.Named("agent"),
	})

	routes := console.Routes()
	routes["GET "+workerstream.Path] = s.Hub.Handler()
	kit.SetLogger(log.Named("http"))
	maps.Copy(routes, s.Events.Routes(events.HTTPConfig{Origins: kit.Origins{Hosts: hosts}, Logger: log.Named("events")}))
	controls := demo.New(demo.Config{
		Scheduler: demo.Replica{Ref: &s.ref, NewEngine: s.newEngine, Run: s.runEngine}, Enabled: cfg.Demo,
		Backend: &s.ref, Events: s.Events, AuthToken: cfg.AuthToken, Cluster: info, Node: cfg.Name,
		Timeout: cfg.WriteTimeout, Logger: log.Named("demo"),
	})
	maps.Copy(routes, controls.Routes())
	seed := seedapi.New(seedapi.Config{
		Backend: &s.ref, Hub: s.Events, Demo: controls, Origins: kit.Origins{Hosts: hosts},
		AuthToken: cfg.AuthToken, Cluster: info, Node: cfg.Name,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxTasks: cfg.MaxTasksPerDAG, WriteTimeout: cfg.WriteTimeout,
		SlowTasks: cfg.Demo, Logger: log.Named("seedapi"),
	})
	maps.Copy(routes, seed.Routes())

	var logs executor.Executor = s.Local
	if s.Local == nil {
		logs = nil
	}
	handler := api.New(api.Config{
		Backend:       &s.ref,
		Logs:          logs,
		RemoteLogs:    func(worker string) executor.Executor { return remoteLogs(s.Hub, worker) },
		Metrics:       s.Metrics,
		Logger:        log.Named("api"),
		Node:          cfg.Name,
		EtcdEndpoints: endpoints,
		AuthToken:     cfg.AuthToken,
		MetricsNoAuth: cfg.MetricsNoAuth,
		RateLimit:     cfg.RateLimit,
		MaxBodyBytes:  cfg.MaxBodyBytes,
		MaxTasks:      cfg.MaxTasksPerDAG,
		MaxItems:      cfg.MaxItems,
		WriteTimeout:  cfg.WriteTimeout,
		Cluster:       info,
		LeaderView:    view,
		Hosts:         hosts,
		APIURL:        apiURL,
		PID:           os.Getpid(),
		Routes:        routes,
		Schedules:     schedules,
		Storage:       func() *apitypes.Storage { return s.ref.Get().Status().Storage },
	})
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    cfg.HTTPMaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		ConnContext:       hijack.ConnContext, // the event stream sizes its socket's buffer
	}

	go view.run(ectx)
	go s.space.Run(ectx)
	go watchEtcdSpace(ectx, s.Client, s.Metrics, log, s.Member == nil)
	go s.runEngine(s.ref.Get())
	go func() {
		// It returns early only if the leader refuses this replica's own
		// slots (config validation keeps their id and count in bounds).
		if err := s.agent.Run(ectx); err != nil {
			s.log.Error("this replica's own slots were refused by the leader; they run nothing", zap.Error(err))
		}
	}()
	go s.Events.Run(ectx)
	if s.labeler != nil {
		go s.labeler.Run(ectx)
	}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// coreConfig is the scheduling policy the settings give.
func coreConfig(cfg config.Server) core.Config {
	return core.Config{RetryBase: cfg.RetryBase, RetryCap: cfg.RetryCap, OrphanGrace: cfg.OrphanGrace, PoolLimits: cfg.PoolLimits,
		MaxOutputBytes: cfg.MaxOutputBytes, MaxLiveDAGs: cfg.MaxLiveDAGs, MaxLiveTasks: cfg.MaxLiveTasks,
		MaxItems: cfg.MaxItems, MaxItemsBytes: maxItemsBytes(cfg)}
}

// setLimitGauges publishes the global limits beside the counts they bound.
func setLimitGauges(m *metrics.Metrics, cfg config.Server) {
	for limit, v := range map[string]float64{
		"max_live_dags": float64(cfg.MaxLiveDAGs), "max_live_tasks": float64(cfg.MaxLiveTasks),
		"max_schedules": float64(cfg.MaxSchedules), "min_schedule_interval": cfg.MinScheduleInterval.Seconds(),
		"storage_admission_ratio": cfg.StorageAdmissionRatio,
	} {
		m.Limit.WithLabelValues(limit).Set(v)
	}
}

// listenError says once what went wrong with the API address (net's own
// error repeats the address and the operation).
func listenError(addr string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
		var sys *os.SyscallError
		if errors.As(err, &sys) {
			err = sys.Err
		}
	}
	msg := fmt.Sprintf("cannot listen on %s for the API: %v", addr, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		msg += " (another orion server, or another program, has it: stop it or choose --listen)"
	}
	return errors.New(msg)
}

// maxTxnOps is max_txn_ops, or when 0 the batch that measured best for the
// topology: 128 on the embedded member (512 measured no better), 512 on an
// etcd cluster (3 members on one host, enough slots: 11.5-13.6k tasks/s
// against 9.1-10.6k with 128). Members that refuse 512 operations
// (etcd's default --max-txn-ops is 128) make the engine halve its batches
// until they accept them (engine.Engine.onCommitFailed).
func maxTxnOps(cfg config.Server) int {
	switch {
	case cfg.MaxTxnOps > 0:
		return cfg.MaxTxnOps
	case len(cfg.EtcdEndpoints) == 0:
		return int(etcdmember.DefaultMaxTxnOps)
	default:
		return 512
	}
}

// commitPipeline is commit_pipeline, or when 0 the depth that measured best
// for the topology: two transactions in flight on the embedded member, one
// on an etcd cluster reached through several members (engine.Config).
func commitPipeline(cfg config.Server) int {
	switch {
	case cfg.CommitPipeline > 0:
		return cfg.CommitPipeline
	case len(cfg.EtcdEndpoints) == 0:
		return 2
	default:
		return 1
	}
}

// WorkerID names this process's local executor: the replica name plus a
// per-process suffix, so attempts of a previous incarnation are recognised
// as orphans rather than adopted.
func WorkerID(node string) string {
	return fmt.Sprintf("%s/%d-%x", node, os.Getpid(), time.Now().UnixNano()&0xffffff)
}

// Wait returns when the engine stops (it only stops when Shutdown is called
// or its context ends).
func (s *Server) Wait() <-chan error { return s.engineCh }

// Shutdown stops accepting requests, lets the engine finish its commit in
// flight and resign leadership, stops the executor and etcd. A leader with
// other replicas registered hands leadership over first (Engine.Retire),
// so that while its API drains (up to 5 s, event streams included) the
// writes that reach it are forwarded to the new leader instead of refused.
func (s *Server) Shutdown(ctx context.Context) error {
	if v, known := s.view.snapshot(); known && len(v.Replicas) > 1 {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := s.ref.Get().Retire(rctx); err != nil {
			s.log.Warn("could not hand leadership over before shutting down", zap.Error(err))
		}
		cancel()
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = s.http.Shutdown(hctx)
	cancel()
	s.firer.Stop()
	s.cancel()
	select {
	case <-s.ref.Get().Done():
	case <-ctx.Done():
	}
	s.closeResources()
	return nil
}

func (s *Server) closeResources() {
	if s.apart != nil {
		s.apart.Close()
	}
	if s.Hub != nil {
		_ = s.Hub.Close()
	}
	if s.Local != nil {
		_ = s.Local.Close()
	}
	if s.route != nil {
		s.route.Close()
	}
	if s.Client != nil {
		_ = s.Client.Close()
	}
	if s.Member != nil {
		_ = s.Member.Close()
	}
}
