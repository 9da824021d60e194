package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/orion-sched/orion/internal/model"
)

// MinMaskedSecretBytes is the shortest secret value masked in a task's
// output: a shorter one would blank ordinary words and numbers (Airflow
// draws the same line).
const MinMaskedSecretBytes = 5

// secretMask replaces a secret's value in a task's output.
const secretMask = "***"

// secretEnv reads the values of an attempt's env_from where it runs, from
// <secrets_dir>/<secret>/<key>, at each attempt, so that a rotated secret
// is read without a restart. The values go only into the process's
// environment: never into the result, the log or an error message.
func (l *Local) secretEnv(refs []model.SecretRef) (env []string, values [][]byte, err error) {
	if len(refs) == 0 {
		return nil, nil, nil
	}
	if l.secretsDir == "" {
		return nil, nil, errors.New("env_from: worker " + l.id + " has no secrets directory (set secrets_dir); " +
			"send tasks with secrets to workers that have them with a pool or selector")
	}
	for _, r := range refs {
		// Validated at submission; checked again because this is where a
		// path is built from it.
		if msg := r.Problem(); msg != "" {
			return nil, nil, fmt.Errorf("env_from: %s", msg)
		}
		v, err := readSecret(filepath.Join(l.secretsDir, r.Secret, r.Key))
		if err != nil {
			return nil, nil, fmt.Errorf("env_from %s: secret %s key %s on worker %s: %w", r.As, r.Secret, r.Key, l.id, err)
		}
		env = append(env, r.As+"="+string(v))
		values = append(values, v)
	}
	return env, values, nil
}

// readSecret reads one value: a regular file (a Kubernetes Secret volume's
// keys are symlinks to one), at most model.MaxSecretValueBytes, without NUL.
// Its errors name the file, never its content.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("not found (no file %s)", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	v, err := io.ReadAll(io.LimitReader(f, model.MaxSecretValueBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", path, err)
	case len(v) > model.MaxSecretValueBytes:
		return nil, fmt.Errorf("%s is larger than %d bytes", path, model.MaxSecretValueBytes)
	case bytes.IndexByte(v, 0) >= 0:
		return nil, fmt.Errorf("%s holds a NUL byte, which an environment variable cannot carry", path)
	}
	return v, nil
}

// outputsHoldNoSecret refuses outputs that carry a secret's value (as
// written, or as JSON escapes it): outputs are committed to etcd and shown
// by the API, where the value must never be. Failing says so; masking would
// hand the tasks downstream a wrong value.
func outputsHoldNoSecret(outputs model.Outputs, refs []model.SecretRef, values [][]byte) error {
	if len(outputs) == 0 {
		return nil
	}
	for i, v := range values {
		if len(v) < MinMaskedSecretBytes {
			continue
		}
		quoted, _ := json.Marshal(string(v))
		escaped := quoted[1 : len(quoted)-1]
		for name, o := range outputs {
			if bytes.Contains(o, v) || bytes.Contains(o, escaped) {
				return fmt.Errorf("output %s holds the value of env_from %s (secret %s key %s): outputs are stored in etcd and shown by the API; "+
					"pass the secret's reference to the tasks that need it instead", name, refs[i].As, refs[i].Secret, refs[i].Key)
			}
		}
	}
	return nil
}

// maskingWriter writes what passes through it to w with every secret value
// replaced by secretMask, including one split across writes: it holds back
// the longest end of what it has seen that could start a secret, until the
// next write or Flush says whether it does.
type maskingWriter struct {
	w       io.Writer
	secrets [][]byte
	pending []byte
}

// newMaskingWriter returns w itself when no value is long enough to mask.
func newMaskingWriter(w io.Writer, values [][]byte) io.Writer {
	var secrets [][]byte
	for _, v := range values {
		if len(v) >= MinMaskedSecretBytes {
			secrets = append(secrets, v)
		}
	}
	if len(secrets) == 0 {
		return w
	}
	return &maskingWriter{w: w, secrets: secrets}
}

func (m *maskingWriter) Write(p []byte) (int, error) {
	m.pending = append(m.pending, p...)
	for _, s := range m.secrets {
		if bytes.Contains(m.pending, s) {
			m.pending = bytes.ReplaceAll(m.pending, s, []byte(secretMask))
		}
	}
	keep := 0
	for _, s := range m.secrets {
		for k := min(len(s)-1, len(m.pending)); k > keep; k-- {
			if bytes.HasSuffix(m.pending, s[:k]) {
				keep = k
				break
			}
		}
	}
	n := len(m.pending) - keep
	if n > 0 {
		if _, err := m.w.Write(m.pending[:n]); err != nil {
			return len(p), err
		}
		m.pending = append(m.pending[:0], m.pending[n:]...)
	}
	return len(p), nil
}

// Flush writes what was held back: the output ended without completing a
// secret.
func (m *maskingWriter) Flush() error {
	if len(m.pending) == 0 {
		return nil
	}
	_, err := m.w.Write(m.pending)
	m.pending = m.pending[:0]
	return err
}
