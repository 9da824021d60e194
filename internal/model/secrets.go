package model

import (
	"fmt"
	"regexp"
	"strings"
)

// SecretRef names one value a task's environment takes from a secret that
// the worker running it resolves (env_from): the DAG record, the API and
// etcd hold the reference, never the value. A worker reads it from
// <secrets_dir>/<Secret>/<Key>, the layout of a Kubernetes Secret mounted
// as a volume, so one mount per Secret serves a worker on Kubernetes and
// a directory of files serves one on a host.
type SecretRef struct {
	Secret string `json:"secret"`
	Key    string `json:"key"`
	As     string `json:"as"` // the environment variable
}

// Bounds of env_from, enforced at submission.
const (
	// MaxSecretRefs is how many secret references one task may hold.
	MaxSecretRefs = 32
	// MaxSecretValueBytes bounds one secret's value as a worker reads it
	// (Kubernetes bounds a whole Secret at 1 MiB).
	MaxSecretValueBytes = 64 << 10
)

var (
	// A Kubernetes object name (DNS subdomain): what a Secret may be called.
	secretNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	// A Kubernetes Secret's key; "." and ".." are refused apart.
	secretKeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)
	envNamePattern   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)
)

// ReservedEnvPrefix starts the variables Orion sets itself; a task's
// env_from may not name one.
const ReservedEnvPrefix = "ORION_"

// Problem says what is wrong with r, or "" when it is valid. A secret or
// key that could climb out of the secrets directory ("..", a slash) is
// refused by the patterns.
func (r SecretRef) Problem() string {
	switch {
	case !secretNamePattern.MatchString(r.Secret):
		return fmt.Sprintf("secret %q is invalid: want a Kubernetes Secret name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)", r.Secret)
	case !secretKeyPattern.MatchString(r.Key) || r.Key == "." || strings.HasPrefix(r.Key, ".."):
		return fmt.Sprintf("key %q is invalid: want letters, digits, '-', '_' and '.', not starting with '..'", r.Key)
	case !envNamePattern.MatchString(r.As):
		return fmt.Sprintf("as %q is invalid: want an environment variable name (letters, digits and '_', not starting with a digit)", r.As)
	case strings.HasPrefix(r.As, ReservedEnvPrefix):
		return fmt.Sprintf("as %q is invalid: names starting with %s are Orion's", r.As, ReservedEnvPrefix)
	}
	return ""
}
