package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func fastRetry(c *Client) *Client {
	c.Retries = RetryPolicy{MaxAttempts: 5, MaxElapsed: 5 * time.Second, BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string, details ...string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "details": details}})
}

// deadURL returns the URL of a server that is no longer listening.
func deadURL(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

func TestSubmitSendsBodyAuthAndDecodes(t *testing.T) {
	var gotAuth, gotCT string
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/dags" {
			t.Errorf("got %s %s", r.Method, r.URL.Path)
		}
		gotAuth, gotCT = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
		gotBody, _ = io.ReadAll(r.Body)
		writeJSON(w, 201, map[string]any{"id": "d1", "created": true, "status": "running"})
	}))
	defer srv.Close()

	c := New([]string{srv.URL + "/"}, "s3cret")
	body := []byte(`{"id":"d1","name":"x","tasks":[{"id":"a"}]}`)
	resp, err := c.Submit(context.Background(), body, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if resp != (SubmitResponse{ID: "d1", Created: true, Status: "running"}) {
		t.Errorf("resp = %+v", resp)
	}
	if gotAuth != "Bearer s3cret" || gotCT != "application/json" || !bytes.Equal(gotBody, body) {
		t.Errorf("auth=%q ct=%q body=%s", gotAuth, gotCT, gotBody)
	}
}

func TestNoTokenNoAuthHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header["Authorization"]; ok {
			t.Error("Authorization sent without a token")
		}
		writeJSON(w, 200, map[string]any{"dags": []any{}, "revision": 1})
	}))
	defer srv.Close()
	if _, err := New([]string{srv.URL}, "").ListDAGs(context.Background(), "", 0); err != nil {
		t.Fatal(err)
	}
}

func TestAPIErrorDecoded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 400, "invalid_dag", "2 problems: a; b", "a", "b")
	}))
	defer srv.Close()
	_, err := New([]string{srv.URL}, "").Submit(context.Background(), []byte("name: x\n"), "application/yaml")
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want *APIError", err, err)
	}
	if ae.Status != 400 || ae.Code != "invalid_dag" || ae.Message != "2 problems: a; b" || len(ae.Details) != 2 {
		t.Errorf("got %+v", ae)
	}
	if err.Error() != "2 problems: a; b" {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream exploded", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := New([]string{srv.URL}, "").GetDAG(context.Background(), "x")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 502 || !strings.Contains(ae.Error(), "upstream exploded") {
		t.Fatalf("err = %v", err)
	}
	if !IsTemporary(err) {
		t.Error("502 should be temporary")
	}
}

func TestNotFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 404, "not_found", "dag \"nope\" not found")
	}))
	defer srv.Close()
	_, err := New([]string{srv.URL}, "").GetDAG(context.Background(), "nope")
	if !IsNotFound(err) || IsTemporary(err) {
		t.Fatalf("err = %v", err)
	}
}

func TestGetRetries503Then200(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			writeErr(w, 503, "unavailable", "no leader")
			return
		}
		if r.URL.EscapedPath() != "/api/v1/dags/d%201" {
			t.Errorf("path %q", r.URL.EscapedPath())
		}
		writeJSON(w, 200, map[string]any{"id": "d 1", "name": "n", "status": "running", "revision": 7,
			"counts": map[string]int{"running": 1}, "tasks": []any{map[string]any{
				"id": "a", "kind": "shell", "status": "some_new_status", "exit_code": 3, "spec": map[string]any{"id": "a", "kind": "shell", "timeout": "5m0s"}}}})
	}))
	defer srv.Close()
	d, err := fastRetry(New([]string{srv.URL}, "")).GetDAG(context.Background(), "d 1")
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
	if d.ID != "d 1" || d.Revision != 7 || len(d.Tasks) != 1 || d.Tasks[0].Status != "some_new_status" ||
		*d.Tasks[0].ExitCode != 3 || d.Tasks[0].Spec.Timeout.D() != 5*time.Minute {
		t.Errorf("got %+v", d)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			writeErr(w, 429, "rate_limited", "slow down")
			return
		}
		writeJSON(w, 200, map[string]any{"node": "n1"})
	}))
	defer srv.Close()
	start := time.Now()
	cl, err := fastRetry(New([]string{srv.URL}, "")).Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("retried after %v, want >= 1s (Retry-After)", el)
	}
	if cl.Node != "n1" {
		t.Errorf("cluster = %+v", cl)
	}
}

func TestRetryBounded(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeErr(w, 503, "unavailable", "still no leader")
	}))
	defer srv.Close()
	_, err := fastRetry(New([]string{srv.URL}, "")).ListDAGs(context.Background(), "", 0)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Message != "still no leader" {
		t.Fatalf("err = %v", err)
	}
	if calls.Load() != 5 {
		t.Errorf("calls = %d, want MaxAttempts=5", calls.Load())
	}
}

func TestRetryElapsedBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		writeErr(w, 503, "unavailable", "down")
	}))
	defer srv.Close()
	c := fastRetry(New([]string{srv.URL}, ""))
	start := time.Now()
	_, err := c.ListDAGs(context.Background(), "", 0)
	// Honouring the 30 s Retry-After would take 30 s: 20 s tells the two
	// apart on any machine.
	if err == nil || time.Since(start) > 20*time.Second {
		t.Fatalf("err = %v after %v; want a quick give-up when Retry-After exceeds the budget", err, time.Since(start))
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.RetryAfter != 30*time.Second {
		t.Errorf("err = %#v", err)
	}
}

func TestContextStopsRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "10") // within the retry budget: the client waits
		writeErr(w, 503, "unavailable", "down")
	}))
	defer srv.Close()
	// Long enough for the first answer on a loaded machine, far shorter
	// than the wait it asks for.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := New([]string{srv.URL}, "").ListDAGs(ctx, "", 0)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("err = %v", err)
	}
}

func TestNonIdempotentNotRetriedOn503(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeErr(w, 503, "unavailable", "down")
	}))
	defer srv.Close()
	c := fastRetry(New([]string{srv.URL}, ""))
	if _, err := c.Cancel(context.Background(), "d1"); err == nil {
		t.Fatal("want error")
	}
	if _, err := c.Submit(context.Background(), []byte(`{"name":"x","tasks":[{"id":"a"}]}`), "application/json"); err == nil {
		t.Fatal("want error")
	}
	if calls.Load() != 2 {
		t.Errorf("calls = %d, want 2 (no retries)", calls.Load())
	}
	// With an id the submission is idempotent and retried.
	calls.Store(0)
	if _, err := c.Submit(context.Background(), []byte("id: d1\nname: x\ntasks: [{id: a}]\n"), "application/yaml"); err == nil {
		t.Fatal("want error")
	}
	if calls.Load() != 5 {
		t.Errorf("calls = %d, want 5", calls.Load())
	}
}

func TestFailoverToNextURL(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/api/v1/dags/d1/cancel":
			writeJSON(w, 200, map[string]any{"id": "d1", "status": "cancelled"})
		default:
			writeJSON(w, 200, map[string]any{"dags": []any{}, "revision": 3, "node": "n2"})
		}
	}))
	defer srv.Close()
	dead := deadURL(t)
	c := fastRetry(New([]string{dead, srv.URL}, ""))
	l, err := c.ListDAGs(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Node != "n2" || l.Revision != 3 {
		t.Errorf("list = %+v", l)
	}
	// A refused connection never delivered the request, so even cancel
	// (not idempotent) fails over.
	c2 := fastRetry(New([]string{dead, srv.URL}, ""))
	a, err := c2.Cancel(context.Background(), "d1")
	if err != nil || a.Status != "cancelled" {
		t.Fatalf("cancel = %+v, %v", a, err)
	}
	// The server that answered is preferred afterwards.
	if c.preferred.Load() != 1 {
		t.Errorf("preferred = %d, want 1", c.preferred.Load())
	}
}

func TestAllServersDown(t *testing.T) {
	c := fastRetry(New([]string{deadURL(t), deadURL(t)}, ""))
	_, err := c.ListDAGs(context.Background(), "", 0)
	var ce *ConnError
	if !errors.As(err, &ce) || !IsTemporary(err) {
		t.Fatalf("err = %v (%T)", err, err)
	}
	if !strings.Contains(err.Error(), "cannot reach http://127.0.0.1:") {
		t.Errorf("message %q", err.Error())
	}
}

func TestListQueryAndLog(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/dags":
			if r.URL.Query().Get("status") != "failed" || r.URL.Query().Get("limit") != "5" {
				t.Errorf("query %q", r.URL.RawQuery)
			}
			writeJSON(w, 200, map[string]any{"dags": []any{map[string]any{"id": "a", "status": "failed", "counts": map[string]int{"failed": 1}}}})
		case "/api/v1/dags/d1/tasks/t1/log":
			if r.URL.Query().Get("attempt") != "2" {
				t.Errorf("attempt %q", r.URL.RawQuery)
			}
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "line 1\nline 2\n")
		case "/api/v1/dags/d1/tasks/t1":
			writeJSON(w, 200, map[string]any{"id": "t1", "status": "failed", "history": []any{map[string]any{"attempt": 1, "outcome": "failed"}}})
		default:
			t.Errorf("unexpected %s", r.URL)
		}
	}))
	defer srv.Close()
	c := New([]string{srv.URL}, "")
	l, err := c.ListDAGs(context.Background(), "failed", 5)
	if err != nil || len(l.DAGs) != 1 || l.DAGs[0].Counts["failed"] != 1 {
		t.Fatalf("list = %+v, %v", l, err)
	}
	var buf bytes.Buffer
	if err := c.TaskLog(context.Background(), "d1", "t1", 2, &buf); err != nil || buf.String() != "line 1\nline 2\n" {
		t.Fatalf("log = %q, %v", buf.String(), err)
	}
	tk, err := c.GetTask(context.Background(), "d1", "t1")
	if err != nil || tk.Status != "failed" || len(tk.History) != 1 {
		t.Fatalf("task = %+v, %v", tk, err)
	}
	if _, err := c.GetTask(context.Background(), "d1", ""); err == nil {
		t.Error("empty task id accepted")
	}
}

func TestClusterLenient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"node":"n1","leader":"n1","applied_revision":42,"future":{"x":1},
			"replicas":[{"name":"n1","role":"leader","applied_revision":42,"lag":0}],
			"workers":[{"id":"w1","slots":4,"busy":1,"labels":{"pool":"gpu"},"tags":["gpu"]}],
			"etcd":{"endpoints":["http://e1:2379"],"raft_term":3}}`)
	}))
	defer srv.Close()
	cl, err := New([]string{srv.URL}, "").Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cl.Leader != "n1" || cl.AppliedRevision != 42 || cl.Replicas[0].Role != "leader" || cl.Workers[0].Slots != 4 || cl.Workers[0].Labels["pool"] != "gpu" || cl.Etcd.Endpoints[0] != "http://e1:2379" {
		t.Errorf("cluster = %+v", cl)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":     0,
		"3":    3 * time.Second,
		"-1":   0,
		"junk": 0,
		now.Add(10 * time.Second).Format(http.TimeFormat): 10 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	c := New([]string{" localhost:8080/ ", "", "https://x.example/"}, "")
	got := c.BaseURLs()
	if len(got) != 2 || got[0] != "http://localhost:8080" || got[1] != "https://x.example" {
		t.Errorf("bases = %q", got)
	}
	if _, err := New(nil, "").ListDAGs(context.Background(), "", 0); err == nil {
		t.Error("no URL accepted")
	}
}

func TestLeaderDecodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/leader" || r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("got %s %s auth %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		writeJSON(w, 200, map[string]any{"node": "n1", "leader": "n2", "leader_url": "http://127.0.0.1:2",
			"replicas": []map[string]string{{"name": "n1", "api_url": "http://127.0.0.1:1"}, {"name": "n2", "api_url": "http://127.0.0.1:2"}},
			"revision": 9})
	}))
	defer srv.Close()
	l, err := New([]string{srv.URL}, "s3cret").Leader(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Leader{Node: "n1", Leader: "n2", LeaderURL: "http://127.0.0.1:2", Revision: 9,
		Replicas: []ReplicaAddr{{Name: "n1", APIURL: "http://127.0.0.1:1"}, {Name: "n2", APIURL: "http://127.0.0.1:2"}}}
	if !reflect.DeepEqual(*l, want) {
		t.Fatalf("leader %+v, want %+v", *l, want)
	}
}

// EachTask pages through a DAG's tasks, sending the query and each
// page's cursor, until a page has no next; GetDAGHead sends task_limit.
func TestEachTaskPages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch r.URL.Path {
		case "/api/v1/dags/d1":
			if q.Get("task_limit") != "0" {
				t.Errorf("head query %q", r.URL.RawQuery)
			}
			writeJSON(w, 200, map[string]any{"id": "d1", "tasks": []any{}, "tasks_truncated": true,
				"shape": map[string]any{"nodes": []any{map[string]any{"id": "~0", "kind": "tasks", "tasks": 3}}, "edges": []any{}}})
		case "/api/v1/dags/d1/tasks":
			if q.Get("status") != "failed,running" || q.Get("group") != "~0" || q.Get("limit") != "2" {
				t.Errorf("page query %q", r.URL.RawQuery)
			}
			switch q.Get("cursor") {
			case "":
				writeJSON(w, 200, map[string]any{"tasks": []any{map[string]any{"id": "a"}, map[string]any{"id": "b"}}, "next": "2.0"})
			case "2.0":
				writeJSON(w, 200, map[string]any{"tasks": []any{}, "next": "9.0"}) // a page that found none
			case "9.0":
				writeJSON(w, 200, map[string]any{"tasks": []any{map[string]any{"id": "c"}}})
			default:
				t.Errorf("cursor %q", q.Get("cursor"))
			}
		default:
			t.Errorf("unexpected %s", r.URL)
		}
	}))
	defer srv.Close()
	c := New([]string{srv.URL}, "")
	d, err := c.GetDAGHead(context.Background(), "d1", 0)
	if err != nil || !d.TasksTruncated || d.Shape == nil || d.Shape.Nodes[0].Tasks != 3 {
		t.Fatalf("head %+v, %v", d, err)
	}
	var ids []string
	err = c.EachTask(context.Background(), "d1", TaskQuery{Statuses: []string{"failed", "running"}, Group: "~0", Limit: 2},
		func(tk *Task) bool { ids = append(ids, tk.ID); return true })
	if err != nil || strings.Join(ids, ",") != "a,b,c" {
		t.Fatalf("tasks %v, %v", ids, err)
	}
	ids = nil
	_ = c.EachTask(context.Background(), "d1", TaskQuery{Statuses: []string{"failed", "running"}, Group: "~0", Limit: 2},
		func(tk *Task) bool { ids = append(ids, tk.ID); return len(ids) < 1 })
	if len(ids) != 1 {
		t.Fatalf("stopping early: %v", ids)
	}
}
