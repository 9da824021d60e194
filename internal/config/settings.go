package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Settings is one command's table of settings and how each is named in the
// environment. Server, Worker and Etcd are each read through one: Bind
// defines the flags and binds flag, environment variable and default into
// a viper; Load reads the config file, checks every value's type (naming
// the flag and its environment variable), and decodes the result into a
// struct by key.
type Settings struct {
	Flags []Flag
	// EnvPrefix names the environment form of a flag: EnvPrefix + the key
	// upper-cased (ORION_WORKER_ and log-dir: ORION_WORKER_LOG_DIR).
	EnvPrefix string
	// Env names the flags whose environment variable is not EnvPrefix +
	// KEY (flag name → variable), such as the worker's --server, which is
	// ORION_SERVER like the client commands'.
	Env map[string]string
	// ConfigEnv is the environment variable that names the config file
	// when --config is not given.
	ConfigEnv string
}

// EnvVar is the environment variable of the flag named name.
func (s Settings) EnvVar(name string) string {
	if e, ok := s.Env[name]; ok {
		return e
	}
	return EnvVar(s.EnvPrefix, name)
}

// Bind defines the flags on fs and binds each, its environment variable and
// its default into v, so that v resolves flag > env > config file > default.
func (s Settings) Bind(fs *pflag.FlagSet, v *viper.Viper) {
	for _, f := range s.Flags {
		bindFlag(fs, v, f, s.EnvVar(f.Name))
	}
}

// Invalid is the error for a bad value: it names the flag, its environment
// variable and the value, as `--slots (env ORION_WORKER_SLOTS) "0": must
// be at least 1`.
func (s Settings) Invalid(name string, value any, why string) error {
	return fmt.Errorf("--%s (env %s) %q: %s", name, s.EnvVar(name), fmt.Sprint(value), why)
}

// Load reads the config file into v (file; when empty, the file named by
// ConfigEnv; when that is empty too, none) and decodes the resolved
// settings into out, a pointer to a struct with mapstructure tags. It
// returns the config file it read. A value that is not of its setting's
// type (an integer, a boolean, a number, a duration) is an error naming the
// flag and its environment variable; strings are trimmed of surrounding
// space before they are parsed.
func (s Settings) Load(v *viper.Viper, file string, out any) (string, error) {
	if file == "" && s.ConfigEnv != "" {
		file = os.Getenv(s.ConfigEnv)
	}
	if err := ReadConfigFile(v, file); err != nil {
		return file, err
	}
	if err := s.decode(v, out); err != nil {
		return file, err
	}
	return file, nil
}

// ReadConfigFile reads file into v; an empty file reads nothing.
func ReadConfigFile(v *viper.Viper, file string) error {
	if file == "" {
		return nil
	}
	v.SetConfigFile(file)
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("config file %s: %w", file, err)
	}
	return nil
}

// decode parses every value that arrived as a string (from the environment
// or a quoted config value) by its setting's type, then unmarshals v into
// out. Without the first step an unparsable env value would only surface
// as a decoding error that names neither the flag nor the variable.
func (s Settings) decode(v *viper.Viper, out any) error {
	var errs []error
	for _, f := range s.Flags {
		key := Key(f.Name)
		raw, ok := v.Get(key).(string)
		if !ok {
			continue
		}
		t := strings.TrimSpace(raw)
		var (
			val any
			err error
			why string
		)
		switch f.Default.(type) {
		case string:
			if t == raw {
				continue
			}
			val = t
		case bool:
			val, err = strconv.ParseBool(t)
			why = "not a boolean"
		case int:
			val, err = strconv.Atoi(t)
			why = "not an integer"
		case int64:
			val, err = strconv.ParseInt(t, 10, 64)
			why = "not an integer"
		case float64:
			val, err = strconv.ParseFloat(t, 64)
			why = "not a number"
		case time.Duration:
			val, err = time.ParseDuration(t)
			why = "not a duration such as 30s or 5m"
		default: // lists: comma-separated, split when decoded
			continue
		}
		if err != nil {
			errs = append(errs, s.Invalid(f.Name, raw, why))
			continue
		}
		// The value is resolved already; setting it parsed changes no
		// precedence, it only spares the decoder from parsing it again.
		v.Set(key, val)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := v.Unmarshal(out); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
