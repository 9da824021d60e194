package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/openapi"
	"github.com/orion-sched/orion/internal/http/openapi/openapitest"
	"github.com/orion-sched/orion/internal/server"
	"github.com/orion-sched/orion/internal/server/servertest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

const apiToken = "contract-test-token-0123456789"

// live is one real orion server (embedded etcd, the real wiring) and a
// client whose every answer is held to the document.
type live struct {
	s    *server.Server
	base string
	c    *http.Client

	mu   sync.Mutex
	seen map[apitypes.Code]string // code → the first request that got it
}

func startLive(t *testing.T, mods ...func(*config.Server)) *live {
	s, base := servertest.Start(t, func(c *config.Server) {
		c.AuthToken = apiToken
		c.MaxTasksPerDAG = 5
		c.MaxBodyBytes = 64 << 10
		c.Slots = 2
		c.MaxSchedules, c.MinScheduleInterval = 1, time.Minute
		for _, mod := range mods {
			mod(c)
		}
	})
	l := &live{s: s, base: base, seen: map[apitypes.Code]string{}}
	l.c = &http.Client{Timeout: 30 * time.Second, Transport: checking{t: t, l: l, next: http.DefaultTransport}}
	return l
}

// checking validates every answer against the document, as a client
// outside Go would see it, and notes the error codes answered.
type checking struct {
	t    *testing.T
	l    *live
	next http.RoundTripper
}

func (c checking) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, nil // a stream: its headers are checked by the caller
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	c.l.note(req, body)
	if _, err := openapitest.Validate(req, res.StatusCode, res.Header, body); err != nil {
		c.t.Errorf("%s %s answered %d, which the document does not allow: %v\nbody: %.1000s", req.Method, req.URL.Path, res.StatusCode, err, body)
	}
	return res, nil
}

func (l *live) note(req *http.Request, body []byte) {
	var api apitypes.ErrorBody
	var seed struct {
		Code apitypes.Code `json:"code"`
	}
	code := apitypes.Code("")
	if json.Unmarshal(body, &api) == nil && api.Error.Code != "" {
		code = api.Error.Code
	} else if json.Unmarshal(body, &seed) == nil {
		code = seed.Code
	}
	if code == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[code]; !ok {
		l.seen[code] = req.Method + " " + req.URL.Path
	}
}

type call struct {
	method, path, body string
	hdr                []string // name, value pairs; "Authorization" "" sends none
	status             int
	code               apitypes.Code // for an error
}

// do sends a call (with the apiToken unless it says otherwise) and checks
// its status and code.
func (l *live) do(t *testing.T, c call) []byte {
	t.Helper()
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, l.base+c.path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(c.hdr); i += 2 {
		if c.hdr[i] == "Host" {
			req.Host = c.hdr[i+1]
			continue
		}
		if c.hdr[i+1] == "" {
			req.Header.Del(c.hdr[i])
			continue
		}
		req.Header.Set(c.hdr[i], c.hdr[i+1])
	}
	res, err := l.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != c.status {
		t.Fatalf("%s %s: status %d, want %d; body %s", c.method, c.path, res.StatusCode, c.status, b)
	}
	if c.code != "" {
		var api apitypes.ErrorBody
		var seed struct {
			Code apitypes.Code `json:"code"`
		}
		got := apitypes.Code("")
		if json.Unmarshal(b, &api) == nil && api.Error.Code != "" {
			got = api.Error.Code
		} else if json.Unmarshal(b, &seed) == nil {
			got = seed.Code
		}
		if got != c.code {
			t.Fatalf("%s %s: code %q, want %q; body %s", c.method, c.path, got, c.code, b)
		}
	}
	return b
}

// waitStatus polls a DAG until it has the status.
func (l *live) waitStatus(t *testing.T, id, status string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "DAG "+id+" "+status, func() bool {
		var d apitypes.DAG[string, string]
		return json.Unmarshal(l.do(t, call{method: "GET", path: "/api/v1/dags/" + id, status: 200}), &d) == nil && d.Status == status
	})
}

// faultOnly are the codes a healthy single server on loopback cannot be
// driven to answer, with the tests that provoke them (their answers held
// to the document by openapitest.Checked). A code missing from both this
// map and the live calls fails TestLiveAnswers.
var faultOnly = map[apitypes.Code]string{
	apitypes.CodeRateLimited:      "internal/http/api TestRateLimit (clients beyond loopback only)",
	apitypes.CodeOverloaded:       "internal/http/seedapi TestSubmitErrors",
	apitypes.CodeInternal:         "internal/http/api TestPanicRecovery",
	apitypes.CodeUnreachable:      "internal/http/demo TestTargetUnreachable",
	apitypes.CodeNotLeader:        "internal/http/api TestBackendErrors",
	apitypes.CodeUnavailable:      "internal/http/seedapi TestStatusAndLiveMetrics (scheduler offline)",
	apitypes.CodeTimeout:          "internal/http/api TestWriteTimeout",
	apitypes.CodeStorageFull:      "internal/http/api TestStorageFullIs507; internal/server storagefull_e2e_test.go",
	apitypes.CodeTooManyStreams:   "internal/server TestEventStreamLimits (streams past max_event_subscribers[_per_client])",
	apitypes.CodeMethodNotAllowed: "a method a path does not serve: not an operation of the document (internal/http/api TestUnknownRouteAndMethod)",
}

// A real server answers what the document says: each route driven to its
// answers and to the errors a client can cause, every answer validated by
// the checking client. Every error code of apitypes is either answered
// here or listed in faultOnly with the test that provokes it.
func TestLiveAnswers(t *testing.T) {
	l := startLive(t)
	const (
		chain   = `{"id":"c1","name":"chain","tasks":[{"id":"a","command":"echo hello"},{"id":"b","kind":"noop","depends_on":["a"]}]}`
		chainB  = `{"id":"c1","name":"chain","tasks":[{"id":"a","command":"echo other"}]}`
		sleeper = `{"id":"s1","tasks":[{"id":"z","kind":"sleep","duration":"1m"},{"id":"after","kind":"noop","depends_on":["z"]}]}`
		cron    = `{"id":"nightly","schedule":{"cron":"0 2 * * *","timezone":"UTC"},"tasks":[{"id":"a","kind":"noop"}]}`
		failing = `{"id":"f1","tasks":[{"id":"a","command":"exit 3","max_retries":0}]}`
		// No worker runs pods here: the pod task waits, its spec is answered as stored.
		pod    = `{"id":"p1","tasks":[{"id":"a","kind":"pod","pod":{"image":"busybox:1.36","command":["sh","-c","echo hi"],"resources":{"limits":{"memory":"64Mi"}},"nodeSelector":{"disk":"ssd"}}}]}`
		badPod = `{"id":"p2","tasks":[{"id":"a","kind":"pod","pod":{"image":"busybox","resources":{"limits":{"memory":"lots"}}}}]}`
	)
	// Small in bytes, large once its aliases are expanded: over the decoded budget (twice max_body_bytes).
	var env []string
	for i := range 20 {
		env = append(env, fmt.Sprintf("k%d: *c", i))
	}
	alias := "id: yy\ntasks:\n  - id: a\n    command: &c \"" + strings.Repeat("x", 8<<10) + "\"\n    env: {" + strings.Join(env, ", ") + "}\n"
	many := `{"id":"m","tasks":[` + strings.TrimSuffix(strings.Repeat(`{"id":"t%d","kind":"noop"},`, 6), ",") + `]}`
	many = fmt.Sprintf(many, 1, 2, 3, 4, 5, 6)
	big := `{"id":"big","tasks":[{"id":"a","command":"` + strings.Repeat("x", 70<<10) + `"}]}`
	seedTasks := `[{"id":"s-a","payload":"x","priority":1,"dependencies":[]},{"id":"s-b","payload":"y","priority":2,"dependencies":["s-a"]}]`

	calls := []call{
		// DAGs
		{method: "POST", path: "/api/v1/dags", body: chain, status: 201},
		{method: "POST", path: "/api/v1/dags", body: chain, status: 200},
		{method: "POST", path: "/api/v1/dags", body: chainB, status: 409, code: apitypes.CodeConflict},
		{method: "POST", path: "/api/v1/dags", body: `{"tasks":`, status: 400, code: apitypes.CodeParseError},
		{method: "POST", path: "/api/v1/dags", body: `{"id":"cy","tasks":[{"id":"a","depends_on":["b"]},{"id":"b","depends_on":["a"]}]}`, status: 400, code: apitypes.CodeCycle},
		{method: "POST", path: "/api/v1/dags", body: `{"id":"u","tasks":[{"id":"a","depends_on":["nope"]}]}`, status: 400, code: apitypes.CodeInvalidDAG},
		{method: "POST", path: "/api/v1/dags", body: many, status: 400, code: apitypes.CodeTooManyTasks},
		{method: "POST", path: "/api/v1/dags", body: big, status: 413, code: apitypes.CodeBodyTooLarge},
		{method: "POST", path: "/api/v1/dags", body: chain, hdr: []string{"Content-Type", "text/csv"}, status: 415, code: apitypes.CodeUnsupportedMedia},
		{method: "POST", path: "/api/v1/dags", body: cron, status: 400, code: apitypes.CodeInvalidSchedule},
		{method: "POST", path: "/api/v1/dags", body: alias, hdr: []string{"Content-Type", "application/yaml"}, status: 413, code: apitypes.CodeDAGTooLarge},
		{method: "POST", path: "/api/v1/dags", body: `{"id":"y","tasks":[{"id":"a","kind":"noop"}]}`, hdr: []string{"Content-Type", "application/yaml"}, status: 201},
		{method: "POST", path: "/api/v1/dags", body: sleeper, status: 201},
		{method: "POST", path: "/api/v1/dags", body: pod, status: 201},
		{method: "GET", path: "/api/v1/dags/p1", status: 200},
		{method: "POST", path: "/api/v1/dags", body: badPod, status: 400, code: apitypes.CodeInvalidDAG},
		{method: "GET", path: "/api/v1/dags", status: 200},
		{method: "GET", path: "/api/v1/dags?status=running&limit=5", status: 200},
		{method: "GET", path: "/api/v1/dags?status=sleeping", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags?limit=0", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags/nope", status: 404, code: apitypes.CodeNotFound},
		{method: "GET", path: "/api/v1/dags/s1?task_limit=1", status: 200}, // truncated: with its shape
		{method: "GET", path: "/api/v1/dags/s1?task_limit=-1", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags/s1/tasks", status: 200},
		{method: "GET", path: "/api/v1/dags/s1/tasks?status=pending,running&status=succeeded&limit=1", status: 200},
		{method: "GET", path: "/api/v1/dags/s1/tasks?group=~0", status: 404, code: apitypes.CodeNotFound}, // no node collapsed
		{method: "GET", path: "/api/v1/dags/s1/tasks?cursor=1.0", status: 200},
		{method: "GET", path: "/api/v1/dags/s1/tasks?status=sleeping", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags/s1/tasks?limit=0", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags/s1/tasks?cursor=x", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/dags/s1/tasks?group=nope", status: 404, code: apitypes.CodeNotFound},
		{method: "GET", path: "/api/v1/dags/nope/tasks", status: 404, code: apitypes.CodeNotFound},
		{method: "GET", path: "/api/v1/dags/s1/tasks/after/log", status: 404, code: apitypes.CodeNotFound},
		{method: "GET", path: "/api/v1/dags/s1/tasks/z/log?attempt=0", status: 400, code: apitypes.CodeBadRequest},
		{method: "DELETE", path: "/api/v1/dags/s1", status: 409, code: apitypes.CodeConflict},
		{method: "POST", path: "/api/v1/dags/nope/cancel", status: 404, code: apitypes.CodeNotFound},
		{method: "POST", path: "/api/v1/dags/s1/cancel", status: 200},
		{method: "POST", path: "/api/v1/dags/s1/cancel", status: 200}, // idempotent: cancelled already
		{method: "POST", path: "/api/v1/dags", body: failing, status: 201},
		{method: "DELETE", path: "/api/v1/dags/nope", status: 404, code: apitypes.CodeNotFound},

		// schedules
		{method: "POST", path: "/api/v1/schedules", body: cron, status: 201},
		{method: "POST", path: "/api/v1/schedules", body: cron, status: 200},
		{method: "POST", path: "/api/v1/schedules", body: `{"id":"fast","schedule":{"cron":"@every 1s"},"tasks":[{"id":"a","kind":"noop"}]}`, status: 400, code: apitypes.CodeScheduleTooFrequent},
		{method: "POST", path: "/api/v1/schedules", body: `{"id":"second","schedule":{"cron":"0 3 * * *"},"tasks":[{"id":"a","kind":"noop"}]}`, status: 429, code: apitypes.CodeTooManySchedules},
		{method: "POST", path: "/api/v1/schedules", body: `{"id":"bad","schedule":{"cron":"every day"},"tasks":[{"id":"a"}]}`, status: 400, code: apitypes.CodeInvalidSchedule},
		{method: "GET", path: "/api/v1/schedules", status: 200},
		{method: "GET", path: "/api/v1/schedules/nightly", status: 200},
		{method: "GET", path: "/api/v1/schedules/nope", status: 404, code: apitypes.CodeNotFound},
		{method: "POST", path: "/api/v1/schedules/nightly/pause", status: 200},
		{method: "POST", path: "/api/v1/schedules/nightly/resume", status: 200},
		{method: "POST", path: "/api/v1/schedules/nightly/trigger", status: 201},
		{method: "GET", path: "/api/v1/schedules/nightly/runs", status: 200},
		{method: "GET", path: "/api/v1/schedules/nope/runs", status: 404, code: apitypes.CodeNotFound},
		{method: "POST", path: "/api/v1/schedules/nope/pause", status: 404, code: apitypes.CodeNotFound},
		{method: "DELETE", path: "/api/v1/schedules/nightly", status: 200},
		{method: "DELETE", path: "/api/v1/schedules/nightly", status: 404, code: apitypes.CodeNotFound},

		// cluster, the document, probes
		{method: "GET", path: "/api/v1/cluster", status: 200},
		{method: "GET", path: "/api/v1/cluster/self", status: 200},
		{method: "GET", path: "/api/v1/leader", status: 200},
		{method: "GET", path: "/api/v1/leader?suspect=n9&wait=soon", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: openapi.Path, status: 200},
		{method: "GET", path: "/healthz", hdr: []string{"Authorization", ""}, status: 200},
		{method: "GET", path: "/readyz", hdr: []string{"Authorization", ""}, status: 200},
		{method: "GET", path: "/metrics", status: 200},

		// events (the streams themselves below)
		{method: "GET", path: "/api/v1/events?since=yesterday", status: 400, code: apitypes.CodeBadRequest},
		{method: "GET", path: "/api/v1/events?since=1", hdr: []string{"Origin", "http://evil.example"}, status: 403, code: apitypes.CodeForbidden},

		// demo controls (the server runs without --demo)
		{method: "GET", path: "/api/v1/demo/status", status: 200},
		{method: "POST", path: "/api/v1/demo/crash", status: 403, code: apitypes.CodeDemoDisabled},
		{method: "POST", path: "/api/v1/demo/recover", status: 403, code: apitypes.CodeDemoDisabled},

		// the seed's API
		{method: "POST", path: "/api/v1/dag", body: seedTasks, hdr: []string{"Idempotency-Key", "seed-1"}, status: 201},
		{method: "POST", path: "/api/v1/dag", body: seedTasks, hdr: []string{"Idempotency-Key", "seed-1"}, status: 200},
		{method: "POST", path: "/api/v1/dag", body: seedTasks, status: 400, code: apitypes.CodeBadRequest},
		{method: "POST", path: "/api/v1/dag", body: `[{"id":`, hdr: []string{"Idempotency-Key", "seed-2"}, status: 400, code: apitypes.CodeParseError},
		{method: "POST", path: "/api/v1/dag", body: `[{"id":"x","payload":"p","dependencies":["x"]}]`, hdr: []string{"Idempotency-Key", "seed-3"}, status: 400},
		{method: "POST", path: "/api/v1/dag", body: `[{"id":"x","payload":"p","dependencies":[]},{"id":"y","payload":"p","dependencies":[]}]`, hdr: []string{"Idempotency-Key", "seed-1"}, status: 409, code: apitypes.CodeConflict},
		{method: "GET", path: "/api/v1/status", status: 200},
		{method: "GET", path: "/api/v1/metrics/live", status: 200},
		{method: "GET", path: "/api/v1/dag/state", status: 200},
		{method: "GET", path: "/api/v1/status", hdr: []string{"Origin", "http://evil.example"}, status: 403, code: apitypes.CodeForbidden},
		{method: "GET", path: "/admin/status", status: 200},
		{method: "POST", path: "/admin/simulate-crash", status: 403, code: apitypes.CodeDemoDisabled},
		{method: "POST", path: "/admin/recover", status: 403, code: apitypes.CodeDemoDisabled},

		// the middleware, on a route of each surface
		{method: "GET", path: "/api/v1/dags", hdr: []string{"Authorization", ""}, status: 401, code: apitypes.CodeUnauthorized},
		{method: "GET", path: "/api/v1/status", hdr: []string{"Authorization", "Bearer wrong"}, status: 401, code: apitypes.CodeUnauthorized},
		{method: "GET", path: "/api/v1/dags", hdr: []string{"Host", "rebound.example:80"}, status: 421, code: apitypes.CodeHostNotAllowed},
		{method: "POST", path: "/api/v1/dags", body: chain, hdr: []string{"Origin", "http://evil.example"}, status: 403, code: apitypes.CodeCrossOrigin},
		{method: "POST", path: "/api/v1/dag", body: seedTasks, hdr: []string{"Idempotency-Key", "k", "Origin", "http://evil.example"}, status: 403, code: apitypes.CodeCrossOrigin},
	}
	for _, c := range calls {
		l.do(t, c)
		if c.path == "/api/v1/dags" && c.method == "POST" && strings.Contains(c.body, `"id":"s1"`) {
			// the sleeper runs before it is cancelled
			testkit.WaitFor(t, 30*time.Second, "s1 running", func() bool {
				return bytes.Contains(l.do(t, call{method: "GET", path: "/api/v1/dags/s1/tasks/z", status: 200}), []byte(`"status":"running"`))
			})
		}
	}

	// A finished DAG: its task, its log, a retry of a success (409), its deletion.
	l.waitStatus(t, "c1", "succeeded")
	l.do(t, call{method: "GET", path: "/api/v1/dags/c1", status: 200})
	l.do(t, call{method: "GET", path: "/api/v1/dags/c1/tasks/a", status: 200})
	if b := l.do(t, call{method: "GET", path: "/api/v1/dags/c1/tasks/a/log", status: 200}); !bytes.Contains(b, []byte("hello")) {
		t.Fatalf("log: %q", b)
	}
	l.do(t, call{method: "GET", path: "/api/v1/dags/c1/tasks/a/log?attempt=2", status: 404, code: apitypes.CodeNotFound})
	l.do(t, call{method: "POST", path: "/api/v1/dags/c1/retry", status: 409, code: apitypes.CodeConflict})
	l.do(t, call{method: "DELETE", path: "/api/v1/dags/c1", status: 200})
	l.waitStatus(t, "f1", "failed")
	l.do(t, call{method: "POST", path: "/api/v1/dags/f1/retry", status: 200})

	// The document's ETag makes a second read free.
	l.do(t, call{method: "GET", path: openapi.Path, hdr: []string{"If-None-Match", etagOf(t, l)}, status: 304})

	// The streams answer what the document says: SSE with its media type,
	// WebSocket upgrades with 101.
	l.stream(t, "/api/v1/events?since=0")
	l.websocket(t, "/api/v1/events/ws")
	l.websocket(t, "/ws")

	liveLimits(t, l)

	l.mu.Lock()
	defer l.mu.Unlock()
	codes, err := NewSource(Root()).Enum("github.com/orion-sched/orion/internal/http/apitypes", "Code")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range codes {
		where, seen := l.seen[apitypes.Code(c.Value)]
		why, listed := faultOnly[apitypes.Code(c.Value)]
		switch {
		case !seen && !listed:
			t.Errorf("no call answered code %q: drive a route to it here, or list it in faultOnly with the test that does", c.Value)
		case seen && listed:
			t.Logf("code %q is listed in faultOnly (%s) but %s answered it", c.Value, why, where)
		}
	}
}

// liveLimits drives the limits on running work, on a server of their own
// (max_live_dags 2, max_live_tasks 2), and notes its codes in l.
func liveLimits(t *testing.T, l *live) {
	lim := startLive(t, func(c *config.Server) { c.MaxLiveDAGs, c.MaxLiveTasks = 2, 2 })
	sleeping := func(id string, n int) string {
		var ts []string
		for i := range n {
			ts = append(ts, fmt.Sprintf(`{"id":"t%d","kind":"sleep","duration":"1m"}`, i))
		}
		return fmt.Sprintf(`{"id":%q,"tasks":[%s]}`, id, strings.Join(ts, ","))
	}
	seed := `[{"id":"s-a","payload":"x","priority":1,"dependencies":[]}]`
	for _, c := range []call{
		{method: "POST", path: "/api/v1/dags", body: sleeping("one", 1), status: 201},
		{method: "POST", path: "/api/v1/dags", body: sleeping("two", 2), status: 429, code: apitypes.CodeTooManyLiveTasks},
		{method: "POST", path: "/api/v1/dags", body: sleeping("three", 1), status: 201},
		{method: "POST", path: "/api/v1/dags", body: sleeping("four", 1), status: 429, code: apitypes.CodeTooManyLiveDAGs},
		{method: "POST", path: "/api/v1/dag", body: seed, hdr: []string{"Idempotency-Key", "seed-limit"}, status: 429, code: apitypes.CodeTooManyLiveDAGs},
	} {
		lim.do(t, c)
	}
	lim.mu.Lock()
	defer lim.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for code, where := range lim.seen {
		if _, ok := l.seen[code]; !ok {
			l.seen[code] = where
		}
	}
}

func etagOf(t *testing.T, l *live) string {
	req, _ := http.NewRequest("GET", l.base+openapi.Path, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	res, err := l.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.Header.Get("ETag")
}

// stream opens the SSE stream, checks its answer, and closes it.
func (l *live) stream(t *testing.T, p string) {
	t.Helper()
	req, _ := http.NewRequest("GET", l.base+p, nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	res, err := l.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := openapitest.Validate(req, res.StatusCode, res.Header, nil); err != nil || res.StatusCode != 200 ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s: %d %s: %v", p, res.StatusCode, res.Header.Get("Content-Type"), err)
	}
}

// websocket upgrades and checks the 101 against the document.
func (l *live) websocket(t *testing.T, p string) {
	t.Helper()
	conn, res, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(l.base, "http")+p,
		http.Header{"Authorization": {"Bearer " + apiToken}})
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer conn.Close()
	req := httptest.NewRequest("GET", l.base+p, nil)
	if _, err := openapitest.Validate(req, res.StatusCode, res.Header, nil); err != nil {
		t.Fatalf("GET %s: %d: %v", p, res.StatusCode, err)
	}
}

// The server's mux and the document describe the same routes: every
// operation of the document reaches a route the server registered, and
// every route the server registered is reached by an operation or listed
// in Undocumented with its reason.
func TestRoutesMatchServer(t *testing.T) {
	s, _ := servertest.Start(t)
	patterns := s.Routes()
	if len(patterns) == 0 {
		t.Fatal("the server lists no routes")
	}
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	hit := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			req := httptest.NewRequest(method, "http://127.0.0.1"+param.ReplaceAllString(path, "x"), nil)
			_, pattern := mux.Handler(req)
			if pattern == "" {
				t.Errorf("the document describes %s %s, which the server does not serve", method, path)
				continue
			}
			hit[pattern] = true
		}
	}
	for _, p := range patterns {
		_, undocumented := Undocumented[p]
		switch {
		case !hit[p] && !undocumented:
			t.Errorf("the server serves %q, which the document does not describe: add it to Routes in "+
				"internal/http/openapi/contract/routes.go (or to Undocumented, with the reason) and run `make openapi`", p)
		case hit[p] && undocumented:
			t.Errorf("%q is both described and listed in Undocumented", p)
		}
	}
	for p := range Undocumented {
		if !slices.Contains(patterns, p) {
			t.Errorf("Undocumented lists %q, which the server does not serve", p)
		}
	}
}

// Every error code apitypes declares is named by some response of the
// document, and the document names no other.
func TestEveryCodeNamed(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Document())
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	var walk func(s *openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		if c := s.Value.Properties["code"]; c != nil && c.Value != nil {
			for _, v := range c.Value.Enum {
				named[v.(string)] = true
			}
		}
		for _, sub := range slices.Concat(s.Value.AllOf, s.Value.OneOf, s.Value.AnyOf) {
			walk(sub)
		}
		for _, p := range s.Value.Properties {
			walk(p)
		}
	}
	for _, r := range doc.Components.Responses {
		for _, mt := range r.Value.Content {
			walk(mt.Schema)
		}
	}
	codes, err := NewSource(Root()).Enum("github.com/orion-sched/orion/internal/http/apitypes", "Code")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, c := range codes {
		declared[c.Value] = true
		if !named[c.Value] && c.Value != string(apitypes.CodeMethodNotAllowed) {
			t.Errorf("code %q is declared in apitypes but no response of the document names it: add it to the routes that answer it", c.Value)
		}
	}
	var extra []string
	for c := range named {
		if !declared[c] {
			extra = append(extra, c)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("the document names codes apitypes does not declare: %v", extra)
	}
}
