package executor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// writeSecret writes <dir>/<secret>/<key> as a Kubernetes Secret volume
// lays it out: the key is a symlink into a hidden data directory.
func writeSecret(t *testing.T, dir, secret, key, value string) {
	t.Helper()
	data := filepath.Join(dir, secret, "..data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, key), []byte(value), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, secret, key)); err != nil {
		t.Fatal(err)
	}
}

func withSecrets(refs ...model.SecretRef) func(string) model.Task {
	return func(cmd string) model.Task {
		s := shell(cmd)
		s.EnvFrom = refs
		return s
	}
}

// A shell task's env_from reads each value where the task runs, at each
// attempt; what it prints of them is masked in its tail and its log.
func TestEnvFromSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSecret(t, dir, "db", "password", "s3cr3t-pa55")
	writeSecret(t, dir, "api", "token", "tok-0123456789")
	h := newHarness(t, 2, func(c *LocalConfig) { c.SecretsDir = dir })
	task := withSecrets(model.SecretRef{Secret: "db", Key: "password", As: "DB_PASSWORD"},
		model.SecretRef{Secret: "api", Key: "token", As: "TOKEN"})

	// The process sees the values (checked without printing them whole),
	// and output that does print them is masked, also a value split
	// across two writes.
	id := h.start(task(`[ "$DB_PASSWORD" = s3cr3t-pa55 ] && [ "$TOKEN" = tok-0123456789 ] || exit 9
echo "db=$DB_PASSWORD"; printf 'tok-01234'; sleep 0.05; printf '56789 end\n'; echo "half=s3cr3t"`))
	r := h.wait(id, bound)
	if r.Outcome != model.Succeeded {
		t.Fatalf("%+v", r)
	}
	want := "db=***\n*** end\nhalf=s3cr3t\n"
	if r.OutputTail != want {
		t.Errorf("tail %q, want %q", r.OutputTail, want)
	}
	if got := h.logOf(id); got != want {
		t.Errorf("log %q, want %q", got, want)
	}

	// Outputs go to etcd: one that holds a value fails the attempt, also
	// when JSON escapes it, in a name, without the file's newline, and
	// written with \u escapes; a parse error never quotes it.
	writeSecret(t, dir, "q", "v", `qu"ote-1`)
	writeSecret(t, dir, "nl", "v", "line-ends-here\n")
	for _, cmd := range []string{
		`echo "leak=$TOKEN" >> "$ORION_OUTPUTS"`,
		`echo '{"x": ["qu\"ote-1"]}' > "$ORION_OUTPUTS"`,
		`echo "leak=$NL" >> "$ORION_OUTPUTS"`,
		`printf '{"%s": 1}' "$TOKEN" > "$ORION_OUTPUTS"`,
		`printf '{"x": "\\u0074ok-0123456789"}' > "$ORION_OUTPUTS"`,
		`printf 'ok=1\n%s\n' "$TOKEN" >> "$ORION_OUTPUTS"`,
		`printf 'x<<%s\nabc\n' "$TOKEN" >> "$ORION_OUTPUTS"`,
	} {
		leak := task(cmd)
		leak.EnvFrom = append(leak.EnvFrom, model.SecretRef{Secret: "q", Key: "v", As: "Q"}, model.SecretRef{Secret: "nl", Key: "v", As: "NL"})
		r := h.run(leak)
		if r.Outcome != model.Failed || r.Outputs != nil ||
			strings.Contains(r.Error+r.OutputTail, "0123456789") || strings.Contains(r.Error+r.OutputTail, "ote-1") || strings.Contains(r.Error+r.OutputTail, "ends-here") {
			t.Errorf("%s: %+v", cmd, r)
		}
	}

	// Rotated: the next attempt reads the new value.
	if err := os.WriteFile(filepath.Join(dir, "db", "..data", "password"), []byte("rotated-value"), 0o400); err != nil {
		t.Fatal(err)
	}
	if r := h.run(task(`[ "$DB_PASSWORD" = rotated-value ]`)); r.Outcome != model.Succeeded {
		t.Errorf("after rotation: %+v", r)
	}
}

// What cannot be resolved fails the attempt before it starts, naming the
// secret, the key and the worker, never a value.
func TestEnvFromFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSecret(t, dir, "db", "password", "hunter2-hunter2")
	if err := os.WriteFile(filepath.Join(dir, "db", "big"), bytes.Repeat([]byte("x"), model.MaxSecretValueBytes+1), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "db", "nul"), []byte("a\x00b"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "db", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "db", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 2, func(c *LocalConfig) { c.SecretsDir = dir })
	for _, c := range []struct {
		ref  model.SecretRef
		want string
	}{
		{model.SecretRef{Secret: "db", Key: "user", As: "U"}, "env_from U: secret db key user on worker w1: not found (no file " + filepath.Join(dir, "db", "user") + ")"},
		{model.SecretRef{Secret: "cache", Key: "password", As: "P"}, "secret cache key password on worker w1: not found"},
		{model.SecretRef{Secret: "db", Key: "big", As: "B"}, fmt.Sprintf("is larger than %d bytes", model.MaxSecretValueBytes)},
		{model.SecretRef{Secret: "db", Key: "nul", As: "N"}, "holds a NUL byte"},
		{model.SecretRef{Secret: "db", Key: "sub", As: "S"}, "is not a regular file"},
		{model.SecretRef{Secret: "db", Key: "fifo", As: "F"}, "is not a regular file"}, // and does not block
		// Refused at submission; refused here too, as it would build a
		// path out of the directory.
		{model.SecretRef{Secret: "..", Key: "password", As: "P"}, `secret ".." is invalid`},
		{model.SecretRef{Secret: "db", Key: "../db/password", As: "P"}, `key "../db/password" is invalid`},
	} {
		r := h.run(withSecrets(c.ref)(`echo ran`))
		if r.Outcome != model.Failed || !strings.Contains(r.Error, c.want) || strings.Contains(r.OutputTail, "ran") {
			t.Errorf("%+v: %+v, want failed with %q", c.ref, r, c.want)
		}
		if strings.Contains(r.Error+r.OutputTail, "hunter2") {
			t.Errorf("%+v: a value in the result: %+v", c.ref, r)
		}
	}

	// A worker without a secrets directory says so.
	plain := newHarness(t, 1)
	r := plain.run(withSecrets(model.SecretRef{Secret: "db", Key: "password", As: "P"})(`echo ran`))
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "worker w1 has no secrets directory (set secrets_dir)") {
		t.Errorf("no secrets dir: %+v", r)
	}

	// A secrets directory that is not one is said at start.
	if _, err := NewLocal(LocalConfig{ID: "w", Slots: 1, LogDir: t.TempDir(), SecretsDir: filepath.Join(dir, "db", "password")}); err == nil ||
		!strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("NewLocal with a file as secrets dir: %v", err)
	}
}

// The masking writer: every occurrence masked, whatever the write
// boundaries; short values left alone; what it holds back flushed.
func TestMaskingWriter(t *testing.T) {
	t.Parallel()
	secrets := secretForms([][]byte{[]byte("abcdef"), []byte("xyz12345"), []byte("abc")})
	in := "1abcdef2abcdexyz12345abcdef3abcde"
	want := "1***2abcde******3abcde"
	for size := 1; size <= len(in); size++ {
		var out bytes.Buffer
		w := newMaskingWriter(&out, secrets)
		for i := 0; i < len(in); i += size {
			w.Write([]byte(in[i:min(i+size, len(in))]))
		}
		w.(*maskingWriter).Flush()
		if out.String() != want {
			t.Errorf("writes of %d: %q, want %q", size, out.String(), want)
		}
	}
	var out bytes.Buffer
	if w := newMaskingWriter(&out, secretForms([][]byte{[]byte("abcd")})); w != &out {
		t.Errorf("only short values: a masking writer %T", w)
	}

	// Of two values, one inside the other, the longer is masked whole; a
	// value's trailing newline need not follow it, and each line of a
	// multi-line value is masked on its own.
	for _, c := range []struct {
		values   []string
		in, want string
	}{
		{[]string{"secretvalue1", "secretvalue12345"}, "token=secretvalue12345 and secretvalue1.", "token=*** and ***."},
		{[]string{"pa55word\n"}, "D pa55wordend\n", "D ***end\n"},
		{[]string{"-----BEGIN KEY-----\nAAAAbbbbCCCC\n-----END KEY-----\n"}, "key: AAAAbbbbCCCC\n", "key: ***\n"},
	} {
		var values [][]byte
		for _, v := range c.values {
			values = append(values, []byte(v))
		}
		var out bytes.Buffer
		w := newMaskingWriter(&out, secretForms(values))
		w.Write([]byte(c.in))
		w.(*maskingWriter).Flush()
		if out.String() != c.want {
			t.Errorf("%q with %q: %q, want %q", c.in, c.values, out.String(), c.want)
		}
	}
}
