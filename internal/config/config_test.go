package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/orion-sched/orion/internal/model"
)

func load(t *testing.T, file string, env map[string]string, args ...string) (Server, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	v := viper.New()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	BindServerFlags(fs, v)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	s, _, err := LoadServer(v, file)
	return s, err
}

// Precedence: defaults < config file < ORION_* env < flags.
func TestPrecedence(t *testing.T) {
	t.Chdir(t.TempDir()) // no config/orion.yaml here
	file := filepath.Join(t.TempDir(), "orion.yaml")
	if err := os.WriteFile(file, []byte("slots: 7\nretry_base: 2s\nname: from-file\netcd_endpoints: [http://a:2379, http://b:2379]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := load(t, "", nil)
	if err != nil || s.Slots != DefaultSlots || s.RetryBase != time.Second || s.Listen != "127.0.0.1:8080" {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = load(t, file, nil)
	if err != nil || s.Slots != 7 || s.RetryBase != 2*time.Second || s.Name != "from-file" || len(s.EtcdEndpoints) != 2 {
		t.Fatalf("file: %+v %v", s, err)
	}
	s, err = load(t, file, map[string]string{"ORION_SLOTS": "9", "ORION_ETCD_ENDPOINTS": "http://x:1,http://y:2,http://z:3"})
	if err != nil || s.Slots != 9 || len(s.EtcdEndpoints) != 3 || s.RetryBase != 2*time.Second {
		t.Fatalf("env: %+v %v", s, err)
	}
	s, err = load(t, file, map[string]string{"ORION_SLOTS": "9"}, "--slots", "11", "--retry-base", "5ms")
	if err != nil || s.Slots != 11 || s.RetryBase != 5*time.Millisecond {
		t.Fatalf("flags: %+v %v", s, err)
	}
}

// Binding beyond loopback without a token is refused, naming the way out.
func TestNonLoopbackNeedsAuth(t *testing.T) {
	t.Chdir(t.TempDir())
	_, err := load(t, "", nil, "--listen", "0.0.0.0:8080")
	if err == nil || !strings.Contains(err.Error(), "--auth-token") {
		t.Fatalf("non-loopback without token: %v", err)
	}
	if _, err := load(t, "", nil, "--listen", "0.0.0.0:8080", "--auth-token", "s3cret-0123456789"); err != nil {
		t.Fatal(err)
	}
	// A token short enough to guess is refused where it is the only guard,
	// and accepted on loopback.
	if _, err := load(t, "", nil, "--listen", "0.0.0.0:8080", "--auth-token", "x"); err == nil || !strings.Contains(err.Error(), "auth_token is 1 characters") {
		t.Fatalf("a 1-character token on a network bind: %v", err)
	}
	if _, err := load(t, "", nil, "--listen", "127.0.0.1:8080", "--auth-token", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, "", nil, "--listen", "0.0.0.0:8080", "--insecure-no-auth"); err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, "", nil, "--listen", "[::1]:8080"); err != nil {
		t.Fatal(err)
	}
}

func TestValidationNamesTheSetting(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--slots", "-1"}, "slots"},
		{[]string{"--retry-base", "10s", "--retry-cap", "1s"}, "retry_base"},
		{[]string{"--session-ttl", "500ms"}, "session_ttl"},
		{[]string{"--log-format", "xml"}, "log_format"},
		{[]string{"--listen", "nope"}, "listen"},
		{[]string{"--max-live-dags", "0"}, "max_live_dags"},
		{[]string{"--max-live-tasks", "999"}, "max_live_tasks"}, // under max_tasks_per_dag
		{[]string{"--max-schedules", "0"}, "max_schedules"},
		{[]string{"--min-schedule-interval", "500ms"}, "min_schedule_interval"},
		{[]string{"--storage-admission-ratio", "0.99"}, "storage_admission_ratio"},
		{[]string{"--storage-admission-ratio", "0"}, "storage_admission_ratio"},
	} {
		if _, err := load(t, "", nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// The shipped config file documents every key the server reads.
func TestShippedConfigFileHasEveryKey(t *testing.T) {
	raw, err := os.ReadFile("../../config/orion.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range serverFlags {
		if !strings.Contains(string(raw), "\n"+Key(f.Name)+":") {
			t.Errorf("config/orion.yaml lacks %s", Key(f.Name))
		}
	}
}

// The built-in defaults alone are a valid configuration, equal to what
// LoadServer resolves with nothing set.
func TestDefaultsAreValid(t *testing.T) {
	d := Defaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Slots <= 0 || d.Listen == "" || d.SessionTTL <= 0 || d.MaxBodyBytes <= 0 {
		t.Fatalf("defaults missing: %+v", d)
	}
	loaded, err := load(t, "", nil, "--name", d.Name)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(loaded) != fmt.Sprint(d) {
		t.Fatalf("Defaults   %+v\nLoadServer   %+v", d, loaded)
	}
}

func TestLabelsAndPoolLimits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "orion.yaml")
	if err := os.WriteFile(file, []byte("labels: {pool: gpu, zone: a}\npool_limits: {gpu: 2, db: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := load(t, file, nil)
	if err != nil || model.FormatLabels(s.Labels) != "pool=gpu,zone=a" || s.PoolLimits["gpu"] != 2 || len(s.PoolLimits) != 2 {
		t.Fatalf("from file: %v %v, %v", s.Labels, s.PoolLimits, err)
	}
	s, err = load(t, file, map[string]string{"ORION_LABELS": "pool=cpu", "ORION_POOL_LIMITS": "gpu=3"})
	if err != nil || model.FormatLabels(s.Labels) != "pool=cpu" || s.PoolLimits["gpu"] != 3 || len(s.PoolLimits) != 1 {
		t.Fatalf("from env: %v %v, %v", s.Labels, s.PoolLimits, err)
	}
	s, err = load(t, file, nil, "--labels", "pool=big", "--pool-limits", "big=1,gpu=4")
	if err != nil || model.FormatLabels(s.Labels) != "pool=big" || s.PoolLimits["big"] != 1 || s.PoolLimits["gpu"] != 4 {
		t.Fatalf("from flags: %v %v, %v", s.Labels, s.PoolLimits, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool-limits", "gpu=-1"}, `--pool-limits (env ORION_POOL_LIMITS) "gpu=-1": pool gpu: limit "-1" must be a whole number ≥ 0`},
		{[]string{"--pool-limits", "gpu"}, `want pool=count`},
		{[]string{"--labels", "pool"}, `--labels (env ORION_LABELS) "pool": label "pool": want key=value`},
	} {
		if _, err := load(t, "", nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}
