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
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/http/api"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/auth"
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
	"github.com/orion-sched/orion/internal/worker/agent"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// Server is a running replica.
type Server struct {
	Config   config.Server
	Member   *etcdmember.Member // nil with external etcd
	Etcd     *store.Etcd        // etcd's only client: the log, the election, the cluster's administration
	Local    *executor.Local    // nil with --slots 0
	Hub      *workerstream.Hub
	Events   *events.Hub
	Metrics  *metrics.Metrics
	HTTPAddr string // the address actually bound

	log       *zap.Logger
	sec       transportSecurity   // TLS of the listener and of requests to other replicas
	apart     *leaderapart.Keeper // etcd's raft leader off this node while leading; nil on one member
	view      *leaderView         // who leads, which replicas are registered
	own       *agent.Agent        // this replica's own slots, a worker like any other
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
//
// It is the replica's composition root, read top to bottom: each step
// builds one part from the parts before it, and nothing runs until the
// last step (startLoops) starts every loop at once. The callbacks by which
// the parts answer one another are all made in one place (hooks), so a
// step never reaches into a part built after it. Shutdown undoes the steps
// in the reverse order.
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
			srv.cancel()
			srv.closeResources()
		}
	}()
	s.ectx, s.cancel = context.WithCancel(context.Background())
	h := s.hooks()

	if err := checkRecordBound(cfg); err != nil {
		return nil, err
	}
	// The tokens and TLS files before anything starts: a file that does
	// not load would refuse every client.
	keys, err := loadKeys(cfg, log)
	if err != nil {
		return nil, err
	}
	sec, err := loadTLS(cfg, log)
	if err != nil {
		return nil, err
	}
	s.sec = sec
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

	// etcd: the embedded member unless endpoints are given, then the client.
	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		if s.Member, err = startEmbeddedEtcd(ctx, cfg, log); err != nil {
			return nil, err
		}
		endpoints = s.Member.Endpoints()
	}
	if s.Etcd, s.apart, err = openEtcd(cfg, endpoints, log, s.Metrics); err != nil {
		return nil, err
	}

	// The replica's own slots, a worker like `orion worker`'s.
	if s.own, err = newOwnSlots(cfg, log, h); err != nil {
		return nil, err
	}
	s.Local = s.own.Local()

	// How it is reached: the URL it advertises, the host names it serves.
	addr, err := newAddressing(cfg, ln, sec, log, s.Metrics)
	if err != nil {
		return nil, err
	}
	ln, s.HTTPAddr = addr.ln, addr.bound
	if s.labeler, err = newLabeler(cfg, log, s.Metrics); err != nil {
		return nil, err
	}
	warnOrphanGrace(cfg, log)

	// What it knows of the cluster: who leads and which replicas are
	// registered (the view), its workers (the hub), the live events.
	s.view = newLeaderView(s.Etcd, log.Named("view"))
	s.view.probe = sec.probe()
	s.view.onReplicas = h.replicas
	s.Hub = newWorkerHub(cfg, log, s.Metrics, h)
	s.Events = newEventHub(cfg, s.Metrics, h)
	info := &clusterInfo{etcd: s.Etcd, view: s.view, workers: h.workers}

	// The scheduler: the store it commits through, the schedules it fires,
	// the engine (rebuilt the same way after a demo crash).
	etcdStore, limits := s.newStore(cfg)
	var schedules *firer.Service
	s.firer, schedules = newSchedules(cfg, etcdStore, limits, log, s.Metrics, h)
	setLimitGauges(s.Metrics, cfg)
	s.newEngine = s.engineFactory(cfg, etcdStore, limits, addr.apiURL, o, h)
	s.ref.Set(s.newEngine())

	// The HTTP surfaces: API, console, events, seed API, demo, worker stream.
	s.watchTokens(s.ectx, keys, cfg, log)
	s.http = s.newHTTP(cfg, endpoints, addr, info, schedules, keys, h)

	s.startLoops(ln)
	return s, nil
}

// startEmbeddedEtcd starts the member a replica embeds when it is given no
// etcd endpoints.
func startEmbeddedEtcd(ctx context.Context, cfg config.Server, log *zap.Logger) (*etcdmember.Member, error) {
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
	log.Info("embedded etcd member ready", zap.String("client_url", m.ClientURL()),
		zap.String("data_dir", filepath.Join(cfg.DataDir, "etcd")))
	return m, nil
}

// openEtcd opens the store, etcd's only client (store.Dial: the client,
// and the route of the leader's transactions to etcd's raft leader) and,
// with several members, the keeper that moves etcd's raft leadership off
// this node while it leads.
func openEtcd(cfg config.Server, endpoints []string, log *zap.Logger, m *metrics.Metrics) (*store.Etcd, *leaderapart.Keeper, error) {
	st, err := store.Dial(store.DialConfig{Endpoints: endpoints, Username: cfg.EtcdUsername, Password: cfg.EtcdPassword,
		CA: cfg.EtcdCA, Cert: cfg.EtcdCert, Key: cfg.EtcdKey, Logger: log.Named("commit-route")})
	if err != nil {
		return nil, nil, err
	}
	sweep := log.Named("chunks")
	st.OnSweep = func(n int, err error) {
		switch {
		case err != nil:
			sweep.Warn("could not sweep the chunks of DAGs an earlier leader left without their record; the next term will", zap.Error(err))
		case n > 0:
			sweep.Info("deleted the chunks of DAGs an earlier leader left without their record", zap.Int("chunks", n))
		}
	}
	var apart *leaderapart.Keeper
	if len(endpoints) > 1 {
		apart = leaderapart.New(leaderapart.Config{Etcd: st, Node: cfg.NodeName,
			HTTP:   &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: st.TLS(), Proxy: nil}},
			Logger: log.Named("apart"), Moved: func(o string) { m.EtcdLeaderMoves.WithLabelValues(o).Inc() }})
	}
	return st, apart, nil
}

// newOwnSlots builds the replica's own slots: a local executor driven by an
// agent that keeps a stream to the leader, like any worker's (an in-process
// pipe when the leader is this replica). With no slots the stream is kept
// anyway: it tells this replica at once when the leader dies.
func newOwnSlots(cfg config.Server, log *zap.Logger, h hooks) (*agent.Agent, error) {
	logDir := cfg.TaskLogDir
	if logDir == "" {
		logDir = filepath.Join(cfg.DataDir, "logs")
	}
	return agent.New(agent.Config{
		ID:           WorkerID(cfg.Name),
		Slots:        cfg.Slots,
		LogDir:       logDir,
		SecretsDir:   cfg.SecretsDir, // read by the slots' shell tasks, never by the leader
		Labels:       cfg.Labels,
		Dial:         h.dialLeader,
		Replica:      cfg.Name,
		StaleAfter:   cfg.StreamStaleAfter,
		OnLeaderLost: h.leaderLost,
		MinBackoff:   5 * time.Millisecond,
		MaxBackoff:   200 * time.Millisecond,
		Logger:       log,
		StreamLog:    "agent",
	})
}

// addressing is how a replica is reached: the address it bound, the URL it
// advertises to other replicas and workers, the host names it serves.
type addressing struct {
	ln     net.Listener // wrapped by the per-client connection cap off loopback
	bound  string
	apiURL string
	hosts  guard.Hosts
}

func newAddressing(cfg config.Server, ln net.Listener, sec transportSecurity, log *zap.Logger, m *metrics.Metrics) (addressing, error) {
	a := addressing{ln: ln, bound: ln.Addr().String()}
	apiURL, derived, err := advertisedURL(sec.scheme(), cfg.AdvertiseURL, cfg.Listen, a.bound, net.InterfaceAddrs)
	if err != nil {
		return a, err
	}
	a.apiURL = apiURL
	if derived {
		log.Warn("listening on every address; advertising this host's address to other replicas and workers (set advertise_url to choose another)",
			zap.String("listen", cfg.Listen), zap.String("advertise_url", apiURL))
	}
	// The advertised name is one this replica serves by definition: other
	// replicas forward writes to it and workers dial it.
	served := append(slices.Clone(cfg.AllowedHosts), apiURL)
	if host, _, _ := net.SplitHostPort(cfg.Listen); !config.IsLoopbackHost(host) {
		if sec.serve == nil {
			log.Warn("serving plain HTTP beyond loopback: tokens, task commands and environments cross the network in clear text; set tls_cert_file and tls_key_file",
				zap.String("listen", cfg.Listen))
		}
		a.ln = guard.LimitPerClient(ln, cfg.MaxConnsPerClient, m.ConnsRefused.Inc)
		// Reachable from the network: the machine's own name is one clients
		// use, and no web page can make a browser resolve it.
		if name, err := os.Hostname(); err == nil {
			served = append(served, name)
		}
	}
	// TLS over the per-client cap: a handshake costs a connection first.
	a.ln = sec.listen(a.ln)
	a.hosts = guard.NewHosts(served...)
	if a.hosts.Any() {
		log.Warn("allowed_hosts contains \"*\": any host name is served, so only auth_token stops a web page that rebinds its name to this address")
	}
	return a, nil
}

// newLabeler labels this replica's pod while it leads (kube_leader_label);
// nil without it.
func newLabeler(cfg config.Server, log *zap.Logger, m *metrics.Metrics) (*kubelabel.Labeler, error) {
	if cfg.KubeLeaderLabel == "" {
		return nil, nil
	}
	l, err := kubelabel.FromEnv(cfg.KubeLeaderLabel, log.Named("kubelabel"), m.KubeLabelErrors.Inc)
	if err != nil {
		return nil, err
	}
	l.Leading(false, "")
	return l, nil
}

func warnOrphanGrace(cfg config.Server, log *zap.Logger) {
	if cfg.OrphanGrace < workerstream.ReconnectBound {
		log.Warn("orphan_grace is shorter than a worker's reconnect bound: after a leader change, a task whose worker is alive but still reconnecting may run a second time",
			zap.Duration("orphan_grace", cfg.OrphanGrace), zap.Duration("reconnect_bound", workerstream.ReconnectBound))
	}
}

// newWorkerHub is the leader's end of every worker's stream (this
// replica's own slots among them); on a standby it redirects to the leader.
func newWorkerHub(cfg config.Server, log *zap.Logger, m *metrics.Metrics, h hooks) *workerstream.Hub {
	return workerstream.NewHub(workerstream.HubConfig{
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
		OnRefused:   func(reason string) { m.RefusedHellos.WithLabelValues(reason).Inc() },
		OnFlood:     m.FloodedStreams.Inc,
		Redirect:    h.redirect,
	})
}

// newEventHub is the live event stream: every replica publishes the
// entries it applies.
func newEventHub(cfg config.Server, m *metrics.Metrics, h hooks) *events.Hub {
	hub := events.NewHub(events.Config{Dropped: m.DroppedEvents, Node: cfg.Name,
		Snapshot:       h.eventSnapshot,
		MaxSubscribers: cfg.MaxEventStreams, MaxSubscribersPerClient: cfg.MaxStreamsPerClient,
		Refused: m.SubscribersRefused})
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orion_event_subscribers",
		Help: "Event streams this replica serves (SSE, WebSocket, the seed's /ws)."}, func() float64 { return float64(hub.Subscribers()) }))
	return hub
}

// newStore is the etcd store the engine and the schedules commit through:
// fenced transactions sent to etcd's raft leader, guarded by etcd's space.
func (s *Server) newStore(cfg config.Server) (*store.Etcd, store.Limits) {
	limits := store.Limits{MaxOps: maxTxnOps(cfg), MaxRequest: cfg.EtcdMaxRequestBytes}
	limits.MaxBytes = min(store.DefaultLimits.MaxBytes, limits.RecordLimit())
	etcdStore := s.Etcd
	s.space = s.Etcd.NewSpaceGauge(0)
	etcdStore.GuardWith(s.space)
	etcdStore.KnowLeaderFrom(s.view.ElectedLeader)
	return etcdStore, limits
}

// newSchedules is the firer of schedule ticks (while this replica leads)
// and the service behind the schedule routes.
func newSchedules(cfg config.Server, st *store.Etcd, limits store.Limits, log *zap.Logger, m *metrics.Metrics, h hooks) (*firer.Firer, *firer.Service) {
	f := firer.NewFirer(firer.Config{
		Engine:    h.engine,
		Store:     st,
		Metrics:   metrics.NewSchedules(m.Registry),
		BadValues: m.BadValues,
		Logger:    log.Named("schedules"),
	})
	return f, &firer.Service{Engine: h.engine, Store: st, Firer: f, Limits: limits,
		MaxSchedules: cfg.MaxSchedules, MinInterval: cfg.MinScheduleInterval, Refused: m.Refused}
}

// engineFactory builds the scheduling engine; a demo crash builds another
// the same way. The event hub's and the view's methods are passed as they
// are, not as hooks: the loop calls Observe for every entry it applies.
func (s *Server) engineFactory(cfg config.Server, st *store.Etcd, limits store.Limits, apiURL string, o options, h hooks) func() *engine.Engine {
	workerEvents := engine.HubWorkers(s.ectx, s.Hub.Events())
	return func() *engine.Engine {
		return engine.New(engine.Config{
			Node:             cfg.Name,
			APIURL:           apiURL,
			Core:             coreConfig(cfg),
			Limits:           limits,
			CommitPipeline:   commitPipeline(cfg),
			SessionTTL:       cfg.SessionTTL,
			Retention:        cfg.Retention,
			Logger:           s.log.Named("scheduler"),
			Metrics:          s.Metrics,
			Workers:          workerEvents,
			Results:          s.Hub.Results(),
			Observer:         s.Events.Observe,
			DispatchObserver: o.dispatchObserver,
			OnReload:         s.Events.Reset,
			LeaderAnswers:    s.view.leaderAnswers,
			Storage:          s.space,
			StorageAdmission: cfg.StorageAdmissionRatio,
			OnLeading:        h.leading,
		}, st)
	}
}

// newHTTP is the replica's HTTP server: the API and, on its mux, the
// console, the worker stream, the event streams, the demo controls and the
// seed design's API.
func (s *Server) newHTTP(cfg config.Server, endpoints []string, addr addressing, info *clusterInfo, schedules *firer.Service, keys *auth.Keyring, h hooks) *http.Server {
	log := s.log
	routes := console.Routes()
	routes["GET "+workerstream.Path] = s.Hub.Handler()
	kit.SetLogger(log.Named("http"))
	// A stream opened with a token since revoked ends (auth.Keyring.Still).
	allowed := func(ctx context.Context) bool { return keys.Still(auth.From(ctx)) }
	keys.OnChange(func() { s.Hub.DropRevoked(keys.Still) })
	maps.Copy(routes, s.Events.Routes(events.HTTPConfig{Origins: kit.Origins{Hosts: addr.hosts}, Logger: log.Named("events"), Allowed: allowed}))
	controls := demo.New(demo.Config{
		Scheduler: demo.Replica{Ref: &s.ref, NewEngine: s.newEngine, Run: s.runEngine}, Enabled: cfg.Demo,
		Backend: &s.ref, Events: s.Events, AuthToken: cfg.AuthToken, Cluster: info, Node: cfg.Name,
		Timeout: cfg.WriteTimeout, Logger: log.Named("demo"), HTTPClient: s.sec.client(),
	})
	maps.Copy(routes, controls.Routes())
	seed := seedapi.New(seedapi.Config{
		Backend: &s.ref, Hub: s.Events, Demo: controls, Origins: kit.Origins{Hosts: addr.hosts},
		AuthToken: cfg.AuthToken, Cluster: info, Node: cfg.Name,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxTasks: cfg.MaxTasksPerDAG, WriteTimeout: cfg.WriteTimeout,
		SlowTasks: cfg.Demo, Logger: log.Named("seedapi"), HTTPClient: s.sec.client(), HTTP: events.HTTPConfig{Allowed: allowed},
	})
	maps.Copy(routes, seed.Routes())

	var logs executor.Executor = s.Local
	if s.Local == nil {
		logs = nil
	}
	handler := api.New(api.Config{
		Backend:       &s.ref,
		Logs:          logs,
		RemoteLogs:    h.remoteLogs,
		Metrics:       s.Metrics,
		Logger:        log.Named("api"),
		Node:          cfg.Name,
		EtcdEndpoints: endpoints,
		AuthToken:     cfg.AuthToken,
		Keys:          keys,
		HTTPClient:    s.sec.client(),
		MetricsNoAuth: cfg.MetricsNoAuth,
		RateLimit:     cfg.RateLimit,
		MaxBodyBytes:  cfg.MaxBodyBytes,
		MaxTasks:      cfg.MaxTasksPerDAG,
		MaxItems:      cfg.MaxItems,
		WriteTimeout:  cfg.WriteTimeout,
		Cluster:       info,
		LeaderView:    s.view,
		Hosts:         addr.hosts,
		APIURL:        addr.apiURL,
		PID:           os.Getpid(),
		Routes:        routes,
		Schedules:     schedules,
		Storage:       h.storage,
	})
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    cfg.HTTPMaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		ConnContext:       hijack.ConnContext, // the event stream sizes its socket's buffer
	}
}

// startLoops starts every loop of the replica, the last step of Start:
// until now nothing ran. They end with s.ectx (Shutdown), the API last.
func (s *Server) startLoops(ln net.Listener) {
	go s.view.run(s.ectx)
	go s.space.Run(s.ectx)
	go watchEtcdSpace(s.ectx, s.Etcd, s.Metrics, s.log, s.Member == nil)
	go s.runEngine(s.ref.Get())
	s.own.Start(s.ectx)
	go func() {
		// It ends early only if the leader refuses this replica's own
		// slots (config validation keeps their id and count in bounds).
		<-s.own.Done()
		if err := s.own.Err(); err != nil {
			s.log.Error("this replica's own slots were refused by the leader; they run nothing", zap.Error(err))
		}
	}()
	go s.Events.Run(s.ectx)
	if s.labeler != nil {
		go s.labeler.Run(s.ectx)
	}
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", zap.Error(err))
		}
	}()
}

// hooks are the callbacks by which the parts of a replica answer one
// another, all made here so that who reacts to what reads in one place.
// Each reads the part it calls when it is called: every part exists by
// then, since nothing runs before startLoops.
type hooks struct {
	// The engine, when this replica starts or stops leading: the parts
	// that act only on the leader follow it.
	leading func(leading bool, term engine.Leading)
	// This replica's own slots: how they reach the leader, and that the
	// stream to it ended (the engine then asks whether it is dead).
	dialLeader func(ctx context.Context) (workerstream.Conn, string, error)
	leaderLost func(leader string)
	// The worker hub: where to send a worker that dialled a standby.
	redirect func() (name, apiURL string)
	// The cluster view: the registered replicas, which the hub hands to
	// workers so that they find the next leader.
	replicas func([]apitypes.ReplicaAddr)
	// The cluster endpoint: the workers connected here.
	workers func() []apitypes.Worker
	// The event stream's metrics messages.
	eventSnapshot func(*events.Metrics)
	// The firer, the schedule routes and the API: whichever engine runs
	// now (a demo crash replaces it), and etcd's space as it last saw it.
	engine  func() firer.Engine
	storage func() *apitypes.Storage
	// The API: the worker connected here that can serve an attempt's log.
	remoteLogs func(worker string) executor.Executor
}

func (s *Server) hooks() hooks {
	return hooks{
		leading: func(leading bool, term engine.Leading) {
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
		dialLeader: func(ctx context.Context) (workerstream.Conn, string, error) {
			return dialLeader(ctx, s.view, s.Config.Name, s.Hub, s.Config.AuthToken, s.sec.wsDialer())
		},
		leaderLost: func(leader string) { s.ref.Get().SuspectLeader(leader) },
		redirect: func() (string, string) {
			addr, _ := s.view.LeaderAddr()
			return addr.Name, addr.APIURL
		},
		replicas:      func(addrs []apitypes.ReplicaAddr) { hubPeers(s.Hub)(addrs) },
		workers:       func() []apitypes.Worker { return hubWorkers(s.Hub) },
		eventSnapshot: newEventSnapshot(s),
		engine:        func() firer.Engine { return s.ref.Get() },
		storage:       func() *apitypes.Storage { return s.ref.Get().Status().Storage },
		remoteLogs:    func(worker string) executor.Executor { return remoteLogs(s.Hub, worker) },
	}
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
	s.handOver(ctx)
	s.stopHTTP(ctx)
	s.stopLoops(ctx)
	s.closeResources()
	return nil
}

// handOver has a leader with other replicas registered resign to one of
// them (a standby returns at once).
func (s *Server) handOver(ctx context.Context) {
	if v, known := s.view.snapshot(); known && len(v.Replicas) > 1 {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := s.ref.Get().Retire(rctx); err != nil {
			s.log.Warn("could not hand leadership over before shutting down", zap.Error(err))
		}
		cancel()
	}
}

// stopHTTP stops the API, letting requests and event streams drain for up
// to 5 s.
func (s *Server) stopHTTP(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = s.http.Shutdown(hctx)
	cancel()
}

// stopLoops stops the schedule firer, then every loop startLoops started,
// and waits for the engine to finish its commit in flight and resign.
func (s *Server) stopLoops(ctx context.Context) {
	s.firer.Stop()
	s.cancel()
	select {
	case <-s.ref.Get().Done():
	case <-ctx.Done():
	}
}

// closeResources closes what Start built, in the reverse order (the keeper
// of etcd's raft leader first: it acts only while this replica leads). Start
// calls it too when a step fails, on what it built so far.
func (s *Server) closeResources() {
	if s.apart != nil {
		s.apart.Close()
	}
	if s.Hub != nil {
		_ = s.Hub.Close()
	}
	if s.own != nil {
		_ = s.own.Close()
	}
	if s.Etcd != nil {
		_ = s.Etcd.Close() // the route, then the client
	}
	if s.Member != nil {
		_ = s.Member.Close()
	}
}
