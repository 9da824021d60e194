package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/orion-sched/orion/internal/etcdmember"
)

func loadEtcd(t *testing.T, file string, env map[string]string, args ...string) (Etcd, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	v := viper.New()
	fs := pflag.NewFlagSet("etcd", pflag.ContinueOnError)
	BindEtcdFlags(fs, v)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if file == "" {
		file, _ = fs.GetString("config")
	}
	e, _, err := LoadEtcd(v, file)
	return e, err
}

// Precedence: defaults < config file < ORION_ETCD_* env < flags.
func TestEtcdPrecedence(t *testing.T) {
	clearEnv(t)
	e, err := loadEtcd(t, "", nil, "--data-dir", "/tmp/d")
	if err != nil {
		t.Fatal(err)
	}
	m := e.Member()
	if m.ClientURL != etcdmember.DefaultClientURL || m.PeerURL != etcdmember.DefaultPeerURL || m.HeartbeatMs != 50 ||
		m.ElectionMs != 250 || m.ClusterState != "new" || m.ClusterToken != etcdmember.DefaultClusterToken ||
		m.AutoCompactionMode != "revision" || m.AutoCompactionRetention != "" || m.QuotaBackendBytes != etcdmember.DefaultQuotaBackendBytes ||
		m.MaxTxnOps != DefaultEtcdMaxTxnOps || m.MaxRequestBytes != etcdmember.DefaultMaxRequestBytes ||
		m.LogLevel != "warn" || m.AllowRemoteClients || m.ReadyTimeout != 5*time.Minute || m.DataDir != "/tmp/d" {
		t.Fatalf("defaults: %+v", m)
	}
	if h, _ := os.Hostname(); h != "" && !strings.ContainsAny(h, "=, ") && m.Name != h {
		t.Fatalf("a single member is named after the host: %q", m.Name)
	}

	file := writeFile(t, "name: e1\ndata_dir: /tmp/file\ninitial_cluster: e1=http://127.0.0.1:2380\nheartbeat_ms: 20\nelection_ms: 200\nready_timeout: 1m\nmax_request_bytes: 2000000\nauto_compaction_mode: periodic\n")
	e, err = loadEtcd(t, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "e1" || e.DataDir != "/tmp/file" || e.HeartbeatMs != 20 || e.ElectionMs != 200 || e.ReadyTimeout != time.Minute ||
		e.MaxRequestBytes != 2000000 || e.InitialCluster != "e1=http://127.0.0.1:2380" || e.AutoCompactionRetention != "" {
		t.Fatalf("file: %+v", e)
	}

	env := map[string]string{
		"ORION_ETCD_DATA_DIR":                  " /tmp/env ",
		"ORION_ETCD_HEARTBEAT_MS":              "30",
		"ORION_ETCD_READY_TIMEOUT":             "2m",
		"ORION_ETCD_ALLOW_REMOTE_CLIENTS":      "true",
		"ORION_ETCD_LISTEN_CLIENT_URL":         "http://0.0.0.0:2379",
		"ORION_ETCD_AUTO_COMPACTION_RETENTION": "2h",
	}
	e, err = loadEtcd(t, file, env)
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "e1" || e.DataDir != "/tmp/env" || e.HeartbeatMs != 30 || e.ElectionMs != 200 || e.ReadyTimeout != 2*time.Minute ||
		!e.AllowRemoteClients || e.ListenClientURL != "http://0.0.0.0:2379" || e.AutoCompactionRetention != "2h" {
		t.Fatalf("env over file: %+v", e)
	}

	e, err = loadEtcd(t, file, env, "--data-dir", "/tmp/flag", "--heartbeat-ms", "40", "--ready-timeout", "3m",
		"--allow-remote-clients=false", "--listen-client-url", "http://127.0.0.1:12379")
	if err != nil {
		t.Fatal(err)
	}
	if e.DataDir != "/tmp/flag" || e.HeartbeatMs != 40 || e.ReadyTimeout != 3*time.Minute || e.AllowRemoteClients ||
		e.ListenClientURL != "http://127.0.0.1:12379" || e.ElectionMs != 200 {
		t.Fatalf("flags over env: %+v", e)
	}

	clearEnv(t)
	e, err = loadEtcd(t, "", map[string]string{"ORION_ETCD_CONFIG": file})
	if err != nil || e.DataDir != "/tmp/file" {
		t.Fatalf("ORION_ETCD_CONFIG: %+v %v", e, err)
	}
}

// A bad value is refused with a message that names the flag, its
// environment variable and the value.
func TestEtcdBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, nil, "--data-dir (env ORION_ETCD_DATA_DIR) is required"},
		{nil, []string{"--data-dir", "d", "--initial-cluster", "e1=http://127.0.0.1:2380"}, "--name (env ORION_ETCD_NAME) is required with --initial-cluster"},
		{map[string]string{"ORION_ETCD_HEARTBEAT_MS": "fast"}, []string{"--data-dir", "d"}, `--heartbeat-ms (env ORION_ETCD_HEARTBEAT_MS) "fast": not an integer`},
		{map[string]string{"ORION_ETCD_QUOTA_BACKEND_BYTES": "4GiB"}, []string{"--data-dir", "d"}, `--quota-backend-bytes (env ORION_ETCD_QUOTA_BACKEND_BYTES) "4GiB": not an integer`},
		{map[string]string{"ORION_ETCD_ALLOW_REMOTE_CLIENTS": "sure"}, []string{"--data-dir", "d"}, `--allow-remote-clients (env ORION_ETCD_ALLOW_REMOTE_CLIENTS) "sure": not a boolean`},
		{map[string]string{"ORION_ETCD_READY_TIMEOUT": "5"}, []string{"--data-dir", "d"}, `--ready-timeout (env ORION_ETCD_READY_TIMEOUT) "5": not a duration such as 30s or 5m`},
		{nil, []string{"--data-dir", "d", "--ready-timeout", "0s"}, `--ready-timeout (env ORION_ETCD_READY_TIMEOUT) "0s": must be positive`},
		{nil, []string{"--data-dir", "d", "--max-txn-ops", "0"}, `--max-txn-ops (env ORION_ETCD_MAX_TXN_OPS) "0": must be at least 1`},
		{nil, []string{"--data-dir", "d", "--election-ms", "100"}, `--election-ms (env ORION_ETCD_ELECTION_MS) "100": must be at least 5x --heartbeat-ms (250)`},
		{nil, []string{"--data-dir", "d", "--initial-cluster-state", "old"}, `--initial-cluster-state (env ORION_ETCD_INITIAL_CLUSTER_STATE) "old": must be new or existing`},
		{nil, []string{"--data-dir", "d", "--listen-client-url", "http://10.0.0.1:2379"}, `--listen-client-url (env ORION_ETCD_LISTEN_CLIENT_URL) "http://10.0.0.1:2379": not a loopback address`},
		{nil, []string{"--data-dir", "d", "--log-level", "chatty"}, `--log-level (env ORION_ETCD_LOG_LEVEL) "chatty": must be debug, info, warn or error`},
	} {
		t.Run(c.want, func(t *testing.T) {
			clearEnv(t)
			_, err := loadEtcd(t, "", c.env, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %s", err, c.want)
			}
		})
	}
	// A bad value in the config file gets the same message.
	clearEnv(t)
	_, err := loadEtcd(t, writeFile(t, "data_dir: d\nheartbeat_ms: \"often\"\n"), nil)
	if err == nil || !strings.Contains(err.Error(), `--heartbeat-ms (env ORION_ETCD_HEARTBEAT_MS) "often": not an integer`) {
		t.Fatalf("file: %v", err)
	}
}

// The server's settings get the same type errors as the worker's and the
// member's (viper alone would only say it could not decode a key).
func TestServerBadEnvValueNamesFlagAndEnv(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct{ env, val, want string }{
		{"ORION_SLOTS", "four", `--slots (env ORION_SLOTS) "four": not an integer`},
		{"ORION_RETRY_BASE", "1", `--retry-base (env ORION_RETRY_BASE) "1": not a duration`},
		{"ORION_DEMO", "maybe", `--demo (env ORION_DEMO) "maybe": not a boolean`},
		{"ORION_RATE_LIMIT", "lots", `--rate-limit (env ORION_RATE_LIMIT) "lots": not a number`},
	} {
		_, err := load(t, "", map[string]string{c.env: c.val})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v, want %s", c.env, c.val, err, c.want)
		}
	}
}
