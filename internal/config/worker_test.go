package config

import (
	"github.com/orion-sched/orion/internal/model"

	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// clearEnv unsets every variable the worker and the etcd member read, so a
// developer's own ORION_SERVER does not leak into a test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "ORION_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadWorker(t *testing.T, file string, env map[string]string, args ...string) (Worker, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	v := viper.New()
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	BindWorkerFlags(fs, v)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if file == "" {
		file, _ = fs.GetString("config")
	}
	w, _, err := LoadWorker(v, file)
	return w, err
}

// Precedence: defaults < config file < env (ORION_SERVER, ORION_AUTH_TOKEN,
// ORION_WORKER_*) < flags.
func TestWorkerPrecedence(t *testing.T) {
	clearEnv(t)
	host, _ := os.Hostname()
	w, err := loadWorker(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Servers) != 1 || w.Servers[0] != DefaultServer || w.Token != "" || w.Slots != DefaultSlots ||
		w.Name != host || w.LogLevel != "info" || w.LogFormat != "console" || w.LogDir != "" {
		t.Fatalf("defaults: %+v", w)
	}

	file := writeFile(t, "server: [10.0.0.1:8080, \"http://10.0.0.2:8080/\"]\ntoken: from-file\nslots: 3\nname: file-w\nlog_dir: /tmp/file-logs\nlog_format: json\n")
	w, err = loadWorker(t, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Servers, ",") != "http://10.0.0.1:8080,http://10.0.0.2:8080" || w.Token != "from-file" ||
		w.Slots != 3 || w.Name != "file-w" || w.LogDir != "/tmp/file-logs" || w.LogFormat != "json" {
		t.Fatalf("file: %+v", w)
	}

	env := map[string]string{
		"ORION_SERVER":            "http://e1:8080, e2:8080",
		"ORION_AUTH_TOKEN":        " from-env\n",
		"ORION_WORKER_SLOTS":      "5",
		"ORION_WORKER_NAME":       "env-w",
		"ORION_WORKER_LOG_DIR":    "/tmp/env-logs",
		"ORION_WORKER_LOG_FORMAT": "console",
	}
	w, err = loadWorker(t, file, env)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Servers, ",") != "http://e1:8080,http://e2:8080" || w.Token != "from-env" ||
		w.Slots != 5 || w.Name != "env-w" || w.LogDir != "/tmp/env-logs" || w.LogFormat != "console" {
		t.Fatalf("env over file: %+v", w)
	}

	w, err = loadWorker(t, file, env, "--server", "https://f:443/", "--token", "from-flag", "--slots", "7",
		"--name", "flag-w", "--log-dir", "/tmp/flag-logs", "--log-format", "json", "--log-level", "debug")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Servers, ",") != "https://f:443" || w.Token != "from-flag" || w.Slots != 7 ||
		w.Name != "flag-w" || w.LogDir != "/tmp/flag-logs" || w.LogFormat != "json" || w.LogLevel != "debug" {
		t.Fatalf("flags over env: %+v", w)
	}

	clearEnv(t)
	// The config file can come from --config or ORION_WORKER_CONFIG.
	w, err = loadWorker(t, "", map[string]string{"ORION_WORKER_CONFIG": file})
	if err != nil || w.Name != "file-w" {
		t.Fatalf("ORION_WORKER_CONFIG: %+v %v", w, err)
	}
	w, err = loadWorker(t, "", nil, "--config", file)
	if err != nil || w.Name != "file-w" {
		t.Fatalf("--config: %+v %v", w, err)
	}
}

// The worker does not read the server's settings: ORION_SLOTS is a
// replica's, not a worker's.
func TestWorkerIgnoresServerEnv(t *testing.T) {
	clearEnv(t)
	w, err := loadWorker(t, "", map[string]string{"ORION_SLOTS": "99", "ORION_NAME": "replica", "ORION_LOG_FORMAT": "xml"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Slots == 99 || w.Name == "replica" || w.LogFormat != "console" {
		t.Fatalf("read the server's env: %+v", w)
	}
}

// A bad value is refused with a message that names the flag, its
// environment variable and the value.
func TestWorkerBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--slots", "0"}, `--slots (env ORION_WORKER_SLOTS) "0": must be at least 1`},
		{map[string]string{"ORION_WORKER_SLOTS": "many"}, nil, `--slots (env ORION_WORKER_SLOTS) "many": not an integer`},
		{nil, []string{"--server", ""}, `--server (env ORION_SERVER): no URL given`},
		{map[string]string{"ORION_SERVER": ","}, nil, `--server (env ORION_SERVER): no URL given`},
		{nil, []string{"--server", "http://"}, `--server (env ORION_SERVER) "http:": want http://host:port`},
		{nil, []string{"--name", "a/b"}, `--name (env ORION_WORKER_NAME) "a/b": want 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{nil, []string{"--name", "a b"}, `--name (env ORION_WORKER_NAME) "a b": want 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{nil, []string{"--name", "gpu\x1b[2J"}, "--name (env ORION_WORKER_NAME) \"gpu\\x1b[2J\": want 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit"},
		{nil, []string{"--log-level", "loud"}, `--log-level (env ORION_WORKER_LOG_LEVEL) "loud": must be debug, info, warn or error`},
		{map[string]string{"ORION_WORKER_LOG_FORMAT": "xml"}, nil, `--log-format (env ORION_WORKER_LOG_FORMAT) "xml": must be console or json`},
	} {
		t.Run(c.want, func(t *testing.T) {
			clearEnv(t)
			_, err := loadWorker(t, "", c.env, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %s", err, c.want)
			}
		})
	}
	// Several mistakes are reported together.
	clearEnv(t)
	_, err := loadWorker(t, "", nil, "--slots", "-1", "--name", "x/y")
	if err == nil || !strings.Contains(err.Error(), "--slots") || !strings.Contains(err.Error(), "--name") {
		t.Fatalf("both mistakes: %v", err)
	}
	// A missing config file is an error that names it.
	_, err = loadWorker(t, filepath.Join(t.TempDir(), "nope.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing config file: %v", err)
	}
}

func TestWorkerLabels(t *testing.T) {
	w, err := loadWorker(t, "", map[string]string{"ORION_WORKER_LABELS": "pool=gpu, zone=a"})
	if err != nil || model.FormatLabels(w.Labels) != "pool=gpu,zone=a" {
		t.Fatalf("env: %v, %v", w.Labels, err)
	}
	w, err = loadWorker(t, "", nil, "--labels", "pool=cpu")
	if err != nil || model.FormatLabels(w.Labels) != "pool=cpu" {
		t.Fatalf("flag: %v, %v", w.Labels, err)
	}
	if _, err := loadWorker(t, "", nil, "--labels", "pool=a b"); err == nil || !strings.Contains(err.Error(), "--labels (env ORION_WORKER_LABELS)") {
		t.Fatalf("bad labels: %v", err)
	}
}
