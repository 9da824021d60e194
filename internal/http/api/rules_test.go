package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// A condition that does not compile, or reads a task it may not, is a 400
// that names the task and the field; nothing reaches the backend.
func TestSubmitBadCondition(t *testing.T) {
	e := newEnv(t, nil)
	for body, want := range map[string]string{
		`{"name":"x","tasks":[{"id":"a"},{"id":"b","depends_on":["a"],"when":"tasks.a.status =="}]}`:    `task "b": when: `,
		`{"name":"x","tasks":[{"id":"a"},{"id":"b","when":"tasks.a.status == 'failed'"}]}`:              `task "b": when: tasks.a: task a is not upstream of this task`,
		`{"name":"x","tasks":[{"id":"a","when":"params.day == 'x'"}]}`:                                  `task "a": when: params.day is not declared (it declares no params)`,
		`{"name":"x","tasks":[{"id":"a","trigger_rule":"sometimes"}]}`:                                  `task "a": trigger_rule "sometimes" is unknown`,
		`{"name":"x","tasks":[{"id":"a"}],"on_exit":{"command":"true","when":"tasks.zz.status == ''"}}`: `on_exit: when: tasks.zz: no task zz in the DAG`,
		`{"name":"x","tasks":[{"id":"a"}],"notify":[{"url":"http://h/","headers":{"Host":"evil"}}]}`:    `notify[0]: headers: Host is set by Orion or by the connection`,
	} {
		info := e.do(t, "POST", "/api/v1/dags", body, "Content-Type", "application/json").wantError(t, http.StatusBadRequest, dag.CodeInvalid)
		if !strings.Contains(info.Message, want) {
			t.Errorf("%s: message %q lacks %q", body, info.Message, want)
		}
	}
	if len(e.f.submitted) != 0 {
		t.Fatalf("invalid DAGs reached the backend: %d", len(e.f.submitted))
	}
}

// The views say what each task runs by, why a skipped one was, and what a
// DAG's handlers and notifications are; a notification's task is read by
// its id, brackets escaped in the path.
func TestRulesInViews(t *testing.T) {
	e := newEnv(t, nil)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := model.DAG{ID: "d3", Name: "rules", Tasks: []model.Task{
		{ID: "a", Kind: model.KindNoop, Timeout: model.Duration(time.Minute)},
		{ID: "b", Kind: model.KindNoop, DependsOn: []string{"a"}, TriggerRule: model.OneFailed, When: "dag.run > 1",
			ContinueOnFailure: true, Timeout: model.Duration(time.Minute)},
	}, OnExit: &model.Task{ID: model.OnExitID, Kind: model.KindNoop, Timeout: model.Duration(time.Minute)},
		Notify: []model.Notification{{URL: "http://127.0.0.1:9/hook", Method: "POST", Timeout: model.Duration(time.Minute)}}}
	e.f.set(func(f *fakeBackend) {
		f.c = core.New(core.Config{})
		errs := f.c.Restore(30, []core.Entry{{Rev: 21, DAG: "d3", D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1,
			SubmittedAt: now, CancelRequested: true}}}, []core.Entry{
			{DAG: "d3", Task: "a", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Worker: "w1", Event: "succeed"}},
			{DAG: "d3", Task: "b", T: &core.TaskRecord{Status: core.Skipped, Run: 1, Event: core.SkipTriggerRule}},
		})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
	})
	m := e.do(t, "GET", "/api/v1/dags/d3", "").object(t)
	if m["cancel_requested"] != true || m["task_count"] != float64(4) {
		t.Errorf("DAG: %v", m)
	}
	tasks := m["tasks"].([]any)
	want := []map[string]any{
		{"id": "a", "trigger_rule": "all_success", "role": "task"},
		{"id": "b", "trigger_rule": "one_failed", "when": "dag.run > 1", "role": "task", "status": "skipped", "skipped": "trigger_rule"},
		{"id": "on_exit", "trigger_rule": "all_success", "role": "handler", "status": "ready"},
		{"id": "notify[0]", "role": "notification", "kind": "http", "status": "pending"},
	}
	for i, w := range want {
		got := tasks[i].(map[string]any)
		for k, v := range w {
			if got[k] != v {
				t.Errorf("task %d: %s = %v, want %v", i, k, got[k], v)
			}
		}
	}
	if spec := tasks[1].(map[string]any)["spec"].(map[string]any); spec["continue_on_failure"] != true {
		t.Errorf("b's spec: %v", spec)
	}
	r := e.do(t, "GET", "/api/v1/dags/d3/tasks/notify%5B0%5D", "")
	if m := r.object(t); r.code != http.StatusOK || m["id"] != "notify[0]" || m["role"] != "notification" {
		t.Errorf("notify[0]: %d %s", r.code, r.body)
	}
}

// A cancel of a DAG with handlers answers once its cancellation is
// requested: running, and says so.
func TestCancelRequested(t *testing.T) {
	e := newEnv(t, nil)
	e.f.set(func(f *fakeBackend) { f.cancelSt = core.DAGRunning })
	m := e.do(t, "POST", "/api/v1/dags/d1/cancel", "").object(t)
	if m["status"] != "running" || m["cancel_requested"] != true {
		t.Errorf("cancel: %v", m)
	}
	// A retry answers running too, and is no cancellation.
	m = e.do(t, "POST", "/api/v1/dags/d1/retry", "").object(t)
	if _, ok := m["cancel_requested"]; ok {
		t.Errorf("retry: %v", m)
	}
}
