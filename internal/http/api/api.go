// Package api serves Orion's REST API v1 over HTTP: DAG submission, queries,
// cancel and retry, task logs, cluster status, probes and Prometheus metrics.
//
// The routes and JSON shapes are a contract scripts rely on. Every error is
// JSON: {"error": {"code": "...", "message": "...", "details": [...]}}.
package api

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/http/openapi"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// Backend is what the API needs of a replica; *engine.Engine implements it.
type Backend interface {
	Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error)
	Cancel(ctx context.Context, id string) (core.DAGStatus, error)
	// Retry retries the DAG's current run, or run when it is not 0 (see
	// scheduler.Engine.Retry).
	Retry(ctx context.Context, id string, run int) (core.DAGStatus, error)
	Delete(ctx context.Context, id string) error
	Reads
	Status() *engine.Status
	Leader(ctx context.Context) (string, error)
	// WaitApplied returns once the replica has applied the log through rev
	// (Engine.WaitApplied).
	WaitApplied(ctx context.Context, rev int64) error
}

// Reads are the reads the API makes of a replica's state (see
// internal/engine/reads.go): copies, with the revision they reflect.
type Reads interface {
	DAGs(ctx context.Context, q core.DAGQuery) ([]core.DAGSummary, int64, error)
	DAGHead(ctx context.Context, id string, limit int) (engine.HeadRead, error)
	Tasks(ctx context.Context, id string, q engine.TasksQuery) (engine.TasksRead, error)
	Task(ctx context.Context, dagID, taskID string) (engine.TaskRead, error)
	Instances(ctx context.Context, dagID, taskID string, offset, limit int) (engine.InstancesRead, error)
	DAGState(ctx context.Context, id string) (core.DAGStatus, int, bool, error)
	Rev() int64
}

var _ Backend = (*engine.Engine)(nil)

// Defaults for zero Config fields.
const (
	DefaultRateLimit    = 5.0
	DefaultMaxBodyBytes = kit.DefaultMaxBodyBytes
	DefaultWriteTimeout = 30 * time.Second
)

// Config configures the handler. Only Backend is required.
type Config struct {
	Backend Backend
	// Logs is the local executor; the log endpoint reads attempt logs from it.
	// Nil: no log is on this node.
	Logs executor.Executor
	// RemoteLogs returns the executor of a worker connected to this replica
	// (the leader's hub), to read logs kept on that worker; nil if unknown.
	RemoteLogs func(worker string) executor.Executor
	// Metrics: /metrics serves Metrics.Registry, and the handler counts
	// requests in Metrics.HTTPRequests. Nil: a private registry.
	Metrics *metrics.Metrics
	Logger  *zap.Logger
	// Node is this replica's name (default: Backend.Status().Node).
	Node          string
	EtcdEndpoints []string
	// AuthToken is the cluster token: replicas send it with the requests
	// they forward and relay to one another.
	AuthToken string
	// Keys, when they hold a token (the cluster token, or a tokens file's:
	// internal/http/auth), are required as "Authorization: Bearer <token>"
	// on every request except /healthz and /readyz (and /metrics when
	// MetricsNoAuth is set), and the token's role must allow the request.
	// Nil: a keyring of AuthToken alone.
	Keys          *auth.Keyring
	MetricsNoAuth bool
	// RateLimit is the sustained requests/s allowed per client IP (per /64 for
	// IPv6) for clients that are not on loopback; burst is max(1, 2×rate).
	// 0 means DefaultRateLimit; a negative value disables the limit. The
	// probes /healthz and /readyz are never limited.
	RateLimit float64
	// MaxBodyBytes bounds a submitted DAG (default 1 MiB).
	MaxBodyBytes int64
	// MaxTasks bounds the tasks of a DAG (default dag.DefaultMaxTasks).
	MaxTasks int
	// MaxItems bounds a for_each literal's items (default
	// model.DefaultMaxItems): the server's max_items.
	MaxItems int
	// WriteTimeout is how long a request waits for the scheduler: for a
	// write, until its change is committed (default 30s).
	WriteTimeout time.Duration
	// Cluster, when set, lets a standby forward writes to the leader and the
	// cluster endpoint describe every replica. Nil: a lone process.
	Cluster kit.ClusterInfo
	// LeaderView, when set, answers GET /api/v1/leader from the replica's
	// memory. Nil: the endpoint names this process when it leads (a lone
	// process is its own cluster).
	LeaderView LeaderView
	// APIURL is where this replica's API is reachable, PID its process id
	// (shown by the cluster endpoint; drills use them).
	APIURL string
	PID    int
	// HTTPClient makes forwarded and fan-out requests (default
	// http.DefaultClient).
	HTTPClient *http.Client
	// FailoverWait bounds how long a standby's forwarded write waits for a
	// leader once the one it was sent to is deposed or silent (default
	// kit.DefaultFailoverWait); see kit.Forwarder.
	FailoverWait time.Duration
	// Hosts is the Host allow-list every request must pass, before any
	// other check (DNS rebinding; see package guard). The zero value serves IP
	// literals and localhost only.
	Hosts guard.Hosts
	// Schedules serves /api/v1/schedules. Nil: no schedule routes.
	Schedules Schedules
	// Storage describes etcd's space for /readyz and the cluster view
	// (nil, or a nil answer: not shown).
	Storage func() *apitypes.Storage
	// Routes are extra handlers mounted behind the same rate limit and
	// authentication (the worker stream endpoint).
	Routes map[string]http.Handler
}

type server struct {
	cfg     Config
	b       Backend
	log     *zap.Logger
	m       *metrics.Metrics
	mux     *routeMux
	limiter *ipLimiter    // nil: no rate limit
	keys    *auth.Keyring // who may do what; its cluster token's forwarded writes skip the rate limit
	docs    docBudget     // bytes of DAG and schedule documents being read and decoded
}

// New returns the API handler. It panics if cfg.Backend is nil.
func New(cfg Config) http.Handler {
	if cfg.Backend == nil {
		panic("api: Config.Backend is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxTasks <= 0 {
		cfg.MaxTasks = dag.DefaultMaxTasks
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	s := &server{cfg: cfg, b: cfg.Backend, log: cfg.Logger, m: cfg.Metrics, mux: &routeMux{ServeMux: http.NewServeMux()}}
	if cfg.RateLimit > 0 {
		s.limiter = newIPLimiter(cfg.RateLimit)
	}
	s.keys = cfg.Keys
	if s.keys == nil {
		s.keys = auth.NewKeyring(cfg.AuthToken)
	}

	s.mux.HandleFunc("POST /api/v1/dags", s.submit)
	s.mux.HandleFunc("GET /api/v1/dags", s.listDAGs)
	s.mux.HandleFunc("GET /api/v1/dags/{id}", s.getDAG)
	s.mux.HandleFunc("GET /api/v1/dags/{id}/tasks", s.listTasks)
	s.mux.HandleFunc("GET /api/v1/dags/{id}/tasks/{task}", s.getTask)
	s.mux.HandleFunc("GET /api/v1/dags/{id}/tasks/{task}/log", s.taskLog)
	s.mux.HandleFunc("GET /api/v1/dags/{id}/tasks/{task}/instances", s.listInstances)
	s.mux.HandleFunc("POST /api/v1/dags/{id}/cancel", s.cancel)
	s.mux.HandleFunc("POST /api/v1/dags/{id}/retry", s.retry)
	s.mux.HandleFunc("DELETE /api/v1/dags/{id}", s.deleteDAG)
	s.mux.HandleFunc("GET /api/v1/cluster", s.cluster)
	s.mux.HandleFunc("GET /api/v1/cluster/self", s.clusterSelf)
	s.mux.HandleFunc("GET /api/v1/leader", s.leader)
	s.mux.Handle("GET "+openapi.Path, openapi.Handler())
	s.scheduleRoutes()
	for pattern, h := range cfg.Routes {
		s.mux.Handle(pattern, h)
	}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics.Registry, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(cfg.Logger),
	}))
	return s
}

// routeMux is the API's mux, remembering every pattern registered on it:
// the OpenAPI contract test compares them with the routes the document
// describes, so a route served without its description fails it.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Patterns returns the ServeMux patterns h serves, when h is a handler New
// returned (nil otherwise): the API's own routes and Config.Routes.
func Patterns(h http.Handler) []string {
	if s, ok := h.(*server); ok {
		return slices.Clone(s.mux.patterns)
	}
	return nil
}

// dagLimits bounds a submitted DAG: its task count, and the text it decodes
// to at twice the body limit (YAML aliases multiply bytes; see
// dag.DecodedBytes).
func (s *server) dagLimits() dag.Limits {
	return dag.Limits{MaxTasks: s.cfg.MaxTasks, MaxDecodedBytes: 2 * s.cfg.MaxBodyBytes, MaxItems: s.cfg.MaxItems}
}

// node is this replica's name.
func (s *server) node() string {
	if s.cfg.Node != "" {
		return s.cfg.Node
	}
	return s.status().Node
}

// storage is etcd's space as this replica measures it, or nil.
func (s *server) storage() *apitypes.Storage {
	if s.cfg.Storage == nil {
		return nil
	}
	return s.cfg.Storage()
}

// status never returns nil.
func (s *server) status() *engine.Status {
	if st := s.b.Status(); st != nil {
		return st
	}
	return &engine.Status{}
}
