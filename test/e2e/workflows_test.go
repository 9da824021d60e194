package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

// Parameters and outputs through the real binary, as a user runs them:
// `orion submit -p` sets the params a DAG file declares; a shell task
// publishes outputs through $ORION_OUTPUTS (both forms), an http task
// takes one from its JSON response; the tasks downstream get commands
// rendered from them (each writes what it got to a file); `orion get`
// shows the params and the outputs.
func TestParamsAndOutputs(t *testing.T) {
	n := newNode(t, "--slots", "4")
	n.start()
	work := t.TempDir()

	// The endpoint an http task calls: a JSON document, 127.0.0.1 only.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"items": [{"id": "batch-`+r.URL.Query().Get("region")+`"}], "count": 1}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	file := filepath.Join(work, "etl.yaml")
	body := fmt.Sprintf(`id: etl-inline
params:
  region: eu
  day:
  limit: 10
tasks:
  - id: list
    command: |
      echo "rows=42" >> "$ORION_OUTPUTS"
      printf 'files<<EOF\na.csv\nb.csv\nEOF\n' >> "$ORION_OUTPUTS"
      echo "region={{ params.region }}" >> "$ORION_OUTPUTS"
  - id: stats
    command: |
      echo '{"sizes": [3, 4], "ok": true}' > "$ORION_OUTPUTS"
  - id: call
    kind: http
    url: "http://%s/batches?region={{ tasks.list.outputs.region }}"
    outputs:
      json: {batch: ".items[0].id"}
    depends_on: [list]
  - id: load
    command: >-
      echo "{{ tasks.list.outputs.rows }} rows of {{ params.day }} in {{ tasks.list.outputs.region }},
      sizes {{ tasks.stats.outputs.sizes }}, first {{ split(tasks.list.outputs.files, "\n")[0] }},
      limit {{ params.limit * 2 }}, batch {{ tasks.call.outputs.batch }}" > %s/load.out
    depends_on: [call, stats]
`, ln.Addr(), work)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := n.orion("submit", "-f", file, "-p", "day=2026-11-27", "-p", "region=us", "--wait", "--timeout", "60s")
	if err != nil {
		t.Fatalf("orion submit: %v\n%s\n%s", err, out, n.logs())
	}
	got, err := os.ReadFile(filepath.Join(work, "load.out"))
	want := "42 rows of 2026-11-27 in us, sizes [3,4], first a.csv, limit 20, batch batch-us\n"
	if err != nil || string(got) != want {
		t.Fatalf("load wrote %q (%v), want %q", got, err, want)
	}

	out, err = n.orion("get", "dag", "etl-inline")
	if err != nil || !strings.Contains(out, "Params:\n  day     2026-11-27\n  limit   10\n  region  us\n") {
		t.Errorf("orion get dag: %v\n%s", err, out)
	}
	out, err = n.orion("get", "task", "etl-inline/list")
	if err != nil || !strings.Contains(out, "Outputs:\n  files   a.csv\\nb.csv\n  region  us\n  rows    42\n") {
		t.Errorf("orion get task: %v\n%s", err, out)
	}
	out, err = n.orion("get", "task", "etl-inline/call", "-o", "json")
	var call client.Task
	if err != nil || json.Unmarshal([]byte(out), &call) != nil || string(call.Outputs["batch"]) != `"batch-us"` {
		t.Errorf("orion get task -o json: %v\n%s", err, out)
	}
	// The stored spec keeps its templates; the attempt ran the rendered one.
	if !strings.Contains(call.Spec.URL, "{{ tasks.list.outputs.region }}") {
		t.Errorf("stored url %q", call.Spec.URL)
	}

	// The example in test/fixtures runs as its comment says.
	if out, err := n.orion("submit", "-f", fixture("etl-params.yaml"), "-p", "region=us", "--wait", "--timeout", "60s"); err != nil {
		t.Fatalf("etl-params.yaml: %v\n%s", err, out)
	}
	out, err = n.orion("get", "task", "etl-params/report")
	if err != nil || !strings.Contains(out, "Outputs:\n  total  1540\n") || !strings.Contains(out, "1540 rows into orders_us and customers_us") {
		t.Errorf("etl-params/report: %v\n%s", err, out)
	}
}

// What cannot work is said, naming it: a bad expression or reference is a
// 400 at submission; outputs over max_output_bytes fail their task with a
// message (and do not reach the task downstream); a template that cannot
// render fails its task without a retry.
func TestWorkflowErrors(t *testing.T) {
	n := newNode(t, "--slots", "2", "--max-output-bytes", "2048")
	n.start()
	for body, want := range map[string]string{
		"id: bad1\ntasks:\n- {id: a, command: 'echo {{ params.nope }}'}\n":                                   `task \"a\": command: params.nope is not declared`,
		"id: bad2\ntasks:\n- {id: a, command: 'echo {{ tasks.b.outputs.x }}'}\n- {id: b, command: 'true'}\n": `task \"a\": command: tasks.b is not upstream of a`,
		"id: bad3\ntasks:\n- {id: a, command: 'echo {{ 1 + }}'}\n":                                           `task \"a\": command: {{ 1 + }}`,
		"id: bad4\nparams: {day: null}\ntasks:\n- {id: a, command: 'echo {{ params.day }}'}\n":               `param day is required`,
	} {
		code, out := n.do("POST", "/api/v1/dags", "application/yaml", []byte(body))
		if code != 400 || !strings.Contains(string(out), want) || !strings.Contains(string(out), `"code":"invalid_dag"`) {
			t.Errorf("%q: %d %s\nwant 400 saying %s", body, code, out, want)
		}
	}
	code, out := n.do("POST", "/api/v1/dags?param=zone=a", "application/yaml", []byte("id: bad5\nparams: {day: x}\ntasks:\n- {id: a}\n"))
	if code != 400 || !strings.Contains(string(out), "param zone is not declared by the DAG (it declares day)") {
		t.Errorf("an undeclared override: %d %s", code, out)
	}

	n.submit(`id: too-big
tasks:
  - id: a
    max_retries: 0
    command: head -c 3000 /dev/zero | tr '\0' x | sed 's/^/blob=/' > "$ORION_OUTPUTS"
  - id: b
    command: echo {{ tasks.a.outputs.blob }}
    depends_on: [a]
  - id: c
    command: |
      echo '{"n": "x"}' > "$ORION_OUTPUTS"
  - id: d
    max_retries: 3
    command: echo {{ tasks.c.outputs.n + 1 }}
    depends_on: [c]
`)
	d := n.waitDAG("too-big", 60*time.Second)
	var a, dd struct {
		Status   string `json:"status"`
		Error    string `json:"error"`
		Attempts int    `json:"attempts"`
	}
	n.getJSON("/api/v1/dags/too-big/tasks/a", &a)
	n.getJSON("/api/v1/dags/too-big/tasks/d", &dd)
	if d.Status != "failed" || a.Status != "failed" || !strings.Contains(a.Error, "outputs file of 3005 bytes exceeds max_output_bytes (2048)") ||
		d.Task("b").Status != "upstream_failed" {
		t.Errorf("too-big: %s; a %s %q; b %s", d.Status, a.Status, a.Error, d.Task("b").Status)
	}
	if dd.Status != "failed" || dd.Attempts != 1 || !strings.Contains(dd.Error, "cannot render command: {{ tasks.c.outputs.n + 1 }}") {
		t.Errorf("d: %s after %d attempts, %q: want failed once, naming the field", dd.Status, dd.Attempts, dd.Error)
	}
}

// A scheduled run sees its tick as a parameter, and its data interval.
func TestScheduleTickParam(t *testing.T) {
	n := newNode(t, "--slots", "2")
	n.start()
	marks := t.TempDir()
	file := filepath.Join(t.TempDir(), "tick.yaml")
	body := fmt.Sprintf(`id: ticks
params:
  tick:
schedule:
  cron: "@every 2s"
  overlap: skip
tasks:
  - id: mark
    command: echo "{{ params.tick }} {{ run.interval_start }} {{ run.interval_end }} $ORION_SCHEDULE_TICK" > %s/$ORION_DAG_ID
`, marks)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := n.orion("submit", "-f", file); err != nil {
		t.Fatalf("orion submit -f: %v\n%s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		entries, _ := os.ReadDir(marks)
		if len(entries) > 0 {
			name := entries[0].Name()
			b, _ := os.ReadFile(filepath.Join(marks, name))
			line := strings.TrimSpace(string(b))
			if line == "" {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			// The run's id ends with its tick: ticks-20261127T000002Z.
			tick, err := time.Parse("20060102T150405Z", strings.TrimPrefix(name, "ticks-"))
			if err != nil {
				t.Fatalf("run id %q: %v", name, err)
			}
			ts := tick.UTC().Format(time.RFC3339)
			want := fmt.Sprintf("%s %s %s %s", ts, tick.Add(-2*time.Second).UTC().Format(time.RFC3339), ts, ts)
			if line != want {
				t.Fatalf("the run wrote %q, want %q", line, want)
			}
			d, _ := n.dag(name)
			t.Logf("run %s: %q (status %s)", name, line, d.Status)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run marked within 60s\n%s", n.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
