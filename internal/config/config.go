// Package config reads the settings of `orion server`, `orion worker` and
// `orion etcd`, one way for all three (Settings): with viper, in increasing
// precedence, built-in defaults, the config file (--config), ORION_*
// environment variables, then command-line flags. Every setting has all
// four forms: for the server, key data_dir, env ORION_DATA_DIR, flag
// --data-dir; the worker's and the etcd member's environment variables
// carry their own prefixes (ORION_WORKER_, ORION_ETCD_), except the
// worker's ORION_SERVER and ORION_AUTH_TOKEN, which it shares with the
// client commands.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/orion-sched/orion/internal/model"
)

// Server is the resolved configuration of one `orion server`.
// DefaultSlots is how many attempts a worker (or a replica's own executor)
// runs at once unless told otherwise: Airflow's default worker concurrency.
// Most tasks of a DAG wait on something else (a database, an API, a
// cluster), so a slot per core would leave a worker idle; and slots bound
// the attempts in flight, so with few of them short tasks wait on commits
// (3 etcd members on one host, 2 workers: 2.3-2.6k noop tasks/s with 4 slots
// each, 5.7-6.1k with 16).
const DefaultSlots = 16

type Server struct {
	Name                 string        `mapstructure:"name" json:"name"`
	Listen               string        `mapstructure:"listen" json:"listen"`
	AdvertiseURL         string        `mapstructure:"advertise_url" json:"advertise_url"`
	NodeName             string        `mapstructure:"node_name" json:"node_name"`
	KubeLeaderLabel      string        `mapstructure:"kube_leader_label" json:"kube_leader_label"`
	MetricsNoAuth        bool          `mapstructure:"metrics_no_auth" json:"metrics_no_auth"`
	AllowedHosts         []string      `mapstructure:"allowed_hosts" json:"allowed_hosts"`
	HTTPReadTimeout      time.Duration `mapstructure:"http_read_timeout" json:"http_read_timeout"`
	HTTPWriteTimeout     time.Duration `mapstructure:"http_write_timeout" json:"http_write_timeout"`
	HTTPIdleTimeout      time.Duration `mapstructure:"http_idle_timeout" json:"http_idle_timeout"`
	HTTPMaxHeaderBytes   int           `mapstructure:"http_max_header_bytes" json:"http_max_header_bytes"`
	MaxConnsPerClient    int           `mapstructure:"max_conns_per_client" json:"max_conns_per_client"`
	MaxEventStreams      int           `mapstructure:"max_event_subscribers" json:"max_event_subscribers"`
	MaxStreamsPerClient  int           `mapstructure:"max_event_subscribers_per_client" json:"max_event_subscribers_per_client"`
	EtcdMaxRequestBytes  int           `mapstructure:"etcd_max_request_bytes" json:"etcd_max_request_bytes"`
	Demo                 bool          `mapstructure:"demo" json:"demo"`
	StreamStaleAfter     time.Duration `mapstructure:"stream_stale_after" json:"stream_stale_after"`
	WorkerReconnectGrace time.Duration `mapstructure:"worker_reconnect_grace" json:"worker_reconnect_grace"`
	WorkerMaxSlots       int           `mapstructure:"worker_max_slots" json:"worker_max_slots"`
	MaxWorkers           int           `mapstructure:"max_workers" json:"max_workers"`
	WorkerStreamMaxRate  float64       `mapstructure:"worker_stream_max_rate" json:"worker_stream_max_rate"`
	DataDir              string        `mapstructure:"data_dir" json:"data_dir"`
	EtcdEndpoints        []string      `mapstructure:"etcd_endpoints" json:"etcd_endpoints"`
	EtcdUsername         string        `mapstructure:"etcd_username" json:"etcd_username,omitempty"`
	EtcdPassword         string        `mapstructure:"etcd_password" json:"-"`
	EtcdCA               string        `mapstructure:"etcd_ca" json:"etcd_ca,omitempty"`
	EtcdCert             string        `mapstructure:"etcd_cert" json:"etcd_cert,omitempty"`
	EtcdKey              string        `mapstructure:"etcd_key" json:"etcd_key,omitempty"`
	EmbeddedClientURL    string        `mapstructure:"embedded_etcd_client_url" json:"embedded_etcd_client_url"`
	EmbeddedPeerURL      string        `mapstructure:"embedded_etcd_peer_url" json:"embedded_etcd_peer_url"`
	EmbeddedCompaction   string        `mapstructure:"embedded_etcd_auto_compaction_retention" json:"embedded_etcd_auto_compaction_retention"`
	AuthToken            string        `mapstructure:"auth_token" json:"-"`
	AuthTokensFile       string        `mapstructure:"auth_tokens_file" json:"auth_tokens_file,omitempty"`
	TLSCertFile          string        `mapstructure:"tls_cert_file" json:"tls_cert_file,omitempty"`
	TLSKeyFile           string        `mapstructure:"tls_key_file" json:"tls_key_file,omitempty"`
	TLSClientCAFile      string        `mapstructure:"tls_client_ca_file" json:"tls_client_ca_file,omitempty"`
	TLSCAFile            string        `mapstructure:"tls_ca_file" json:"tls_ca_file,omitempty"`
	InsecureNoAuth       bool          `mapstructure:"insecure_no_auth" json:"insecure_no_auth"`
	RateLimit            float64       `mapstructure:"rate_limit" json:"rate_limit"`
	Slots                int           `mapstructure:"slots" json:"slots"`
	LabelsSetting        any           `mapstructure:"labels" json:"-"`
	PoolLimitsSetting    any           `mapstructure:"pool_limits" json:"-"`
	// Labels are the labels of the replica's own slots, PoolLimits the
	// running tasks allowed per pool: parsed from the two settings above.
	Labels               model.Labels   `mapstructure:"-" json:"labels,omitempty"`
	PoolLimits           map[string]int `mapstructure:"-" json:"pool_limits,omitempty"`
	MaxTasksPerDAG       int            `mapstructure:"max_tasks_per_dag" json:"max_tasks_per_dag"`
	MaxBodyBytes         int64          `mapstructure:"max_body_bytes" json:"max_body_bytes"`
	MaxOutputBytes       int            `mapstructure:"max_output_bytes" json:"max_output_bytes"`
	MaxItems             int            `mapstructure:"max_items" json:"max_items"`
	RetryBase            time.Duration  `mapstructure:"retry_base" json:"retry_base"`
	RetryCap             time.Duration  `mapstructure:"retry_cap" json:"retry_cap"`
	OrphanGrace          time.Duration  `mapstructure:"orphan_grace" json:"orphan_grace"`
	SessionTTL           time.Duration  `mapstructure:"session_ttl" json:"session_ttl"`
	Retention            time.Duration  `mapstructure:"retention" json:"retention"`
	MaxTxnOps            int            `mapstructure:"max_txn_ops" json:"max_txn_ops"`
	CommitPipeline       int            `mapstructure:"commit_pipeline" json:"commit_pipeline"`
	LogLevel             string         `mapstructure:"log_level" json:"log_level"`
	LogFormat            string         `mapstructure:"log_format" json:"log_format"`
	WriteTimeout         time.Duration  `mapstructure:"write_timeout" json:"write_timeout"`
	ShutdownGrace        time.Duration  `mapstructure:"shutdown_grace" json:"shutdown_grace"`
	TaskLogDir           string         `mapstructure:"task_log_dir" json:"task_log_dir,omitempty"`
	SecretsDir           string         `mapstructure:"secrets_dir" json:"secrets_dir,omitempty"`
	EmbeddedEtcdLogLevel string         `mapstructure:"embedded_etcd_log_level" json:"embedded_etcd_log_level"`
	EmbeddedQuotaBytes   int64          `mapstructure:"embedded_etcd_quota_bytes" json:"embedded_etcd_quota_bytes"`
	EmbeddedHeartbeatMs  int            `mapstructure:"embedded_etcd_heartbeat_ms" json:"embedded_etcd_heartbeat_ms"`
	EmbeddedElectionMs   int            `mapstructure:"embedded_etcd_election_ms" json:"embedded_etcd_election_ms"`
	// Global limits (what the whole admits; README, "Limits").
	MaxLiveDAGs           int           `mapstructure:"max_live_dags" json:"max_live_dags"`
	MaxLiveTasks          int           `mapstructure:"max_live_tasks" json:"max_live_tasks"`
	MaxSchedules          int           `mapstructure:"max_schedules" json:"max_schedules"`
	MinScheduleInterval   time.Duration `mapstructure:"min_schedule_interval" json:"min_schedule_interval"`
	StorageAdmissionRatio float64       `mapstructure:"storage_admission_ratio" json:"storage_admission_ratio"`
}

// Flag describes one setting: its flag name, default and help. The
// config-file key is the name with underscores (Key); the environment
// variable is a prefix and the key upper-cased (EnvVar).
type Flag struct {
	Name    string
	Default any
	Usage   string
}

// ServerEnvPrefix prefixes the environment form of every server setting:
// --data-dir is ORION_DATA_DIR.
const ServerEnvPrefix = "ORION_"

var serverFlags = []Flag{
	{"name", "", "replica name: the election value and worker id prefix (default: host name)"},
	{"listen", "127.0.0.1:8080", "HTTP address for the API, console and /metrics; non-loopback needs --auth-token or --insecure-no-auth"},
	{"allowed-hosts", []string{}, "host names requests may carry in Host besides IP literals and localhost (the names of a load balancer or Service); \".example.com\" allows its subdomains, \"*\" any name (then only a token protects the server from DNS rebinding)"},
	{"http-read-timeout", 30 * time.Second, "longest time to read a whole request (headers have 10s)"},
	{"http-write-timeout", 60 * time.Second, "longest time to answer a request; streams (events, worker stream, logs) set their own deadlines; must exceed write-timeout"},
	{"http-idle-timeout", 120 * time.Second, "how long an idle keep-alive connection is kept"},
	{"http-max-header-bytes", 64 << 10, "largest request header block"},
	{"max-conns-per-client", 128, "open connections one non-loopback client address (an IPv4 address or an IPv6 /64) may hold; more are closed at once"},
	{"max-event-subscribers", 512, "event streams (SSE, WebSocket, the seed's /ws) this replica serves at once; more are refused with 503 and Retry-After"},
	{"max-event-subscribers-per-client", 128, "event streams one client address (an IPv4 address or an IPv6 /64, loopback included) may hold; more are refused with 429 and Retry-After"},
	{"etcd-max-request-bytes", 3 << 19, "etcd's --max-request-bytes (1.5 MiB by default): every record is checked against it before it is committed, and the embedded member uses it"},
	{"advertise-url", "", "URL other replicas and workers use to reach this API (default http://<listen address>)"},
	{"node-name", "", "the node (machine) this replica runs on, named as the 'orion etcd' members' --node-name names theirs: while it leads, etcd's raft leader is moved off this node (default: the host name; on Kubernetes, spec.nodeName)"},
	{"stream-stale-after", 300 * time.Millisecond, "a worker or leader stream silent this long is treated as dead (the leader sends heartbeats every 100ms)"},
	{"worker-reconnect-grace", 2 * time.Second, "how long a disconnected worker keeps its running attempts before they are re-queued"},
	{"worker-max-slots", 1024, "most slots a worker (or a replica's own executor) may announce; a worker with more is refused and stops"},
	{"max-workers", 1000, "most workers the leader holds (replicas' own slots included, connected or within their reconnect grace); one more is refused until one leaves"},
	{"worker-stream-max-rate", 1000.0, "messages per second a worker stream may send besides the results of its attempts (heartbeats, every 100ms, are 10), with a burst of as many; a stream over it is closed"},
	{"data-dir", "./data", "directory for the embedded etcd member and task logs"},
	{"etcd-endpoints", []string{}, "comma-separated etcd client URLs; empty: embed a single etcd member in --data-dir"},
	{"etcd-username", "", "etcd user (auth enabled clusters)"},
	{"etcd-password", "", "etcd password"},
	{"etcd-ca", "", "CA bundle to verify etcd's TLS certificate"},
	{"etcd-cert", "", "client certificate for etcd TLS"},
	{"etcd-key", "", "client key for etcd TLS"},
	{"embedded-etcd-client-url", "http://127.0.0.1:2379", "client URL of the embedded etcd member"},
	{"embedded-etcd-peer-url", "http://127.0.0.1:2380", "peer URL of the embedded etcd member"},
	{"embedded-etcd-auto-compaction-retention", "100000", "revisions of history the embedded member keeps (revision-mode auto-compaction)"},
	{"embedded-etcd-log-level", "warn", "log level of the embedded etcd member"},
	{"embedded-etcd-quota-bytes", int64(4 << 30), "backend quota of the embedded etcd member"},
	{"embedded-etcd-heartbeat-ms", 50, "raft heartbeat of the embedded member (small so a 1 s session TTL is granted)"},
	{"embedded-etcd-election-ms", 250, "raft election timeout of the embedded member"},
	{"kube-leader-label", "", "in a Kubernetes pod: keep this label on the pod, \"leader\" while it leads and \"standby\" otherwise (for a Service that selects the leader); needs POD_NAME, POD_NAMESPACE and a service account allowed to patch the pod"},
	{"demo", false, "demo mode: the console's \"pull the plug\" and auto-demo crash and recover the scheduler (never beyond loopback without --auth-token)"},
	{"metrics-no-auth", false, "serve /metrics without the bearer token (for Prometheus scrapes; the rest of the API still needs it)"},
	{"auth-token", "", "the cluster token: required on the API, sent by replicas to one another, allowed to do anything (env ORION_AUTH_TOKEN)"},
	{"auth-tokens-file", "", "YAML file of further tokens, each with a role (viewer, operator, admin, worker) and stored as its SHA-256 (orion token new); read again when it changes. Needs auth_token"},
	{"tls-cert-file", "", "serve the API, console, events, metrics and worker stream over TLS with this certificate (PEM; re-read when it changes), with --tls-key-file"},
	{"tls-key-file", "", "the TLS certificate's key (PEM)"},
	{"tls-client-ca-file", "", "require every client (CLI, workers, other replicas) to present a certificate signed by one of these CAs (PEM): mutual TLS. Replicas present their own --tls-cert-file"},
	{"tls-ca-file", "", "CA bundle (PEM) this replica verifies other replicas' https:// APIs with; default the system's"},
	{"insecure-no-auth", false, "allow a non-loopback --listen without a token (logged as a warning: shell tasks mean remote execution)"},
	{"rate-limit", 5.0, "requests per second per non-loopback client IP"},
	{"slots", DefaultSlots, "local executor slots; 0 runs no tasks on this replica"},
	{"labels", "", "labels of this replica's own slots, as pool=gpu,zone=a: tasks that require labels run only on workers that have them"},
	{"pool-limits", "", "most running tasks per pool, as gpu=2,db=4 (a mapping in the config file); a pool absent or 0 has no limit"},
	{"max-tasks-per-dag", 100000, "largest DAG accepted (at most max_live_tasks)"},
	{"max-body-bytes", int64(32 << 20), "largest request body accepted (and twice it the decoded text of a DAG)"},
	{"max-output-bytes", model.DefaultMaxOutputBytes, "most a task's outputs may take, as JSON (names and values); over it the attempt fails. A task record holds them: etcd-max-request-bytes must leave room (checked at start)"},
	{"max-items", model.DefaultMaxItems, "most instances a map group (for_each) expands to; more fail the group with a message naming the bound"},
	{"retry-base", time.Second, "retry backoff base: retry n waits min(base*2^n, cap)"},
	{"retry-cap", 30 * time.Second, "retry backoff cap"},
	{"orphan-grace", 5 * time.Second, "how long a new leader waits for a worker to report a running attempt before re-queuing it (at least a worker's reconnect bound, 4.5s, or a live worker's task may run twice)"},
	{"session-ttl", time.Second, "leadership lease TTL"},
	{"retention", 24 * time.Hour, "finished DAGs are deleted from etcd after this long; 0 keeps them"},
	{"max-txn-ops", 0, "operations per etcd transaction, at most the members' --max-txn-ops; 0: 128 with the embedded member, 512 with --etcd-endpoints (halved while etcd refuses them)"},
	{"commit-pipeline", 0, "etcd transactions in flight at once; 0: 2 with the embedded member, 1 with --etcd-endpoints"},
	{"log-level", "info", "debug, info, warn or error"},
	{"log-format", "console", "console or json"},
	{"write-timeout", 30 * time.Second, "how long an API write waits for its commit"},
	{"shutdown-grace", 10 * time.Second, "how long SIGTERM waits for running tasks before killing them"},
	{"task-log-dir", "", "where full task logs are kept (default <data-dir>/logs)"},
	{"secrets-dir", "", "directory of the secrets this replica's own slots give shell tasks' env_from: <dir>/<secret>/<key>, one file per key"},
	{"max-live-dags", 10000, "most DAGs running at once (submitted or retried, not finished); more are refused with 429 too_many_live_dags"},
	{"max-live-tasks", 1000000, "most tasks in the DAGs running at once (finished or not, until their DAG finishes); more are refused with 429 too_many_live_tasks"},
	{"max-schedules", 1000, "most schedules; more are refused with 429 too_many_schedules"},
	{"min-schedule-interval", time.Second, "shortest time between two ticks of a schedule; a schedule that ticks more often is refused with 400 schedule_too_frequent"},
	{"storage-admission-ratio", 0.5, "share of etcd's quota the database in use may reach, counting what running DAGs have yet to write, before new DAGs and retries are refused with 507 storage_full (the rest is kept for admitted work to finish, be cancelled and deleted, and for leases)"},
}

// serverSettings are `orion server`'s settings: env ORION_ + KEY, the
// config file from --config, ORION_CONFIG or config/orion.yaml.
var serverSettings = Settings{Flags: serverFlags, EnvPrefix: ServerEnvPrefix, ConfigEnv: "ORION_CONFIG"}

// BindServerFlags defines the server's flags on fs and binds them, the
// environment and the defaults into v.
func BindServerFlags(fs *pflag.FlagSet, v *viper.Viper) {
	serverSettings.Bind(fs, v)
	fs.String("config", "", "config file (default: config/orion.yaml when present, else none); env ORION_CONFIG")
}

// BindFlags defines flags on fs and binds each, its environment variable
// (envPrefix + the key upper-cased) and its default into v under Key(name),
// so that v resolves flag > env > config file > default.
func BindFlags(fs *pflag.FlagSet, v *viper.Viper, flags []Flag, envPrefix string) {
	Settings{Flags: flags, EnvPrefix: envPrefix}.Bind(fs, v)
}

func bindFlag(fs *pflag.FlagSet, v *viper.Viper, f Flag, env string) {
	switch d := f.Default.(type) {
	case string:
		fs.String(f.Name, d, f.Usage)
	case []string:
		fs.StringSlice(f.Name, d, f.Usage)
	case bool:
		fs.Bool(f.Name, d, f.Usage)
	case int:
		fs.Int(f.Name, d, f.Usage)
	case int64:
		fs.Int64(f.Name, d, f.Usage)
	case float64:
		fs.Float64(f.Name, d, f.Usage)
	case time.Duration:
		fs.Duration(f.Name, d, f.Usage)
	default:
		panic(fmt.Sprintf("config: flag %s has unsupported default %T", f.Name, d))
	}
	key := Key(f.Name)
	v.SetDefault(key, f.Default)
	_ = v.BindPFlag(key, fs.Lookup(f.Name))
	_ = v.BindEnv(key, env)
}

// EnvVar is the environment form of a flag: EnvVar("ORION_", "data-dir")
// is ORION_DATA_DIR.
func EnvVar(prefix, flagName string) string { return prefix + strings.ToUpper(Key(flagName)) }

// Key turns a flag name into its config-file key.
func Key(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// LoadServer resolves the configuration. configFile may be empty: then
// ORION_CONFIG, then ./config/orion.yaml if it exists, else defaults only.
func LoadServer(v *viper.Viper, configFile string) (Server, string, error) {
	if configFile == "" {
		configFile = os.Getenv("ORION_CONFIG")
	}
	if configFile == "" {
		if _, err := os.Stat("config/orion.yaml"); err == nil {
			configFile = "config/orion.yaml"
		}
	}
	var s Server
	if _, err := serverSettings.Load(v, configFile, &s); err != nil {
		return s, configFile, err
	}
	s.EtcdEndpoints = splitList(s.EtcdEndpoints)
	s.AllowedHosts = splitList(s.AllowedHosts)
	if err := s.parseMaps(); err != nil {
		return s, configFile, err
	}
	if s.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "orion"
		}
		s.Name = h
	}
	return s, configFile, s.Validate()
}

// Defaults is the configuration of `orion server` with no file, no
// environment and no flags: the built-in defaults alone. Benchmarks and
// tests that start a replica in process begin from it.
func Defaults() Server {
	v := viper.New()
	for _, f := range serverSettings.Flags {
		v.SetDefault(Key(f.Name), f.Default)
	}
	var s Server
	if err := serverSettings.decode(v, &s); err != nil {
		panic("config: the built-in defaults do not decode: " + err.Error())
	}
	s.EtcdEndpoints = splitList(s.EtcdEndpoints)
	s.AllowedHosts = splitList(s.AllowedHosts)
	if s.Name == "" {
		s.Name = "orion"
	}
	return s
}

// splitList accepts both a YAML list and comma-separated strings (from env).
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// parseMaps decodes the labels and pool_limits settings.
func (s *Server) parseMaps() error {
	var errs []error
	var err error
	if s.Labels, err = parseLabels(s.LabelsSetting); err != nil {
		errs = append(errs, serverSettings.Invalid("labels", s.LabelsSetting, err.Error()))
	}
	if s.PoolLimits, err = parseLimits(s.PoolLimitsSetting); err != nil {
		errs = append(errs, serverSettings.Invalid("pool-limits", s.PoolLimitsSetting, err.Error()))
	}
	return errors.Join(errs...)
}

// MinTokenLen is the shortest auth_token a server listening beyond
// loopback accepts: 16 random characters are beyond guessing through a
// rate-limited API, a word or a PIN is not.
const MinTokenLen = 16

// Validate checks the settings that would make the server unsafe or unable
// to start, with messages that name the setting.
func (s Server) Validate() error {
	var errs []error
	host, _, err := net.SplitHostPort(s.Listen)
	if err != nil {
		errs = append(errs, fmt.Errorf("listen %q: want HOST:PORT (%v)", s.Listen, err))
	} else if !IsLoopbackHost(host) && s.AuthToken == "" && !s.InsecureNoAuth {
		errs = append(errs, fmt.Errorf("listen %q is not loopback: set --auth-token (or ORION_AUTH_TOKEN), or --insecure-no-auth to accept anyone who can reach it running shell commands", s.Listen))
	} else if !IsLoopbackHost(host) && s.AuthToken != "" && len(s.AuthToken) < MinTokenLen {
		errs = append(errs, fmt.Errorf("auth_token is %d characters: on a non-loopback listen (%q) it is all that stands between the network and shell commands; use at least %d (such as `head -c 32 /dev/urandom | base64`)",
			len(s.AuthToken), s.Listen, MinTokenLen))
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		errs = append(errs, errors.New("tls_cert_file and tls_key_file go together: give both, or neither for plain HTTP"))
	}
	if s.TLSClientCAFile != "" && s.TLSCertFile == "" {
		errs = append(errs, errors.New("tls_client_ca_file needs tls_cert_file and tls_key_file: mutual TLS is TLS first"))
	}
	if s.TLSCertFile != "" && s.AdvertiseURL != "" && !strings.HasPrefix(strings.ToLower(s.AdvertiseURL), "https://") {
		errs = append(errs, fmt.Errorf("advertise_url %q: with TLS on, other replicas and workers reach this API over https://", s.AdvertiseURL))
	}
	if s.AuthTokensFile != "" && s.AuthToken == "" {
		errs = append(errs, fmt.Errorf("auth_tokens_file %q needs auth_token, the cluster token the replicas send to one another (and an admin's)", s.AuthTokensFile))
	}
	if err == nil && s.Demo && !IsLoopbackHost(host) && s.AuthToken == "" {
		errs = append(errs, fmt.Errorf("demo mode on a non-loopback listen %q needs --auth-token (--insecure-no-auth is not enough: demo mode can crash the scheduler)", s.Listen))
	}
	if s.DataDir == "" {
		errs = append(errs, errors.New("data_dir must not be empty"))
	}
	if s.Slots < 0 {
		errs = append(errs, fmt.Errorf("slots %d: must be ≥ 0", s.Slots))
	}
	if s.WorkerMaxSlots < 1 || s.WorkerMaxSlots > maxWorkerMaxSlots {
		errs = append(errs, fmt.Errorf("worker_max_slots %d: must be 1 to %d", s.WorkerMaxSlots, maxWorkerMaxSlots))
	} else if s.Slots > s.WorkerMaxSlots {
		// The replica's own slots join the leader like any worker's.
		errs = append(errs, fmt.Errorf("slots %d: must be at most worker_max_slots (%d)", s.Slots, s.WorkerMaxSlots))
	}
	if s.MaxWorkers < 1 {
		errs = append(errs, fmt.Errorf("max_workers %d: must be ≥ 1", s.MaxWorkers))
	}
	if s.WorkerStreamMaxRate < 20 {
		errs = append(errs, fmt.Errorf("worker_stream_max_rate %v: must be ≥ 20 (a worker's heartbeats alone are 10 a second)", s.WorkerStreamMaxRate))
	}
	// The name is the election value and the prefix of the ids of the
	// replica's own slots, which the leader checks (model.ValidWorkerID).
	if !model.ValidWorkerName(s.Name) {
		errs = append(errs, fmt.Errorf("name %q: want %s", s.Name, model.WorkerNameRule))
	}
	if s.MaxTasksPerDAG < 1 {
		errs = append(errs, fmt.Errorf("max_tasks_per_dag %d: must be ≥ 1", s.MaxTasksPerDAG))
	}
	if s.RetryBase <= 0 || s.RetryCap < s.RetryBase {
		errs = append(errs, fmt.Errorf("retry_base %s / retry_cap %s: need 0 < base ≤ cap", s.RetryBase, s.RetryCap))
	}
	if s.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("session_ttl %s: etcd leases are whole seconds, at least 1s", s.SessionTTL))
	}
	if s.CommitPipeline < 0 || s.CommitPipeline > 4 {
		errs = append(errs, fmt.Errorf("commit_pipeline %d: must be 0 (automatic) to 4", s.CommitPipeline))
	}
	if s.MaxTxnOps != 0 && s.MaxTxnOps < 4 {
		errs = append(errs, fmt.Errorf("max_txn_ops %d: must be 0 (automatic) or ≥ 4", s.MaxTxnOps))
	}
	if s.HTTPReadTimeout <= 0 || s.HTTPIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("http_read_timeout %s / http_idle_timeout %s: must be > 0", s.HTTPReadTimeout, s.HTTPIdleTimeout))
	}
	if s.HTTPWriteTimeout <= s.WriteTimeout {
		errs = append(errs, fmt.Errorf("http_write_timeout %s: must exceed write_timeout %s, or a write's answer is cut off while it waits for its commit", s.HTTPWriteTimeout, s.WriteTimeout))
	}
	if s.HTTPMaxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("http_max_header_bytes %d: must be ≥ 4096", s.HTTPMaxHeaderBytes))
	}
	if s.MaxConnsPerClient < 1 {
		errs = append(errs, fmt.Errorf("max_conns_per_client %d: must be ≥ 1", s.MaxConnsPerClient))
	}
	if s.MaxItems < 1 || s.MaxItems > model.MaxMaxItems {
		errs = append(errs, fmt.Errorf("max_items %d: must be 1 to %d", s.MaxItems, model.MaxMaxItems))
	}
	if s.MaxOutputBytes < 1<<10 || s.MaxOutputBytes > model.MaxMaxOutputBytes {
		errs = append(errs, fmt.Errorf("max_output_bytes %d: must be 1024 to %d", s.MaxOutputBytes, model.MaxMaxOutputBytes))
	}
	if s.MaxEventStreams < 1 || s.MaxStreamsPerClient < 1 {
		errs = append(errs, fmt.Errorf("max_event_subscribers %d / max_event_subscribers_per_client %d: must be ≥ 1",
			s.MaxEventStreams, s.MaxStreamsPerClient))
	}
	if s.EtcdMaxRequestBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("etcd_max_request_bytes %d: must be ≥ 65536 (etcd's default is 1572864)", s.EtcdMaxRequestBytes))
	}
	if s.MaxLiveDAGs < 1 {
		errs = append(errs, fmt.Errorf("max_live_dags %d: must be ≥ 1", s.MaxLiveDAGs))
	}
	if s.MaxLiveTasks < s.MaxTasksPerDAG {
		errs = append(errs, fmt.Errorf("max_live_tasks %d: must be at least max_tasks_per_dag (%d), or no DAG of that size could run", s.MaxLiveTasks, s.MaxTasksPerDAG))
	}
	if s.MaxSchedules < 1 {
		errs = append(errs, fmt.Errorf("max_schedules %d: must be ≥ 1", s.MaxSchedules))
	}
	if s.MinScheduleInterval < time.Second {
		errs = append(errs, fmt.Errorf("min_schedule_interval %s: must be ≥ 1s (a schedule ticks at most once a second)", s.MinScheduleInterval))
	}
	if s.StorageAdmissionRatio <= 0 || s.StorageAdmissionRatio > 0.95 {
		errs = append(errs, fmt.Errorf("storage_admission_ratio %v: must be > 0 and ≤ 0.95 (the rest of etcd's quota is what admitted work finishes in)", s.StorageAdmissionRatio))
	}
	if s.RateLimit <= 0 {
		errs = append(errs, fmt.Errorf("rate_limit %v: must be > 0", s.RateLimit))
	}
	switch s.LogFormat {
	case "console", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q: console or json", s.LogFormat))
	}
	return errors.Join(errs...)
}

// maxWorkerMaxSlots bounds worker_max_slots (workerstream.MaxSlotsCeiling).
const maxWorkerMaxSlots = 1 << 20

// IsLoopbackHost reports whether a listen host only accepts local clients.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
