package seedapi_test

// An end-to-end run of the seed surface and the event stream on a single
// node started by internal/server, as `orion server --demo` starts it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/seedapi"
	"github.com/orion-sched/orion/internal/server/servertest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	// A single node as `orion server --demo` runs it: embedded etcd, its
	// slots behind the worker hub, the seed surface and the event stream.
	s, base := servertest.Start(t, func(cfg *config.Server) {
		cfg.Demo, cfg.Slots = true, 4
		cfg.RetryBase, cfg.RetryCap, cfg.OrphanGrace = 5*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	})
	leading := func() bool { return s.Engine().Status().Leader }
	srv := struct{ URL string }{base}
	wsBase := "ws" + strings.TrimPrefix(srv.URL, "http")

	// The seed console's socket, and an Orion client that loaded state
	// through REST and follows the stream from that revision.
	seedWS, _, err := websocket.DefaultDialer.Dial(wsBase+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer seedWS.Close()
	seedEvents := make(chan seedapi.TaskEvent, 10000)
	go func() {
		defer close(seedEvents)
		for {
			var ev seedapi.TaskEvent
			if err := seedWS.ReadJSON(&ev); err != nil {
				return
			}
			seedEvents <- ev
		}
	}()
	var list apitypes.DAGList[string]
	getJSON(t, srv.URL+"/api/v1/dags", &list)
	sse := openSSE(t, fmt.Sprintf("%s/api/v1/events?since=%d", srv.URL, list.Revision))
	defer sse.Close()

	// The load tester's request shape: b fails for good (fail payload, one
	// retry), so c is cascaded; a and d succeed.
	body := `[{"id":"a","payload":"echo a","priority":1,"dependencies":[]},
	 {"id":"b","payload":"fail","priority":1,"dependencies":["a"],"max_retries":1},
	 {"id":"c","payload":"work","priority":2,"dependencies":["b"]},
	 {"id":"d","payload":"work","priority":0,"dependencies":[]}]`
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/dag", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "e2e-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sr seedapi.SubmitResponse
	_ = json.NewDecoder(resp.Body).Decode(&sr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || sr.DAGID != "e2e-1" || sr.Ingested != 4 {
		t.Fatalf("submit: %d %+v", resp.StatusCode, sr)
	}

	// As the load tester waits: until nothing is pending or running.
	testkit.WaitFor(t, 30*time.Second, "the engine to drain", func() bool {
		var st map[string]int
		getJSON(t, srv.URL+"/api/v1/status", &st)
		return st["pending"] == 0 && st["running"] == 0 && st["completed"] > 0
	})
	var st map[string]int
	getJSON(t, srv.URL+"/api/v1/status", &st)
	if st["completed"] != 2 || st["failed"] != 2 || st["retried"] != 1 {
		t.Fatalf("status %v", st)
	}
	var state seedapi.StateResponse
	getJSON(t, srv.URL+"/api/v1/dag/state", &state)
	for id, want := range map[string]string{"a": "completed", "b": "failed", "c": "failed", "d": "completed"} {
		if got := state.Tasks[id].Status; got != want {
			t.Errorf("dag/state %s = %s, want %s", id, got, want)
		}
	}

	// The seed's event stream, in the seed's vocabulary.
	seen := map[string][]seedapi.TaskEvent{}
	deadline := time.After(10 * time.Second)
collect:
	for {
		select {
		case ev := <-seedEvents:
			seen[ev.Type] = append(seen[ev.Type], ev)
			if len(seen["task.completed"]) >= 2 && len(seen["task.cascade"]) >= 1 && len(seen["metrics.update"]) >= 1 {
				break collect
			}
		case <-deadline:
			t.Fatalf("seed events so far: %v", keys(seen))
		}
	}
	if sub := seen["dag.submitted"]; len(sub) != 1 || strings.Join(sub[0].DAGTasks, ",") != "a,b,c,d" {
		t.Errorf("dag.submitted: %+v", sub)
	}
	for _, ev := range seen["task.started"] {
		if ev.WorkerID < 1 || ev.WorkerID > 4 {
			t.Errorf("task.started with worker_id %d", ev.WorkerID)
		}
	}
	if len(seen["task.started"]) != 4 { // a, d, b twice
		t.Errorf("%d task.started, want 4", len(seen["task.started"]))
	}
	for _, ev := range seen["task.completed"] {
		if ev.Duration <= 0 || ev.WorkerID == 0 {
			t.Errorf("task.completed: %+v", ev)
		}
	}
	if r := seen["task.retry"]; len(r) != 1 || r[0].TaskID != "b" || r[0].Retry != 1 || r[0].MaxRetry != 1 {
		t.Errorf("task.retry: %+v", r)
	}
	if f := seen["task.failed"]; len(f) != 1 || f[0].TaskID != "b" {
		t.Errorf("task.failed: %+v", f)
	}
	if c := seen["task.cascade"]; len(c) != 1 || c[0].TaskID != "b" || strings.Join(c[0].DAGTasks, ",") != "c" {
		t.Errorf("task.cascade: %+v", c)
	}
	if mu := seen["metrics.update"][0]; mu.Metadata["queue_size"] == "" || mu.Metadata["completed"] == "" {
		t.Errorf("metrics.update: %+v", mu)
	}

	// The Orion stream: each task's statuses in order, each event once, up
	// to the DAG's final record (the last write before the crash below).
	statuses := map[string][]string{}
	var lastID string
	dagDone := false
	for !dagDone || len(statuses["c"]) == 0 || len(statuses["b"]) < 5 || len(statuses["a"]) < 2 || len(statuses["d"]) < 2 {
		id, ev := sse.next(t)
		if ev.Type == events.TypeDAG && (ev.Status == "failed" || ev.Status == "succeeded") {
			dagDone = true
		}
		if ev.Type == events.TypeTask {
			statuses[ev.Task] = append(statuses[ev.Task], ev.Status)
			if id != ev.ID || id == lastID {
				t.Fatalf("frame id %q, event id %q, previous %q", id, ev.ID, lastID)
			}
			lastID = id
		}
	}
	for task, want := range map[string]string{"a": "running succeeded", "d": "running succeeded",
		"b": "running retrying ready running failed", "c": "upstream_failed"} {
		if got := strings.Join(statuses[task], " "); got != want {
			t.Errorf("stream of %s: %q, want %q", task, got, want)
		}
	}

	// The demo: crash (kill -9 semantics), then recover from etcd.
	post := func(path string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := post("/admin/simulate-crash"); code != 200 || out["status"] != "crashed" {
		t.Fatalf("crash: %d %v", code, out)
	}
	var adm map[string]any
	getJSON(t, srv.URL+"/admin/status", &adm)
	if adm["running"] != false {
		t.Fatalf("after crash: %v", adm)
	}
	// The seed's paths are aliases of Orion's: both report the one crash.
	var own map[string]any
	getJSON(t, srv.URL+"/api/v1/demo/status", &own)
	if own["running"] != false || own["last_crash"] != adm["last_crash"] {
		t.Fatalf("Orion's demo status after the crash: %v; the seed's: %v", own, adm)
	}
	if resp, err := http.Get(srv.URL + "/api/v1/status"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status while crashed: %v %v", resp.StatusCode, err)
	}
	waitSeed(t, seedEvents, "system.crash")
	if code, out := post("/admin/recover"); code != 200 || out["status"] != "recovered" {
		t.Fatalf("recover: %d %v", code, out)
	}
	getJSON(t, srv.URL+"/admin/status", &adm)
	if adm["running"] != true {
		t.Fatalf("after recover: %v", adm)
	}
	rec := waitSeed(t, seedEvents, "system.recover")
	if rec.Metadata["completed_recovered"] != "2" {
		t.Errorf("system.recover metadata %v", rec.Metadata)
	}
	// The Orion client sees the crash and the recovery. It needs no resync:
	// nothing was written to the log in between, so the state the new
	// engine loaded is the one the client already has.
	var sys []string
	for len(sys) < 2 {
		_, ev := sse.next(t)
		switch ev.Type {
		case events.TypeSystem:
			sys = append(sys, ev.Event)
		case events.TypeResync:
			t.Fatalf("unexpected resync: %+v", ev)
		}
	}
	if strings.Join(sys, ",") != "crash,recover" {
		t.Fatalf("system events %v", sys)
	}
	// The recovered engine leads once the crashed one's lease expires; the
	// acknowledged DAG survived.
	testkit.WaitFor(t, 15*time.Second, "leadership after recovery", leading)
	getJSON(t, srv.URL+"/api/v1/dag/state", &state)
	if state.Tasks["a"].Status != "completed" || state.Tasks["c"].Status != "failed" {
		t.Fatalf("state after recovery: %+v", state.Tasks)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/api/v1/dag", strings.NewReader(`[{"id":"z","payload":"work"}]`))
	req.Header.Set("Idempotency-Key", "e2e-2")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit after recovery: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	waitSeedTask(t, seedEvents, "task.completed", "z")
	if n := s.Events.Dropped(); n != 0 {
		t.Errorf("%d events dropped with fast readers", n)
	}
}

func keys(m map[string][]seedapi.TaskEvent) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s×%d", k, len(v)))
	}
	return out
}

func waitSeed(t *testing.T, ch <-chan seedapi.TaskEvent, typ string) seedapi.TaskEvent {
	t.Helper()
	return waitSeedTask(t, ch, typ, "")
}

func waitSeedTask(t *testing.T, ch <-chan seedapi.TaskEvent, typ, task string) seedapi.TaskEvent {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("seed socket closed waiting for %s", typ)
			}
			if ev.Type == typ && (task == "" || ev.TaskID == task) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s %s", typ, task)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

func openSSE(t *testing.T, url string) *sseStream {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("SSE: %d", resp.StatusCode)
	}
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

func (s *sseStream) Close() { s.resp.Body.Close() }

func (s *sseStream) next(t *testing.T) (string, events.Event) {
	t.Helper()
	var id, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("SSE: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && data != "":
			var ev events.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			return id, ev
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
}
