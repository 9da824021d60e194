package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
)

func TestMain(m *testing.M) {
	pollInterval = 5 * time.Millisecond
	clientHook = func(c *client.Client) {
		c.Retries = client.RetryPolicy{MaxAttempts: 5, MaxElapsed: 5 * time.Second, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	}
	os.Exit(m.Run())
}

type result struct {
	out, err string
	code     int
}

// run executes the orion root as main would, with stdin as input.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	root := NewRoot() // the binary's own root: every command, every flag
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	code := Execute(context.Background(), root)
	return result{out.String(), errb.String(), code}
}

// cleanEnv keeps the developer's environment out of the tests.
func cleanEnv(t *testing.T) {
	t.Setenv(EnvServer, "")
	t.Setenv(EnvToken, "")
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func must(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.out, r.err)
	}
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}

var idPattern = regexp.MustCompile(`^\d{8}-\d{6}-[0-9a-f]{6}$`)

const seedYAML = `name: seed style
tasks:
  - name: extract
    type: python
    command: print("hi")
    env: {A: "1"}
  - name: load
    type: bash
    command: echo load
    dependencies: [extract]
    max_retries: 0
`

func TestSubmitInjectsIDAndKeepsFields(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "etl.yaml", seedYAML)
	r := run(t, "", "submit", "-f", file, "--server", f.URL)
	must(t, r, 0)
	id := strings.TrimSpace(r.out)
	if !idPattern.MatchString(id) {
		t.Fatalf("stdout %q is not a generated id", r.out)
	}
	s := f.lastSubmit()
	if s.contentType != "application/json" {
		t.Errorf("content type %q, want application/json for a re-marshalled body", s.contentType)
	}
	var sent map[string]any
	if err := json.Unmarshal(s.body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent["id"] != id || sent["name"] != "seed style" {
		t.Errorf("sent id/name %v/%v", sent["id"], sent["name"])
	}
	tasks := sent["tasks"].([]any)
	t0, t1 := tasks[0].(map[string]any), tasks[1].(map[string]any)
	if t0["name"] != "extract" || t0["interpreter"] != "python3" || t0["command"] != `print("hi")` ||
		t0["env"].(map[string]any)["A"] != "1" || t0["max_retries"] != 3.0 {
		t.Errorf("task 0 = %v", t0)
	}
	if t1["max_retries"] != 0.0 || t1["depends_on"].([]any)[0] != "extract" {
		t.Errorf("task 1 = %v", t1)
	}
	// The server stored what the file says.
	if d := f.dags[id]; d == nil || d.Tasks[0].Spec.Interpreter != "python3" || d.Tasks[1].MaxRetries != 0 {
		t.Errorf("stored %+v", d)
	}
}

func TestSubmitFileIDSentAsWritten(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	body := "id: my-dag\nname: n\ntasks:\n  - id: a\n    kind: noop\n"
	file := writeFile(t, "d.yml", body)
	t.Setenv(EnvServer, f.URL) // the server comes from the environment
	r := run(t, "", "submit", "-f", file)
	must(t, r, 0)
	if r.out != "my-dag\n" {
		t.Errorf("stdout %q", r.out)
	}
	if s := f.lastSubmit(); s.contentType != "application/yaml" || string(s.body) != body {
		t.Errorf("sent %q %q", s.contentType, s.body)
	}
	// Again: idempotent, reported as existing.
	r = run(t, "", "submit", "-f", file)
	must(t, r, 0)
	contains(t, "stderr", r.err, "already exists")
	// --id overrides the file's id.
	r = run(t, "", "submit", "-f", file, "--id", "other", "-o", "json")
	must(t, r, 0)
	var resp client.SubmitResponse
	if err := json.Unmarshal([]byte(r.out), &resp); err != nil || resp.ID != "other" || !resp.Created {
		t.Errorf("json %q: %+v %v", r.out, resp, err)
	}
}

// A YAML file larger than the server decodes as YAML (dag.MaxYAMLBytes)
// is sent as JSON, the same DAG.
func TestSubmitLargeYAMLGoesAsJSON(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	var b strings.Builder
	b.WriteString("id: wide\ntasks:\n")
	n := 0
	for ; b.Len() <= dag.MaxYAMLBytes; n++ {
		fmt.Fprintf(&b, "  - id: t%d\n    kind: noop\n", n)
	}
	file := writeFile(t, "wide.yaml", b.String())
	r := run(t, "", "submit", "-f", file, "--server", f.URL)
	must(t, r, 0)
	s := f.lastSubmit()
	var sent struct {
		ID    string `json:"id"`
		Tasks []struct {
			ID string `json:"id"`
		} `json:"tasks"`
	}
	if s.contentType != "application/json" {
		t.Fatalf("sent as %q", s.contentType)
	}
	if err := json.Unmarshal(s.body, &sent); err != nil || sent.ID != "wide" || len(sent.Tasks) != n || sent.Tasks[n-1].ID != fmt.Sprintf("t%d", n-1) {
		t.Fatalf("sent id %q, %d tasks (want %d): %v", sent.ID, len(sent.Tasks), n, err)
	}
}

func TestSubmitStdinJSON(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	r := run(t, ` {"name":"from stdin","tasks":[{"id":"a","kind":"sleep","duration":"1s","fail":0.5}]}`,
		"submit", "-f", "-", "--server", f.URL)
	must(t, r, 0)
	var sent map[string]any
	_ = json.Unmarshal(f.lastSubmit().body, &sent)
	task := sent["tasks"].([]any)[0].(map[string]any)
	if task["duration"] != "1s" || task["fail"] != 0.5 || sent["id"] != strings.TrimSpace(r.out) {
		t.Errorf("sent %v", sent)
	}
}

func TestSubmitLocalValidation(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "bad.yaml", "name: cyc\ntasks:\n  - {id: a, depends_on: [b]}\n  - {id: b, depends_on: [a]}\n  - {id: c, kind: shell}\n")
	r := run(t, "", "submit", "-f", file, "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: "+file+": 2 problems", "\n  task \"c\": shell task needs a command", "cycle")
	if len(f.requestLog()) != 0 {
		t.Errorf("invalid DAG was sent: %v", f.requestLog())
	}
	r = run(t, "", "submit", "-f", writeFile(t, "x.json", `{"name": "x", "tasks": [}`), "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "invalid JSON at line 1")
	r = run(t, "", "submit", "-f", filepath.Join(t.TempDir(), "missing.yaml"), "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: reading ")
	r = run(t, "", "submit", "-f", writeFile(t, "ok.yaml", "name: x\ntasks: [{id: a}]\n"), "--id", "bad/id", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, `--id "bad/id" is invalid`)
	r = run(t, "", "submit", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, `required flag(s) "file" not set`)
}

func TestSubmitServerRejects(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "d.yaml", "id: dup\nname: n\ntasks: [{id: a}]\n")
	must(t, run(t, "", "submit", "-f", file, "--server", f.URL), 0)
	// Same id, different content: the server says conflict.
	file2 := writeFile(t, "d.yaml", "id: dup\nname: n\ntasks: [{id: b}]\n")
	r := run(t, "", "submit", "-f", file2, "--server", f.URL)
	must(t, r, 2)
	if r.err != "error: dag dup exists with a different definition\n" {
		t.Errorf("stderr %q", r.err)
	}
	if strings.Contains(r.out+r.err, "Usage:") {
		t.Error("usage printed for an API error")
	}
}

// With the event stream, --wait reads the DAG once, follows its events and
// reads it again only when its record says it ended: no polling.
func TestSubmitWaitFollowsEvents(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.stream = true
	file := writeFile(t, "d.yaml", `id: ev-dag
name: pipeline
tasks:
  - {id: a, command: echo a}
  - {id: b, command: echo b, depends_on: [a]}
  - {id: c, depends_on: [a]}
`)
	r := run(t, "", "submit", "-f", file, "--wait", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "running  pending=3\n", "succeeded succeeded=3\n", "\ndag ev-dag succeeded in ")
	f.mu.Lock()
	defer f.mu.Unlock()
	var reads, streams []string
	for _, q := range f.requests {
		switch {
		case q == "GET /api/v1/dags/ev-dag":
			reads = append(reads, q)
		case strings.HasPrefix(q, "GET /api/v1/events"):
			streams = append(streams, q)
		}
	}
	if len(reads) != 2 || len(streams) != 1 || streams[0] != "GET /api/v1/events?since=12" {
		t.Errorf("want one read, one stream from the read's revision and the final read; requests: %q", f.requests)
	}
}

// A stream that breaks (its replica died) is followed again from a fresh
// read, and the wait still ends with the DAG.
func TestSubmitWaitStreamBreaks(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.stream, f.breakAfter = true, 1
	file := writeFile(t, "d.yaml", `id: ev-break
name: pipeline
tasks:
  - {id: a, command: echo a}
  - {id: b, command: echo b, depends_on: [a]}
  - {id: c, command: exit 1, depends_on: [b]}
`)
	r := run(t, "", "submit", "-f", file, "--wait", "--server", f.URL)
	must(t, r, 1)
	contains(t, "stdout", r.out, "\ndag ev-break failed in ")
	f.mu.Lock()
	defer f.mu.Unlock()
	streams := 0
	for _, q := range f.requests {
		if strings.HasPrefix(q, "GET /api/v1/events") {
			streams++
		}
	}
	if streams < 2 {
		t.Errorf("the stream was not opened again after it broke: %q", f.requests)
	}
}

func TestSubmitWaitSucceeded(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "d.yaml", `id: ok-dag
name: pipeline
tasks:
  - {id: a, command: echo a}
  - {id: b, command: echo b, depends_on: [a]}
  - {id: c, depends_on: [a]}
`)
	r := run(t, "", "submit", "-f", file, "--wait", "--server", f.URL)
	must(t, r, 0)
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	if lines[0] != "ok-dag" {
		t.Errorf("first line %q", lines[0])
	}
	progress := regexp.MustCompile(`^\d\d:\d\d:\d\d (running|succeeded)\s+\S`)
	var steps []string
	for _, l := range lines[1:] {
		if progress.MatchString(l) {
			steps = append(steps, l[9:])
		}
	}
	want := []string{
		"running  pending=3",
		"running  running=1 pending=2",
		"running  succeeded=1 running=2",
		"succeeded succeeded=3",
	}
	if strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Errorf("progress:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	contains(t, "stdout", r.out, "TASK  STATUS     ATTEMPTS  DURATION  EXIT\n", "a     succeeded  1         1.5s      0\n",
		"\ndag ok-dag succeeded in ")
}

func TestSubmitWaitFailed(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "d.yaml", `name: failing
tasks:
  - {id: a, command: exit 1}
  - {id: b, depends_on: [a]}
`)
	r := run(t, "", "submit", "-f", file, "--wait", "--server", f.URL)
	must(t, r, 1)
	contains(t, "stdout", r.out, "failed   failed=1 upstream_failed=1", "a     failed           1         1.5s      1\n",
		"b     upstream_failed  0         -         -\n")
	contains(t, "stderr", r.err, "error: dag ", " finished failed")
}

func TestSubmitWaitJSON(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "d.json", `{"id":"j1","name":"j","tasks":[{"id":"a"}]}`)
	r := run(t, "", "submit", "-f", file, "--wait", "-o", "json", "--server", f.URL)
	must(t, r, 0)
	var d client.DAG
	if err := json.Unmarshal([]byte(r.out), &d); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, r.out)
	}
	if d.ID != "j1" || d.Status != "succeeded" || len(d.Tasks) != 1 || d.Tasks[0].Status != "succeeded" {
		t.Errorf("final DAG %+v", d)
	}
	contains(t, "stderr", r.err, "running  pending=1")
}

func TestSubmitWaitTimeout(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.noAdvance = true
	file := writeFile(t, "d.yaml", "id: slow\nname: s\ntasks: [{id: a}]\n")
	r := run(t, "", "submit", "-f", file, "--wait", "--timeout", "50ms", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: timed out after 50ms waiting for dag slow (status running)")
}

func TestSubmitWaitRidesOut503(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "d.yaml", "id: flaky\nname: s\ntasks: [{id: a}]\n")
	// The submit itself and the first polls see 503: the client retries
	// within one call (the submission carries an id, so that is safe).
	f.unavail = 3
	r := run(t, "", "submit", "-f", file, "--wait", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "dag flaky succeeded")
	reqs := f.requestLog()
	if reqs[0] != "POST /api/v1/dags" || reqs[3] != "POST /api/v1/dags" {
		t.Errorf("requests %v", reqs)
	}
}

func TestGetDAGsRetries503(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.seed(t, "id: first\nname: one\ntasks: [{id: a}, {id: b, depends_on: [a]}]\n", 5)
	f.seed(t, "id: second\nname: two\ntasks: [{id: a, command: exit 1}]\n", 1)
	f.unavail = 2
	r := run(t, "", "get", "dags", "--server", f.URL)
	must(t, r, 0)
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout:\n%s", r.out)
	}
	header := regexp.MustCompile(`^ID\s+NAME\s+STATUS\s+TASKS\s+SUCCEEDED\s+FAILED\s+SUBMITTED\s+DURATION$`)
	if !header.MatchString(lines[0]) {
		t.Errorf("header %q", lines[0])
	}
	if !regexp.MustCompile(`^second\s+two\s+running\s+1\s+0\s+0\s+\d+m ago\s+\d+m\d\ds$`).MatchString(lines[1]) {
		t.Errorf("row 1 %q", lines[1])
	}
	if !regexp.MustCompile(`^first\s+one\s+succeeded\s+2\s+2\s+0\s+\d+m ago\s+\d+\.\ds$`).MatchString(lines[2]) {
		t.Errorf("row 2 %q", lines[2])
	}
	reqs := f.requestLog()
	if len(reqs) != 3 {
		t.Errorf("requests %v, want two 503s then success", reqs)
	}

	r = run(t, "", "get", "dags", "--status", "succeeded", "--limit", "1", "-o", "json", "--server", f.URL)
	must(t, r, 0)
	var l client.DAGList
	if err := json.Unmarshal([]byte(r.out), &l); err != nil || len(l.DAGs) != 1 || l.DAGs[0].ID != "first" || l.Node != "n1" {
		t.Errorf("json %s (%v)", r.out, err)
	}
	if last := f.requestLog()[3]; last != "GET /api/v1/dags?limit=1&status=succeeded" {
		t.Errorf("request %q", last)
	}

	r = run(t, "", "get", "dags", "--status", "cancelled", "--server", f.URL)
	must(t, r, 0)
	if r.out != "" || !strings.Contains(r.err, "No DAGs found.") {
		t.Errorf("empty list: %+v", r)
	}
}

func TestGetDAG(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.seed(t, "id: d1\nname: pipeline\ntasks: [{id: a, command: exit 1}, {id: b, depends_on: [a]}, {id: c}]\n", 2)
	r := run(t, "", "get", "dag", "d1", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "ID:         d1\n", "Name:       pipeline\n", "Status:     failed\n", "Run:        1\n",
		"Finished:   20", "Tasks:      3 (succeeded=1 failed=1 upstream_failed=1)\n")
	table := r.out[strings.Index(r.out, "TASK"):]
	want := "TASK  KIND   STATUS           ATTEMPTS  WORKER  DURATION  EXIT  ERROR\n" +
		"a     shell  failed           1         w1      1.5s      1     exit status 1 second line\n" +
		"b     noop   upstream_failed  0         -       -         -     -\n" +
		"c     noop   succeeded        1         w1      1.5s      0     -\n"
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}

	r = run(t, "", "get", "dag", "d1", "-o", "json", "--server", f.URL)
	must(t, r, 0)
	var d client.DAG
	if err := json.Unmarshal([]byte(r.out), &d); err != nil || d.Revision != 12 || d.Tasks[0].Error == "" {
		t.Errorf("json: %v %+v", err, d)
	}

	r = run(t, "", "get", "dag", "nope", "--server", f.URL)
	must(t, r, 2)
	if r.err != "error: dag \"nope\" not found\n" || r.out != "" {
		t.Errorf("not found: %+v", r)
	}
}

func TestGetTaskAndLogs(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.seed(t, "id: d1\nname: p\ntasks:\n  - {id: a, command: \"echo hi\", env: {X: '1'}, timeout: 90s}\n", 2)
	for _, args := range [][]string{{"d1/a"}, {"d1", "a"}} {
		r := run(t, "", append([]string{"get", "task", "--server", f.URL}, args...)...)
		must(t, r, 0)
		contains(t, "stdout", r.out, "DAG:         d1\n", "Task:        a\n", "Kind:        shell\n",
			"Command:     echo hi\n", "Env:         X\n", "Timeout:     1m30s\n", "Status:      succeeded\n",
			"Attempts:    1 (retries used 0 of 3)\n", "Exit code:   0\n",
			"\nHistory:\nATTEMPT  WORKER  OUTCOME    EXIT  DURATION  STARTED", "1        w1      succeeded  0     1.5s",
			"\nOutput (tail):\n  hello from a\n")
	}
	r := run(t, "", "get", "task", "d1", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, `want DAG/TASK or DAG TASK, got "d1"`)

	r = run(t, "", "logs", "d1/a", "--server", f.URL)
	must(t, r, 0)
	if r.out != "attempt one of a\n" {
		t.Errorf("log %q", r.out)
	}
	r = run(t, "", "logs", "d1", "a", "--attempt", "2", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: no log for attempt 2")
	if last := f.requestLog(); last[len(last)-1] != "GET /api/v1/dags/d1/tasks/a/log?attempt=2" {
		t.Errorf("request %q", last[len(last)-1])
	}
}

func TestCancelAndRetry(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.seed(t, "id: d1\nname: p\ntasks: [{id: a}, {id: b, depends_on: [a]}]\n", 1)
	r := run(t, "", "cancel", "d1", "--server", f.URL)
	must(t, r, 0)
	if r.out != "dag d1: cancelled\n" {
		t.Errorf("cancel %q", r.out)
	}
	r = run(t, "", "cancel", "d1", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: dag d1 is cancelled, not running")
	r = run(t, "", "retry", "d1", "-o", "json", "--server", f.URL)
	must(t, r, 0)
	var a client.ActionResponse
	if err := json.Unmarshal([]byte(r.out), &a); err != nil || a != (client.ActionResponse{ID: "d1", Status: "running"}) {
		t.Errorf("retry json %q", r.out)
	}
	r = run(t, "", "cancel", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "accepts 1 arg(s), received 0")
}

// A DAG with rules, handlers and notifications: its table says what each
// task runs by, and why a skipped one was; its tasks say it in full; a
// cancel says the DAG runs on while its handlers do.
func TestRulesAndHandlers(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	v := f.seed(t, `id: d1
name: release
tasks:
  - {id: deploy, command: "exit 1", max_retries: 0}
  - {id: rollback, depends_on: [deploy], trigger_rule: one_failed, when: 'tasks.deploy.status == "failed"'}
  - {id: lint, continue_on_failure: true}
on_exit: {command: "echo bye"}
notify: [{url: "http://127.0.0.1:9/hook", on: [failed]}]
`, 0)
	f.mu.Lock()
	v.Tasks[2].Status, v.Tasks[2].Skipped = client.StatusSkipped, "condition"
	f.mu.Unlock()
	f.noAdvance = true
	r := run(t, "", "get", "dag", "d1", "--server", f.URL)
	must(t, r, 0)
	table := r.out[strings.Index(r.out, "TASK"):]
	want := "TASK       KIND   STATUS               RULE                   ATTEMPTS  WORKER  DURATION  EXIT  ERROR\n" +
		"deploy     shell  pending              all_success            0         -       -         -     -\n" +
		"rollback   noop   pending              one_failed +when       0         -       -         -     -\n" +
		"lint       noop   skipped (condition)  all_success +continue  0         -       -         -     -\n" +
		"on_exit    shell  pending              handler                0         -       -         -     -\n" +
		"notify[0]  http   pending              notification           0         -       -         -     -\n"
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}

	r = run(t, "", "get", "task", "d1/rollback", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "Rule:        one_failed\n", "When:        tasks.deploy.status == \"failed\"\n")
	r = run(t, "", "get", "task", "d1/lint", "--server", f.URL)
	contains(t, "stdout", r.out, "On failure:  continue: a failure counts as a success", "Skipped:     condition: its when: was false\n")
	r = run(t, "", "get", "task", "d1/on_exit", "--server", f.URL)
	contains(t, "stdout", r.out, "Runs:        as the DAG's on_exit handler, once its tasks have ended\n")

	r = run(t, "", "cancel", "d1", "--server", f.URL)
	must(t, r, 0)
	if r.out != "dag d1: running, cancel requested: its tasks are being cancelled; its handlers and notifications run, "+
		"then it is cancelled (cancel again to stop them)\n" {
		t.Errorf("cancel %q", r.out)
	}
	r = run(t, "", "get", "dag", "d1", "--server", f.URL)
	contains(t, "stdout", r.out, "Status:     running (cancel requested: its handlers and notifications run, then it is cancelled)\n")
}

func TestDelete(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.seed(t, "id: d1\nname: p\ntasks: [{id: a}]\n", 1)
	r := run(t, "", "delete", "d1", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: DAG d1 is running: cancel it before deleting it")
	must(t, run(t, "", "cancel", "d1", "--server", f.URL), 0)
	r = run(t, "", "delete", "d1", "--server", f.URL)
	must(t, r, 0)
	if r.out != "dag d1: deleted\n" {
		t.Errorf("delete %q", r.out)
	}
	r = run(t, "", "delete", "d1", "-o", "json", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "d1")
	if got := f.requests[len(f.requests)-1]; got != "DELETE /api/v1/dags/d1" {
		t.Errorf("last request %q", got)
	}
}

func TestCluster(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	r := run(t, "", "cluster", "--server", f.URL)
	must(t, r, 0)
	want := `Node:              n1
Leader:            n2
Applied revision:  42

Replicas:
NAME  ROLE      APPLIED REV  LAG  API  LEADER SINCE
n1    follower  41           0    -    -
n2    leader    42           0    -    -

Workers:
ID  SLOTS  BUSY  CONNECTED  REPLICA  HOST        LABELS
w1  4      1     false      -        -           -
w2  2      0     false      -        gpu-node-1  pool=gpu,zone=a

etcd endpoints: http://10.0.0.1:2379, http://10.0.0.2:2379
`
	if r.out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.out, want)
	}
	r = run(t, "", "cluster", "-o", "yaml", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, `--output "yaml": want table or json`)
}

func TestAuthToken(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	f.token = "tok"
	r := run(t, "", "get", "dags", "--server", f.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: missing or invalid bearer token\n", "hint: pass --token or set ORION_AUTH_TOKEN")
	must(t, run(t, "", "get", "dags", "--server", f.URL, "--token", "tok"), 0)
	t.Setenv(EnvToken, "tok")
	must(t, run(t, "", "get", "dags", "--server", f.URL), 0)
	// The flag wins over the environment.
	must(t, run(t, "", "get", "dags", "--server", f.URL, "--token", "wrong"), 2)
}

func TestServerFailoverAndUnreachable(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	must(t, run(t, "", "cluster", "--server", deadURL+","+f.URL), 0)

	r := run(t, "", "cluster", "--server", deadURL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "error: cannot reach "+deadURL, "hint: is the server running?")
}

func TestExitCode(t *testing.T) {
	if ExitCode(nil) != 0 || ExitCode(errors.New("x")) != 2 ||
		ExitCode(&DAGUnsuccessfulError{ID: "d", Status: "cancelled"}) != 1 ||
		ExitCode(&client.APIError{Status: 500}) != 2 {
		t.Error("wrong exit codes")
	}
}

func TestHelpHasExamples(t *testing.T) {
	cleanEnv(t)
	for _, args := range [][]string{
		{"submit"}, {"get"}, {"get", "dags"}, {"get", "dag"}, {"get", "task"},
		{"logs"}, {"cancel"}, {"retry"}, {"cluster"},
	} {
		r := run(t, "", append(args, "--help")...)
		must(t, r, 0)
		contains(t, strings.Join(args, " ")+" --help", r.out, "Examples:", "  orion ", "--server", "--output")
	}
}

func TestFormatters(t *testing.T) {
	cases := map[time.Duration]string{
		850 * time.Millisecond:        "850ms",
		4200 * time.Millisecond:       "4.2s",
		3*time.Minute + 7*time.Second: "3m07s",
		2*time.Hour + 5*time.Minute:   "2h05m",
		50 * time.Hour:                "2d02h",
	}
	for d, want := range cases {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := formatCounts(map[string]int{"pending": 1, "running": 2, "succeeded": 3, "weird": 1, "failed": 0}); got != "succeeded=3 running=2 pending=1 weird=1" {
		t.Errorf("formatCounts = %q", got)
	}
	if got := truncate("abcdefghij", 8); got != "abcde..." {
		t.Errorf("truncate = %q", got)
	}
}

// A task retried more often than a record keeps attempts lists the last
// ones and says how many came before them: Attempts still counts them all.
func TestGetTaskSaysHowManyAttemptsAreNotKept(t *testing.T) {
	tk := &client.Task{ID: "a", Kind: "http", Status: client.StatusFailed, Attempts: 32, Retries: 15, MaxRetries: 15, HistoryOmitted: 26}
	for i := 27; i <= 31; i++ {
		tk.History = append(tk.History, client.Attempt{Attempt: i, Worker: "w1", Outcome: "fail", Error: "connection refused"})
	}
	var b strings.Builder
	if err := printTask(&b, "d1", tk); err != nil {
		t.Fatal(err)
	}
	contains(t, "stdout", b.String(), "Attempts:    32 (retries used 15 of 15)\n",
		"\nHistory (the last 5 earlier attempts; 26 before them are counted, not kept):\nATTEMPT", "\n27 ", "\n31 ")
}
