package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

const paramsDAG = `id: p1
name: with params
params:
  region: eu
  day:
  n: 3
tasks:
  - id: a
    command: echo {{ params.region }} {{ params.day }}
    pool: "pool-{{ params.region }}"
  - id: b
    command: echo {{ tasks.a.outputs.rows }}
    depends_on: [a]
`

// ?param=name=value sets a declared param, for a YAML body as for JSON;
// the DAG submitted carries the values, and its pool is rendered.
func TestSubmitParams(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "POST", "/api/v1/dags?param=day=2026-11-27&param=n=4", paramsDAG, "Content-Type", "application/yaml")
	if r.code != http.StatusCreated {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	d := e.f.submitted[0]
	if string(d.Params["day"]) != `"2026-11-27"` || string(d.Params["n"]) != `4` || string(d.Params["region"]) != `"eu"` {
		t.Errorf("params %v", d.Params)
	}
	if d.Tasks[0].Pool != "pool-eu" || d.Tasks[0].Command != "echo {{ params.region }} {{ params.day }}" {
		t.Errorf("task a: pool %q command %q", d.Tasks[0].Pool, d.Tasks[0].Command)
	}
	b, _ := json.Marshal(d)
	r = e.do(t, "POST", "/api/v1/dags?param=region=us", string(b), "Content-Type", "application/json")
	if r.code != http.StatusCreated && r.code != http.StatusOK {
		t.Fatalf("JSON: status %d: %s", r.code, r.body)
	}
	if got := e.f.submitted[1]; string(got.Params["region"]) != `"us"` {
		t.Errorf("JSON: params %v", got.Params)
	}
}

// Each mistake is a 400 that names it: a param not declared, a required
// one unset, a malformed override, a template that does not compile or
// reads what its task cannot.
func TestSubmitParamErrors(t *testing.T) {
	e := newEnv(t, nil)
	for query, want := range map[string]string{
		"?param=day=1&param=zone=a": "param zone is not declared by the DAG (it declares day, n, region)",
		"":                          "param day is required",
		"?param=day":                `param "day": want name=value`,
	} {
		info := e.do(t, "POST", "/api/v1/dags"+query, paramsDAG, "Content-Type", "application/yaml").wantError(t, http.StatusBadRequest, dag.CodeInvalid)
		if !strings.Contains(info.Message, want) {
			t.Errorf("%q: %q, want %q", query, info.Message, want)
		}
	}
	for edit, want := range map[string]string{
		"echo {{ tasks.a.outputs.rows }}": "",
		"echo {{ tasks.b.status }}":       `task "b": command: tasks.b is not upstream of b`,
		"echo {{ params.zone }}":          `task "b": command: params.zone is not declared`,
		"echo {{ params.( }}":             `task "b": command: {{ params.( }}`,
	} {
		body := strings.Replace(paramsDAG, "echo {{ tasks.a.outputs.rows }}", edit, 1)
		r := e.do(t, "POST", "/api/v1/dags?param=day=x", body, "Content-Type", "application/yaml")
		if want == "" {
			if r.code >= 300 {
				t.Errorf("%q: status %d: %s", edit, r.code, r.body)
			}
			continue
		}
		info := r.wantError(t, http.StatusBadRequest, dag.CodeInvalid)
		if !strings.Contains(info.Message, want) {
			t.Errorf("%q: %q, want %q", edit, info.Message, want)
		}
	}
}

// A DAG's view carries its params and a scheduled run's times; a task's
// carries the outputs it published.
func TestViewsShowParamsAndOutputs(t *testing.T) {
	e := newEnv(t, nil)
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	d := &model.DAG{ID: "p", Name: "p", Params: model.Params{"region": []byte(`"eu"`)},
		Scheduled: &model.ScheduledRun{Schedule: "s", Tick: now, IntervalStart: now.Add(-time.Hour), IntervalEnd: now},
		Tasks:     []model.Task{{ID: "a", Kind: model.KindShell, Command: "true", Timeout: model.Duration(time.Minute)}}}
	c := core.New(core.Config{})
	if errs := c.Restore(5, []core.Entry{{Rev: 1, DAG: "p", D: &core.DAGRecord{DAG: *d, Status: core.DAGSucceeded, Run: 1, SubmittedAt: now}}},
		[]core.Entry{{Rev: 2, DAG: "p", Task: "a", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Event: "succeed",
			Outputs: model.Outputs{"rows": []byte(`42`), "files": []byte(`["a","b"]`)}}}}); len(errs) > 0 {
		t.Fatal(errs)
	}
	e.f.set(func(f *fakeBackend) { f.c = c })
	m := e.do(t, "GET", "/api/v1/dags/p", "").object(t)
	if p, _ := m["params"].(map[string]any); p["region"] != "eu" {
		t.Errorf("params %v", m["params"])
	}
	if s, _ := m["scheduled"].(map[string]any); s["tick"] != "2026-11-27T00:00:00Z" || s["interval_start"] != "2026-11-26T23:00:00Z" {
		t.Errorf("scheduled %v", m["scheduled"])
	}
	task := e.do(t, "GET", "/api/v1/dags/p/tasks/a", "").object(t)
	if o, _ := task["outputs"].(map[string]any); o["rows"] != float64(42) || len(o["files"].([]any)) != 2 {
		t.Errorf("outputs %v", task["outputs"])
	}
}
