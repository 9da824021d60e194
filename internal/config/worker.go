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
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/model"
)

// Worker is the resolved configuration of one `orion worker`.
type Worker struct {
	// Servers are the API URLs of the replicas, normalized
	// (client.NormalizeURL).
	Servers []string `mapstructure:"server" json:"server"`
	Token   string   `mapstructure:"token" json:"-"`
	// CAFile verifies https:// servers (empty: the system's CAs); CertFile
	// and KeyFile are the certificate the worker presents to servers that
	// require one (mutual TLS).
	CAFile   string `mapstructure:"ca_file" json:"ca_file,omitempty"`
	CertFile string `mapstructure:"cert_file" json:"cert_file,omitempty"`
	KeyFile  string `mapstructure:"key_file" json:"key_file,omitempty"`
	Slots    int    `mapstructure:"slots" json:"slots"`
	Name     string `mapstructure:"name" json:"name"`
	LogDir   string `mapstructure:"log_dir" json:"log_dir,omitempty"`
	// SecretsDir holds the secrets shell tasks read with env_from.
	SecretsDir string `mapstructure:"secrets_dir" json:"secrets_dir,omitempty"`
	LogLevel   string `mapstructure:"log_level" json:"log_level"`
	LogFormat  string `mapstructure:"log_format" json:"log_format"`
	// LabelsSetting is --labels as given; Labels, parsed from it, go in
	// the worker's hello.
	LabelsSetting any          `mapstructure:"labels" json:"-"`
	Labels        model.Labels `mapstructure:"-" json:"labels,omitempty"`
	// DrainTimeout is how long a worker told to stop (SIGTERM) lets the
	// attempts it runs finish before it cancels them.
	DrainTimeout time.Duration `mapstructure:"drain_timeout" json:"drain_timeout"`

	// Pod tasks (kind: pod): Pods makes the worker run them on the
	// Kubernetes API of the cluster it runs in, in PodNamespace (empty:
	// its own pod's namespace).
	Pods               bool          `mapstructure:"pods" json:"pods"`
	PodNamespace       string        `mapstructure:"pod_namespace" json:"pod_namespace,omitempty"`
	PodStuckTimeout    time.Duration `mapstructure:"pod_stuck_timeout" json:"pod_stuck_timeout"`
	PodDeleteSucceeded time.Duration `mapstructure:"pod_delete_succeeded" json:"pod_delete_succeeded"`
	PodDeleteFailed    time.Duration `mapstructure:"pod_delete_failed" json:"pod_delete_failed"`
	PodGCAfter         time.Duration `mapstructure:"pod_gc_after" json:"pod_gc_after"`
}

// Environment variables of `orion worker` that it shares with the client
// commands.
const (
	EnvServer   = "ORION_SERVER"
	EnvToken    = "ORION_AUTH_TOKEN"
	EnvCAFile   = "ORION_CA_FILE"
	EnvCertFile = "ORION_CERT_FILE"
	EnvKeyFile  = "ORION_KEY_FILE"
)

// DefaultDrainTimeout is --drain-timeout's default: below the 30 s a
// Kubernetes pod gets between SIGTERM and SIGKILL by default.
const DefaultDrainTimeout = 25 * time.Second

// DefaultServer is the API a worker (and a client command) reaches when
// neither --server nor ORION_SERVER is given.
const DefaultServer = "http://127.0.0.1:8080"

// WorkerEnvPrefix prefixes the environment form of the worker's other
// settings: --slots is ORION_WORKER_SLOTS. (Not ORION_SLOTS: that is the
// server's, and a worker must not pick up a replica's settings.)
const WorkerEnvPrefix = "ORION_WORKER_"

var workerSettings = Settings{
	Flags: []Flag{
		// Its own --server and --token shadow the root's persistent flags of
		// the same name, with help that fits a worker. The --server default
		// is viper's, not the flag's (BindWorkerFlags), so that the help keeps
		// saying where it comes from and an explicit empty --server is an
		// error rather than the default.
		{Name: "server", Default: "", Usage: "comma-separated API URLs of the replicas (env " + EnvServer + "; default " + DefaultServer + "); the worker learns the others from the one it reaches"},
		{Name: "token", Default: "", Usage: "bearer token of the API (env " + EnvToken + ")"},
		{Name: "slots", Default: DefaultSlots, Usage: "attempts run at once"},
		{Name: "labels", Default: "", Usage: "the worker's labels, as pool=gpu,zone=a: tasks that require labels (pool: gpu, selector: {...}) run only on workers that have them"},
		{Name: "name", Default: "", Usage: "worker name; its id is NAME/PID-RANDOM, new at each start (default: host name)"},
		{Name: "log-dir", Default: "", Usage: "where attempt logs are kept (default <tmp>/orion-logs)"},
		{Name: "log-level", Default: "info", Usage: "debug, info, warn or error"},
		{Name: "log-format", Default: "console", Usage: "console or json"},
		{Name: "drain-timeout", Default: DefaultDrainTimeout, Usage: "on SIGTERM, how long the attempts running get to finish (the worker takes no new ones meanwhile) before they are cancelled and re-queued; pod tasks' pods are left running for another worker"},
		{Name: "ca-file", Default: "", Usage: "CA bundle (PEM) that https:// servers are verified with; default the system's (env " + EnvCAFile + ")"},
		{Name: "cert-file", Default: "", Usage: "client certificate (PEM) for servers that require one (tls_client_ca_file), with --key-file (env " + EnvCertFile + ")"},
		{Name: "key-file", Default: "", Usage: "the client certificate's key (PEM) (env " + EnvKeyFile + ")"},
		{Name: "secrets-dir", Default: "", Usage: "directory of the secrets shell tasks take with env_from: <dir>/<secret>/<key>, one file per key (a Kubernetes Secret mounted as a volume has this layout); read at each attempt, never sent to the leader"},
		{Name: "pods", Default: false, Usage: "run pod tasks (kind: pod): one pod per attempt, on the Kubernetes API of the cluster this worker runs in, with its service account"},
		{Name: "pod-namespace", Default: "", Usage: "namespace of pod tasks' pods (default: the worker pod's own)"},
		{Name: "pod-stuck-timeout", Default: 2 * time.Minute, Usage: "a pod task fails when its container waits this long on an image it cannot pull or a Secret or ConfigMap that does not exist"},
		{Name: "pod-delete-succeeded", Default: time.Duration(0), Usage: "how long a succeeded pod task's pod is kept once its result is recorded"},
		{Name: "pod-delete-failed", Default: 10 * time.Minute, Usage: "how long a failed pod task's pod is kept once its result is recorded (for kubectl logs and describe)"},
		{Name: "pod-gc-after", Default: time.Hour, Usage: "finished pod tasks' pods still there this long after they ended (their worker died first) are deleted by any worker"},
	},
	EnvPrefix: WorkerEnvPrefix,
	Env:       map[string]string{"server": EnvServer, "token": EnvToken, "ca_file": EnvCAFile, "cert_file": EnvCertFile, "key_file": EnvKeyFile},
	ConfigEnv: WorkerEnvPrefix + "CONFIG",
}

// BindWorkerFlags defines the worker's flags on fs (--config among them)
// and binds them, the environment and the defaults into v.
func BindWorkerFlags(fs *pflag.FlagSet, v *viper.Viper) {
	workerSettings.Bind(fs, v)
	v.SetDefault(Key("server"), DefaultServer)
	fs.String("config", "", "config file; its keys are the flag names with underscores (server, token, slots, labels, name, log_dir, log_level, log_format, drain_timeout, pods, pod_namespace...); env "+workerSettings.ConfigEnv)
}

// LoadWorker resolves the worker's configuration, in increasing
// precedence: defaults, the config file (configFile, else the file named by
// ORION_WORKER_CONFIG, else none), the environment (ORION_SERVER,
// ORION_AUTH_TOKEN, ORION_WORKER_*), then flags. It returns the config file
// it read.
func LoadWorker(v *viper.Viper, configFile string) (Worker, string, error) {
	var w Worker
	used, err := workerSettings.Load(v, configFile, &w)
	if err != nil {
		return w, used, err
	}
	var servers []string
	for _, s := range splitList(w.Servers) {
		servers = append(servers, client.NormalizeURL(s))
	}
	w.Servers = servers
	w.Token = strings.TrimSpace(w.Token)
	if w.Labels, err = parseLabels(w.LabelsSetting); err != nil {
		return w, used, workerSettings.Invalid("labels", w.LabelsSetting, err.Error())
	}
	if w.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "worker"
		}
		w.Name = h
	}
	return w, used, w.Validate()
}

// Validate checks the worker's settings, with messages that name the flag
// and its environment variable.
func (w Worker) Validate() error {
	s := workerSettings
	var errs []error
	if len(w.Servers) == 0 {
		errs = append(errs, errors.New("--server (env "+EnvServer+"): no URL given"))
	}
	for _, srv := range w.Servers {
		if u, err := url.Parse(srv); err != nil || u.Host == "" {
			errs = append(errs, s.Invalid("server", srv, "want http://host:port"))
		}
	}
	if w.Slots < 1 {
		errs = append(errs, s.Invalid("slots", w.Slots, "must be at least 1"))
	}
	if !model.ValidWorkerName(w.Name) {
		// It prefixes the worker's id, which the leader checks.
		errs = append(errs, s.Invalid("name", w.Name, "want "+model.WorkerNameRule))
	}
	if _, err := zapcore.ParseLevel(w.LogLevel); err != nil {
		errs = append(errs, s.Invalid("log-level", w.LogLevel, "must be debug, info, warn or error"))
	}
	switch w.LogFormat {
	case "console", "json":
	default:
		errs = append(errs, s.Invalid("log-format", w.LogFormat, "must be console or json"))
	}
	if w.DrainTimeout < 0 {
		errs = append(errs, s.Invalid("drain-timeout", w.DrainTimeout, "must not be negative"))
	}
	if w.PodNamespace != "" && len(validation.IsDNS1123Label(w.PodNamespace)) > 0 {
		errs = append(errs, s.Invalid("pod-namespace", w.PodNamespace, "not a namespace name: "+validation.IsDNS1123Label(w.PodNamespace)[0]))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"pod-stuck-timeout", w.PodStuckTimeout}, {"pod-gc-after", w.PodGCAfter}} {
		if d.v <= 0 {
			errs = append(errs, s.Invalid(d.name, d.v, "must be more than 0"))
		}
	}
	if w.PodDeleteSucceeded < 0 || w.PodDeleteFailed < 0 {
		errs = append(errs, s.Invalid("pod-delete-failed", w.PodDeleteFailed, "pod-delete-succeeded and pod-delete-failed must not be negative"))
	}
	if keep := max(w.PodDeleteSucceeded, w.PodDeleteFailed); w.PodGCAfter > 0 && w.PodGCAfter <= keep {
		errs = append(errs, s.Invalid("pod-gc-after", w.PodGCAfter, fmt.Sprintf("must be longer than pods are kept (%s): the sweep would delete them first", keep)))
	}
	if _, reserved := w.Labels[model.PodsLabel]; reserved {
		errs = append(errs, s.Invalid("labels", w.LabelsSetting, model.PodsLabel+" is the worker's own: --pods sets it"))
	} else if w.Pods && len(w.Labels) >= model.MaxLabels {
		// The leader refuses a hello with more labels, for good.
		errs = append(errs, s.Invalid("labels", w.LabelsSetting, fmt.Sprintf("%d labels: with --pods at most %d (--pods adds %s)", len(w.Labels), model.MaxLabels-1, model.PodsLabel)))
	}
	return errors.Join(errs...)
}
