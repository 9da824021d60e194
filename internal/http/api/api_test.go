package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/http/openapi/openapitest"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// fakeBackend holds a real core restored from records, so Query runs the
// same view code as the engine.
type fakeBackend struct {
	mu        sync.Mutex
	c         *core.Core
	st        *engine.Status
	leader    string
	leaderErr error
	submitErr error
	submitted []*model.DAG
	seen      map[string]bool
	blockSub  bool // Submit waits for its context to end
	cancelErr error
	cancelSt  core.DAGStatus // what Cancel answers; cancelled when empty
	retryErr  error
	deleteErr error
	cancelled []string
	retried   []string
	deleted   []string
	panicky   bool // reads panic
}

func (f *fakeBackend) Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error) {
	if f.blockSub {
		<-ctx.Done()
		return engine.SubmitResult{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil {
		return engine.SubmitResult{}, f.submitErr
	}
	if d.ID == "" {
		d.ID = dag.NewID(time.Now())
	}
	f.submitted = append(f.submitted, d)
	if f.seen[d.ID] {
		return engine.SubmitResult{ID: d.ID, Created: false}, nil
	}
	f.seen[d.ID] = true
	return engine.SubmitResult{ID: d.ID, Created: true}, nil
}

// WaitApplied: the fake applies everything at once.
func (f *fakeBackend) WaitApplied(ctx context.Context, rev int64) error { return ctx.Err() }

func (f *fakeBackend) Cancel(ctx context.Context, id string) (core.DAGStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancelErr != nil {
		return "", f.cancelErr
	}
	f.cancelled = append(f.cancelled, id)
	if f.cancelSt != "" {
		return f.cancelSt, nil
	}
	return core.DAGCancelled, nil
}

func (f *fakeBackend) Retry(ctx context.Context, id string, run int) (core.DAGStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.retryErr != nil {
		return "", f.retryErr
	}
	if run > 0 {
		id = fmt.Sprintf("%s@%d", id, run)
	}
	f.retried = append(f.retried, id)
	return core.DAGRunning, nil
}

func (f *fakeBackend) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	f.deleted = append(f.deleted, id)
	return nil
}

// read reads the fake's core as the engine's typed reads do on its loop.
func (f *fakeBackend) read(fn func(c *core.Core)) {
	if f.panicky {
		panic("boom")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.c)
}

func (f *fakeBackend) DAGs(ctx context.Context, q core.DAGQuery) (dags []core.DAGSummary, rev int64, err error) {
	f.read(func(c *core.Core) { dags, rev = c.DAGs(q), c.Rev() })
	return dags, rev, nil
}

func (f *fakeBackend) DAG(ctx context.Context, id string) (v *core.DAGView, rev int64, err error) {
	f.read(func(c *core.Core) { v, _ = c.DAG(id); rev = c.Rev() })
	return v, rev, nil
}

// DAGHead and Tasks read as the engine's do, building the shape each time
// where the engine keeps it.
func (f *fakeBackend) DAGHead(ctx context.Context, id string, limit int) (r engine.HeadRead, err error) {
	f.read(func(c *core.Core) {
		r.Rev = c.Rev()
		if r.View, r.Truncated, _ = c.DAGHead(id, limit); r.Truncated {
			r.Shape, _ = c.Shape(id)
			r.Counts, _ = c.ShapeCounts(r.Shape)
		}
	})
	return r, nil
}

func (f *fakeBackend) Tasks(ctx context.Context, id string, q engine.TasksQuery) (r engine.TasksRead, err error) {
	f.read(func(c *core.Core) {
		r.Rev = c.Rev()
		cq := core.TaskQuery{Statuses: q.Statuses, Group: q.Group, From: q.Cursor, Limit: q.Limit}
		if strings.HasPrefix(q.Group, core.ShapeGroupPrefix) {
			s, ok := c.Shape(id)
			if r.DAGFound = ok; !ok || s.Node(q.Group) == nil {
				return
			}
			cq.Group, cq.Members = "", s.Node(q.Group).Members
		}
		var err error
		if r.Page, r.DAGFound, err = c.TaskPage(id, cq); err != nil {
			r.Page = nil
		}
	})
	return r, nil
}

func (f *fakeBackend) Task(ctx context.Context, dagID, taskID string) (r engine.TaskRead, err error) {
	f.read(func(c *core.Core) {
		r.View, r.DAGFound = c.Task(dagID, taskID)
		if !r.DAGFound {
			_, r.DAGFound = c.Summary(dagID)
		}
		r.Rev = c.Rev()
	})
	return r, nil
}

func (f *fakeBackend) Instances(ctx context.Context, dagID, taskID string, offset, limit int) (r engine.InstancesRead, err error) {
	f.read(func(c *core.Core) {
		r.Rev = c.Rev()
		if r.List, r.TaskFound = c.Instances(dagID, taskID, offset, limit); r.TaskFound {
			r.DAGFound = true
			return
		}
		_, r.DAGFound = c.Summary(dagID)
		tv, _ := c.Task(dagID, taskID)
		r.TaskFound = tv != nil
	})
	return r, nil
}

func (f *fakeBackend) DAGState(ctx context.Context, id string) (st core.DAGStatus, run int, ok bool, err error) {
	f.read(func(c *core.Core) { st, run, ok = c.DAGState(id) })
	return st, run, ok, nil
}

func (f *fakeBackend) Rev() (rev int64) {
	f.read(func(c *core.Core) { rev = c.Rev() })
	return rev
}

func (f *fakeBackend) Status() *engine.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeBackend) Leader(ctx context.Context) (string, error) { return f.leader, f.leaderErr }

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func ptr[T any](v T) *T { return &v }

// newFake returns a backend holding:
//
//	d1 running: a succeeded (attempt 1 on w1), b running (attempt 2 on
//	            "other", attempt 1 on w1), c pending
//	d2 succeeded: x succeeded
func newFake(t *testing.T) *fakeBackend {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d1 := &model.DAG{ID: "d1", Name: "first", Tasks: []model.Task{
		{ID: "a", Kind: model.KindShell, Command: "echo a", MaxRetries: 3, Timeout: model.Duration(time.Minute)},
		{ID: "b", Kind: model.KindShell, Command: "echo b", DependsOn: []string{"a"}, MaxRetries: 3, Timeout: model.Duration(time.Minute)},
		{ID: "c", Kind: model.KindNoop, DependsOn: []string{"b"}, MaxRetries: 3, Timeout: model.Duration(time.Minute)},
	}}
	d2 := &model.DAG{ID: "d2", Name: "second", Tasks: []model.Task{
		{ID: "x", Kind: model.KindNoop, MaxRetries: 3, Timeout: model.Duration(time.Minute)},
	}}
	c := core.New(core.Config{})
	dags := []core.Entry{
		{Rev: 10, DAG: "d1", D: &core.DAGRecord{DAG: *d1, Status: core.DAGRunning, Run: 1, SubmittedAt: now}},
		{Rev: 11, DAG: "d2", D: &core.DAGRecord{DAG: *d2, Status: core.DAGSucceeded, Run: 1, SubmittedAt: now, FinishedAt: ptr(now.Add(time.Second))}},
	}
	tasks := []core.Entry{
		{Rev: 12, DAG: "d1", Task: "a", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Worker: "w1",
			StartedAt: ptr(now), FinishedAt: ptr(now.Add(time.Second)), ExitCode: ptr(0), Event: "succeed"}},
		{Rev: 13, DAG: "d1", Task: "b", T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 2, Retries: 1, Worker: "other",
			StartedAt: ptr(now), Event: "dispatch",
			History: []core.AttemptSummary{{Attempt: 1, Worker: "w1", Outcome: "failed", ExitCode: ptr(1)}}}},
		{Rev: 14, DAG: "d2", Task: "x", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Worker: "w1", Event: "succeed"}},
	}
	if errs := c.Restore(20, dags, tasks); len(errs) > 0 {
		t.Fatalf("restore: %v", errs)
	}
	return &fakeBackend{c: c, seen: map[string]bool{}, leader: "node-1",
		st: &engine.Status{Node: "node-1", Leader: true, HoldsTerm: true, AppliedRev: 20, Loaded: true,
			Workers: []core.WorkerView{{ID: "w1", Slots: 4, Busy: 1}}}}
}

type env struct {
	f   *fakeBackend
	h   http.Handler
	srv *httptest.Server
	m   *metrics.Metrics
	ex  *executor.Local
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	f := newFake(t)
	ex, err := executor.NewLocal(executor.LocalConfig{ID: "w1", Slots: 1, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	m := metrics.New()
	cfg := Config{Backend: f, Logs: ex, Metrics: m, Logger: zap.NewNop(), Node: "node-1",
		EtcdEndpoints: []string{"http://127.0.0.1:2379"}}
	if mod != nil {
		mod(&cfg)
	}
	h := New(cfg)
	// Every answer a test provokes must be one the OpenAPI document allows.
	srv := httptest.NewServer(openapitest.Checked(t, h))
	t.Cleanup(srv.Close)
	return &env{f: f, h: h, srv: srv, m: m, ex: ex}
}

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, method, path string, body string, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

func (r resp) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func wantKeys(t *testing.T, m map[string]any, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := keys(m); !reflect.DeepEqual(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
}

// wantError checks the status and the error envelope, and returns it.
func (r resp) wantError(t *testing.T, status int, code string) apitypes.ErrorInfo {
	t.Helper()
	if r.code != status {
		t.Fatalf("status = %d, want %d; body %s", r.code, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	m := r.object(t)
	wantKeys(t, m, "error")
	inner, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("error is not an object: %s", r.body)
	}
	wantKeys(t, inner, "code", "message", "details")
	if _, ok := inner["details"].([]any); !ok {
		t.Fatalf("details is not an array: %s", r.body)
	}
	var eb apitypes.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatal(err)
	}
	if string(eb.Error.Code) != code {
		t.Fatalf("code = %q, want %q (message %q)", eb.Error.Code, code, eb.Error.Message)
	}
	if eb.Error.Message == "" {
		t.Fatal("empty message")
	}
	return eb.Error
}

const okDAG = `{"name": "hello", "tasks": [{"id": "a", "kind": "noop"}, {"id": "b", "command": "echo b", "depends_on": ["a"]}]}`

func TestSubmitCreatedAndDuplicate(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"id": "job-1", "name": "hello", "tasks": [{"id": "a", "kind": "noop"}]}`
	r := e.do(t, "POST", "/api/v1/dags", body, "Content-Type", "application/json")
	if r.code != http.StatusCreated {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "id", "created", "status")
	if m["id"] != "job-1" || m["created"] != true || m["status"] != "running" {
		t.Fatalf("body %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/dags/job-1" {
		t.Fatalf("Location = %q", loc)
	}
	r = e.do(t, "POST", "/api/v1/dags", body, "Content-Type", "application/json")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m = r.object(t)
	wantKeys(t, m, "id", "created")
	if m["id"] != "job-1" || m["created"] != false {
		t.Fatalf("body %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/dags/job-1" {
		t.Fatalf("Location = %q", loc)
	}
}

func TestSubmitGeneratesID(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "POST", "/api/v1/dags", okDAG) // no Content-Type: sniffed
	if r.code != http.StatusCreated {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	id, _ := r.object(t)["id"].(string)
	if !dag.ValidID(id) || r.header.Get("Location") != "/api/v1/dags/"+id {
		t.Fatalf("id %q, Location %q", id, r.header.Get("Location"))
	}
	got := e.f.submitted[0]
	if got.Name != "hello" || len(got.Tasks) != 2 || got.Tasks[1].Kind != model.KindShell || got.Tasks[1].MaxRetries != model.DefaultMaxRetries {
		t.Fatalf("submitted DAG not normalized: %+v", got)
	}
}

func TestSubmitYAML(t *testing.T) {
	e := newEnv(t, nil)
	yml := "name: y\ntasks:\n  - id: a\n    command: echo a\n  - id: b\n    kind: noop\n    depends_on: [a]\n"
	for i, ct := range []string{"application/yaml", "application/x-yaml", "text/yaml; charset=utf-8"} {
		id := fmt.Sprintf("y%d", i)
		r := e.do(t, "POST", "/api/v1/dags", "id: "+id+"\n"+yml, "Content-Type", ct)
		if r.code != http.StatusCreated {
			t.Fatalf("%s: status %d: %s", ct, r.code, r.body)
		}
		if r.object(t)["id"] != id {
			t.Fatalf("%s: body %s", ct, r.body)
		}
	}
	d := e.f.submitted[0]
	if d.Name != "y" || len(d.Tasks) != 2 || d.Tasks[0].Kind != model.KindShell || d.Tasks[1].DependsOn[0] != "a" {
		t.Fatalf("submitted %+v", d)
	}
	// YAML declared as JSON is a parse error, not a guess.
	r := e.do(t, "POST", "/api/v1/dags", yml, "Content-Type", "application/json")
	r.wantError(t, http.StatusBadRequest, dag.CodeParse)
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t, nil)
	noID := `{"name": "n", "tasks": [{"id": "a", "kind": "noop"}]}`

	r := e.do(t, "POST", "/api/v1/dags", noID, "Idempotency-Key", "nightly-2026-01-02")
	if r.code != http.StatusCreated || r.object(t)["id"] != "nightly-2026-01-02" {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	r = e.do(t, "POST", "/api/v1/dags", noID, "Idempotency-Key", "nightly-2026-01-02")
	if r.code != http.StatusOK || r.object(t)["created"] != false || r.object(t)["id"] != "nightly-2026-01-02" {
		t.Fatalf("replay: status %d: %s", r.code, r.body)
	}

	key := "tenant/42 run #7"
	sum := sha256.Sum256([]byte(key))
	want := "k-" + hex.EncodeToString(sum[:])[:20]
	if got := kit.IdempotencyID(key); got != want || !dag.ValidID(got) {
		t.Fatalf("IdempotencyID = %q, want %q", got, want)
	}
	r = e.do(t, "POST", "/api/v1/dags", noID, "Idempotency-Key", key)
	if r.code != http.StatusCreated || r.object(t)["id"] != want {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/dags/"+want {
		t.Fatalf("Location %q", loc)
	}

	// An id in the body wins over the key.
	r = e.do(t, "POST", "/api/v1/dags", `{"id": "explicit", "name": "n", "tasks": [{"id": "a", "kind": "noop"}]}`, "Idempotency-Key", "other")
	if r.code != http.StatusCreated || r.object(t)["id"] != "explicit" {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
}

func TestBadFixtures(t *testing.T) {
	want := map[string]string{
		"bad-kind.json":         dag.CodeInvalid,
		"bad-template.yaml":     dag.CodeInvalid,
		"bad-timeout.yaml":      dag.CodeInvalid,
		"cycle.yaml":            dag.CodeCycle,
		"dup-id.yaml":           dag.CodeInvalid,
		"empty.json":            dag.CodeInvalid,
		"not-json.json":         dag.CodeParse,
		"self-dep.yaml":         dag.CodeInvalid,
		"unknown-dep.json":      dag.CodeInvalid,
		"bad-when.yaml":         dag.CodeInvalid,
		"bad-trigger-rule.yaml": dag.CodeInvalid,
	}
	dir := filepath.Join("..", "..", "..", "test", "fixtures", "bad")
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", dir, err)
	}
	e := newEnv(t, nil)
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			code, ok := want[name]
			if !ok {
				t.Fatalf("fixture %s has no expected code in this test; add one", name)
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ct := "application/json"
			if strings.HasSuffix(name, ".yaml") {
				ct = "application/yaml"
			}
			r := e.do(t, "POST", "/api/v1/dags", string(body), "Content-Type", ct)
			info := r.wantError(t, http.StatusBadRequest, code)
			if len(info.Details) == 0 {
				t.Fatalf("no details: %s", r.body)
			}
			if code == dag.CodeCycle && !strings.Contains(info.Message, "→") {
				t.Fatalf("cycle message has no path: %q", info.Message)
			}
		})
	}
	if len(e.f.submitted) != 0 {
		t.Fatalf("invalid DAGs reached the backend: %d", len(e.f.submitted))
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 4096; c.MaxTasks = 3 })
	post := func(body string, hdr ...string) resp {
		return e.do(t, "POST", "/api/v1/dags", body, hdr...)
	}

	post("", "Content-Type", "application/json").wantError(t, http.StatusBadRequest, dag.CodeParse)
	post("   \n", "Content-Type", "application/yaml").wantError(t, http.StatusBadRequest, dag.CodeParse)
	info := post(`{"name": "x", "tasks": [`, "Content-Type", "application/json").wantError(t, http.StatusBadRequest, dag.CodeParse)
	if !strings.Contains(info.Message, "JSON") {
		t.Fatalf("message %q", info.Message)
	}
	post(`{"name": "x", "tasks": [{"id": "a", "kind": "noop", "colour": "red"}]}`, "Content-Type", "application/json").
		wantError(t, http.StatusBadRequest, dag.CodeParse)
	for _, ct := range []string{"application/xml", "text/html", "multipart/form-data; boundary=x", "garbage/;;"} {
		post(okDAG, "Content-Type", ct).wantError(t, http.StatusUnsupportedMediaType, dag.CodeUnsupportedMedia)
	}

	big := `{"name": "big", "tasks": [{"id": "a", "kind": "noop", "command": "` + strings.Repeat("x", 5000) + `"}]}`
	post(big, "Content-Type", "application/json").wantError(t, http.StatusRequestEntityTooLarge, "body_too_large")

	tasks := make([]string, 4)
	for i := range tasks {
		tasks[i] = fmt.Sprintf(`{"id": "t%d", "kind": "noop"}`, i)
	}
	post(`{"name": "many", "tasks": [`+strings.Join(tasks, ",")+`]}`, "Content-Type", "application/json").
		wantError(t, http.StatusBadRequest, dag.CodeTooMany)

	cyc := `{"name": "c", "tasks": [{"id": "a", "kind": "noop", "depends_on": ["b"]}, {"id": "b", "kind": "noop", "depends_on": ["a"]}]}`
	info = post(cyc, "Content-Type", "application/json").wantError(t, http.StatusBadRequest, dag.CodeCycle)
	if !strings.Contains(info.Message, "a → b → a") {
		t.Fatalf("cycle message %q", info.Message)
	}

	info = post(`{"id": "bad/id", "name": "x", "tasks": [{"id": "a", "kind": "noop"}]}`, "Content-Type", "application/json").
		wantError(t, http.StatusBadRequest, dag.CodeInvalid)
	if !strings.Contains(info.Message, "bad/id") {
		t.Fatalf("message %q", info.Message)
	}
	if len(e.f.submitted) != 0 {
		t.Fatalf("invalid DAGs reached the backend: %d", len(e.f.submitted))
	}
}

func TestBackendErrors(t *testing.T) {
	e := newEnv(t, nil)
	for _, err := range []error{core.ErrNotLeader, engine.ErrNotLeader, engine.ErrUnknown, engine.ErrStopped,
		fmt.Errorf("wrapped: %w", engine.ErrNotLeader)} {
		e.f.set(func(f *fakeBackend) { f.submitErr = err })
		r := e.do(t, "POST", "/api/v1/dags", okDAG)
		r.wantError(t, http.StatusServiceUnavailable, "not_leader")
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("%v: Retry-After = %q", err, r.header.Get("Retry-After"))
		}
	}

	e.f.set(func(f *fakeBackend) {
		f.submitErr = &core.Error{Code: core.CodeConflict, Msg: "DAG d1 already exists with different content"}
	})
	info := e.do(t, "POST", "/api/v1/dags", okDAG).wantError(t, http.StatusConflict, "conflict")
	if info.Message != "DAG d1 already exists with different content" {
		t.Fatalf("message %q", info.Message)
	}

	e.f.set(func(f *fakeBackend) { f.submitErr = errors.New("etcd: secret internals at 10.0.0.1") })
	info = e.do(t, "POST", "/api/v1/dags", okDAG).wantError(t, http.StatusInternalServerError, "internal")
	if strings.Contains(info.Message, "10.0.0.1") {
		t.Fatalf("internal error leaked: %q", info.Message)
	}
}

func TestWriteTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WriteTimeout = 50 * time.Millisecond })
	e.f.set(func(f *fakeBackend) { f.blockSub = true })
	start := time.Now()
	e.do(t, "POST", "/api/v1/dags", okDAG).wantError(t, http.StatusGatewayTimeout, "timeout")
	if time.Since(start) > 30*time.Second { // without the timeout the call would block for good
		t.Fatal("timeout not applied")
	}
}

func TestListDAGs(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/dags", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "dags", "revision", "node")
	if m["node"] != "node-1" || m["revision"] != float64(20) {
		t.Fatalf("body %s", r.body)
	}
	var lr apitypes.DAGList[string]
	if err := json.Unmarshal(r.body, &lr); err != nil {
		t.Fatal(err)
	}
	if len(lr.DAGs) != 2 || lr.DAGs[0].ID != "d2" || lr.DAGs[1].ID != "d1" {
		t.Fatalf("dags %+v", lr.DAGs)
	}
	first := m["dags"].([]any)[1].(map[string]any)
	wantKeys(t, first, "id", "name", "status", "run", "submitted_at", "task_count", "counts")
	if first["task_count"] != float64(3) || first["status"] != "running" {
		t.Fatalf("summary %v", first)
	}

	r = e.do(t, "GET", "/api/v1/dags?status=succeeded", "")
	if err := json.Unmarshal(r.body, &lr); err != nil || len(lr.DAGs) != 1 || lr.DAGs[0].ID != "d2" || lr.DAGs[0].FinishedAt == nil {
		t.Fatalf("status filter: %s", r.body)
	}
	r = e.do(t, "GET", "/api/v1/dags?status=cancelled", "")
	if !strings.Contains(string(r.body), `"dags":[]`) {
		t.Fatalf("empty list must be [], got %s", r.body)
	}
	r = e.do(t, "GET", "/api/v1/dags?limit=1", "")
	if err := json.Unmarshal(r.body, &lr); err != nil || len(lr.DAGs) != 1 {
		t.Fatalf("limit: %s", r.body)
	}
	if r := e.do(t, "GET", "/api/v1/dags?limit=100000", ""); r.code != http.StatusOK {
		t.Fatalf("large limit is clamped, got %d", r.code)
	}
	e.do(t, "GET", "/api/v1/dags?status=done", "").wantError(t, http.StatusBadRequest, "bad_request")
	e.do(t, "GET", "/api/v1/dags?limit=0", "").wantError(t, http.StatusBadRequest, "bad_request")
	e.do(t, "GET", "/api/v1/dags?limit=x", "").wantError(t, http.StatusBadRequest, "bad_request")
}

func TestGetDAG(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/dags/d1", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "id", "name", "status", "run", "submitted_at", "task_count", "counts", "tasks", "revision")
	if m["id"] != "d1" || m["revision"] != float64(20) || m["run"] != float64(1) {
		t.Fatalf("body %s", r.body)
	}
	tasks := m["tasks"].([]any)
	if len(tasks) != 3 {
		t.Fatalf("tasks %v", tasks)
	}
	a := tasks[0].(map[string]any)
	for _, k := range []string{"id", "kind", "status", "attempts", "retries", "max_retries", "priority", "depends_on", "exit_code", "output_tail", "spec", "worker"} {
		if _, ok := a[k]; !ok {
			t.Fatalf("task lacks %q: %v", k, a)
		}
	}
	if a["status"] != "succeeded" || a["worker"] != "w1" {
		t.Fatalf("task a %v", a)
	}
	r = e.do(t, "GET", "/api/v1/dags/d2", "")
	if _, ok := r.object(t)["finished_at"]; !ok {
		t.Fatalf("finished DAG lacks finished_at: %s", r.body)
	}
	e.do(t, "GET", "/api/v1/dags/nope", "").wantError(t, http.StatusNotFound, "not_found")
}

func TestGetTask(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/dags/d1/tasks/b", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	if m["id"] != "b" || m["status"] != "running" || m["attempts"] != float64(2) || m["revision"] != float64(20) {
		t.Fatalf("body %s", r.body)
	}
	if _, ok := m["history"].([]any); !ok {
		t.Fatalf("no history: %s", r.body)
	}
	info := e.do(t, "GET", "/api/v1/dags/d1/tasks/zz", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "zz") {
		t.Fatalf("message %q", info.Message)
	}
	info = e.do(t, "GET", "/api/v1/dags/nope/tasks/a", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "nope") {
		t.Fatalf("message %q", info.Message)
	}
}

func TestTaskLog(t *testing.T) {
	e := newEnv(t, nil)
	write := func(task string, attempt int, text string) {
		p := e.ex.LogPath(model.AttemptID{DAG: "d1", Task: task, Attempt: attempt})
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 1, "hello from a\n")
	write("b", 1, "b failed once\n")

	r := e.do(t, "GET", "/api/v1/dags/d1/tasks/a/log", "")
	if r.code != http.StatusOK || string(r.body) != "hello from a\n" {
		t.Fatalf("status %d: %q", r.code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	r = e.do(t, "GET", "/api/v1/dags/d1/tasks/b/log?attempt=1", "")
	if r.code != http.StatusOK || string(r.body) != "b failed once\n" {
		t.Fatalf("status %d: %q", r.code, r.body)
	}

	// The latest attempt of b ran on another worker.
	info := e.do(t, "GET", "/api/v1/dags/d1/tasks/b/log", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "worker other") || !strings.Contains(info.Message, "node-1") {
		t.Fatalf("message %q", info.Message)
	}
	info = e.do(t, "GET", "/api/v1/dags/d1/tasks/c/log", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "not run") {
		t.Fatalf("message %q", info.Message)
	}
	e.do(t, "GET", "/api/v1/dags/d1/tasks/a/log?attempt=5", "").wantError(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", "/api/v1/dags/d1/tasks/zz/log", "").wantError(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", "/api/v1/dags/d1/tasks/a/log?attempt=x", "").wantError(t, http.StatusBadRequest, "bad_request")
	// Ran here but left no file (a noop).
	info = e.do(t, "GET", "/api/v1/dags/d2/tasks/x/log", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "no log") {
		t.Fatalf("message %q", info.Message)
	}

	// Without a local executor nothing is here.
	e2 := newEnv(t, func(c *Config) { c.Logs = nil })
	info = e2.do(t, "GET", "/api/v1/dags/d1/tasks/a/log", "").wantError(t, http.StatusNotFound, "not_found")
	if !strings.Contains(info.Message, "worker w1") {
		t.Fatalf("message %q", info.Message)
	}
}

func TestCancelRetry(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "POST", "/api/v1/dags/d1/cancel", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "id", "status")
	if m["id"] != "d1" || m["status"] != "cancelled" {
		t.Fatalf("body %s", r.body)
	}
	r = e.do(t, "POST", "/api/v1/dags/d1/retry", "")
	m = r.object(t)
	if r.code != http.StatusOK || m["id"] != "d1" || m["status"] != "running" {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	wantKeys(t, m, "id", "status")
	if !reflect.DeepEqual(e.f.cancelled, []string{"d1"}) || !reflect.DeepEqual(e.f.retried, []string{"d1"}) {
		t.Fatalf("cancelled %v retried %v", e.f.cancelled, e.f.retried)
	}

	e.f.set(func(f *fakeBackend) {
		f.cancelErr = &core.Error{Code: core.CodeConflict, Msg: "DAG d2 already succeeded"}
		f.retryErr = &core.Error{Code: core.CodeNotFound, Msg: "no DAG zz"}
	})
	info := e.do(t, "POST", "/api/v1/dags/d2/cancel", "").wantError(t, http.StatusConflict, "conflict")
	if info.Message != "DAG d2 already succeeded" {
		t.Fatalf("message %q", info.Message)
	}
	e.do(t, "POST", "/api/v1/dags/zz/retry", "").wantError(t, http.StatusNotFound, "not_found")

	e.f.set(func(f *fakeBackend) { f.cancelErr = core.ErrNotLeader })
	r = e.do(t, "POST", "/api/v1/dags/d1/cancel", "")
	r.wantError(t, http.StatusServiceUnavailable, "not_leader")
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "DELETE", "/api/v1/dags/d1", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "id", "status")
	if m["id"] != "d1" || m["status"] != "deleted" || !reflect.DeepEqual(e.f.deleted, []string{"d1"}) {
		t.Fatalf("body %s, deleted %v", r.body, e.f.deleted)
	}
	// A page of another site cannot delete through the user's browser.
	req, _ := http.NewRequest("DELETE", e.srv.URL+"/api/v1/dags/d9", nil)
	req.Header.Set("Origin", "http://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(e.f.deleted) != 1 {
		t.Fatalf("cross-site DELETE: %d, deleted %v", resp.StatusCode, e.f.deleted)
	}
	e.f.set(func(f *fakeBackend) {
		f.deleteErr = &core.Error{Code: core.CodeConflict, Msg: "DAG d2 is running: cancel it before deleting it"}
	})
	info := e.do(t, "DELETE", "/api/v1/dags/d2", "").wantError(t, http.StatusConflict, "conflict")
	if info.Message != "DAG d2 is running: cancel it before deleting it" {
		t.Fatalf("message %q", info.Message)
	}
	e.f.set(func(f *fakeBackend) { f.deleteErr = &core.Error{Code: core.CodeNotFound, Msg: "no DAG zz"} })
	e.do(t, "DELETE", "/api/v1/dags/zz", "").wantError(t, http.StatusNotFound, "not_found")
	e.f.set(func(f *fakeBackend) { f.deleteErr = context.DeadlineExceeded })
	info = e.do(t, "DELETE", "/api/v1/dags/d3", "").wantError(t, http.StatusGatewayTimeout, "timeout")
	if !strings.Contains(info.Message, "not committed") {
		t.Fatalf("message %q", info.Message)
	}
}

func TestCluster(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/api/v1/cluster", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.object(t)
	wantKeys(t, m, "node", "leader", "applied_revision", "lag", "replicas", "workers", "etcd")
	var cr apitypes.Cluster
	if err := json.Unmarshal(r.body, &cr); err != nil {
		t.Fatal(err)
	}
	want := apitypes.Cluster{Node: "node-1", Leader: "node-1", AppliedRevision: 20,
		Replicas: []apitypes.Replica{{Name: "node-1", Role: "leader", AppliedRevision: 20, Reachable: true}},
		Workers:  []apitypes.Worker{{ID: "w1", Slots: 4, Busy: 1, Connected: true}},
		Etcd:     apitypes.EtcdInfo{Endpoints: []string{"http://127.0.0.1:2379"}}}
	if !reflect.DeepEqual(cr, want) {
		t.Fatalf("cluster = %+v, want %+v", cr, want)
	}
	wantKeys(t, m["replicas"].([]any)[0].(map[string]any), "name", "role", "applied_revision", "lag", "reachable")
	wantKeys(t, m["workers"].([]any)[0].(map[string]any), "id", "slots", "busy", "running", "connected", "since")
	wantKeys(t, m["etcd"].(map[string]any), "endpoints")

	// A standby with etcd unreachable: no leader known, empty lists not null.
	e.f.set(func(f *fakeBackend) {
		f.leaderErr = errors.New("etcd down")
		f.st = &engine.Status{Node: "node-1", AppliedRev: 7, Loaded: true}
	})
	r = e.do(t, "GET", "/api/v1/cluster", "")
	if !strings.Contains(string(r.body), `"leader":""`) || !strings.Contains(string(r.body), `"workers":[]`) ||
		!strings.Contains(string(r.body), `"role":"standby"`) {
		t.Fatalf("standby cluster %s", r.body)
	}
}

func TestProbes(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", "/healthz", "")
	if r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Fatalf("healthz %d %s", r.code, r.body)
	}
	r = e.do(t, "GET", "/readyz", "")
	if r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"status":"ready","leader":true,"term":true}` {
		t.Fatalf("readyz %d %s", r.code, r.body)
	}
	e.f.set(func(f *fakeBackend) { f.st = &engine.Status{Node: "node-1"} })
	r = e.do(t, "GET", "/readyz", "")
	if r.code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before load %d %s", r.code, r.body)
	}
	// Cut off from etcd: not ready, saying why, and still the term's holder
	// while it re-reads (standbys must not depose it for that).
	e.f.set(func(f *fakeBackend) {
		f.st = &engine.Status{Node: "node-1", Loaded: true, HoldsTerm: true, Problem: "re-reading the state from etcd"}
	})
	r = e.do(t, "GET", "/readyz", "")
	if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
		strings.TrimSpace(string(r.body)) != `{"status":"not_ready","leader":false,"problem":"re-reading the state from etcd","term":true}` {
		t.Fatalf("readyz while re-reading %d %s", r.code, r.body)
	}
	// Liveness does not depend on the state.
	if r := e.do(t, "GET", "/healthz", ""); r.code != http.StatusOK {
		t.Fatalf("healthz %d", r.code)
	}
	e.f.set(func(f *fakeBackend) { f.st = nil })
	if r := e.do(t, "GET", "/readyz", ""); r.code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with nil status %d", r.code)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "GET", "/api/v1/dags/d1", "")
	e.do(t, "GET", "/api/v1/dags/nope", "")
	e.do(t, "GET", "/no/such/route", "")
	r := e.do(t, "GET", "/metrics", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d", r.code)
	}
	text := string(r.body)
	for _, want := range []string{
		`orion_http_requests_total{code="200",route="GET /api/v1/dags/{id}"} 1`,
		`orion_http_requests_total{code="404",route="GET /api/v1/dags/{id}"} 1`,
		`orion_http_requests_total{code="404",route="unmatched"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "GET", "/api/v1/nothing", "").wantError(t, http.StatusNotFound, "not_found")
	e.do(t, "GET", "/", "").wantError(t, http.StatusNotFound, "not_found")
	r := e.do(t, "PUT", "/api/v1/dags/d1", "")
	r.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "DELETE") {
		t.Fatalf("Allow %q", allow)
	}
	r = e.do(t, "GET", "/api/v1/dags/d1/cancel", "")
	r.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := r.header.Get("Allow"); allow != "POST" {
		t.Fatalf("Allow %q", allow)
	}
	if r.header.Get("X-Content-Type-Options") != "" {
		t.Fatal("text error headers leaked")
	}
}

func TestPanicRecovery(t *testing.T) {
	e := newEnv(t, nil)
	e.f.set(func(f *fakeBackend) { f.panicky = true })
	e.do(t, "GET", "/api/v1/dags", "").wantError(t, http.StatusInternalServerError, "internal")
	// The server survives.
	if r := e.do(t, "GET", "/healthz", ""); r.code != http.StatusOK {
		t.Fatalf("healthz %d", r.code)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AuthToken = "s3cret" })
	r := e.do(t, "GET", "/api/v1/dags", "")
	r.wantError(t, http.StatusUnauthorized, "unauthorized")
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	e.do(t, "GET", "/api/v1/dags", "", "Authorization", "Bearer wrong").wantError(t, http.StatusUnauthorized, "unauthorized")
	e.do(t, "GET", "/api/v1/dags", "", "Authorization", "Basic czNjcmV0").wantError(t, http.StatusUnauthorized, "unauthorized")
	e.do(t, "GET", "/api/v1/dags", "", "Authorization", "s3cret").wantError(t, http.StatusUnauthorized, "unauthorized")
	e.do(t, "POST", "/api/v1/dags", okDAG).wantError(t, http.StatusUnauthorized, "unauthorized")
	// Unknown routes do not tell strangers what exists.
	e.do(t, "GET", "/api/v1/secret", "").wantError(t, http.StatusUnauthorized, "unauthorized")
	if len(e.f.submitted) != 0 {
		t.Fatal("unauthenticated submit reached the backend")
	}

	if r := e.do(t, "GET", "/api/v1/dags", "", "Authorization", "Bearer s3cret"); r.code != http.StatusOK {
		t.Fatalf("with token: %d %s", r.code, r.body)
	}
	if r := e.do(t, "GET", "/api/v1/dags", "", "Authorization", "bearer s3cret"); r.code != http.StatusOK {
		t.Fatalf("scheme is case-insensitive: %d", r.code)
	}
	if r := e.do(t, "POST", "/api/v1/dags", okDAG, "Authorization", "Bearer s3cret"); r.code != http.StatusCreated {
		t.Fatalf("submit with token: %d %s", r.code, r.body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := e.do(t, "GET", p, ""); r.code != http.StatusOK {
			t.Fatalf("%s needs no token, got %d", p, r.code)
		}
	}
	e.do(t, "GET", "/metrics", "").wantError(t, http.StatusUnauthorized, "unauthorized")
	if r := e.do(t, "GET", "/metrics", "", "Authorization", "Bearer s3cret"); r.code != http.StatusOK {
		t.Fatalf("metrics with token: %d", r.code)
	}

	open := newEnv(t, func(c *Config) { c.AuthToken = "s3cret"; c.MetricsNoAuth = true })
	if r := open.do(t, "GET", "/metrics", ""); r.code != http.StatusOK {
		t.Fatalf("MetricsNoAuth: %d", r.code)
	}
	open.do(t, "GET", "/api/v1/cluster", "").wantError(t, http.StatusUnauthorized, "unauthorized")
}

// direct calls the handler without a network, from the given address.
func direct(h http.Handler, remote, method, path string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://127.0.0.1:8080"+path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, nil) // default 5/s, burst 10
	const remote = "203.0.113.9:1234"
	// The burst passes; then requests are refused, give or take the tokens
	// that refilled while the test ran (on a slow machine).
	start := time.Now()
	var rec *httptest.ResponseRecorder
	n := 0
	for ; n < 100; n++ {
		rec = direct(e.h, fmt.Sprintf("203.0.113.9:%d", 1000+n), "GET", "/api/v1/dags") // ports vary: the IP counts
		if rec.Code != http.StatusOK {
			break
		}
	}
	if refilled := int(time.Since(start).Seconds()*DefaultRateLimit) + 1; n < 10 || n > 10+refilled {
		t.Fatalf("%d requests passed before a refusal; want the burst of 10 (+%d refilled)", n, refilled)
	}
	resp{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}.wantError(t, http.StatusTooManyRequests, "rate_limited")
	if ra := rec.Header().Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	// Probes are never limited; another address has its own bucket.
	if rec := direct(e.h, remote, "GET", "/healthz"); rec.Code != http.StatusOK {
		t.Fatalf("healthz limited: %d", rec.Code)
	}
	if rec := direct(e.h, "198.51.100.7:1", "GET", "/api/v1/dags"); rec.Code != http.StatusOK {
		t.Fatalf("other client limited: %d", rec.Code)
	}
	// Loopback is never limited.
	for _, lo := range []string{"127.0.0.1:4000", "127.9.8.7:1", "[::1]:4000", "[::ffff:127.0.0.1]:9"} {
		for i := 0; i < 50; i++ {
			if rec := direct(e.h, lo, "GET", "/api/v1/dags"); rec.Code != http.StatusOK {
				t.Fatalf("loopback %s limited at request %d: %d", lo, i, rec.Code)
			}
		}
	}
	r := e.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(r.body), "orion_rate_limited_total 1") {
		t.Fatal("rate_limited not counted")
	}

	// A negative rate disables the limit.
	off := newEnv(t, func(c *Config) { c.RateLimit = -1 })
	for i := 0; i < 30; i++ {
		if rec := direct(off.h, remote, "GET", "/api/v1/dags"); rec.Code != http.StatusOK {
			t.Fatalf("disabled limit refused request %d", i)
		}
	}
}

func TestRateLimitBeforeAuth(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AuthToken = "s3cret"; c.RateLimit = 1 }) // burst 2
	const remote = "203.0.113.10:1"
	codes := []int{}
	for i := 0; i < 3; i++ {
		codes = append(codes, direct(e.h, remote, "GET", "/api/v1/dags", "Authorization", "Bearer guess").Code)
	}
	if !reflect.DeepEqual(codes, []int{401, 401, 429}) {
		t.Fatalf("codes %v", codes)
	}
}

func TestLimiterBounded(t *testing.T) {
	l := newIPLimiter(5)
	now := time.Unix(1000, 0)
	for i := 0; i < maxClients+500; i++ {
		if ok, _ := l.allow(fmt.Sprintf("c%d", i), now); !ok {
			t.Fatalf("new client %d refused", i)
		}
	}
	if n := l.size(); n > maxClients {
		t.Fatalf("%d clients tracked, bound %d", n, maxClients)
	}
	// Once idle past the refill time and the sweep interval, all are gone.
	if ok, _ := l.allow("fresh", now.Add(sweepEvery+l.idle)); !ok {
		t.Fatal("fresh client refused")
	}
	if n := l.size(); n != 1 {
		t.Fatalf("%d clients after the sweep, want 1", n)
	}
	// A refused request does not consume a token: after the refill time the
	// full burst is available again.
	for i := 0; i < 100; i++ {
		l.allow("busy", now)
	}
	later := now.Add(l.idle)
	for i := 0; i < l.burst; i++ {
		if ok, _ := l.allow("busy", later); !ok {
			t.Fatalf("request %d of a refilled bucket refused", i)
		}
	}
	if ok, wait := l.allow("busy", later); ok || wait <= 0 {
		t.Fatalf("burst exceeded: ok=%v wait=%v", ok, wait)
	}
}

func TestNewRequiresBackend(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New without a backend did not panic")
		}
	}()
	New(Config{})
}

var _ Backend = (*fakeBackend)(nil)

func TestRequestLog(t *testing.T) {
	zc, logs := observer.New(zap.DebugLevel)
	e := newEnv(t, func(c *Config) { c.Logger = zap.New(zc) })
	e.do(t, "GET", "/api/v1/dags/nope", "")
	entries := logs.FilterMessage("http request").All()
	if len(entries) != 1 {
		t.Fatalf("%d request log entries", len(entries))
	}
	f := entries[0].ContextMap()
	if entries[0].Level != zap.DebugLevel || f["method"] != "GET" || f["path"] != "/api/v1/dags/nope" ||
		f["status"] != int64(404) || f["route"] != "GET /api/v1/dags/{id}" {
		t.Fatalf("log entry %v at %v", f, entries[0].Level)
	}
	if _, ok := f["duration"]; !ok {
		t.Fatalf("no duration: %v", f)
	}
}

// A browser page of another site cannot submit to the API (CSRF): writes
// carrying a foreign Origin are refused; same-origin pages (the console)
// and programs without an Origin are not.
func TestCrossSiteWritesRefused(t *testing.T) {
	e := newEnv(t, nil)
	body := `{"name":"x","tasks":[{"id":"a","kind":"noop"}]}`
	for _, c := range []struct {
		origin string
		want   int
	}{
		{"http://evil.example", http.StatusForbidden},
		{"null", http.StatusForbidden},
		{"", http.StatusCreated},
	} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/dags", strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Origin %q: %d, want %d", c.origin, resp.StatusCode, c.want)
		}
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/dags", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", e.srv.URL)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Errorf("same-origin write: %d", resp.StatusCode)
	}
}

// DNS rebinding: a page whose own name now resolves to 127.0.0.1 sends a Host
// and an Origin that name that page's site and match each other. No route
// family may be reached that way, not even the probes or a mounted route
// (the worker stream, events, the seed API, the console), and the names
// this server serves still work.
func TestForeignHostRefusedOnEveryRoute(t *testing.T) {
	reached := map[string]int{}
	mounted := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached[name]++ })
	}
	e := newEnv(t, func(c *Config) {
		c.Hosts = guard.NewHosts("orion.example.com")
		c.Routes = map[string]http.Handler{
			"GET /internal/v1/worker": mounted("worker"),
			"/api/v1/events":          mounted("events"),
			"POST /api/v1/dag":        mounted("seed"),
			"GET /{$}":                mounted("console"),
		}
	})
	routes := []struct{ method, path string }{
		{"POST", "/api/v1/dags"}, {"GET", "/api/v1/dags"}, {"GET", "/api/v1/dags/x"}, {"POST", "/api/v1/dags/x/cancel"},
		{"GET", "/api/v1/cluster"}, {"GET", "/metrics"}, {"GET", "/healthz"}, {"GET", "/readyz"},
		{"GET", "/internal/v1/worker"}, {"GET", "/api/v1/events"}, {"POST", "/api/v1/dag"}, {"GET", "/"},
	}
	for _, host := range []string{"rebind.example:8080", "rebind.example", "127.0.0.1.nip.io:8080", "orion.example.com.evil.example"} {
		for _, rt := range routes {
			req := httptest.NewRequest(rt.method, "http://"+host+rt.path, strings.NewReader(`{"name":"x","tasks":[{"id":"a"}]}`))
			req.RemoteAddr = "127.0.0.1:5555"
			req.Header.Set("Origin", "http://"+host)
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, req)
			resp{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}.wantError(t, http.StatusMisdirectedRequest, "host_not_allowed")
		}
	}
	e.f.mu.Lock()
	submitted := len(e.f.submitted)
	e.f.mu.Unlock()
	if len(reached) != 0 || submitted != 0 {
		t.Fatalf("a rebound request reached a handler: %v, %d DAGs submitted", reached, submitted)
	}
	// Served names: loopback, an IP literal, a configured name.
	for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080", "10.1.2.3:8080", "orion.example.com"} {
		req := httptest.NewRequest("GET", "http://"+host+"/internal/v1/worker", nil)
		req.RemoteAddr = "127.0.0.1:5555"
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("Host %s: %d %s", host, rec.Code, rec.Body)
		}
	}
	if reached["worker"] != 5 {
		t.Fatalf("worker route reached %d times, want 5", reached["worker"])
	}
	r := e.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(r.body), "orion_http_host_refused_total 48") {
		t.Fatal("refused hosts not counted (orion_http_host_refused_total 48)")
	}
}

// A write whose Origin names a page of the rebinding site is refused even
// when its Host is allowed: the Origin is judged by the allow-list, never by
// the request's own Host.
func TestOriginJudgedByAllowList(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Hosts = guard.NewHosts("orion.example.com") })
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:8080", "http://rebind.example:8080", http.StatusForbidden},
		{"orion.example.com", "http://rebind.example", http.StatusForbidden},
		{"10.1.2.3:8080", "http://10.1.2.3:8080", http.StatusForbidden}, // not the address it arrived on
		{"127.0.0.1:8080", "http://127.0.0.1:8080", http.StatusCreated},
		{"orion.example.com", "https://orion.example.com", http.StatusCreated},
	} {
		req := httptest.NewRequest("POST", "http://"+c.host+"/api/v1/dags", strings.NewReader(`{"name":"x","tasks":[{"id":"a"}]}`))
		req.RemoteAddr = "127.0.0.1:5555"
		req.Header.Set("Origin", c.origin)
		req.Header.Set("Content-Type", "text/plain")
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != c.want && !(c.want == http.StatusCreated && rec.Code == http.StatusOK) {
			t.Errorf("Host %s Origin %s: %d %s, want %d", c.host, c.origin, rec.Code, rec.Body, c.want)
		}
	}
}

// A write a standby forwarded again after its first leader froze carries
// hints (kit.IDAssignedHeader, ExistedHeader, ?run=) with which the new
// leader answers it as the first send was answered: the write was applied
// once, by the first leader, and the client learns it succeeded.
func TestForwardedWriteSentAgainIsAnsweredAsTheFirst(t *testing.T) {
	e := newEnv(t, nil)
	fwd := []string{kit.ForwardedHeader, "node-2"}
	body := `{"name": "n", "tasks": [{"id": "a", "kind": "noop"}]}`
	key := "20260102-030405-abcdef"

	// The first send created the DAG under the id the standby chose.
	if r := e.do(t, "POST", "/api/v1/dags", body, append(fwd, "Idempotency-Key", key, kit.IDAssignedHeader, "1")...); r.code != http.StatusCreated {
		t.Fatalf("first send: %d %s", r.code, r.body)
	}
	// The second finds it: created by this very submission.
	r := e.do(t, "POST", "/api/v1/dags", body, append(fwd, "Idempotency-Key", key, kit.IDAssignedHeader, "1")...)
	if m := r.object(t); r.code != http.StatusCreated || m["id"] != key || m["created"] != true {
		t.Fatalf("second send: %d %s, want 201 created", r.code, r.body)
	}
	// Without the hint (a client's own repeat), the DAG existed already.
	if r := e.do(t, "POST", "/api/v1/dags", body, "Idempotency-Key", key); r.code != http.StatusOK {
		t.Fatalf("a client's repeat: %d %s, want 200", r.code, r.body)
	}
	// A client's id: sent again by a standby that did not see the DAG
	// before the first send, the first send created it.
	if r := e.do(t, "POST", "/api/v1/dags", body, append(fwd, "Idempotency-Key", key, kit.ExistedHeader, "0")...); r.code != http.StatusCreated {
		t.Fatalf("a client-named DAG sent again: %d %s, want 201", r.code, r.body)
	}
	if r := e.do(t, "POST", "/api/v1/dags", body, append(fwd, "Idempotency-Key", key, kit.ExistedHeader, "1")...); r.code != http.StatusOK {
		t.Fatalf("a client-named DAG that existed before: %d %s, want 200", r.code, r.body)
	}
	// Not from a standby, the hint is ignored.
	if r := e.do(t, "POST", "/api/v1/dags", body, "Idempotency-Key", key, kit.IDAssignedHeader, "1"); r.code != http.StatusOK {
		t.Fatalf("a hint without forwarding: %d %s, want 200", r.code, r.body)
	}

	// A deletion that finds nothing, sent again by a standby that saw the
	// DAG before the first send: the first deleted it.
	e.f.set(func(f *fakeBackend) { f.deleteErr = &core.Error{Code: core.CodeNotFound, Msg: "no DAG d9"} })
	if r := e.do(t, "DELETE", "/api/v1/dags/d9", "", append(fwd, kit.ExistedHeader, "1")...); r.code != http.StatusOK {
		t.Fatalf("deletion sent again: %d %s, want 200", r.code, r.body)
	}
	e.do(t, "DELETE", "/api/v1/dags/d9", "", append(fwd, kit.ExistedHeader, "0")...).wantError(t, http.StatusNotFound, "not_found")
	e.do(t, "DELETE", "/api/v1/dags/d9", "").wantError(t, http.StatusNotFound, "not_found")

	// A retry names its run; a bad one is refused before anything happens.
	if r := e.do(t, "POST", "/api/v1/dags/d1/retry?run=2", ""); r.code != http.StatusOK {
		t.Fatalf("retry of run 2: %d %s", r.code, r.body)
	}
	e.do(t, "POST", "/api/v1/dags/d1/retry?run=zero", "").wantError(t, http.StatusBadRequest, "bad_request")
	if !reflect.DeepEqual(e.f.retried, []string{"d1@2"}) {
		t.Fatalf("retried %v, want d1's run 2 only", e.f.retried)
	}
}

// A YAML body past dag.MaxYAMLBytes is refused before it is decoded (YAML
// costs about 200 bytes of memory per byte), while the same DAG in JSON,
// within max_body_bytes, is accepted.
func TestLargeYAMLIsRefusedAndJSONAccepted(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 8 << 20; c.MaxTasks = 100000 })
	var y, j strings.Builder
	y.WriteString("id: wide\ntasks:\n")
	j.WriteString(`{"id": "wide", "tasks": [`)
	for i := 0; y.Len() <= dag.MaxYAMLBytes; i++ {
		fmt.Fprintf(&y, "- {id: t%d, kind: noop}\n", i)
		if i > 0 {
			j.WriteString(",")
		}
		fmt.Fprintf(&j, `{"id": "t%d", "kind": "noop"}`, i)
	}
	j.WriteString("]}")
	for _, ct := range []string{"application/yaml", "text/plain", ""} {
		info := e.do(t, "POST", "/api/v1/dags", y.String(), "Content-Type", ct).
			wantError(t, http.StatusRequestEntityTooLarge, dag.CodeTooLarge)
		if !strings.Contains(info.Message, "YAML") || !strings.Contains(info.Message, "JSON") {
			t.Fatalf("message %q does not say to send JSON", info.Message)
		}
	}
	if len(e.f.submitted) != 0 {
		t.Fatalf("a refused YAML body reached the backend: %d", len(e.f.submitted))
	}
	if r := e.do(t, "POST", "/api/v1/dags", j.String(), "Content-Type", "application/json"); r.code != http.StatusCreated {
		t.Fatalf("the same DAG in JSON: %d %s", r.code, r.body)
	}
}

// A schedule's tasks are counted before its body is decoded, as a DAG's
// are: a body of empty tasks within max_body_bytes would otherwise cost
// hundreds of bytes a task to decode before the count refused it.
func TestScheduleTasksCountedBeforeDecoding(t *testing.T) {
	// The service is never reached: the count refuses first (a call
	// would panic on the nil interface).
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 8 << 20; c.MaxTasks = 1000; c.Schedules = unreachedSchedules{} })
	body := `{"id": "nightly", "schedule": {"cron": "0 * * * *"}, "tasks": [` + strings.Repeat(`{},`, 200000) + `{}]}`
	info := e.do(t, "POST", "/api/v1/schedules", body, "Content-Type", "application/json").
		wantError(t, http.StatusBadRequest, dag.CodeTooMany)
	if !strings.Contains(info.Message, "200001") {
		t.Fatalf("message %q does not count the tasks", info.Message)
	}
}

type unreachedSchedules struct{ Schedules }

// The documents a replica reads and decodes at once are bounded in bytes,
// whoever sends them: with four bodies of unknown length (each may take
// max_body_bytes) still being read, a fifth is answered 503 with
// Retry-After before its body is read, and once they end, documents are
// read again. The four are held in the budget directly: slow bodies over
// HTTP made the test depend on when a loaded machine got to read them.
func TestDocumentsInFlightAreBounded(t *testing.T) {
	const max = 64 << 10
	s := &server{cfg: Config{MaxBodyBytes: max}}
	for range docBudgetFactor {
		if !s.docs.take(max, docBudgetFactor*max) {
			t.Fatal("the budget refused one of the first four documents")
		}
	}
	read := func() (*httptest.ResponseRecorder, bool) {
		req := httptest.NewRequest("POST", "/api/v1/dags", strings.NewReader(okDAG))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		_, _, release, ok := s.readDocument(w, req)
		if ok {
			release()
		}
		return w, ok
	}
	w, ok := read()
	if ok || w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("a fifth document: read %v, answered %d, Retry-After %q", ok, w.Code, w.Header().Get("Retry-After"))
	}
	var body struct{ Error apitypes.ErrorInfo }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != "unavailable" || !strings.Contains(body.Error.Message, "max_body_bytes") {
		t.Fatalf("answer %s (%v)", w.Body.String(), err)
	}
	for range docBudgetFactor {
		s.docs.give(max)
	}
	if w, ok := read(); !ok {
		t.Fatalf("after the four documents: answered %d %s", w.Code, w.Body.String())
	}
	if n := s.docs.inUse.Load(); n != 0 {
		t.Fatalf("%d bytes left in the budget", n)
	}
}
