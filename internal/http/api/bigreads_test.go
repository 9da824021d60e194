package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
)

// bigEnv serves a DAG "big" of a start task, wide tasks after it (every
// tenth failed) and a join.
func bigEnv(t *testing.T, wide int) *env {
	e := newEnv(t, nil)
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	tasks := []model.Task{{ID: "start", Kind: model.KindNoop}}
	join := model.Task{ID: "join", Kind: model.KindNoop}
	for i := range wide {
		id := fmt.Sprintf("w%05d", i)
		tasks = append(tasks, model.Task{ID: id, Kind: model.KindNoop, DependsOn: []string{"start"}})
		join.DependsOn = append(join.DependsOn, id)
	}
	d := model.DAG{ID: "big", Name: "big", Tasks: append(tasks, join)}
	d.Normalize()
	recs := []core.Entry{{Rev: 11, DAG: "big", Task: "start", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Event: "succeed"}}}
	for i := 0; i < wide; i += 10 {
		recs = append(recs, core.Entry{Rev: 11, DAG: "big", Task: fmt.Sprintf("w%05d", i), T: &core.TaskRecord{Status: core.Failed,
			Run: 1, Attempt: 1, Event: "fail", StartedAt: &now, FinishedAt: &now}})
	}
	c := core.New(core.Config{})
	if errs := c.Restore(20, []core.Entry{{Rev: 10, DAG: "big", D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1, SubmittedAt: now}}}, recs); len(errs) > 0 {
		t.Fatal(errs)
	}
	e.f.set(func(f *fakeBackend) { f.c = c })
	return e
}

// GET /api/v1/dags/{id} of a big DAG lists its first tasks, says so and
// gives the shape; GET .../tasks pages every task, or the failed ones, or a
// shape node's.
func TestBigDAGHead(t *testing.T) {
	const wide = 2500
	e := bigEnv(t, wide)
	var v apitypes.DAG[string, string]
	r := e.do(t, "GET", "/api/v1/dags/big", "")
	if err := json.Unmarshal(r.body, &v); err != nil || r.code != 200 {
		t.Fatalf("%d %v", r.code, err)
	}
	if !v.TasksTruncated || len(v.Tasks) != apitypes.MaxViewTasks || v.TaskCount != wide+2 || v.Counts["failed"] != wide/10 ||
		v.Shape == nil || len(v.Shape.Nodes) != 3 || v.Shape.Nodes[1].ID != "~1" || v.Shape.Nodes[1].Counts["failed"] != wide/10 ||
		len(v.Shape.Edges) != 2 {
		t.Fatalf("head: truncated %v, %d tasks, counts %v, shape %+v", v.TasksTruncated, len(v.Tasks), v.Counts, v.Shape)
	}
	r = e.do(t, "GET", "/api/v1/dags/big?task_limit=0", "")
	if err := json.Unmarshal(r.body, &v); err != nil || len(v.Tasks) != 0 || v.Shape == nil {
		t.Fatalf("task_limit=0: %v %d tasks", err, len(v.Tasks))
	}
	if r := e.do(t, "GET", "/api/v1/dags/big?task_limit=x", ""); r.code != 400 {
		t.Fatalf("task_limit=x: %d", r.code)
	}

	pages := func(query string) (ids []string, n int) {
		cursor := ""
		for {
			p := "/api/v1/dags/big/tasks?" + query
			if cursor != "" {
				p += "&cursor=" + url.QueryEscape(cursor)
			}
			r := e.do(t, "GET", p, "")
			var page apitypes.TaskPage[string]
			if err := json.Unmarshal(r.body, &page); err != nil || r.code != 200 {
				t.Fatalf("GET %s: %d %s", p, r.code, r.body)
			}
			for _, tk := range page.Tasks {
				ids = append(ids, tk.ID)
			}
			n++
			if cursor = page.Next; cursor == "" || n > 100 {
				return ids, n
			}
		}
	}
	if ids, n := pages("limit=1000"); len(ids) != wide+2 || n != 3 {
		t.Fatalf("every task: %d in %d pages", len(ids), n)
	}
	if ids, _ := pages(""); len(ids) != wide+2 {
		t.Fatalf("every task, default pages: %d", len(ids))
	}
	if ids, _ := pages("status=failed&limit=7"); len(ids) != wide/10 || ids[0] != "w00000" {
		t.Fatalf("failed: %d, first %v", len(ids), ids[:1])
	}
	if ids, _ := pages("status=succeeded,failed"); len(ids) != wide/10+1 || ids[0] != "start" {
		t.Fatalf("succeeded and failed: %d", len(ids))
	}
	if ids, _ := pages("group=~1&status=ready"); len(ids) != wide-wide/10 {
		t.Fatalf("the node's ready tasks: %d", len(ids))
	}
	for q, code := range map[string]int{"status=nope": 400, "limit=0": 400, "limit=x": 400, "cursor=1": 400, "cursor=-1.0": 400,
		"group=join": 404, "group=~9": 404, "limit=5000": 200} {
		if r := e.do(t, "GET", "/api/v1/dags/big/tasks?"+q, ""); r.code != code {
			t.Errorf("?%s: %d, want %d: %s", q, r.code, code, r.body)
		}
	}
	if r := e.do(t, "GET", "/api/v1/dags/nope/tasks", ""); r.code != 404 {
		t.Errorf("no DAG: %d", r.code)
	}
}

// A small DAG's view is what it was: every task, no truncation, no shape.
func TestSmallDAGHeadUnchanged(t *testing.T) {
	e := newEnv(t, nil)
	m := e.do(t, "GET", "/api/v1/dags/d1", "").object(t)
	if _, ok := m["tasks_truncated"]; ok {
		t.Fatalf("tasks_truncated on a small DAG: %v", keys(m))
	}
	if _, ok := m["shape"]; ok {
		t.Fatalf("shape on a small DAG: %v", keys(m))
	}
	if n := len(m["tasks"].([]any)); n != 3 {
		t.Fatalf("%d tasks", n)
	}
}

// With a token, a handler's own 404 keeps its message: the request the
// mux routes is a copy carrying the principal, and the pattern is on it.
func TestNotFoundMessageWithAToken(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AuthToken = "token-0123456789abcdef" })
	r := e.do(t, "GET", "/api/v1/dags/nope", "", "Authorization", "Bearer token-0123456789abcdef")
	if r.code != 404 || !json.Valid(r.body) || !strings.Contains(string(r.body), "no DAG nope") {
		t.Fatalf("%d %s", r.code, r.body)
	}
}
