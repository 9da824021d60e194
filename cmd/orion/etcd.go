package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/etcdserver"
)

// etcdEnvPrefix prefixes the environment form of every `orion etcd` flag:
// --initial-cluster is ORION_ETCD_INITIAL_CLUSTER.
const etcdEnvPrefix = "ORION_ETCD_"

// etcdFlags are the `orion etcd` settings; the env var of each is
// etcdEnvPrefix + the flag name upper-cased with underscores.
var etcdFlags = []config.Flag{
	{Name: "name", Default: "", Usage: "member name, unique in the cluster; required with --initial-cluster (a single member defaults to the host name)"},
	{Name: "data-dir", Default: "", Usage: "member data directory: WAL, snapshots, db (required; created if missing)"},
	{Name: "listen-client-url", Default: etcdserver.DefaultClientURL, Usage: "client URL to listen on (an IP, or 0.0.0.0 with --advertise-client-url), also advertised unless --advertise-client-url is set; a non-loopback host needs --allow-remote-clients"},
	{Name: "listen-peer-url", Default: etcdserver.DefaultPeerURL, Usage: "peer (raft) URL to listen on (an IP, or 0.0.0.0 with --advertise-peer-url), also advertised unless --advertise-peer-url is set"},
	{Name: "advertise-client-url", Default: "", Usage: "client URL published to clients and the cluster (default: --listen-client-url); required when that host is 0.0.0.0"},
	{Name: "advertise-peer-url", Default: "", Usage: "peer URL published to the other members, as listed in --initial-cluster (default: --listen-peer-url); required when that host is 0.0.0.0"},
	{Name: "initial-cluster", Default: "", Usage: "every member of a new cluster, \"e1=http://127.0.0.1:2380,e2=...\"; empty: a single member; ignored once --data-dir holds a member"},
	{Name: "initial-cluster-state", Default: "new", Usage: "new (bootstrap) or existing (join a member added with 'etcdctl member add')"},
	{Name: "initial-cluster-token", Default: etcdserver.DefaultClusterToken, Usage: "token that keeps clusters bootstrapped from the same --initial-cluster apart"},
	// 50 ms / 250 ms, not etcd's 100 ms / 1000 ms: etcd grants no lease
	// shorter than 1.5 election timeouts rounded up to whole seconds, and
	// orion's leadership session is a 1 s lease. With etcd's defaults that
	// lease would silently become 2 s and every failover a second slower.
	// See etcdserver.MinLeaseTTL.
	{Name: "heartbeat-ms", Default: etcdserver.DefaultHeartbeatMs, Usage: "raft heartbeat interval in ms"},
	{Name: "election-ms", Default: etcdserver.DefaultElectionMs, Usage: "raft election timeout in ms, at least 5x --heartbeat-ms; at most 650 with a 50 ms heartbeat keeps 1 s leases (orion's session TTL) possible"},
	{Name: "auto-compaction-mode", Default: etcdserver.DefaultAutoCompactionMode, Usage: "revision or periodic"},
	{Name: "auto-compaction-retention", Default: etcdserver.DefaultAutoCompactionRetention, Usage: "revisions to keep (revision mode), or a duration such as 1h (periodic mode; default 1h there)"},
	{Name: "quota-backend-bytes", Default: etcdserver.DefaultQuotaBackendBytes, Usage: "backend size at which etcd raises a NOSPACE alarm and refuses writes"},
	{Name: "max-txn-ops", Default: int(etcdserver.DefaultMaxTxnOps), Usage: "most operations in one transaction (orion batches up to 128)"},
	{Name: "max-request-bytes", Default: int64(etcdserver.DefaultMaxRequestBytes), Usage: "largest client request in bytes"},
	{Name: "log-level", Default: etcdserver.DefaultLogLevel, Usage: "level of etcd's own logs: debug, info, warn, error (orion's start and stop lines are always shown)"},
	{Name: "allow-remote-clients", Default: false, Usage: "allow a non-loopback --listen-client-url; etcd then serves ANYONE who can reach it, with no auth and no TLS"},
	{Name: "ready-timeout", Default: 5 * time.Minute, Usage: "how long to wait for the member to join a quorum before giving up"},
}

func newEtcdCommand() *cobra.Command {
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run one etcd member (of a cluster the scheduler replicas share)",
		Long: `etcd runs one member of an etcd cluster, embedded in the orion binary, until
SIGINT or SIGTERM, then closes it gracefully (a leader first hands over).

Run one per host (or three on one host for testing) with the same
--initial-cluster, then point every 'orion server' at all client URLs with
--etcd-endpoints. The members must be started within --ready-timeout of each
other: a member is ready once a quorum has formed.

--initial-cluster and --initial-cluster-state are only read when --data-dir
holds no member yet; a restarted member takes its membership from its data.
To replace a member, remove it ('etcdctl member remove'), add the new one
('etcdctl member add'), and start it with --initial-cluster-state existing and
the --initial-cluster that 'member add' prints.

The raft timings default to a 50 ms heartbeat and a 250 ms election timeout
so that etcd grants orion's 1 s leadership lease as 1 s (etcd never grants a
lease shorter than 1.5 election timeouts, rounded up to whole seconds).

Every flag can also be set in the environment: ORION_ETCD_ and the flag name
in upper case with underscores (--data-dir is ORION_ETCD_DATA_DIR). Flags win.

There is no authentication and no TLS: keep the client URL on loopback (the
default), and peer URLs on a trusted network.`,
		Example: `  # A single member for one 'orion server --etcd-endpoints http://127.0.0.1:2379'
  orion etcd --data-dir ./etcd-data

  # A 3-member cluster on one host: start all three (in three terminals, or with &)
  CLUSTER=e1=http://127.0.0.1:2380,e2=http://127.0.0.1:22380,e3=http://127.0.0.1:32380
  orion etcd --name e1 --data-dir ./e1 --initial-cluster $CLUSTER \
    --listen-client-url http://127.0.0.1:2379 --listen-peer-url http://127.0.0.1:2380
  orion etcd --name e2 --data-dir ./e2 --initial-cluster $CLUSTER \
    --listen-client-url http://127.0.0.1:22379 --listen-peer-url http://127.0.0.1:22380
  orion etcd --name e3 --data-dir ./e3 --initial-cluster $CLUSTER \
    --listen-client-url http://127.0.0.1:32379 --listen-peer-url http://127.0.0.1:32380

  # Check it, then run the scheduler replicas on it
  ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:2379,http://127.0.0.1:22379,http://127.0.0.1:32379 member list
  orion server --name n1 --listen 127.0.0.1:8081 --data-dir ./n1 \
    --etcd-endpoints http://127.0.0.1:2379,http://127.0.0.1:22379,http://127.0.0.1:32379

  # The same member configured through the environment
  ORION_ETCD_NAME=e1 ORION_ETCD_DATA_DIR=./e1 ORION_ETCD_INITIAL_CLUSTER=$CLUSTER orion etcd

  # test/cluster.sh up (make cluster) does all of this: 3 members, 3 servers, 2 workers`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadEtcdConfig(v)
			if err != nil {
				return err
			}
			// Errors from here on are not usage mistakes.
			cmd.SilenceUsage = true
			return runEtcd(cmd.Context(), cfg)
		},
	}
	bindEtcdFlags(cmd.Flags(), v)
	return cmd
}

func bindEtcdFlags(fs *pflag.FlagSet, v *viper.Viper) {
	config.BindFlags(fs, v, etcdFlags, etcdEnvPrefix)
}

func etcdEnv(flagName string) string { return config.EnvVar(etcdEnvPrefix, flagName) }

// etcdSettings reads flags and environment with errors that name both forms
// (viper's own getters turn an unparsable env value into zero silently).
type etcdSettings struct {
	v    *viper.Viper
	errs []error
}

func (s *etcdSettings) fail(name string, raw any, why string) {
	s.errs = append(s.errs, fmt.Errorf("--%s (env %s) %q: %s", name, etcdEnv(name), fmt.Sprint(raw), why))
}

func (s *etcdSettings) str(name string) string {
	return strings.TrimSpace(fmt.Sprint(s.v.Get(config.Key(name))))
}

func (s *etcdSettings) int64(name string, min int64) int64 {
	raw := s.str(name)
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		s.fail(name, raw, "not an integer")
		return 0
	}
	if n < min {
		s.fail(name, raw, fmt.Sprintf("must be at least %d", min))
	}
	return n
}

func (s *etcdSettings) bool(name string) bool {
	raw := s.str(name)
	b, err := strconv.ParseBool(raw)
	if err != nil {
		s.fail(name, raw, "not a boolean")
	}
	return b
}

func (s *etcdSettings) duration(name string) time.Duration {
	raw := s.str(name)
	d, err := time.ParseDuration(raw)
	if err != nil {
		s.fail(name, raw, "not a duration such as 30s or 5m")
	} else if d <= 0 {
		s.fail(name, raw, "must be positive")
	}
	return d
}

// etcdRun is the resolved `orion etcd` configuration.
type etcdRun struct {
	member   etcdserver.Config
	logLevel zapcore.Level
}

func loadEtcdConfig(v *viper.Viper) (etcdRun, error) {
	s := &etcdSettings{v: v}
	c := etcdserver.Config{
		Name:               s.str("name"),
		DataDir:            s.str("data-dir"),
		ClientURL:          s.str("listen-client-url"),
		PeerURL:            s.str("listen-peer-url"),
		AdvertiseClientURL: s.str("advertise-client-url"),
		AdvertisePeerURL:   s.str("advertise-peer-url"),
		InitialCluster:     s.str("initial-cluster"),
		ClusterState:       s.str("initial-cluster-state"),
		ClusterToken:       s.str("initial-cluster-token"),
		HeartbeatMs:        int(s.int64("heartbeat-ms", 1)),
		ElectionMs:         int(s.int64("election-ms", 1)),
		AutoCompactionMode: s.str("auto-compaction-mode"),
		QuotaBackendBytes:  s.int64("quota-backend-bytes", 1),
		MaxTxnOps:          uint(s.int64("max-txn-ops", 1)),
		MaxRequestBytes:    uint(s.int64("max-request-bytes", 1)),
		LogLevel:           s.str("log-level"),
		AllowRemoteClients: s.bool("allow-remote-clients"),
		ReadyTimeout:       s.duration("ready-timeout"),
	}
	// An unset retention follows the mode: 100000 revisions, or 1h periodic.
	if v.IsSet(config.Key("auto-compaction-retention")) {
		c.AutoCompactionRetention = s.str("auto-compaction-retention")
	}
	if c.DataDir == "" {
		s.errs = append(s.errs, fmt.Errorf("--data-dir (env %s) is required", etcdEnv("data-dir")))
	}
	if c.Name == "" {
		if c.InitialCluster != "" {
			s.errs = append(s.errs, fmt.Errorf("--name (env %s) is required with --initial-cluster: it says which entry is this member", etcdEnv("name")))
		} else if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, "=, ") {
			c.Name = h // etcd warns about its own "default"
		}
	}
	switch c.ClusterState {
	case "new", "existing":
	default:
		s.fail("initial-cluster-state", c.ClusterState, "must be new or existing")
	}
	if c.HeartbeatMs > 0 && c.ElectionMs < 5*c.HeartbeatMs {
		s.fail("election-ms", c.ElectionMs, fmt.Sprintf("must be at least 5x --heartbeat-ms (%d)", 5*c.HeartbeatMs))
	}
	if u, err := url.Parse(c.ClientURL); err == nil && u.Hostname() != "" && !config.IsLoopbackHost(u.Hostname()) && !c.AllowRemoteClients {
		s.fail("listen-client-url", c.ClientURL, "not a loopback address; etcd has no authentication here, so serving other hosts needs --allow-remote-clients")
	}
	lvl, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		s.fail("log-level", c.LogLevel, "must be debug, info, warn or error")
	}
	if len(s.errs) > 0 {
		return etcdRun{}, errors.Join(s.errs...)
	}
	return etcdRun{member: c, logLevel: lvl}, nil
}

func runEtcd(ctx context.Context, r etcdRun) error {
	// orion's own lines are logged at info whatever --log-level says; the
	// member's logger is filtered down to --log-level by etcdserver.
	log, err := newEtcdLogger(min(r.logLevel, zapcore.InfoLevel))
	if err != nil {
		return err
	}
	defer log.Sync()
	c := r.member
	c.Logger = log // etcdserver drops the noise of a requested close

	if c.AllowRemoteClients {
		log.Warn("INSECURE: --allow-remote-clients: this etcd member has NO authentication and NO TLS; anyone who reaches "+
			c.ClientURL+" can read and rewrite every DAG and task, and so run shell commands on every orion worker",
			zap.String("client_url", c.ClientURL))
	}
	if u, err := url.Parse(c.PeerURL); err == nil && !config.IsLoopbackHost(u.Hostname()) {
		log.Warn("peer traffic is unauthenticated and unencrypted: keep the peer URL on a trusted network",
			zap.String("peer_url", c.PeerURL))
	}
	if ttl := c.MinLeaseTTL(); ttl > 1 {
		log.Warn("these raft timings make etcd raise orion's 1 s leadership lease; failover will be slower",
			zap.Int64("min_lease_ttl_seconds", ttl), zap.Int("heartbeat_ms", c.HeartbeatMs), zap.Int("election_ms", c.ElectionMs))
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := os.Stat(filepath.Join(c.DataDir, "member", "wal")); err == nil {
		log.Info("restarting etcd member from its data dir (--initial-cluster is not read again)",
			zap.String("name", c.Name), zap.String("data_dir", c.DataDir))
	} else if c.InitialCluster != "" {
		log.Info("starting a new etcd member; it is ready once a quorum of the initial cluster has started",
			zap.String("name", c.Name), zap.String("initial_cluster", c.InitialCluster), zap.Duration("ready_timeout", c.ReadyTimeout))
	}
	begin := time.Now()
	m, err := etcdserver.Start(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while starting")
			return nil
		}
		return err
	}
	log.Info("etcd member ready",
		zap.String("name", m.Name()),
		zap.String("client_url", m.ClientURL()),
		zap.String("peer_url", m.PeerURL()),
		zap.Strings("cluster_client_urls", m.Endpoints()),
		zap.Int64("min_lease_ttl_seconds", c.MinLeaseTTL()),
		zap.String("data_dir", c.DataDir),
		zap.Duration("took", time.Since(begin).Round(time.Millisecond)))

	var failure error
	select {
	case <-ctx.Done():
		log.Info("shutting down the etcd member", zap.String("name", m.Name()))
	case err := <-m.Err():
		failure = err
		log.Error("etcd member stopped", zap.String("name", m.Name()), zap.Error(err))
	}
	stop() // a second SIGINT/SIGTERM now kills the process outright
	begin = time.Now()
	_ = m.Close()
	if failure == nil {
		log.Info("etcd member stopped", zap.String("name", m.Name()), zap.Duration("took", time.Since(begin).Round(time.Millisecond)))
	}
	return failure
}

// newEtcdLogger logs in zap's console format on stderr, in colour only when
// stderr is a terminal (the member usually logs to a file).
func newEtcdLogger(lvl zapcore.Level) (*zap.Logger, error) {
	cfg := zap.NewDevelopmentConfig()
	cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout(time.TimeOnly)
	cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}
	cfg.DisableStacktrace = true
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}
