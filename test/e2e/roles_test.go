package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// Tokens with roles, and workers with identities of their own: a viewer
// reads and may not submit, an operator submits and may not delete, an
// admin deletes; no API token opens the worker stream; a worker token's
// holder may be only the workers its token names, with only its labels, and
// may not take over another token's worker. The file is read again when it
// changes: a removed token stops working without a restart.
func TestRolesAndWorkerIdentities(t *testing.T) {
	const clusterToken = "cluster-token-0123456789abcdef"
	tok := map[string]string{"viewer": "viewer-token-aaaaaaaa", "viewer2": "viewer2-token-ffffffff", "operator": "operator-token-bbbbbbbb", "admin": "admin-token-cccccccc",
		"gpu": "gpu-worker-token-dddddddd", "gpu2": "gpu2-worker-token-eeeeeeee"}
	entries := map[string]string{
		"viewer":   fmt.Sprintf("  - {name: grafana, role: viewer, sha256: %s}", auth.Digest(tok["viewer"])),
		"viewer2":  fmt.Sprintf("  - {name: dashboard, role: viewer, sha256: %s}", auth.Digest(tok["viewer2"])),
		"operator": fmt.Sprintf("  - {name: ci, role: operator, sha256: %s}", auth.Digest(tok["operator"])),
		"admin":    fmt.Sprintf("  - {name: ops, role: admin, sha256: %s}", auth.Digest(tok["admin"])),
		"gpu":      fmt.Sprintf("  - {name: gpu-pool, role: worker, sha256: %s, worker_ids: [gpu-*], labels: {pool: gpu}}", auth.Digest(tok["gpu"])),
		"gpu2":     fmt.Sprintf("  - {name: gpu-pool-2, role: worker, sha256: %s, worker_ids: [gpu-*], labels: {pool: gpu}}", auth.Digest(tok["gpu2"])),
	}
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(names ...string) {
		t.Helper()
		var b strings.Builder
		b.WriteString("tokens:\n")
		for _, n := range names {
			b.WriteString(entries[n] + "\n")
		}
		if err := os.WriteFile(file+".tmp", []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	write("viewer", "viewer2", "operator", "admin", "gpu", "gpu2")
	n := newNode(t, "--auth-token", clusterToken, "--auth-tokens-file", file, "--slots", "0")
	n.token = clusterToken
	n.start()
	as := func(role, method, path string, body []byte) (int, string) {
		t.Helper()
		hdr := []string{"Content-Type", "application/yaml"}
		if role != "" {
			hdr = append(hdr, "Authorization", "Bearer "+tok[role])
		} else {
			hdr = append(hdr, "Authorization", "")
		}
		code, out := n.request(method, path, "", body, hdr...)
		return code, string(out)
	}
	dag := func(id string) []byte {
		return []byte(fmt.Sprintf("id: %s\ntasks:\n  - {id: t, pool: gpu, command: 'echo on $ORION_TASK_ID'}\n", id))
	}
	for _, c := range []struct {
		role, method, path string
		body               []byte
		code               int
		want               string
	}{
		{"", "GET", "/api/v1/dags", nil, 401, `"code":"unauthorized"`},
		{"viewer", "GET", "/api/v1/dags", nil, 200, ""},
		{"viewer", "GET", "/metrics", nil, 200, "orion_"},
		{"viewer", "POST", "/api/v1/dags", dag("by-viewer"), 403, `"code":"forbidden","message":"token \"grafana\" has role viewer: POST /api/v1/dags needs role operator"`},
		{"operator", "POST", "/api/v1/dags", dag("first"), 201, ""},
		{"operator", "DELETE", "/api/v1/dags/first", nil, 403, "needs role admin"},
		{"operator", "POST", "/api/v1/schedules", []byte("id: s\nschedule: {cron: '@hourly'}\ntasks: [{id: t}]\n"), 403, "needs role admin"},
		{"operator", "GET", "/internal/v1/worker", nil, 403, "needs role worker"},
		{"admin", "GET", "/internal/v1/worker", nil, 403, "needs role worker"},
		{"gpu", "GET", "/api/v1/dags", nil, 403, `token \"gpu-pool\" has role worker`},
		{"gpu", "POST", "/api/v1/dags", dag("by-worker"), 403, "needs role operator"},
	} {
		code, out := as(c.role, c.method, c.path, c.body)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("%s %s %s: %d %.300s; want %d with %s", c.role, c.method, c.path, code, out, c.code, c.want)
		}
	}

	// A worker with its token, id and labels runs the DAG.
	startWorker(t, n, "gpu-1", "--token", tok["gpu"], "--labels", "pool=gpu", "--slots", "2")
	if d := n.waitDAG("first", time.Minute); d.Status != "succeeded" || !strings.HasPrefix(d.Task("t").Worker, "gpu-1/") {
		t.Fatalf("first: %+v", d)
	}

	// The same token may not be another id, nor claim other labels: refused
	// at its hello, for good (it stops).
	for _, c := range []struct{ name, labels, want string }{
		{"cpu-1", "pool=gpu", `may not run a worker named \"cpu-1\"`},
		{"gpu-9", "pool=gpu,zone=a", "may not claim label zone=a"},
	} {
		_, logPath, exited := startWorker(t, n, c.name, "--token", tok["gpu"], "--labels", c.labels, "--slots", "1")
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("worker %s still runs: want it refused for good", c.name)
		}
		if b, _ := os.ReadFile(logPath); !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("worker %s: its log lacks %s:\n%s", c.name, c.want, b)
		}
	}

	// An API token does not open the stream (its worker keeps trying: the
	// tokens file may yet give it a worker token).
	_, opLog, _ := startWorker(t, n, "gpu-3", "--token", tok["operator"], "--labels", "pool=gpu", "--slots", "1")
	testkit.WaitFor(t, 30*time.Second, "the operator token's worker refused", func() bool {
		b, _ := os.ReadFile(opLog)
		return bytes.Contains(b, []byte("HTTP 403")) && bytes.Contains(b, []byte("needs role worker"))
	})

	// Another worker token's worker runs beside it (taking over a
	// connected worker's id is refused: TestIdentityHoldsItsWorkerID).
	startWorker(t, n, "gpu-2", "--token", tok["gpu2"], "--labels", "pool=gpu", "--slots", "1")
	if code, out := as("operator", "POST", "/api/v1/dags", dag("second")); code != 201 {
		t.Fatalf("second: %d %s", code, out)
	}
	if d := n.waitDAG("second", time.Minute); d.Status != "succeeded" || !strings.HasPrefix(d.Task("t").Worker, "gpu-") {
		t.Fatalf("second: %+v", d)
	}

	if code, out := as("admin", "DELETE", "/api/v1/dags/first", nil); code != 200 {
		t.Errorf("admin deletes: %d %s", code, out)
	}

	// Revoked by editing the file: refused within the re-read, no restart;
	// the streams open with revoked tokens end: the workers' (their tasks
	// then wait for a worker) and an event stream's.
	req, err := http.NewRequest("GET", n.url()+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok["viewer2"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", resp, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	t.Cleanup(func() { resp.Body.Close() })
	write("viewer", "admin")
	testkit.WaitFor(t, 30*time.Second, "the operator token revoked", func() bool {
		code, _ := as("operator", "GET", "/api/v1/dags", nil)
		return code == 401
	})
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Error("the revoked viewer's event stream is still open")
	}
	if code, out := as("admin", "POST", "/api/v1/dags", dag("third")); code != 201 {
		t.Fatalf("third: %d %s", code, out)
	}
	testkit.WaitFor(t, 30*time.Second, "third to wait for a worker", func() bool {
		d, _ := n.dag("third")
		return d != nil && strings.Contains(d.Task("t").Waiting, "no connected worker")
	})
	if code, out := as("viewer", "GET", "/api/v1/dags", nil); code != 200 {
		t.Errorf("viewer after the edit: %d %s", code, out)
	}
	if b, err := os.ReadFile(n.logPath); err != nil || bytes.Contains(b, []byte(tok["operator"])) || bytes.Contains(b, []byte(clusterToken)) {
		t.Errorf("a token in the server's log (%v)", err)
	}
}

// A task runs as its worker's user, beside the worker's credentials: it
// finds none of them in its environment, nor in its parent's (the process
// is not dumpable), nor in the reaper's.
func TestTasksCannotReadCredentials(t *testing.T) {
	const clusterToken = "cluster-token-never-in-a-task-0123"
	n := newNode(t, "--slots", "2")
	n.env = []string{"ORION_AUTH_TOKEN=" + clusterToken, "ORION_ETCD_PASSWORD=etcd-password-never-in-a-task"}
	n.token = clusterToken
	if os.Geteuid() == 0 {
		// Root reads any process's memory: the server runs as nobody, as
		// a deployment runs it as a user of its own.
		n.asUser = &syscall.Credential{Uid: 65534, Gid: 65534}
		// Its data dir and a copy of the binary where nobody can reach
		// them: under /tmp, not $TMPDIR or the checkout, which may be
		// closed to other users.
		base, err := os.MkdirTemp("/tmp", "orion-as-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		n.dataDir = filepath.Join(base, "data")
		n.logPath = filepath.Join(n.dataDir, "server.log")
		if err := os.Mkdir(n.dataDir, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{base, n.dataDir} {
			if err := os.Chmod(d, 0o777); err != nil { // past the umask
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(cluster.Bin)
		if err != nil {
			t.Fatal(err)
		}
		n.bin = filepath.Join(base, "orion")
		if err := os.WriteFile(n.bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.start()
	id := n.submit(`
id: snoop
tasks:
  - id: look
    command: |
      env
      cat /proc/$PPID/environ /proc/$PPID/cmdline 2>&1 | tr '\0' '\n'
      for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\0' '\n' | grep -a ORION_ ; done
      echo done looking
`)
	d := n.waitDAG(id, time.Minute)
	code, log := n.do("GET", "/api/v1/dags/"+id+"/tasks/look/log", "", nil)
	if d.Status != "succeeded" || code != 200 || !bytes.Contains(log, []byte("done looking")) {
		t.Fatalf("the task: %+v; log %d %s", d, code, log)
	}
	for _, secret := range []string{clusterToken, "etcd-password-never-in-a-task"} {
		if bytes.Contains(log, []byte(secret)) {
			t.Errorf("the task read %q:\n%s", secret, log)
		}
	}
	if !bytes.Contains(log, []byte("ORION_TASK_ID=look")) {
		t.Errorf("the task's own ORION_ variables are missing:\n%s", log)
	}
}
