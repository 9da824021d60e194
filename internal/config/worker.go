package config

import (
	"errors"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/model"
)

// Worker is the resolved configuration of one `orion worker`.
type Worker struct {
	// Servers are the API URLs of the replicas, normalized
	// (client.NormalizeURL).
	Servers   []string `mapstructure:"server" json:"server"`
	Token     string   `mapstructure:"token" json:"-"`
	Slots     int      `mapstructure:"slots" json:"slots"`
	Name      string   `mapstructure:"name" json:"name"`
	LogDir    string   `mapstructure:"log_dir" json:"log_dir,omitempty"`
	LogLevel  string   `mapstructure:"log_level" json:"log_level"`
	LogFormat string   `mapstructure:"log_format" json:"log_format"`
	// LabelsSetting is --labels as given; Labels, parsed from it, go in
	// the worker's hello.
	LabelsSetting any          `mapstructure:"labels" json:"-"`
	Labels        model.Labels `mapstructure:"-" json:"labels,omitempty"`
}

// Environment variables of `orion worker` that it shares with the client
// commands.
const (
	EnvServer = "ORION_SERVER"
	EnvToken  = "ORION_AUTH_TOKEN"
)

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
	},
	EnvPrefix: WorkerEnvPrefix,
	Env:       map[string]string{"server": EnvServer, "token": EnvToken},
	ConfigEnv: WorkerEnvPrefix + "CONFIG",
}

// BindWorkerFlags defines the worker's flags on fs (--config among them)
// and binds them, the environment and the defaults into v.
func BindWorkerFlags(fs *pflag.FlagSet, v *viper.Viper) {
	workerSettings.Bind(fs, v)
	v.SetDefault(Key("server"), DefaultServer)
	fs.String("config", "", "config file; its keys are the flag names with underscores (server, token, slots, labels, name, log_dir, log_level, log_format); env "+workerSettings.ConfigEnv)
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
	return errors.Join(errs...)
}
