package kit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// view is a ClusterInfo and LeaderWatch whose leader the test sets.
type view struct {
	mu      sync.Mutex
	leader  apitypes.ReplicaAddr
	ok      bool
	changed chan struct{}
}

func newView() *view { return &view{changed: make(chan struct{})} }

func (v *view) set(addr apitypes.ReplicaAddr, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.leader, v.ok = addr, ok
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *view) WatchLeader() (apitypes.ReplicaAddr, bool, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leader, v.ok, v.changed
}

func (v *view) LeaderAddr(context.Context) (apitypes.ReplicaAddr, bool, error) {
	a, ok, _ := v.WatchLeader()
	return a, ok, nil
}
func (v *view) Replicas(context.Context) ([]apitypes.ReplicaAddr, error) { return nil, nil }
func (v *view) Members(context.Context) ([]apitypes.EtcdMember, error)   { return nil, nil }
func (v *view) Workers() []apitypes.Worker                               { return nil }

// replica records what it was sent and answers with answer, or never
// (until the test ends) when hang is set: a frozen leader.
type replica struct {
	name string
	srv  *httptest.Server
	mu   sync.Mutex
	got  []*http.Request
	hang chan struct{} // closed when the test ends
	code int
}

func newReplica(t *testing.T, name string, code int, hang bool) *replica {
	rp := &replica{name: name, code: code}
	if hang {
		rp.hang = make(chan struct{})
	}
	rp.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		rp.mu.Lock()
		rp.got = append(rp.got, r.Clone(context.Background()))
		code := rp.code
		rp.mu.Unlock()
		if rp.hang != nil {
			select {
			case <-rp.hang:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"from":"`+name+`"}`)
	}))
	t.Cleanup(func() {
		if rp.hang != nil {
			close(rp.hang)
		}
		rp.srv.Close()
	})
	return rp
}

func (rp *replica) addr() apitypes.ReplicaAddr {
	return apitypes.ReplicaAddr{Name: rp.name, APIURL: rp.srv.URL}
}

func (rp *replica) requests() []*http.Request {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return append([]*http.Request(nil), rp.got...)
}

func waitRequests(t *testing.T, rp *replica, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(rp.requests()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s got %d requests, want %d", rp.name, len(rp.requests()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func write() Write {
	return Write{
		Body: []byte(`{"name":"x"}`), Headers: []string{"Content-Type"},
		Set:       map[string]string{"Idempotency-Key": "k1"},
		ResendSet: map[string]string{ExistedHeader: "1"}, ResendQuery: map[string][]string{"run": {"3"}},
	}
}

// A write in flight to a leader that is then deposed (frozen: it never
// answers) is abandoned and sent again to the successor with its identity
// and the re-send's hints; the successor's answer is the client's.
func TestForwardAbandonsADeposedLeaderForItsSuccessor(t *testing.T) {
	frozen := newReplica(t, "n1", 0, true)
	next := newReplica(t, "n3", http.StatusCreated, false)
	v := newView()
	v.set(frozen.addr(), true)
	f := Forwarder{Cluster: v, Node: "n2", Timeout: 30 * time.Second, FailoverWait: 5 * time.Second}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/api/v1/dags/d1/retry", nil)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan Forwarded, 1)
	go func() { done <- f.Forward(rec, req, write()) }()
	waitRequests(t, frozen, 1)
	v.set(apitypes.ReplicaAddr{}, false) // deposed: nobody leads for a moment
	v.set(next.addr(), true)
	var fw Forwarded
	select {
	case fw = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the write waited on the deposed leader")
	}
	if fw.Outcome != Answered || fw.Sends != 2 || fw.Leader != "n3" {
		t.Fatalf("forward: %+v, want answered by n3 after 2 sends", fw)
	}
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), "n3") || rec.Header().Get(LeaderHeader) != "n3" {
		t.Fatalf("answer %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	first, again := frozen.requests()[0], next.requests()[0]
	if first.Header.Get("Idempotency-Key") != "k1" || first.Header.Get(ExistedHeader) != "" || first.URL.Query().Get("run") != "" {
		t.Errorf("first send: key %q, existed %q, run %q: want the identity only", first.Header.Get("Idempotency-Key"),
			first.Header.Get(ExistedHeader), first.URL.Query().Get("run"))
	}
	if again.Header.Get("Idempotency-Key") != "k1" || again.Header.Get(ExistedHeader) != "1" || again.URL.Query().Get("run") != "3" ||
		again.Header.Get(ForwardedHeader) != "n2" || again.URL.Path != "/api/v1/dags/d1/retry" {
		t.Errorf("re-send: %s %v, want the identity and the re-send's hints", again.URL, again.Header)
	}
}

// A leader that answers 503 (not leading yet, or unsure whether it
// committed) is asked again after a pause, and its next answer passed on.
func TestForwardSendsAgainAfterA503(t *testing.T) {
	rp := newReplica(t, "n1", http.StatusServiceUnavailable, false)
	v := newView()
	v.set(rp.addr(), true)
	f := Forwarder{Cluster: v, Node: "n2", FailoverWait: 2 * time.Second}
	go func() {
		waitRequests(t, rp, 2)
		rp.mu.Lock()
		rp.code = http.StatusOK
		rp.mu.Unlock()
	}()
	rec := httptest.NewRecorder()
	fw := f.Forward(rec, httptest.NewRequest("POST", "/api/v1/dags", strings.NewReader("x")), write())
	if fw.Outcome != Answered || rec.Code != http.StatusOK || fw.Sends < 3 {
		t.Fatalf("forward %+v, answer %d: want 200 after 503s", fw, rec.Code)
	}
	// Still 503 when time is up: that answer, with its Retry-After, is
	// passed on.
	rp.mu.Lock()
	rp.code = http.StatusServiceUnavailable
	rp.mu.Unlock()
	rec = httptest.NewRecorder()
	fw = f.Forward(rec, httptest.NewRequest("POST", "/api/v1/dags", nil), Write{})
	if fw.Outcome != Answered || rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("forward %+v, answer %d %v: want the last 503 passed on", fw, rec.Code, rec.Header())
	}
}

// With no leader, or a frozen one and no successor, a write is given up
// after FailoverWait, with nothing written: the caller answers 503.
func TestForwardGivesUpAfterFailoverWait(t *testing.T) {
	v := newView()
	f := Forwarder{Cluster: v, Node: "n2", FailoverWait: 200 * time.Millisecond}
	rec := httptest.NewRecorder()
	if fw := f.Forward(rec, httptest.NewRequest("POST", "/api/v1/dags", nil), Write{}); fw.Outcome != NoLeader || rec.Body.Len() != 0 {
		t.Fatalf("no leader: %+v %q", fw, rec.Body)
	}

	frozen := newReplica(t, "n1", 0, true)
	v.set(frozen.addr(), true)
	go func() {
		waitRequests(t, frozen, 1)
		v.set(apitypes.ReplicaAddr{}, false)
	}()
	rec = httptest.NewRecorder()
	fw := f.Forward(rec, httptest.NewRequest("POST", "/api/v1/dags", nil), Write{})
	if fw.Outcome != Unanswered || fw.Leader != "n1" || rec.Body.Len() != 0 {
		t.Fatalf("frozen leader, no successor: %+v %q", fw, rec.Body)
	}
	// A request already forwarded is never forwarded again.
	req := httptest.NewRequest("POST", "/api/v1/dags", nil)
	req.Header.Set(ForwardedHeader, "n3")
	if fw := f.Forward(httptest.NewRecorder(), req, Write{}); fw.Outcome != NotForwarded {
		t.Fatalf("forwarded request: %+v", fw)
	}
}
