package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// fakeServer implements the API contract over an in-memory store. Each GET
// of a running DAG advances it one step (running tasks finish, ready ones
// start), so `submit --wait` sees it progress. A task whose command contains
// "exit 1" fails.
type fakeServer struct {
	*httptest.Server

	mu        sync.Mutex
	token     string // required bearer token, if set
	dags      map[string]*client.DAG
	specs     map[string]*model.DAG
	canonical map[string][]byte
	order     []string
	logs      map[string]string // "dag/task/attempt" -> log
	submits   []submission
	requests  []string // "METHOD path?query"
	unavail   int      // answer this many upcoming requests with 503
	noAdvance bool     // freeze DAG states
	// stream serves GET /api/v1/events: the newest DAG advances as the
	// stream is read, each change an event (404 without it, like a server
	// that has no stream). breakAfter > 0 ends each stream after that many
	// events, as a replica that dies would.
	stream     bool
	breakAfter int
	clock      time.Time
}

type submission struct {
	contentType string
	body        []byte
}

func newFake(t *testing.T) *fakeServer {
	f := &fakeServer{
		dags: map[string]*client.DAG{}, specs: map[string]*model.DAG{}, canonical: map[string][]byte{},
		logs: map[string]string{}, clock: time.Now().Add(-time.Hour),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/dags", f.submit)
	mux.HandleFunc("GET /api/v1/dags", f.list)
	mux.HandleFunc("GET /api/v1/dags/{id}", f.getDAG)
	mux.HandleFunc("GET /api/v1/dags/{id}/tasks/{task}", f.getTask)
	mux.HandleFunc("GET /api/v1/dags/{id}/tasks/{task}/log", f.getLog)
	mux.HandleFunc("POST /api/v1/dags/{id}/cancel", f.cancel)
	mux.HandleFunc("POST /api/v1/dags/{id}/retry", f.retry)
	mux.HandleFunc("DELETE /api/v1/dags/{id}", f.delete)
	mux.HandleFunc("GET /api/v1/cluster", f.cluster)
	mux.HandleFunc("GET /api/v1/events", f.events)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		if f.unavail > 0 {
			f.unavail--
			f.mu.Unlock()
			w.Header().Set("Retry-After", "0")
			apiErr(w, 503, "unavailable", "no leader elected yet")
			return
		}
		token := f.token
		f.mu.Unlock()
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			apiErr(w, 401, "unauthorized", "missing or invalid bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func apiJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiErr(w http.ResponseWriter, status int, code, msg string, details ...string) {
	if details == nil {
		details = []string{}
	}
	apiJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "details": details}})
}

func (f *fakeServer) tick() time.Time {
	f.clock = f.clock.Add(1500 * time.Millisecond)
	return f.clock
}

func (f *fakeServer) submit(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ct := r.Header.Get("Content-Type")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, submission{ct, body})
	d, err := dag.Parse(body, ct)
	if err == nil {
		// As the API: ?param= sets declared params before validation.
		d.Normalize()
		var overrides map[string]string
		if overrides, err = dag.ParseParamFlags(r.URL.Query()["param"]); err == nil {
			if err = dag.Bind(d, overrides); err == nil {
				err = dag.Validate(d, dag.Limits{})
			}
		}
	}
	if err != nil {
		var ve *dag.ValidationError
		if errors.As(err, &ve) {
			apiErr(w, 400, ve.Code, ve.Message, ve.Details...)
			return
		}
		apiErr(w, 400, "bad_request", err.Error())
		return
	}
	if d.ID == "" {
		d.ID = dag.NewID(time.Now())
	}
	if prev, ok := f.canonical[d.ID]; ok {
		if !bytes.Equal(prev, d.Canonical()) {
			apiErr(w, 409, "conflict", "dag "+d.ID+" exists with a different definition")
			return
		}
		apiJSON(w, 200, map[string]any{"id": d.ID, "created": false})
		return
	}
	f.add(d)
	apiJSON(w, 201, map[string]any{"id": d.ID, "created": true, "status": "running"})
}

// add stores a normalized DAG as running with every task pending.
func (f *fakeServer) add(d *model.DAG) *client.DAG {
	v := &client.DAG{DAGSummary: client.DAGSummary{ID: d.ID, Name: d.Name, Status: client.DAGRunning, Run: 1,
		SubmittedAt: f.tick(), TaskCount: len(d.Tasks)}}
	for _, t := range d.Tasks {
		deps := t.DependsOn
		if deps == nil {
			deps = []string{}
		}
		v.Tasks = append(v.Tasks, client.Task{ID: t.ID, Kind: t.Kind, Status: client.StatusPending,
			MaxRetries: t.MaxRetries, Priority: t.Priority, DependsOn: deps, Spec: t,
			TriggerRule: t.Rule(), When: t.When, Role: "task"})
	}
	// A DAG's handlers and notifications are tasks after its own; this
	// fake never runs them (advance runs only the DAG file's tasks).
	for _, h := range d.Handlers() {
		v.Tasks = append(v.Tasks, client.Task{ID: h.ID, Kind: h.Task.Kind, Status: client.StatusPending, DependsOn: []string{},
			Spec: *h.Task, TriggerRule: model.AllSuccess, When: h.Task.When, Role: "handler"})
	}
	for i, n := range d.Notify {
		v.Tasks = append(v.Tasks, client.Task{ID: model.NotifyID(i), Kind: model.KindHTTP, Status: client.StatusPending,
			DependsOn: []string{}, Spec: model.Task{Kind: model.KindHTTP, URL: n.URL, Method: n.Method},
			TriggerRule: model.AllSuccess, Role: "notification"})
	}
	v.Params = d.Params
	recount(v)
	f.dags[d.ID], f.specs[d.ID], f.canonical[d.ID] = v, d, d.Canonical()
	f.order = append(f.order, d.ID)
	return v
}

func recount(d *client.DAG) {
	d.Counts = map[string]int{}
	for _, t := range d.Tasks {
		d.Counts[t.Status]++
	}
}

// advance moves a running DAG one step.
func (f *fakeServer) advance(d *client.DAG) {
	if f.noAdvance || d.Status != client.DAGRunning {
		return
	}
	now := f.tick()
	status := map[string]string{}
	for i := range d.Tasks {
		t := &d.Tasks[i]
		if t.Status == client.StatusRunning {
			code := 0
			t.Status = client.StatusSucceeded
			t.OutputTail = "hello from " + t.ID + "\n"
			if strings.Contains(t.Spec.Command, "exit 1") {
				code, t.Status, t.Error = 1, client.StatusFailed, "exit status 1\nsecond line"
			}
			fin := now
			ms := fin.Sub(*t.StartedAt).Milliseconds()
			t.FinishedAt, t.DurationMs, t.ExitCode = &fin, &ms, &code
			t.History = append(t.History, client.Attempt{Attempt: t.Attempts, Worker: t.Worker,
				StartedAt: t.StartedAt, FinishedAt: &fin, Outcome: t.Status, ExitCode: &code})
			f.logs[d.ID+"/"+t.ID+"/1"] = "attempt one of " + t.ID + "\n"
		}
		status[t.ID] = t.Status
	}
	for i := range d.Tasks {
		t := &d.Tasks[i]
		if t.Status != client.StatusPending || t.Role != "task" {
			continue
		}
		ready := true
		for _, dep := range t.DependsOn {
			switch status[dep] {
			case client.StatusSucceeded:
			case client.StatusFailed, client.StatusUpstreamFailed:
				t.Status, t.Cascade, t.Cause, ready = client.StatusUpstreamFailed, true, dep, false
			default:
				ready = false
			}
		}
		if ready {
			start := now
			t.Status, t.Attempts, t.Worker, t.StartedAt = client.StatusRunning, t.Attempts+1, "w1", &start
		}
	}
	recount(d)
	done, failed := true, false
	for _, t := range d.Tasks {
		switch t.Status {
		case client.StatusSucceeded:
		case client.StatusFailed, client.StatusUpstreamFailed:
			failed = true
		default:
			done = false
		}
	}
	if done {
		fin := now
		d.FinishedAt, d.Status = &fin, client.DAGSucceeded
		if failed {
			d.Status = client.DAGFailed
		}
	}
}

func (f *fakeServer) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []client.DAGSummary{}
	for i := len(f.order) - 1; i >= 0; i-- {
		d := f.dags[f.order[i]]
		if s := r.URL.Query().Get("status"); s != "" && d.Status != s {
			continue
		}
		out = append(out, d.DAGSummary)
	}
	if n := r.URL.Query().Get("limit"); n == "1" && len(out) > 1 {
		out = out[:1]
	}
	apiJSON(w, 200, map[string]any{"dags": out, "revision": 12, "node": "n1"})
}

func (f *fakeServer) lookup(w http.ResponseWriter, r *http.Request) *client.DAG {
	d := f.dags[r.PathValue("id")]
	if d == nil {
		apiErr(w, 404, "not_found", "dag \""+r.PathValue("id")+"\" not found")
	}
	return d
}

func (f *fakeServer) getDAG(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.lookup(w, r)
	if d == nil {
		return
	}
	out := struct {
		*client.DAG
		Revision int64 `json:"revision"`
	}{d, 12}
	apiJSON(w, 200, out)
	f.advance(d) // the next poll sees progress
}

// events streams the newest DAG's progress as the server's event stream
// does: a task event per task whose status changed, then the DAG's record
// once it ended; the stream then stays open, as a real one does.
func (f *fakeServer) events(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if !f.stream || len(f.order) == 0 {
		f.mu.Unlock()
		apiErr(w, 404, "not_found", "no route")
		return
	}
	d, breakAfter := f.dags[f.order[len(f.order)-1]], f.breakAfter
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fmt.Fprint(w, "retry: 1000\n: orion events\n\n")
	rc := http.NewResponseController(w)
	rev, sent := int64(100+len(f.requests)*10), 0
	send := func(ev map[string]any) bool {
		rev++
		ev["rev"], ev["dag"] = rev, d.ID
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "id: %d:1\ndata: %s\n\n: heartbeat\n\n", rev, b)
		rc.Flush()
		sent++
		return breakAfter == 0 || sent < breakAfter
	}
	for {
		f.mu.Lock()
		before := map[string]string{}
		for _, t := range d.Tasks {
			before[t.ID] = t.Status
		}
		f.advance(d)
		var changed []map[string]any
		for _, t := range d.Tasks {
			if t.Status != before[t.ID] {
				changed = append(changed, map[string]any{"type": "task", "task": t.ID, "status": t.Status})
			}
		}
		status := d.Status
		f.mu.Unlock()
		for _, ev := range changed {
			if !send(ev) {
				return
			}
		}
		if status != client.DAGRunning {
			send(map[string]any{"type": "dag", "status": status, "unknown_field": true})
			<-r.Context().Done()
			return
		}
	}
}

func (f *fakeServer) task(w http.ResponseWriter, r *http.Request) *client.Task {
	d := f.lookup(w, r)
	if d == nil {
		return nil
	}
	for i := range d.Tasks {
		if d.Tasks[i].ID == r.PathValue("task") {
			return &d.Tasks[i]
		}
	}
	apiErr(w, 404, "not_found", "task \""+r.PathValue("task")+"\" not found")
	return nil
}

func (f *fakeServer) getTask(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.task(w, r); t != nil {
		t.Revision = 12
		apiJSON(w, 200, t)
	}
}

func (f *fakeServer) getLog(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.task(w, r)
	if t == nil {
		return
	}
	attempt := r.URL.Query().Get("attempt")
	if attempt == "" {
		attempt = "1"
	}
	log, ok := f.logs[r.PathValue("id")+"/"+t.ID+"/"+attempt]
	if !ok {
		apiErr(w, 404, "not_found", "no log for attempt "+attempt)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, log)
}

func (f *fakeServer) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.lookup(w, r)
	if d == nil {
		return
	}
	if d.Status != client.DAGRunning {
		apiErr(w, 409, "conflict", "dag "+d.ID+" is "+d.Status+", not running")
		return
	}
	if f.specs[d.ID].HasHooks() && !d.CancelRequested {
		// Its tasks are cancelled, its handlers and notifications are
		// to run: the DAG still runs.
		d.CancelRequested = true
		apiJSON(w, 200, map[string]any{"id": d.ID, "status": d.Status, "cancel_requested": true})
		return
	}
	for i := range d.Tasks {
		if t := &d.Tasks[i]; !isTerminal(t.Status) {
			t.Status = client.StatusCancelled
		}
	}
	fin := f.tick()
	d.Status, d.FinishedAt = client.DAGCancelled, &fin
	recount(d)
	apiJSON(w, 200, map[string]any{"id": d.ID, "status": d.Status})
}

func (f *fakeServer) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.lookup(w, r)
	if d == nil {
		return
	}
	if d.Status == client.DAGRunning {
		apiErr(w, 409, "conflict", "DAG "+d.ID+" is running: cancel it before deleting it")
		return
	}
	delete(f.dags, d.ID)
	apiJSON(w, 200, map[string]any{"id": d.ID, "status": "deleted"})
}

func (f *fakeServer) retry(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.lookup(w, r)
	if d == nil {
		return
	}
	if d.Status != client.DAGFailed && d.Status != client.DAGCancelled {
		apiErr(w, 409, "conflict", "dag "+d.ID+" is "+d.Status+"; only failed or cancelled DAGs can be retried")
		return
	}
	for i := range d.Tasks {
		if t := &d.Tasks[i]; t.Status != client.StatusSucceeded {
			t.Status = client.StatusPending
		}
	}
	d.Status, d.FinishedAt, d.Run = client.DAGRunning, nil, d.Run+1
	recount(d)
	apiJSON(w, 200, map[string]any{"id": d.ID, "status": d.Status})
}

func isTerminal(s string) bool {
	switch s {
	case client.StatusSucceeded, client.StatusFailed, client.StatusUpstreamFailed, client.StatusCancelled:
		return true
	}
	return false
}

func (f *fakeServer) cluster(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, `{"node":"n1","leader":"n2","applied_revision":42,"term":7,
		"replicas":[{"name":"n1","role":"follower","applied_revision":41},{"name":"n2","role":"leader","applied_revision":42}],
		"workers":[{"id":"w1","slots":4,"busy":1},{"id":"w2","slots":2,"busy":0,"labels":{"pool":"gpu","zone":"a"},"host":"gpu-node-1","pid":4242}],
		"etcd":{"endpoints":["http://10.0.0.1:2379","http://10.0.0.2:2379"]}}`)
}

func (f *fakeServer) lastSubmit() submission {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.submits[len(f.submits)-1]
}

func (f *fakeServer) requestLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// seed stores a DAG parsed from YAML and advances it n steps.
func (f *fakeServer) seed(t *testing.T, yamlBody string, steps int) *client.DAG {
	t.Helper()
	d, err := dag.Load([]byte(yamlBody), "application/yaml", dag.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.add(d)
	for range steps {
		f.advance(v)
	}
	return v
}
