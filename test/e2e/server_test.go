package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// The README's quick start: submit the ETL sample with the CLI and wait.
func TestQuickStartCLI(t *testing.T) {
	n := newNode(t)
	n.start()
	out, err := n.orion("submit", "-f", fixture("etl.yaml"), "--wait", "--id", "etl-1")
	if err != nil {
		t.Fatalf("orion submit --wait: %v\n%s\n%s", err, out, n.logs())
	}
	for _, want := range []string{"etl-1", "succeeded", "ATTEMPTS"} {
		if !strings.Contains(out, want) {
			t.Errorf("submit output lacks %q:\n%s", want, out)
		}
	}
	d, _ := n.dag("etl-1")
	if d.Status != "succeeded" {
		t.Fatalf("etl DAG %s: %+v", d.Status, d.Tasks)
	}
	for _, tk := range d.Tasks {
		if tk.Status != "succeeded" || tk.Attempts != 1 || tk.ExitCode == nil || *tk.ExitCode != 0 {
			t.Errorf("task %+v", tk)
		}
	}
	if out, err := n.orion("get", "dags"); err != nil || !strings.Contains(out, "etl-1") {
		t.Errorf("get dags: %v\n%s", err, out)
	}
	if out, err := n.orion("get", "dag", "etl-1"); err != nil || !strings.Contains(out, d.Tasks[0].ID) {
		t.Errorf("get dag: %v\n%s", err, out)
	}
	first := d.Tasks[0]
	out, err = n.orion("logs", "etl-1/"+first.ID)
	if err != nil || strings.TrimSpace(out) == "" || !strings.Contains(out, strings.TrimSpace(lastLine(first.OutputTail))) {
		t.Errorf("logs: %v\n%q (tail %q)", err, out, first.OutputTail)
	}
	// Resubmitting the same DAG with the same id is idempotent.
	if out, err := n.orion("submit", "-f", fixture("etl.yaml"), "--id", "etl-1"); err != nil {
		t.Errorf("idempotent resubmit: %v\n%s", err, out)
	}
	var list struct {
		DAGs []struct{ ID string } `json:"dags"`
	}
	n.getJSON("/api/v1/dags", &list)
	if len(list.DAGs) != 1 {
		t.Errorf("after idempotent resubmit there are %d DAGs", len(list.DAGs))
	}
	// Deleted, it is gone; its id is free again.
	if out, err := n.orion("delete", "etl-1"); err != nil || out != "dag etl-1: deleted\n" {
		t.Errorf("delete: %v\n%s", err, out)
	}
	if out, err := n.orion("get", "dag", "etl-1"); err == nil || !strings.Contains(out, "etl-1") {
		t.Errorf("get dag after delete: %v\n%s", err, out)
	}
	list.DAGs = nil
	n.getJSON("/api/v1/dags", &list)
	if len(list.DAGs) != 0 {
		t.Errorf("after delete there are %d DAGs", len(list.DAGs))
	}
	if out, err := n.orion("submit", "-f", fixture("etl.yaml"), "--wait", "--id", "etl-1"); err != nil {
		t.Errorf("submit again after delete: %v\n%s", err, out)
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// A mixed DAG: shell, sleep, a task that succeeds on its third attempt, one
// that fails for good and cascades, and a diamond.
func TestMixedDAGFinalStates(t *testing.T) {
	n := newNode(t)
	n.start()
	dir := t.TempDir()
	id := n.submit(fmt.Sprintf(`
id: mixed
name: mixed
tasks:
  - {id: extract, command: "echo extracted"}
  - {id: left, command: "echo left", depends_on: [extract], priority: 1}
  - {id: right, kind: sleep, duration: 100ms, depends_on: [extract]}
  - {id: join, kind: noop, depends_on: [left, right]}
  - {id: flaky, command: "echo try >> %[1]s/flaky; [ $(wc -l < %[1]s/flaky) -ge 3 ]", max_retries: 3}
  - {id: broken, command: "echo broken >&2; exit 7", max_retries: 2}
  - {id: downstream, kind: noop, depends_on: [broken]}
  - {id: further, kind: noop, depends_on: [downstream, join]}
  - {id: slowpoke, command: "sleep 5", timeout: 300ms, max_retries: 0}
`, dir))
	d := n.waitDAG(id, 60*time.Second)
	if d.Status != "failed" {
		t.Fatalf("DAG status %s, want failed", d.Status)
	}
	want := map[string]struct {
		status   string
		attempts int
	}{
		"extract": {"succeeded", 1}, "left": {"succeeded", 1}, "right": {"succeeded", 1}, "join": {"succeeded", 1},
		"flaky": {"succeeded", 3}, "broken": {"failed", 3}, "downstream": {"upstream_failed", 0},
		"further": {"upstream_failed", 0}, "slowpoke": {"failed", 1},
	}
	for id, w := range want {
		tk := d.Task(id)
		if tk.Status != w.status || tk.Attempts != w.attempts {
			t.Errorf("%s: %s after %d attempts, want %s after %d", id, tk.Status, tk.Attempts, w.status, w.attempts)
		}
	}
	if tk := d.Task("broken"); tk.ExitCode == nil || *tk.ExitCode != 7 || !strings.Contains(tk.OutputTail, "broken") {
		t.Errorf("broken: exit %v tail %q", tk.ExitCode, tk.OutputTail)
	}
	if !d.Task("downstream").Cascade {
		t.Errorf("downstream not marked as cascade")
	}
	if cluster.Lines(t, filepath.Join(dir, "flaky")) != 3 {
		t.Errorf("flaky ran %d times", cluster.Lines(t, filepath.Join(dir, "flaky")))
	}

	// Retry the failed DAG: only the failed and upstream-failed tasks run.
	if out, err := n.orion("retry", id); err != nil {
		t.Fatalf("retry: %v %s", err, out)
	}
	d = n.waitDAG(id, 60*time.Second)
	if d.Run != 2 || d.Task("broken").Attempts != 6 || d.Task("extract").Attempts != 1 || d.Task("flaky").Attempts != 3 {
		t.Errorf("after retry: run %d broken %d extract %d flaky %d", d.Run, d.Task("broken").Attempts, d.Task("extract").Attempts, d.Task("flaky").Attempts)
	}
}

// kill -9 of the server in the middle of DAGs, then start it again: every
// acknowledged DAG finishes, no task is lost, and tasks that had finished
// before the kill do not run again.
func TestKill9MidRunResumes(t *testing.T) {
	n := newNode(t, "--slots", "3")
	n.start()
	marks := t.TempDir()
	var ids []string
	for i := 0; i < 3; i++ {
		var b strings.Builder
		fmt.Fprintf(&b, "id: crash-%d\nname: crash-%d\ntasks:\n", i, i)
		for j := 0; j < 8; j++ {
			dep := ""
			if j >= 2 {
				dep = fmt.Sprintf(", depends_on: [t%d]", j-2)
			}
			fmt.Fprintf(&b, "  - {id: t%d, command: \"echo run >> %s/%d-%d; sleep 0.3\"%s}\n", j, marks, i, j, dep)
		}
		ids = append(ids, n.submit(b.String()))
	}
	// Let some tasks finish, then kill mid-run.
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, _ := n.dag(ids[0])
		if d.Counts["succeeded"] >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress before the kill: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	finishedBefore := map[string]bool{}
	for _, id := range ids {
		d, _ := n.dag(id)
		for _, tk := range d.Tasks {
			if tk.Status == "succeeded" {
				finishedBefore[id+"/"+tk.ID] = true
			}
		}
	}
	n.kill9()
	n.start()
	for i, id := range ids {
		d := n.waitDAG(id, 60*time.Second)
		if d.Status != "succeeded" {
			t.Errorf("%s ended %s", id, d.Status)
		}
		for j := 0; j < 8; j++ {
			runs := cluster.Lines(t, filepath.Join(marks, fmt.Sprintf("%d-%d", i, j)))
			key := fmt.Sprintf("%s/t%d", id, j)
			switch {
			case runs == 0:
				t.Errorf("%s never ran (lost)", key)
			case finishedBefore[key] && runs != 1:
				t.Errorf("%s finished before the kill but ran %d times", key, runs)
			case runs > 2:
				t.Errorf("%s ran %d times", key, runs)
			}
		}
	}
	if len(finishedBefore) == 0 {
		t.Fatal("the kill came before any task finished; the test proved nothing")
	}
}

// Bad input gets a 4xx JSON error naming the problem, and the server keeps
// serving.
func TestBadInputBattery(t *testing.T) {
	n := newNode(t, "--max-tasks-per-dag", "50", "--max-body-bytes", "65536")
	n.start()
	type tc struct {
		name, ctype string
		body        []byte
		status      int
		contains    string
	}
	var cases []tc
	entries, err := os.ReadDir(fixture("bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		body, _ := os.ReadFile(fixture("bad/" + e.Name()))
		ct := "application/json"
		if strings.HasSuffix(e.Name(), ".yaml") {
			ct = "application/yaml"
		}
		cases = append(cases, tc{e.Name(), ct, body, 400, ""})
	}
	var big strings.Builder
	big.WriteString(`{"name":"big","tasks":[`)
	for i := 0; i < 60; i++ {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `{"id":"t%d","kind":"noop"}`, i)
	}
	big.WriteString("]}")
	cases = append(cases,
		tc{"cycle path", "application/yaml", []byte("name: c\ntasks:\n- {id: a, depends_on: [c]}\n- {id: b, depends_on: [a]}\n- {id: c, depends_on: [b]}\n"), 400, "→"},
		tc{"empty body", "application/json", nil, 400, ""},
		tc{"truncated json", "application/json", []byte(`{"name": "x", "tasks": [`), 400, ""},
		tc{"unknown field", "application/json", []byte(`{"name":"x","tasks":[{"id":"a","kind":"noop","colour":"red"}]}`), 400, "colour"},
		tc{"wrong content type", "image/png", []byte{0x89, 'P', 'N', 'G'}, 415, ""},
		tc{"too many tasks", "application/json", []byte(big.String()), 400, "too_many_tasks"},
		tc{"body too large", "application/json", []byte(`{"name":"x","tasks":[{"id":"a","kind":"shell","command":"` + strings.Repeat("x", 70000) + `"}]}`), 413, ""},
		tc{"bad id", "application/json", []byte(`{"id":"a/b","name":"x","tasks":[{"id":"a","kind":"noop"}]}`), 400, ""},
	)
	for _, c := range cases {
		code, body := n.do("POST", "/api/v1/dags", c.ctype, c.body)
		var e struct {
			Error struct {
				Code    string   `json:"code"`
				Message string   `json:"message"`
				Details []string `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Errorf("%s: not a JSON error (%d): %s", c.name, code, body)
			continue
		}
		if code != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, code, c.status, body)
		}
		if c.contains != "" && !strings.Contains(string(body), c.contains) {
			t.Errorf("%s: error lacks %q: %s", c.name, c.contains, body)
		}
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/api/v1/dags/nope", 404}, {"POST", "/api/v1/dags/nope/cancel", 404},
		{"GET", "/api/v1/dags/nope/tasks/x", 404}, {"DELETE", "/api/v1/dags", 405}, {"GET", "/api/v1/nothing", 404},
	} {
		if code, body := n.do(c.method, c.path, "", nil); code != c.status || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
	// Still serving, nothing was written.
	var list struct {
		DAGs []json.RawMessage `json:"dags"`
	}
	if code, _ := n.getJSON("/api/v1/dags", &list); code != 200 || len(list.DAGs) != 0 {
		t.Fatalf("after bad input: %d, %d DAGs", code, len(list.DAGs))
	}
	id := n.submit("name: ok\ntasks:\n- {id: a, kind: noop}\n")
	if d := n.waitDAG(id, 20*time.Second); d.Status != "succeeded" {
		t.Fatalf("good DAG after bad input: %s", d.Status)
	}
}

// Operators read the log with plain etcdctl: every value under /orion/v1/
// (other than election keys) is JSON.
func TestEtcdctlShowsReadableJSON(t *testing.T) {
	etcdctl, err := exec.LookPath("etcdctl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("etcdctl missing in CI: .ci/run installs Debian's etcd-client")
		}
		t.Skip("etcdctl not installed (apt-get install etcd-client)")
	}
	n := newNode(t)
	n.start()
	id := n.submit("id: seen\nname: seen\ntasks:\n- {id: a, command: 'echo hi'}\n- {id: b, kind: noop, depends_on: [a]}\n")
	n.waitDAG(id, 20*time.Second)
	cmd := exec.Command(etcdctl, "--endpoints", n.etcdURL(), "get", "--prefix", "/orion/v1/", "-w", "json")
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("etcdctl: %v", err)
	}
	var resp struct {
		Kvs []struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	keys := map[string]map[string]any{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if strings.HasPrefix(k, "/orion/v1/election") {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			t.Errorf("%s is not JSON: %q", k, kv.Value)
		}
		keys[k] = v
	}
	if keys["/orion/v1/dags/seen"]["status"] != "succeeded" || keys["/orion/v1/tasks/seen/a"]["status"] != "succeeded" || keys["/orion/v1/tasks/seen/b"] == nil {
		t.Fatalf("keys: %v", keys)
	}
	// etcdctl elect -l prints the leader's name, then keeps listening.
	if got := etcdctlLeader(t, n.etcdURL()); got != "e2e" {
		t.Errorf("etcdctl elect -l named %q, want the leader's name e2e", got)
	}
}

// A port already taken, for the API or the embedded etcd member, ends
// `orion server` with an error that names the address (exit status 2, as
// every CLI error), never a panic, and leaves the server that holds the
// port alone. (A failed start used to panic on a nil *Server.)
func TestPortInUseFailsCleanly(t *testing.T) {
	n := newNode(t)
	n.start()
	for _, tc := range []struct {
		name, taken string
		args        []string
	}{
		{"api", fmt.Sprintf("127.0.0.1:%d", n.apiPort), []string{
			"--listen", fmt.Sprintf("127.0.0.1:%d", n.apiPort),
			"--embedded-etcd-client-url", fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
			"--embedded-etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
		}},
		{"etcd client", fmt.Sprintf("127.0.0.1:%d", n.etcdPort), []string{
			"--listen", fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)),
			"--embedded-etcd-client-url", n.etcdURL(),
			"--embedded-etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dataDir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"server", "--name", "second", "--data-dir", dataDir, "--log-format", "json"}, tc.args...)
			cmd := exec.CommandContext(ctx, cluster.Bin, args...)
			cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("second server: %v (want exit status 2)\n%s", err, out)
			}
			if strings.Contains(string(out), "panic:") || strings.Contains(string(out), "goroutine ") ||
				!strings.Contains(string(out), "error: ") || !strings.Contains(string(out), tc.taken) || !strings.Contains(string(out), "address already in use") {
				t.Fatalf("the error does not name %s in use (or panics):\n%s", tc.taken, out)
			}
			// The API port is tried first: a busy one costs no etcd start and
			// leaves no data dir behind.
			if _, err := os.Stat(dataDir); tc.name == "api" && !os.IsNotExist(err) {
				t.Fatalf("a start refused for its API port created %s", dataDir)
			}
		})
	}
	if code, body := n.do("GET", "/readyz", "", nil); code != http.StatusOK {
		t.Fatalf("the first server after the failed starts: %d %s", code, body)
	}
}
