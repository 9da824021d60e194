package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/http/openapi/openapitest"
)

// fakeScheduler counts crashes and recoveries instead of running an engine.
type fakeScheduler struct {
	mu       sync.Mutex
	running  bool
	crashes  int
	recovers int
}

func (f *fakeScheduler) Crash() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = false
	f.crashes++
	return nil
}

func (f *fakeScheduler) Recover(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = true
	f.recovers++
	return nil
}

func (f *fakeScheduler) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Status{Running: f.running, Detail: map[string]any{"node": "n1"}}
}

// calls reads the counts under the lock the handlers took.
func (f *fakeScheduler) calls() (crashes, recovers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashes, f.recovers
}

// emptyBackend is a scheduler that loaded an empty log.
type emptyBackend struct{ c *core.Core }

func (b emptyBackend) Counts(ctx context.Context) (core.StatusCounts, int64, error) {
	return b.c.StatusCounts(), b.c.Rev(), nil
}

// newControls serves the controls' Orion routes as the API mounts them.
func newControls(t *testing.T, mod func(*Config)) (*fakeScheduler, *events.Hub, *httptest.Server) {
	t.Helper()
	sched := &fakeScheduler{running: true}
	hub := events.NewHub(events.Config{})
	t.Cleanup(hub.Close)
	cfg := Config{Scheduler: sched, Enabled: true, Backend: emptyBackend{core.New(core.Config{})}, Events: hub, Node: "n1"}
	if mod != nil {
		mod(&cfg)
	}
	mux := http.NewServeMux()
	for p, h := range New(cfg).Routes() {
		mux.Handle(p, openapitest.Checked(t, h)) // answers the OpenAPI document allows
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return sched, hub, srv
}

type answer struct {
	code int
	body map[string]any
}

func call(t *testing.T, method, url string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content type %q (status %d, body %s)", method, url, ct, resp.StatusCode, b)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s %s: decoding %s: %v", method, url, b, err)
	}
	return answer{resp.StatusCode, body}
}

// wantError checks an answer is the API's error body with this status and code.
func (a answer) wantError(t *testing.T, status int, code apitypes.Code) string {
	t.Helper()
	raw, _ := json.Marshal(a.body)
	var eb apitypes.ErrorBody
	if err := json.Unmarshal(raw, &eb); err != nil || a.code != status || eb.Error.Code != code || eb.Error.Message == "" {
		t.Fatalf("got %d %s, want %d %s", a.code, raw, status, code)
	}
	return eb.Error.Message
}

func TestCrashRecoverStatus(t *testing.T) {
	sched, hub, srv := newControls(t, nil)
	sub, _ := hub.SubscribeLive()
	defer sub.Close()

	st := call(t, "GET", srv.URL+PathStatus)
	if st.code != 200 || st.body["demo"] != true || st.body["running"] != true || st.body["detail"] == nil || st.body["last_crash"] != nil {
		t.Fatalf("before: %+v", st)
	}
	cr := call(t, "POST", srv.URL+PathCrash)
	if crashes, _ := sched.calls(); cr.code != 200 || cr.body["status"] != "crashed" || cr.body["crash_time"] == nil || crashes != 1 {
		t.Fatalf("crash: %+v", cr)
	}
	call(t, "POST", srv.URL+PathCrash).wantError(t, http.StatusConflict, apitypes.CodeConflict)
	st = call(t, "GET", srv.URL+PathStatus)
	if st.body["running"] != false || st.body["last_crash"] == nil {
		t.Fatalf("after crash: %+v", st)
	}
	rec := call(t, "POST", srv.URL+PathRecover)
	if _, recovers := sched.calls(); rec.code != 200 || rec.body["status"] != "recovered" || rec.body["recovery_time"] == nil || recovers != 1 {
		t.Fatalf("recover: %+v", rec)
	}
	if _, ok := rec.body["downtime_ms"].(float64); !ok {
		t.Fatalf("downtime_ms: %+v", rec)
	}
	call(t, "POST", srv.URL+PathRecover).wantError(t, http.StatusConflict, apitypes.CodeConflict)

	// Every page following the stream hears of both, and of what the new
	// scheduler loaded.
	var got []string
	var recovered map[string]string
	for {
		ev, ok, _ := sub.Poll(context.Background(), 50*time.Millisecond)
		if !ok {
			break
		}
		got = append(got, ev.Type+":"+ev.Event)
		if ev.Event == "recover" {
			recovered = ev.Meta
		}
	}
	if strings.Join(got, ",") != "system:crash,system:recover" {
		t.Fatalf("hub got %v", got)
	}
	for _, k := range []string{"downtime_ms", "completed_recovered", "failed_recovered", "in_flight", "revision"} {
		if _, ok := recovered[k]; !ok {
			t.Errorf("recover event without %s: %v", k, recovered)
		}
	}
}

func TestDisabledControlsRefuseAndStatusAnswers(t *testing.T) {
	sched, _, srv := newControls(t, func(c *Config) { c.Enabled = false })
	call(t, "POST", srv.URL+PathCrash).wantError(t, http.StatusForbidden, apitypes.CodeDemoDisabled)
	call(t, "POST", srv.URL+PathRecover).wantError(t, http.StatusForbidden, apitypes.CodeDemoDisabled)
	if crashes, recovers := sched.calls(); crashes+recovers != 0 {
		t.Fatalf("disabled controls acted: %d crashes, %d recoveries", crashes, recovers)
	}
	// The consoles poll the status to learn whether to show the controls.
	st := call(t, "GET", srv.URL+PathStatus)
	if st.code != 200 || st.body["demo"] != false || st.body["running"] != true {
		t.Fatalf("%+v", st)
	}
}

func TestRefusedBeyondLoopbackWithoutToken(t *testing.T) {
	serve := func(token string) *httptest.ResponseRecorder {
		h := New(Config{Scheduler: &fakeScheduler{running: true}, Enabled: true, AuthToken: token,
			Backend: emptyBackend{core.New(core.Config{})}, Events: events.NewHub(events.Config{})})
		req := httptest.NewRequest("POST", PathCrash, nil)
		req.RemoteAddr = "192.0.2.7:5555"
		rec := httptest.NewRecorder()
		h.Routes()["POST "+PathCrash].ServeHTTP(rec, req)
		return rec
	}
	if rec := serve(""); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "auth token") ||
		!strings.Contains(rec.Body.String(), string(apitypes.CodeForbidden)) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	// With a token (checked by the API middleware in front) it is allowed.
	if rec := serve("t"); rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// cluster knows the replicas' addresses and nothing else.
type cluster struct{ replicas []apitypes.ReplicaAddr }

func (c cluster) Replicas(context.Context) ([]apitypes.ReplicaAddr, error) { return c.replicas, nil }
func (c cluster) LeaderAddr(context.Context) (apitypes.ReplicaAddr, bool, error) {
	return apitypes.ReplicaAddr{}, false, nil
}
func (c cluster) Members(context.Context) ([]apitypes.EtcdMember, error) { return nil, nil }
func (c cluster) Workers() []apitypes.Worker                             { return nil }

func TestTargetRelaysToTheNamedReplica(t *testing.T) {
	n2, _, other := newControls(t, func(c *Config) { c.Node = "n2" })
	n1, _, srv := newControls(t, func(c *Config) {
		c.Cluster = cluster{[]apitypes.ReplicaAddr{{Name: "n1", APIURL: "http://unused"}, {Name: "n2", APIURL: other.URL}}}
	})
	if a := call(t, "POST", srv.URL+PathCrash+"?target=n2"); a.code != 200 || a.body["status"] != "crashed" {
		t.Fatalf("relayed crash: %+v", a)
	}
	n1Crashes, _ := n1.calls()
	n2Crashes, _ := n2.calls()
	if n2Crashes != 1 || n1Crashes != 0 {
		t.Fatalf("crashes: n1 %d, n2 %d; want n2 only", n1Crashes, n2Crashes)
	}
	// Naming itself, a replica acts on itself.
	a := call(t, "POST", srv.URL+PathCrash+"?target=n1")
	if n1Crashes, _ = n1.calls(); a.code != 200 || n1Crashes != 1 {
		t.Fatalf("own target: %+v", a)
	}
	call(t, "POST", srv.URL+PathRecover+"?target=n9").wantError(t, http.StatusNotFound, apitypes.CodeNotFound)
	// A relayed request is never relayed again: the replica receiving it
	// acts on itself, whatever ?target= says.
	req, _ := http.NewRequest("POST", other.URL+PathRecover+"?target=n1", nil)
	req.Header.Set(kit.ForwardedHeader, "n1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, n1Recovers := n1.calls()
	_, n2Recovers := n2.calls()
	if resp.StatusCode != 200 || n2Recovers != 1 || n1Recovers != 0 {
		t.Fatalf("forwarded recover: %d; recoveries n1 %d, n2 %d", resp.StatusCode, n1Recovers, n2Recovers)
	}
}

// A replica that does not answer a relayed control is a 502 naming it.
func TestTargetUnreachable(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens at its address any more
	_, _, srv := newControls(t, func(c *Config) {
		c.Timeout = 2 * time.Second
		c.Cluster = cluster{[]apitypes.ReplicaAddr{{Name: "n2", APIURL: gone.URL}}}
	})
	msg := call(t, "POST", srv.URL+PathCrash+"?target=n2").wantError(t, http.StatusBadGateway, apitypes.CodeUnreachable)
	if !strings.Contains(msg, "n2") {
		t.Fatalf("message %q does not name the replica", msg)
	}
}

func TestErrorsInTheCallersShape(t *testing.T) {
	h := New(Config{Scheduler: &fakeScheduler{running: false}, Backend: emptyBackend{core.New(core.Config{})},
		Events: events.NewHub(events.Config{})})
	flat := h.Handlers(func(w http.ResponseWriter, status int, code apitypes.Code, msg string) {
		kit.WriteJSON(w, status, map[string]string{"error": msg, "code": string(code)})
	})
	rec := httptest.NewRecorder()
	flat.Crash(rec, httptest.NewRequest("POST", "/admin/simulate-crash", nil))
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusForbidden ||
		body["code"] != string(apitypes.CodeDemoDisabled) || body["error"] == "" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
