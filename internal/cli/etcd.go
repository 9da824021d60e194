package cli

import (
	"context"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/etcdmember"
)

func newEtcdCmd() *cobra.Command {
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
in upper case with underscores (--data-dir is ORION_ETCD_DATA_DIR), and in a
--config file (or ORION_ETCD_CONFIG) under the name with underscores
(data_dir). Flags win over the environment, the environment over the file.

TLS: --cert-file and --key-file serve the client URL over https
(--client-cert-auth with --trusted-ca-file also requires a client
certificate); --peer-cert-file, --peer-key-file, --peer-trusted-ca-file and
--peer-client-cert-auth do the same for raft traffic, and every peer URL
(--initial-cluster's too) is then https. Authentication (users and roles) is
etcd's own: enable it with etcdctl once the cluster runs (see
docs/security.md). Without TLS, keep the client URL on loopback (the default)
and the peer URLs on a trusted network.`,
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
			hideCredentials()
			file, _ := cmd.Flags().GetString("config")
			cfg, _, err := config.LoadEtcd(v, file)
			if err != nil {
				return err
			}
			// Errors from here on are not usage mistakes.
			cmd.SilenceUsage = true
			return runEtcd(cmd.Context(), cfg)
		},
	}
	config.BindEtcdFlags(cmd.Flags(), v)
	return cmd
}

func runEtcd(ctx context.Context, cfg config.Etcd) error {
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err // Validate has said which flag
	}
	// orion's own lines are logged at info whatever --log-level says; the
	// member's logger is filtered down to --log-level by etcdserver.
	log, err := newEtcdLogger(min(lvl, zapcore.InfoLevel))
	if err != nil {
		return err
	}
	defer log.Sync()
	c := cfg.Member()
	c.Logger = log // etcdserver drops the noise of a requested close

	if u, err := url.Parse(c.ClientURL); err == nil && !config.IsLoopbackHost(u.Hostname()) && !c.ClientTLS.ClientCertAuth {
		what := "NO TLS and no client certificates"
		if c.ClientTLS.Enabled() {
			what = "no client certificates (--client-cert-auth is off)"
		}
		log.Warn("INSECURE: --allow-remote-clients: this etcd member has "+what+"; unless etcd auth is enabled, anyone who reaches "+
			c.ClientURL+" can read and rewrite every DAG and task, and so run shell commands on every orion worker",
			zap.String("client_url", c.ClientURL))
	}
	if u, err := url.Parse(c.PeerURL); err == nil && !config.IsLoopbackHost(u.Hostname()) && !c.PeerTLS.ClientCertAuth {
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
	m, err := etcdmember.Start(ctx, c)
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
