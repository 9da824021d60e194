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
	"slices"
	"strings"
	"syscall"

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
	// Non-blocking: a FIFO put there would hold the open (and the
	// attempt, and the worker's shutdown) until someone wrote to it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
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

// secretForms are what masking and the outputs check look for, longest
// first (so that of two values, one inside the other, the longer is masked
// whole): each value of at least MinMaskedSecretBytes, the value without its
// trailing whitespace (a file written by echo ends with a newline the task
// rarely prints), and each of its lines long enough.
func secretForms(values [][]byte) [][]byte {
	var forms [][]byte
	add := func(b []byte) {
		if len(b) >= MinMaskedSecretBytes && !slices.ContainsFunc(forms, func(f []byte) bool { return bytes.Equal(f, b) }) {
			forms = append(forms, b)
		}
	}
	for _, v := range values {
		add(v)
		trimmed := bytes.TrimRight(v, " \t\r\n")
		add(trimmed)
		for _, line := range bytes.Split(trimmed, []byte("\n")) {
			add(bytes.TrimRight(line, "\r"))
		}
	}
	slices.SortStableFunc(forms, func(a, b []byte) int { return len(b) - len(a) })
	return forms
}

// maskText masks forms in s: for the messages Orion itself writes about an
// attempt (an outputs file's parse error quotes it).
func maskText(s string, forms [][]byte) string {
	for _, f := range forms {
		s = strings.ReplaceAll(s, string(f), secretMask)
	}
	return s
}

// outputsHoldNoSecret refuses outputs that carry a secret's value, in a name
// or a value, as written, as JSON escapes it, or as a JSON string decodes:
// outputs are committed to etcd and shown by the API, where the value must
// never be. Failing says so; masking would hand the tasks downstream a
// wrong value.
func outputsHoldNoSecret(outputs model.Outputs, forms [][]byte) error {
	if len(outputs) == 0 || len(forms) == 0 {
		return nil
	}
	found := func(b []byte) bool {
		for _, f := range forms {
			quoted, _ := json.Marshal(string(f))
			if bytes.Contains(b, f) || bytes.Contains(b, quoted[1:len(quoted)-1]) {
				return true
			}
		}
		return false
	}
	for name, raw := range outputs {
		var v any
		if found([]byte(name)) || found(raw) || (json.Unmarshal(raw, &v) == nil && anyString(v, func(s string) bool { return found([]byte(s)) })) {
			return fmt.Errorf("output %q holds the value of one of its env_from secrets: outputs are stored in etcd and shown by the API; "+
				"pass the secret's reference to the tasks that need it instead", maskText(name, forms))
		}
	}
	return nil
}

// anyString reports whether f holds for a string of v (a decoded JSON
// value), object keys included.
func anyString(v any, f func(string) bool) bool {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return anyString(e, f) })
	case map[string]any:
		for k, e := range x {
			if f(k) || anyString(e, f) {
				return true
			}
		}
	}
	return false
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

// newMaskingWriter returns w itself when there is nothing to mask. forms
// are secretForms': longest first.
func newMaskingWriter(w io.Writer, forms [][]byte) io.Writer {
	if len(forms) == 0 {
		return w
	}
	return &maskingWriter{w: w, secrets: forms}
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
