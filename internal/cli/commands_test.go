package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/config"
	"github.com/spf13/cobra"
)

// The flags that scripts, the chart, test/cluster.sh and the e2e tests pass:
// renaming one breaks them.
func TestEveryCommandKeepsItsFlags(t *testing.T) {
	root := NewRoot()
	for path, flags := range map[string][]string{
		"server": {"name", "listen", "data-dir", "etcd-endpoints", "config", "print-config", "auth-token", "insecure-no-auth",
			"advertise-url", "allowed-hosts", "embedded-etcd-client-url", "embedded-etcd-peer-url", "slots", "log-level",
			"log-format", "max-body-bytes", "max-tasks-per-dag", "orphan-grace", "retry-base", "retry-cap", "kube-leader-label"},
		"worker": {"server", "token", "slots", "name", "log-dir", "log-level", "log-format", "config"},
		"etcd": {"name", "data-dir", "listen-client-url", "listen-peer-url", "advertise-client-url", "advertise-peer-url",
			"initial-cluster", "initial-cluster-state", "initial-cluster-token", "heartbeat-ms", "election-ms",
			"auto-compaction-mode", "auto-compaction-retention", "quota-backend-bytes", "max-txn-ops", "max-request-bytes",
			"log-level", "allow-remote-clients", "ready-timeout", "config", "cert-file", "key-file", "trusted-ca-file",
			"client-cert-auth", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-client-cert-auth"},
		"drill kill-leader": {"server", "token", "count", "interval", "tasks", "work-dir", "restart", "cluster-script",
			"takeover-timeout", "settle-timeout", "restart-timeout", "json"},
		"drill": {"server", "token", "count", "interval", "tasks", "work-dir", "restart", "cluster-script",
			"takeover-timeout", "settle-timeout", "restart-timeout", "json", "fault", "stop-for", "member"},
		"bench": {"tasks", "dag-size", "chain", "shell-chain", "rate", "latency-for", "etcd-for", "slots", "data-dir", "etcd-client-url",
			"etcd-peer-url", "server", "etcd-endpoints", "submitters", "timeout", "json", "token"},
		"submit": {"server", "token", "output", "param"},
	} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd.Name() != strings.Fields(path)[len(strings.Fields(path))-1] {
			t.Errorf("orion %s: not found (%v)", path, err)
			continue
		}
		for _, f := range flags {
			if cmd.Flag(f) == nil {
				t.Errorf("orion %s: no --%s", path, f)
			}
		}
	}
	// Every command has a short help line.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Short == "" && c.HasParent() {
			t.Errorf("orion %s: no short help", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// Bad worker settings stop it before it dials anything, with exit code 2
// and a message naming the flag and its environment variable.
func TestWorkerRefusesBadSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--slots", "0"}, `--slots (env ORION_WORKER_SLOTS) "0": must be at least 1`},
		{map[string]string{"ORION_WORKER_SLOTS": "lots"}, nil, `--slots (env ORION_WORKER_SLOTS) "lots": not an integer`},
		{map[string]string{"ORION_SERVER": " , "}, nil, `--server (env ORION_SERVER): no URL given`},
		{map[string]string{"ORION_WORKER_NAME": "a/b"}, nil, `--name (env ORION_WORKER_NAME) "a/b": want 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{nil, []string{"--log-level", "loud"}, `--log-level (env ORION_WORKER_LOG_LEVEL) "loud"`},
		{nil, []string{"--config", "/nonexistent/worker.yaml"}, `config file /nonexistent/worker.yaml`},
	} {
		t.Run(c.want, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			r := run(t, "", append([]string{"worker"}, c.args...)...)
			must(t, r, ExitUsageOrError)
			contains(t, "stderr", r.err, "error: "+c.want)
		})
	}
}

// Bad etcd settings are refused before a member starts or a data dir is
// made.
func TestEtcdRefusesBadSettings(t *testing.T) {
	cleanEnv(t)
	r := run(t, "", "etcd")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--data-dir (env ORION_ETCD_DATA_DIR) is required")

	dir := t.TempDir() + "/member"
	t.Setenv("ORION_ETCD_ELECTION_MS", "100")
	r = run(t, "", "etcd", "--data-dir", dir, "--heartbeat-ms", "50")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, `--election-ms (env ORION_ETCD_ELECTION_MS) "100": must be at least 5x --heartbeat-ms (250)`)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir made for a refused member: %v", err)
	}

	// TLS: missing files, a certificate without its key, URLs that do
	// not match, each named.
	t.Setenv("ORION_ETCD_ELECTION_MS", "250")
	missing := filepath.Join(t.TempDir(), "nope.pem")
	r = run(t, "", "etcd", "--data-dir", dir, "--cert-file", missing, "--listen-client-url", "https://127.0.0.1:2379")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--cert-file (env ORION_ETCD_CERT_FILE) \""+missing+"\": cannot be read: no such file or directory")
	contains(t, "stderr", r.err, "--cert-file (env ORION_ETCD_CERT_FILE) needs --key-file (env ORION_ETCD_KEY_FILE)")
	r = run(t, "", "etcd", "--data-dir", dir, "--peer-client-cert-auth", "--listen-client-url", "https://127.0.0.1:2379")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--peer-client-cert-auth needs --peer-trusted-ca-file (env ORION_ETCD_PEER_TRUSTED_CA_FILE)")
	contains(t, "stderr", r.err, `--listen-client-url (env ORION_ETCD_LISTEN_CLIENT_URL) "https://127.0.0.1:2379": https needs --cert-file and --key-file`)
	notPEM := filepath.Join(t.TempDir(), "c.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, "", "etcd", "--data-dir", dir, "--cert-file", notPEM, "--key-file", notPEM)
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "not a PEM file")
	contains(t, "stderr", r.err, `--listen-client-url (env ORION_ETCD_LISTEN_CLIENT_URL) "http://127.0.0.1:2379": must be https: --cert-file turns TLS on`)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir made for a refused member: %v", err)
	}
}

// orion server --print-config shows the resolved settings: defaults <
// config file < ORION_* env < flags.
func TestServerPrintConfigPrecedence(t *testing.T) {
	cleanEnv(t)
	t.Chdir(t.TempDir()) // no config/orion.yaml here
	file := writeFile(t, "orion.yaml", "slots: 7\nname: from-file\nretry_base: 2s\n")
	printed := func(args ...string) map[string]any {
		t.Helper()
		r := run(t, "", append([]string{"server", "--print-config"}, args...)...)
		must(t, r, ExitOK)
		var m map[string]any
		if err := json.Unmarshal([]byte(r.out), &m); err != nil {
			t.Fatalf("%v: %s", err, r.out)
		}
		return m
	}
	if m := printed(); m["slots"] != float64(config.DefaultSlots) || m["listen"] != "127.0.0.1:8080" {
		t.Fatalf("defaults: %v", m)
	}
	if m := printed("--config", file); m["slots"] != 7.0 || m["name"] != "from-file" {
		t.Fatalf("file: %v", m)
	}
	t.Setenv("ORION_SLOTS", "9")
	if m := printed("--config", file); m["slots"] != 9.0 || m["name"] != "from-file" {
		t.Fatalf("env over file: %v", m)
	}
	if m := printed("--config", file, "--slots", "11"); m["slots"] != 11.0 {
		t.Fatalf("flag over env: %v", m)
	}
	// The token is never printed.
	t.Setenv("ORION_AUTH_TOKEN", "s3cret")
	r := run(t, "", "server", "--print-config")
	if strings.Contains(r.out, "s3cret") {
		t.Fatalf("token printed: %s", r.out)
	}
	// A bad value exits 2 and names the flag and its variable.
	t.Setenv("ORION_SLOTS", "four")
	r = run(t, "", "server", "--print-config")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, `--slots (env ORION_SLOTS) "four": not an integer`)
}

func TestDrillAndBenchRefuseBadUsage(t *testing.T) {
	cleanEnv(t)
	r0 := run(t, "", "drill", "--fault", "partition", "--server", "http://127.0.0.1:1")
	must(t, r0, ExitUsageOrError)
	contains(t, "stderr", r0.err, "`make drills` runs the partition drill")
	r0 = run(t, "", "drill", "--fault", "stop", "--stop-for", "500ms", "--server", "http://127.0.0.1:1")
	must(t, r0, ExitUsageOrError)
	contains(t, "stderr", r0.err, "--stop-for 500ms: at least 1.5s")
	r := run(t, "", "drill", "kill-leader")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--server: give the API URL of at least one replica (or set ORION_SERVER)")

	r = run(t, "", "drill", "kill-leader", "--server", "http://127.0.0.1:1", "--restart", "sometimes")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "sometimes")

	r = run(t, "", "bench", "--server", "http://127.0.0.1:1")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--etcd-endpoints: give the client URLs")

	r = run(t, "", "bench", "--server", "http://127.0.0.1:1", "--etcd-endpoints", "http://127.0.0.1:2", "--rate", "5", "--slots", "2")
	must(t, r, ExitUsageOrError)
	contains(t, "stderr", r.err, "--rate, --slots: only for the in-process bench, not with --server")
}
