package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A shell task takes a secret by reference (env_from): the process gets the
// value, read where it runs, and the value is nowhere else: not in etcd
// (its keys, nor any file of its data dir, WAL included), the API, the
// task's log or tail, nor the server's log. A missing secret fails the task
// saying which.
func TestSecretsNeverTouchEtcd(t *testing.T) {
	secrets := t.TempDir()
	const value = "pa55-w0rd-7f3c9e1d"
	if err := os.MkdirAll(filepath.Join(secrets, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "db", "password"), []byte(value), 0o400); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, "--secrets-dir", secrets)
	n.start()

	id := n.submit(`
id: with-secret
name: with-secret
tasks:
  - id: use
    max_retries: 0
    env_from: [{secret: db, key: password, as: DB_PASSWORD}]
    command: |
      echo "digest=$(printf %s "$DB_PASSWORD" | sha256sum | cut -c1-16)" >> "$ORION_OUTPUTS"
      echo "connecting with $DB_PASSWORD"
  - id: missing
    max_retries: 0
    env_from: [{secret: db, key: user, as: DB_USER}]
    command: echo never
`)
	d := n.waitDAG(id, 30*time.Second)
	checkStatuses(t, d.Status, "failed", d.Tasks, map[string]string{"use": "succeeded", "missing": "failed"})
	if tk := d.Task("use"); tk.OutputTail != "connecting with ***\n" {
		t.Errorf("tail %q: want the value masked", tk.OutputTail)
	}
	if tk := d.Task("missing"); !strings.Contains(tk.Error, "env_from DB_USER: secret db key user on worker") || !strings.Contains(tk.Error, "not found") {
		t.Errorf("missing secret: error %q", tk.Error)
	}

	// The task saw the value: its output is the value's digest.
	sum := sha256.Sum256([]byte(value))
	code, body := n.do("GET", "/api/v1/dags/"+id+"/tasks/use", "", nil)
	if want := `"digest":"` + hex.EncodeToString(sum[:])[:16] + `"`; code != 200 || !bytes.Contains(body, []byte(want)) {
		t.Errorf("GET the task: %d %s: want outputs with %s", code, body, want)
	}

	// Nowhere else: what the API shows, etcd's keys, every file of the
	// data dir (etcd's WAL and database, the task logs, the server's log).
	var seen []string
	for _, path := range []string{"/api/v1/dags/" + id, "/api/v1/dags/" + id + "/tasks/use", "/api/v1/dags/" + id + "/tasks/use/log",
		"/api/v1/dags?limit=100"} {
		code, body := n.do("GET", path, "", nil)
		if code != 200 {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
		if bytes.Contains(body, []byte(value)) {
			seen = append(seen, "GET "+path)
		}
	}
	out, err := exec.Command("etcdctl", "--endpoints", n.etcdURL(), "get", "--prefix", "/orion/").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(`"env_from":[{"secret":"db","key":"password","as":"DB_PASSWORD"}]`)) {
		t.Errorf("etcdctl get --prefix /orion/: %v: want the DAG record with its reference\n%.2000s", err, out)
	}
	if bytes.Contains(out, []byte(value)) {
		seen = append(seen, "etcdctl get --prefix /orion/")
	}
	n.stop() // etcd's files complete and closed
	err = filepath.WalkDir(n.dataDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(value)) {
			seen = append(seen, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) > 0 {
		t.Errorf("the secret's value is in: %s", strings.Join(seen, ", "))
	}
}
