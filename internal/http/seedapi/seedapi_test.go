package seedapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/demo"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/http/openapi/openapitest"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// fakeBackend accepts submissions and serves a core restored by the test.
type fakeBackend struct {
	mu        sync.Mutex
	c         *core.Core
	st        *engine.Status
	submitted []*model.DAG
	seen      map[string]*model.DAG
	submitErr error
}

func (f *fakeBackend) Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil {
		return engine.SubmitResult{}, f.submitErr
	}
	if prev, ok := f.seen[d.ID]; ok {
		a, _ := json.Marshal(prev)
		b, _ := json.Marshal(d)
		if string(a) != string(b) {
			return engine.SubmitResult{}, &core.Error{Code: core.CodeConflict, Msg: "DAG " + d.ID + " already exists with different content"}
		}
		return engine.SubmitResult{ID: d.ID}, nil
	}
	f.seen[d.ID] = d
	f.submitted = append(f.submitted, d)
	return engine.SubmitResult{ID: d.ID, Created: true}, nil
}

func (f *fakeBackend) Counts(ctx context.Context) (core.StatusCounts, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c.StatusCounts(), f.c.Rev(), nil
}

func (f *fakeBackend) DAGViews(ctx context.Context, q core.DAGQuery) ([]*core.DAGView, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var views []*core.DAGView
	for _, s := range f.c.DAGs(q) {
		v, _ := f.c.DAG(s.ID)
		views = append(views, v)
	}
	return views, f.c.Rev(), nil
}

func (f *fakeBackend) Rev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c.Rev()
}

func (f *fakeBackend) WaitApplied(ctx context.Context, rev int64) error { return ctx.Err() }

func (f *fakeBackend) Status() *engine.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func ptr[T any](v T) *T { return &v }

// newFake holds two DAGs: "old" (succeeded, task t1 shares its id with
// one of "new") and "new" (running: t1 succeeded, t2 retrying, t3 pending,
// t4 upstream_failed).
func newFake(t *testing.T) *fakeBackend {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := ToDAG("old", []Task{{ID: "t1", Payload: "work"}}, false)
	nw := ToDAG("new", []Task{
		{ID: "t1", Payload: "echo hi", Priority: 2},
		{ID: "t2", Payload: "fail", Dependencies: []string{"t1"}},
		{ID: "t3", Payload: "sleep", Dependencies: []string{"t2"}},
		{ID: "t4", Payload: "work", Dependencies: []string{"t2"}},
	}, false)
	c := core.New(core.Config{})
	dags := []core.Entry{
		{Rev: 10, DAG: "old", D: &core.DAGRecord{DAG: *old, Status: core.DAGSucceeded, Run: 1, SubmittedAt: now}},
		{Rev: 11, DAG: "new", D: &core.DAGRecord{DAG: *nw, Status: core.DAGRunning, Run: 1, SubmittedAt: now}},
	}
	tasks := []core.Entry{
		{Rev: 12, DAG: "old", Task: "t1", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Event: "succeed"}},
		{Rev: 13, DAG: "new", Task: "t1", T: &core.TaskRecord{Status: core.Succeeded, Run: 1, Attempt: 1, Event: "succeed",
			StartedAt: ptr(now), FinishedAt: ptr(now.Add(time.Second))}},
		{Rev: 14, DAG: "new", Task: "t2", T: &core.TaskRecord{Status: core.Retrying, Run: 1, Attempt: 1, Retries: 1, Event: "retry"}},
		{Rev: 15, DAG: "new", Task: "t4", T: &core.TaskRecord{Status: core.UpstreamFailed, Run: 1, Cascade: true, Cause: "t2", Event: "cascade"}},
	}
	if errs := c.Restore(20, dags, tasks); len(errs) > 0 {
		t.Fatalf("restore: %v", errs)
	}
	return &fakeBackend{c: c, seen: map[string]*model.DAG{}, st: &engine.Status{
		Node: "n1", Leader: true, Loaded: true, AppliedRev: 20, Counts: c.Counts(),
		Workers: []core.WorkerView{{ID: "w", Slots: 4, Busy: 1}},
	}}
}

// fakeScheduler stands for the engine the demo controls crash and recover.
type fakeScheduler struct {
	mu      sync.Mutex
	running bool
}

func (f *fakeScheduler) Crash() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = false
	return nil
}

func (f *fakeScheduler) Recover(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = true
	return nil
}

func (f *fakeScheduler) Status() demo.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return demo.Status{Running: f.running}
}

// withDemo gives the seed surface the demo controls, enabled or not.
func withDemo(enabled bool) func(*Config) {
	return func(c *Config) {
		c.Demo = demo.New(demo.Config{Scheduler: &fakeScheduler{running: true}, Enabled: enabled, Backend: c.Backend, Events: c.Hub})
	}
}

type env struct {
	f   *fakeBackend
	hub *events.Hub
	h   *Handler
	srv *httptest.Server
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	f := newFake(t)
	hub := events.NewHub(events.Config{})
	cfg := Config{Backend: f, Hub: hub, Node: "n1"}
	if mod != nil {
		mod(&cfg)
	}
	h := New(cfg)
	mux := http.NewServeMux()
	for p, hd := range h.Routes() {
		// Every answer a test provokes must be one the OpenAPI document
		// allows (the seed's own list below is not in it: Orion's API
		// serves that route).
		mux.Handle(p, openapitest.Checked(t, hd))
	}
	mux.Handle("GET /api/v1/dags", h.ListDAGs())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(hub.Close)
	return &env{f: f, hub: hub, h: h, srv: srv}
}

type resp struct {
	code int
	hdr  http.Header
	body []byte
}

func (e *env) do(t *testing.T, method, path, body string, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp{code: r.StatusCode, hdr: r.Header, body: []byte(b.String())}
}

func (r resp) decode(t *testing.T, v any) {
	t.Helper()
	if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q (status %d, body %s)", ct, r.code, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r resp) wantError(t *testing.T, status int, code string) ErrorBody {
	t.Helper()
	var eb ErrorBody
	r.decode(t, &eb)
	if r.code != status || string(eb.Code) != code || eb.Error == "" {
		t.Fatalf("got %d %+v, want %d %s", r.code, eb, status, code)
	}
	return eb
}

// The load tester's request: an array of tasks, an Idempotency-Key.
const loadtestBody = `[{"id":"task-7-0","payload":"echo 'Load test 7 task 0'","priority":3,"dependencies":[]},` +
	`{"id":"task-7-1","payload":"fail","priority":1,"dependencies":["task-7-0"]},` +
	`{"id":"task-7-2","payload":"sleep","priority":0,"dependencies":["task-7-0","task-7-1"],"max_retries":5,"status":"","retry_count":0,"start_time":"0001-01-01T00:00:00Z"}]`

func TestSubmitMapsTheSeedFormat(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "POST", PathSubmit, loadtestBody, "Content-Type", "application/json", "Idempotency-Key", "loadtest-123-7")
	var sr SubmitResponse
	r.decode(t, &sr)
	if r.code != http.StatusCreated || sr.Status != "accepted" || sr.Ingested != 3 || sr.DAGID != "loadtest-123-7" {
		t.Fatalf("%d %+v", r.code, sr)
	}
	if loc := r.hdr.Get("Location"); loc != "/api/v1/dags/loadtest-123-7" {
		t.Fatalf("Location %q", loc)
	}
	d := e.f.submitted[0]
	if d.ID != "loadtest-123-7" || d.Name != d.ID || len(d.Tasks) != 3 {
		t.Fatalf("dag %+v", d)
	}
	t0, t1, t2 := d.Tasks[0], d.Tasks[1], d.Tasks[2]
	for _, tk := range d.Tasks {
		if tk.Kind != model.KindSleep || tk.Timeout.D() != model.DefaultTimeout {
			t.Fatalf("task %s: kind %s timeout %s", tk.ID, tk.Kind, tk.Timeout.D())
		}
	}
	if t0.Name != "echo 'Load test 7 task 0'" || t0.Fail != 0 || t0.Priority != 3 || t0.MaxRetries != 3 ||
		t0.Duration.D() < 50*time.Millisecond || t0.Duration.D() >= 200*time.Millisecond || t0.DependsOn != nil {
		t.Fatalf("ordinary work: %+v", t0)
	}
	if t1.Fail != 1 || t1.Priority != 1 || len(t1.DependsOn) != 1 || t1.Duration.D() >= 200*time.Millisecond {
		t.Fatalf("fail payload: %+v", t1)
	}
	if t2.Duration.D() != 2*time.Second || t2.Fail != 0 || t2.MaxRetries != 5 || len(t2.DependsOn) != 2 {
		t.Fatalf("sleep payload: %+v", t2)
	}

	// The same key and body again: the same DAG, 200, as the seed did.
	r = e.do(t, "POST", PathSubmit, loadtestBody, "Idempotency-Key", "loadtest-123-7")
	r.decode(t, &sr)
	if r.code != http.StatusOK || sr.DAGID != "loadtest-123-7" || len(e.f.submitted) != 1 {
		t.Fatalf("repeat: %d %+v (%d submitted)", r.code, sr, len(e.f.submitted))
	}
	// The same key with another body is a conflict (the seed silently
	// answered with the first response).
	r = e.do(t, "POST", PathSubmit, `[{"id":"other","payload":"x"}]`, "Idempotency-Key", "loadtest-123-7")
	r.wantError(t, http.StatusConflict, "conflict")

	// A key that is not a valid id maps to a stable derived one.
	r = e.do(t, "POST", PathSubmit, `[{"id":"a","payload":"x","priority":1,"dependencies":[]}]`, "Idempotency-Key", "key with spaces/slash")
	r.decode(t, &sr)
	if r.code != http.StatusCreated || sr.DAGID != kit.IdempotencyID("key with spaces/slash") || !strings.HasPrefix(sr.DAGID, "k-") {
		t.Fatalf("%d %+v", r.code, sr)
	}
}

func TestToDAGIsDeterministicAndSlowMode(t *testing.T) {
	tasks := []Task{{ID: "a", Payload: "work"}, {ID: "b", Payload: "work"}}
	a, b := ToDAG("k", tasks, false), ToDAG("k", tasks, false)
	if string(a.Canonical()) != string(b.Canonical()) {
		t.Fatal("the same request maps to different DAGs")
	}
	if ToDAG("k2", tasks, false).Tasks[0].Duration == a.Tasks[0].Duration && ToDAG("k3", tasks, false).Tasks[0].Duration == a.Tasks[0].Duration {
		t.Log("durations do not depend on the key (unlikely but possible)")
	}
	slow := ToDAG("k", tasks, true)
	for _, tk := range slow.Tasks {
		if tk.Duration.D() < 2*time.Second || tk.Duration.D() >= 5*time.Second {
			t.Fatalf("slow duration %s", tk.Duration.D())
		}
	}
	long := ToDAG("k", []Task{{ID: "a", Payload: strings.Repeat("é", 300)}}, false)
	if len(long.Tasks[0].Name) > dag.MaxNameLen || dag.Validate(long, dag.Limits{}) != nil {
		t.Fatalf("long payload label: %d bytes", len(long.Tasks[0].Name))
	}
}

func TestSubmitErrors(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxTasks = 3; c.MaxBodyBytes = 1 << 12 })
	key := []string{"Idempotency-Key", "k1"}
	e.do(t, "POST", PathSubmit, `[{"id":"a"}]`).wantError(t, http.StatusBadRequest, "bad_request") // no key
	e.do(t, "POST", PathSubmit, `{"id":"a"}`, key...).wantError(t, http.StatusBadRequest, "parse_error")
	e.do(t, "POST", PathSubmit, `[{"id":"a","command":"rm -rf /"}]`, key...).wantError(t, http.StatusBadRequest, "parse_error")
	e.do(t, "POST", PathSubmit, `[]`, key...).wantError(t, http.StatusBadRequest, "invalid_dag")
	e.do(t, "POST", PathSubmit, `[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"}]`, key...).wantError(t, http.StatusBadRequest, "too_many_tasks")
	eb := e.do(t, "POST", PathSubmit, `[{"id":"a","dependencies":["b"]},{"id":"b","dependencies":["a"]}]`, key...).
		wantError(t, http.StatusBadRequest, "cycle")
	if len(eb.Details) == 0 || !strings.Contains(eb.Details[0], "→") {
		t.Fatalf("cycle details %v", eb.Details)
	}
	// A dependency on a task of an earlier submission: Orion scopes task
	// ids to their DAG.
	eb = e.do(t, "POST", PathSubmit, `[{"id":"a","dependencies":["elsewhere"]}]`, key...).wantError(t, http.StatusBadRequest, "invalid_dag")
	if !strings.Contains(eb.Error, "unknown task") {
		t.Fatalf("unknown dependency message %q", eb.Error)
	}
	e.do(t, "POST", PathSubmit, `[{"id":"a b"}]`, key...).wantError(t, http.StatusBadRequest, "invalid_dag")
	e.do(t, "POST", PathSubmit, `[{"id":"a","payload":"`+strings.Repeat("x", 5000)+`"}]`, key...).
		wantError(t, http.StatusRequestEntityTooLarge, "body_too_large")
	e.do(t, "GET", PathSubmit, "").wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")
	if len(e.f.submitted) != 0 {
		t.Fatalf("%d DAGs submitted by invalid requests", len(e.f.submitted))
	}

	// Overload: more ready tasks than MaxQueue.
	e.f.mu.Lock()
	e.f.st = &engine.Status{Node: "n1", Leader: true, Loaded: true, Counts: map[core.Status]int{core.Ready: 10001}}
	e.f.mu.Unlock()
	r := e.do(t, "POST", PathSubmit, `[{"id":"a"}]`, key...)
	r.wantError(t, http.StatusTooManyRequests, "overloaded")
	if r.hdr.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}

	// No leader, nobody to forward to: 503 with Retry-After.
	e.f.mu.Lock()
	e.f.st = &engine.Status{Node: "n1", Loaded: true}
	e.f.submitErr = core.ErrNotLeader
	e.f.mu.Unlock()
	r = e.do(t, "POST", PathSubmit, `[{"id":"a"}]`, key...)
	r.wantError(t, http.StatusServiceUnavailable, "unavailable")
	if r.hdr.Get("Retry-After") != "1" {
		t.Fatal("503 without Retry-After")
	}
	e.f.mu.Lock()
	e.f.submitErr = context.DeadlineExceeded
	e.f.mu.Unlock()
	e.do(t, "POST", PathSubmit, `[{"id":"a"}]`, key...).wantError(t, http.StatusGatewayTimeout, "timeout")
	// etcd at its quota: nothing written, 507.
	e.f.mu.Lock()
	e.f.submitErr = &engine.StorageFullError{DAG: "d", Cause: store.ErrNoSpace}
	e.f.mu.Unlock()
	e.do(t, "POST", PathSubmit, `[{"id":"a"}]`, key...).wantError(t, http.StatusInsufficientStorage, "storage_full")
}

// clusterStub names a leader for forwarding.
type clusterStub struct{ leader apitypes.ReplicaAddr }

func (c clusterStub) Replicas(context.Context) ([]apitypes.ReplicaAddr, error) { return nil, nil }
func (c clusterStub) LeaderAddr(context.Context) (apitypes.ReplicaAddr, bool, error) {
	return c.leader, c.leader.Name != "", nil
}
func (c clusterStub) Members(context.Context) ([]apitypes.EtcdMember, error) { return nil, nil }
func (c clusterStub) Workers() []apitypes.Worker                             { return nil }

func TestStandbyForwardsSubmissions(t *testing.T) {
	leader := newEnv(t, nil)
	var gotAuth, gotFwd string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotFwd = r.Header.Get("Authorization"), r.Header.Get(kit.ForwardedHeader)
		leader.srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer front.Close()
	standby := newEnv(t, func(c *Config) {
		c.Node = "n2"
		c.AuthToken = "tok"
		c.Cluster = clusterStub{leader: apitypes.ReplicaAddr{Name: "n1", APIURL: front.URL}}
	})
	standby.f.mu.Lock()
	standby.f.st = &engine.Status{Node: "n2", Loaded: true}
	standby.f.submitErr = core.ErrNotLeader
	standby.f.mu.Unlock()

	r := standby.do(t, "POST", PathSubmit, loadtestBody, "Idempotency-Key", "fwd-1")
	var sr SubmitResponse
	r.decode(t, &sr)
	if r.code != http.StatusCreated || sr.DAGID != "fwd-1" || r.hdr.Get("X-Orion-Leader") != "n1" {
		t.Fatalf("%d %+v", r.code, sr)
	}
	if len(leader.f.submitted) != 1 || len(standby.f.submitted) != 0 {
		t.Fatal("the leader should have the DAG")
	}
	if gotAuth != "Bearer tok" || gotFwd != "n2" {
		t.Fatalf("forwarded with Authorization %q, %s %q", gotAuth, kit.ForwardedHeader, gotFwd)
	}
	// A request that was forwarded once is not forwarded again.
	r = standby.do(t, "POST", PathSubmit, loadtestBody, "Idempotency-Key", "fwd-2", kit.ForwardedHeader, "n3")
	r.wantError(t, http.StatusServiceUnavailable, "unavailable")
}

func TestStatusAndLiveMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.hub.Publish(events.Event{Type: events.TypeTask, Rev: 30, Status: "retrying"})
	var c Counts
	r := e.do(t, "GET", PathStatus, "")
	r.decode(t, &c)
	// pending: new/t3 + new/t2 (retrying); completed: old/t1, new/t1;
	// failed: new/t4 (upstream_failed).
	if r.code != 200 || c != (Counts{Pending: 2, Running: 0, Completed: 2, Failed: 1, Retried: 1}) {
		t.Fatalf("%d %+v", r.code, c)
	}
	var raw map[string]int
	r.decode(t, &raw) // the load tester decodes into map[string]int
	if raw["pending"] != 2 || raw["completed"] != 2 {
		t.Fatalf("as map: %v", raw)
	}

	var lm LiveMetrics
	r = e.do(t, "GET", PathLive, "")
	r.decode(t, &lm)
	if r.code != 200 || lm.Workers != 4 || lm.Completed != 2 || lm.QueueSize != 0 || lm.Node != "n1" || !lm.Leader {
		t.Fatalf("%d %+v", r.code, lm)
	}
	var m map[string]any
	r.decode(t, &m)
	for _, k := range []string{"pending", "running", "completed", "failed", "retried", "queue_size", "ws_clients", "uptime_seconds", "workers", "dropped_events"} {
		if _, ok := m[k]; !ok {
			t.Errorf("metrics/live lacks %q", k)
		}
	}

	e.f.mu.Lock()
	e.f.st = &engine.Status{Node: "n1"} // crashed: not loaded
	e.f.mu.Unlock()
	e.do(t, "GET", PathStatus, "").wantError(t, http.StatusServiceUnavailable, "unavailable")
	e.do(t, "GET", PathLive, "").wantError(t, http.StatusServiceUnavailable, "unavailable")
	var st StateResponse
	r = e.do(t, "GET", PathState, "")
	r.decode(t, &st)
	if r.code != 200 || st.SchedulerRunning || len(st.Tasks) != 0 {
		t.Fatalf("offline state: %d %+v", r.code, st)
	}
}

func TestDAGState(t *testing.T) {
	e := newEnv(t, nil)
	var st StateResponse
	r := e.do(t, "GET", PathState, "")
	r.decode(t, &st)
	if r.code != 200 || !st.SchedulerRunning || st.Revision != 20 || len(st.Tasks) != 4 {
		t.Fatalf("%d %+v", r.code, st)
	}
	want := map[string]string{"t1": "completed", "t2": "pending", "t3": "pending", "t4": "failed"}
	for id, s := range want {
		if got := st.Tasks[id]; got.Status != s || got.DAGID != "new" || got.MaxRetries != 3 {
			t.Errorf("task %s: %+v, want status %s in DAG new", id, got, s)
		}
	}
	if t1 := st.Tasks["t1"]; t1.Payload != "echo hi" || t1.Priority != 2 || t1.StartTime == nil || t1.EndTime == nil {
		t.Errorf("t1: %+v", t1)
	}
	if t2 := st.Tasks["t2"]; t2.Payload != "fail" || t2.RetryCount != 1 || len(t2.Dependencies) != 1 {
		t.Errorf("t2: %+v", t2)
	}
	if st.Metrics.Completed != 2 || st.Metrics.Pending != 2 {
		t.Errorf("metrics %+v", st.Metrics)
	}
	var raw map[string]map[string]map[string]any
	_ = json.Unmarshal(r.body, &raw)
	if _, ok := raw["tasks"]["t3"]["dependencies"].([]any); !ok {
		t.Errorf("dependencies must be an array: %v", raw["tasks"]["t3"])
	}

	// Bounds: only the newest finished DAGs, and a task cap.
	e2 := newEnv(t, func(c *Config) { c.StateDAGs = 1; c.StateTasks = 2 })
	r = e2.do(t, "GET", PathState, "")
	st = StateResponse{}
	r.decode(t, &st)
	if !st.Truncated || len(st.Tasks) != 1 || st.Tasks["t1"].DAGID != "old" {
		t.Fatalf("bounded state: %+v", st)
	}
}

func TestListDAGsSeedShape(t *testing.T) {
	e := newEnv(t, nil)
	var out struct {
		DAGs  []DAGInfo `json:"dags"`
		Count int       `json:"count"`
	}
	r := e.do(t, "GET", "/api/v1/dags", "")
	r.decode(t, &out)
	if out.Count != 2 || out.DAGs[0].ID != "new" || len(out.DAGs[0].TaskIDs) != 4 || out.DAGs[0].TaskCount != 4 {
		t.Fatalf("%+v", out)
	}
}

// The /admin routes are the seed's names for the demo package's controls:
// its behaviour is tested there; here, that the aliases reach it and answer
// in the seed's shape.
func TestAdminAliases(t *testing.T) {
	off := newEnv(t, withDemo(false))
	off.do(t, "POST", PathCrash, "").wantError(t, http.StatusForbidden, "demo_disabled")
	off.do(t, "POST", PathRecover, "").wantError(t, http.StatusForbidden, "demo_disabled")
	var st map[string]any
	r := off.do(t, "GET", PathAdminSts, "")
	r.decode(t, &st)
	if r.code != 200 || st["running"] != true || st["demo"] != false {
		t.Fatalf("%d %v", r.code, st)
	}

	e := newEnv(t, withDemo(true))
	var out map[string]any
	r = e.do(t, "POST", PathCrash, "")
	r.decode(t, &out)
	if r.code != 200 || out["status"] != "crashed" {
		t.Fatalf("%d %v", r.code, out)
	}
	e.do(t, "POST", PathCrash, "").wantError(t, http.StatusConflict, "conflict")
	e.do(t, "GET", PathAdminSts, "").decode(t, &st)
	if st["running"] != false || st["last_crash"] == nil || st["demo"] != true {
		t.Fatalf("after crash: %v", st)
	}
	r = e.do(t, "POST", PathRecover, "")
	r.decode(t, &out)
	if r.code != 200 || out["status"] != "recovered" {
		t.Fatalf("%d %v", r.code, out)
	}
	// The seed's route wrapper still judges the method.
	e.do(t, "GET", PathCrash, "").wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")

	// Without the controls there are no aliases.
	if r := newEnv(t, nil).do(t, "GET", PathAdminSts, ""); r.code != http.StatusNotFound {
		t.Fatalf("status without demo controls: %d %s", r.code, r.body)
	}
}

func TestCORS(t *testing.T) {
	e := newEnv(t, withDemo(true))
	// The seed's console runs on its own dev server (localhost:3000).
	r := e.do(t, "OPTIONS", PathSubmit, "", "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type,idempotency-key")
	if r.code != http.StatusNoContent || r.hdr.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		!strings.Contains(r.hdr.Get("Access-Control-Allow-Headers"), "Idempotency-Key") {
		t.Fatalf("preflight: %d %v", r.code, r.hdr)
	}
	r = e.do(t, "GET", PathStatus, "", "Origin", "http://localhost:3000")
	if r.code != 200 || r.hdr.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Fatalf("%d %v", r.code, r.hdr)
	}
	// Another site's page cannot make a browser crash the demo or submit.
	e.do(t, "POST", PathCrash, "", "Origin", "https://evil.example").wantError(t, http.StatusForbidden, "forbidden")
}
