package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/etcdmember"
)

// Etcd is the resolved configuration of one `orion etcd` member.
// DefaultEtcdMaxTxnOps is `orion etcd`'s --max-txn-ops: room for the 512
// operations a replica batches against external members (etcd's own
// default, 128, makes the replicas halve their batches to 128).
const DefaultEtcdMaxTxnOps = 1024

type Etcd struct {
	Name                    string        `mapstructure:"name" json:"name"`
	DataDir                 string        `mapstructure:"data_dir" json:"data_dir"`
	ListenClientURL         string        `mapstructure:"listen_client_url" json:"listen_client_url"`
	ListenPeerURL           string        `mapstructure:"listen_peer_url" json:"listen_peer_url"`
	AdvertiseClientURL      string        `mapstructure:"advertise_client_url" json:"advertise_client_url,omitempty"`
	AdvertisePeerURL        string        `mapstructure:"advertise_peer_url" json:"advertise_peer_url,omitempty"`
	InitialCluster          string        `mapstructure:"initial_cluster" json:"initial_cluster,omitempty"`
	InitialClusterState     string        `mapstructure:"initial_cluster_state" json:"initial_cluster_state"`
	InitialClusterToken     string        `mapstructure:"initial_cluster_token" json:"initial_cluster_token"`
	HeartbeatMs             int           `mapstructure:"heartbeat_ms" json:"heartbeat_ms"`
	ElectionMs              int           `mapstructure:"election_ms" json:"election_ms"`
	AutoCompactionMode      string        `mapstructure:"auto_compaction_mode" json:"auto_compaction_mode"`
	AutoCompactionRetention string        `mapstructure:"auto_compaction_retention" json:"auto_compaction_retention,omitempty"`
	QuotaBackendBytes       int64         `mapstructure:"quota_backend_bytes" json:"quota_backend_bytes"`
	MaxTxnOps               int           `mapstructure:"max_txn_ops" json:"max_txn_ops"`
	MaxRequestBytes         int64         `mapstructure:"max_request_bytes" json:"max_request_bytes"`
	LogLevel                string        `mapstructure:"log_level" json:"log_level"`
	AllowRemoteClients      bool          `mapstructure:"allow_remote_clients" json:"allow_remote_clients"`
	CertFile                string        `mapstructure:"cert_file" json:"cert_file,omitempty"`
	KeyFile                 string        `mapstructure:"key_file" json:"key_file,omitempty"`
	TrustedCAFile           string        `mapstructure:"trusted_ca_file" json:"trusted_ca_file,omitempty"`
	ClientCertAuth          bool          `mapstructure:"client_cert_auth" json:"client_cert_auth"`
	PeerCertFile            string        `mapstructure:"peer_cert_file" json:"peer_cert_file,omitempty"`
	PeerKeyFile             string        `mapstructure:"peer_key_file" json:"peer_key_file,omitempty"`
	PeerTrustedCAFile       string        `mapstructure:"peer_trusted_ca_file" json:"peer_trusted_ca_file,omitempty"`
	PeerClientCertAuth      bool          `mapstructure:"peer_client_cert_auth" json:"peer_client_cert_auth"`
	ReadyTimeout            time.Duration `mapstructure:"ready_timeout" json:"ready_timeout"`
	NodeName                string        `mapstructure:"node_name" json:"node_name,omitempty"`
}

// EtcdEnvPrefix prefixes the environment form of every `orion etcd`
// setting: --initial-cluster is ORION_ETCD_INITIAL_CLUSTER.
const EtcdEnvPrefix = "ORION_ETCD_"

var etcdSettings = Settings{
	Flags: []Flag{
		{Name: "name", Default: "", Usage: "member name, unique in the cluster; required with --initial-cluster (a single member defaults to the host name)"},
		{Name: "data-dir", Default: "", Usage: "member data directory: WAL, snapshots, db (required; created if missing)"},
		{Name: "listen-client-url", Default: etcdmember.DefaultClientURL, Usage: "client URL to listen on (an IP, or 0.0.0.0 with --advertise-client-url), also advertised unless --advertise-client-url is set; a non-loopback host needs --allow-remote-clients"},
		{Name: "listen-peer-url", Default: etcdmember.DefaultPeerURL, Usage: "peer (raft) URL to listen on (an IP, or 0.0.0.0 with --advertise-peer-url), also advertised unless --advertise-peer-url is set"},
		{Name: "advertise-client-url", Default: "", Usage: "client URL published to clients and the cluster (default: --listen-client-url); required when that host is 0.0.0.0"},
		{Name: "advertise-peer-url", Default: "", Usage: "peer URL published to the other members, as listed in --initial-cluster (default: --listen-peer-url); required when that host is 0.0.0.0"},
		{Name: "initial-cluster", Default: "", Usage: "every member of a new cluster, \"e1=http://127.0.0.1:2380,e2=...\"; empty: a single member; ignored once --data-dir holds a member"},
		{Name: "initial-cluster-state", Default: "new", Usage: "new (bootstrap) or existing (join a member added with 'etcdctl member add')"},
		{Name: "initial-cluster-token", Default: etcdmember.DefaultClusterToken, Usage: "token that keeps clusters bootstrapped from the same --initial-cluster apart"},
		// 50 ms / 250 ms, not etcd's 100 ms / 1000 ms: etcd grants no lease
		// shorter than 1.5 election timeouts rounded up to whole seconds, and
		// orion's leadership session is a 1 s lease. With etcd's defaults that
		// lease would silently become 2 s and every failover a second slower.
		// See etcdmember.MinLeaseTTL.
		{Name: "heartbeat-ms", Default: etcdmember.DefaultHeartbeatMs, Usage: "raft heartbeat interval in ms"},
		{Name: "election-ms", Default: etcdmember.DefaultElectionMs, Usage: "raft election timeout in ms, at least 5x --heartbeat-ms; at most 650 with a 50 ms heartbeat keeps 1 s leases (orion's session TTL) possible"},
		{Name: "auto-compaction-mode", Default: etcdmember.DefaultAutoCompactionMode, Usage: "revision or periodic"},
		// No default here: an unset retention follows the mode.
		{Name: "auto-compaction-retention", Default: "", Usage: "revisions to keep (revision mode; default " + etcdmember.DefaultAutoCompactionRetention + "), or a duration such as 1h (periodic mode; default " + etcdmember.DefaultPeriodicCompactionRetention + ")"},
		{Name: "quota-backend-bytes", Default: etcdmember.DefaultQuotaBackendBytes, Usage: "backend size at which etcd raises a NOSPACE alarm and refuses writes"},
		{Name: "max-txn-ops", Default: DefaultEtcdMaxTxnOps, Usage: "most operations in one transaction (orion server batches up to 512 against external members)"},
		{Name: "max-request-bytes", Default: int64(etcdmember.DefaultMaxRequestBytes), Usage: "largest client request in bytes"},
		{Name: "log-level", Default: etcdmember.DefaultLogLevel, Usage: "level of etcd's own logs: debug, info, warn, error (orion's start and stop lines are always shown)"},
		{Name: "allow-remote-clients", Default: false, Usage: "allow a non-loopback --listen-client-url without --client-cert-auth; etcd then serves ANYONE who can reach it (unless etcd auth is on)"},
		// etcd's own flag names, so that an operator's etcd habits carry over.
		{Name: "cert-file", Default: "", Usage: "TLS certificate (PEM) the client URL presents; the client URLs are then https"},
		{Name: "key-file", Default: "", Usage: "key (PEM) of --cert-file"},
		{Name: "trusted-ca-file", Default: "", Usage: "CA (PEM) that signed the clients' certificates, for --client-cert-auth"},
		{Name: "client-cert-auth", Default: false, Usage: "refuse clients without a certificate signed by --trusted-ca-file (with etcd auth on, a client that sends no password is the user its certificate's CN names)"},
		{Name: "peer-cert-file", Default: "", Usage: "TLS certificate (PEM) for raft traffic between members, presented both ways; every peer URL (--initial-cluster's too) is then https"},
		{Name: "peer-key-file", Default: "", Usage: "key (PEM) of --peer-cert-file"},
		{Name: "peer-trusted-ca-file", Default: "", Usage: "CA (PEM) that signed the other members' peer certificates"},
		{Name: "peer-client-cert-auth", Default: false, Usage: "refuse peers without a certificate signed by --peer-trusted-ca-file"},
		{Name: "ready-timeout", Default: 5 * time.Minute, Usage: "how long to wait for the member to join a quorum before giving up"},
		{Name: "node-name", Default: "", Usage: "the node (machine) this member runs on, named as the scheduler replicas' --node-name names theirs; served on the client URL so that Orion's leader keeps etcd's raft leader off its own node (default: the host name; on Kubernetes, spec.nodeName)"},
	},
	EnvPrefix: EtcdEnvPrefix,
	ConfigEnv: EtcdEnvPrefix + "CONFIG",
}

// BindEtcdFlags defines the etcd member's flags on fs (--config among them)
// and binds them, the environment and the defaults into v.
func BindEtcdFlags(fs *pflag.FlagSet, v *viper.Viper) {
	etcdSettings.Bind(fs, v)
	fs.String("config", "", "config file; its keys are the flag names with underscores (data_dir, initial_cluster, ...); env "+etcdSettings.ConfigEnv)
}

// LoadEtcd resolves the member's configuration, in increasing precedence:
// defaults, the config file (configFile, else the file named by
// ORION_ETCD_CONFIG, else none), ORION_ETCD_* environment variables, then
// flags. It returns the config file it read.
func LoadEtcd(v *viper.Viper, configFile string) (Etcd, string, error) {
	var e Etcd
	used, err := etcdSettings.Load(v, configFile, &e)
	if err != nil {
		return e, used, err
	}
	if e.Name == "" && e.InitialCluster == "" {
		if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsAny(h, "=, ") {
			e.Name = h // etcd warns about its own "default"
		}
	}
	return e, used, e.Validate()
}

// Validate checks the member's settings, with messages that name the flag
// and its environment variable.
func (e Etcd) Validate() error {
	s := etcdSettings
	var errs []error
	if e.DataDir == "" {
		errs = append(errs, fmt.Errorf("--data-dir (env %s) is required", s.EnvVar("data-dir")))
	}
	if e.Name == "" && e.InitialCluster != "" {
		errs = append(errs, fmt.Errorf("--name (env %s) is required with --initial-cluster: it says which entry is this member", s.EnvVar("name")))
	}
	switch e.InitialClusterState {
	case "new", "existing":
	default:
		errs = append(errs, s.Invalid("initial-cluster-state", e.InitialClusterState, "must be new or existing"))
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"heartbeat-ms", int64(e.HeartbeatMs)},
		{"election-ms", int64(e.ElectionMs)},
		{"quota-backend-bytes", e.QuotaBackendBytes},
		{"max-txn-ops", int64(e.MaxTxnOps)},
		{"max-request-bytes", e.MaxRequestBytes},
	} {
		if n.v < 1 {
			errs = append(errs, s.Invalid(n.name, n.v, "must be at least 1"))
		}
	}
	if e.HeartbeatMs > 0 && e.ElectionMs < 5*e.HeartbeatMs {
		errs = append(errs, s.Invalid("election-ms", e.ElectionMs, fmt.Sprintf("must be at least 5x --heartbeat-ms (%d)", 5*e.HeartbeatMs)))
	}
	if u, err := url.Parse(e.ListenClientURL); err == nil && u.Hostname() != "" && !IsLoopbackHost(u.Hostname()) && !e.AllowRemoteClients && !e.ClientCertAuth {
		errs = append(errs, s.Invalid("listen-client-url", e.ListenClientURL, "not a loopback address; serving other hosts needs --client-cert-auth (clients must present a certificate) or --allow-remote-clients"))
	}
	errs = append(errs, e.checkTLS("", "client", e.CertFile, e.KeyFile, e.TrustedCAFile, e.ClientCertAuth,
		[]string{"listen-client-url", "advertise-client-url"}, []string{e.ListenClientURL, e.AdvertiseClientURL})...)
	errs = append(errs, e.checkTLS("peer-", "peer", e.PeerCertFile, e.PeerKeyFile, e.PeerTrustedCAFile, e.PeerClientCertAuth,
		[]string{"listen-peer-url", "advertise-peer-url"}, []string{e.ListenPeerURL, e.AdvertisePeerURL})...)
	if _, err := zapcore.ParseLevel(e.LogLevel); err != nil {
		errs = append(errs, s.Invalid("log-level", e.LogLevel, "must be debug, info, warn or error"))
	}
	if e.ReadyTimeout <= 0 {
		errs = append(errs, s.Invalid("ready-timeout", e.ReadyTimeout, "must be positive"))
	}
	return errors.Join(errs...)
}

// checkTLS checks one side's TLS flags (prefix "" or "peer-") against its
// URLs: the files exist and are PEM, a certificate comes with its key, and
// the URLs are https exactly when a certificate is given.
func (e Etcd) checkTLS(prefix, side, cert, key, ca string, clientAuth bool, urlFlags, urls []string) []error {
	s := etcdSettings
	var errs []error
	on := cert != "" || key != ""
	switch {
	case cert == "" && key != "":
		errs = append(errs, fmt.Errorf("--%skey-file (env %s) needs --%scert-file (env %s)", prefix, s.EnvVar(prefix+"key-file"), prefix, s.EnvVar(prefix+"cert-file")))
	case cert != "" && key == "":
		errs = append(errs, fmt.Errorf("--%scert-file (env %s) needs --%skey-file (env %s)", prefix, s.EnvVar(prefix+"cert-file"), prefix, s.EnvVar(prefix+"key-file")))
	}
	if clientAuth && ca == "" {
		errs = append(errs, fmt.Errorf("--%sclient-cert-auth needs --%strusted-ca-file (env %s): the CA that signed the %ss' certificates",
			prefix, prefix, s.EnvVar(prefix+"trusted-ca-file"), side))
	}
	if !on && (clientAuth || ca != "") {
		errs = append(errs, fmt.Errorf("--%strusted-ca-file and --%sclient-cert-auth need TLS: give --%scert-file and --%skey-file", prefix, prefix, prefix, prefix))
	}
	for _, f := range []struct{ flag, path string }{{prefix + "cert-file", cert}, {prefix + "key-file", key}, {prefix + "trusted-ca-file", ca}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		switch {
		case err != nil:
			errs = append(errs, s.Invalid(f.flag, f.path, "cannot be read: "+err.Error()))
		case !strings.Contains(string(b), "-----BEGIN "):
			errs = append(errs, s.Invalid(f.flag, f.path, "not a PEM file"))
		}
	}
	want := "http"
	if on {
		want = "https"
	}
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if raw == "" || err != nil || u.Scheme == want || (u.Scheme != "http" && u.Scheme != "https") {
			continue // the member's own checks say what is wrong with it
		}
		if on {
			errs = append(errs, s.Invalid(urlFlags[i], raw, "must be https: --"+prefix+"cert-file turns TLS on"))
		} else {
			errs = append(errs, s.Invalid(urlFlags[i], raw, "https needs --"+prefix+"cert-file and --"+prefix+"key-file"))
		}
	}
	return errs
}

// Member is the etcdserver configuration of the member (without a logger).
func (e Etcd) Member() etcdmember.Config {
	return etcdmember.Config{
		Name:                    e.Name,
		DataDir:                 e.DataDir,
		ClientURL:               e.ListenClientURL,
		PeerURL:                 e.ListenPeerURL,
		AdvertiseClientURL:      e.AdvertiseClientURL,
		AdvertisePeerURL:        e.AdvertisePeerURL,
		InitialCluster:          e.InitialCluster,
		ClusterState:            e.InitialClusterState,
		ClusterToken:            e.InitialClusterToken,
		HeartbeatMs:             e.HeartbeatMs,
		ElectionMs:              e.ElectionMs,
		AutoCompactionMode:      e.AutoCompactionMode,
		AutoCompactionRetention: e.AutoCompactionRetention,
		QuotaBackendBytes:       e.QuotaBackendBytes,
		MaxTxnOps:               uint(e.MaxTxnOps),
		MaxRequestBytes:         uint(e.MaxRequestBytes),
		LogLevel:                e.LogLevel,
		AllowRemoteClients:      e.AllowRemoteClients,
		ReadyTimeout:            e.ReadyTimeout,
		Node:                    e.NodeName,
		ClientTLS:               etcdmember.TLS{CertFile: e.CertFile, KeyFile: e.KeyFile, TrustedCAFile: e.TrustedCAFile, ClientCertAuth: e.ClientCertAuth},
		PeerTLS:                 etcdmember.TLS{CertFile: e.PeerCertFile, KeyFile: e.PeerKeyFile, TrustedCAFile: e.PeerTrustedCAFile, ClientCertAuth: e.PeerClientCertAuth},
	}
}
