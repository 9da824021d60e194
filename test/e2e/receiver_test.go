package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// receiver is a webhook endpoint on 127.0.0.1 that records every delivery
// of a DAG's notifications by its Idempotency-Key. Its paths answer:
//
//	/ok      204
//	/flaky   503 to the first delivery of each key, then 204: a retry
//	/gone    410, always: a notification that fails for good
//	/hold    204 once release is called (a delivery in flight)
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	deliveries map[string][]delivery // by key
	holding    int                   // /hold requests waiting now
	released   chan struct{}
	once       sync.Once
}

type delivery struct {
	path   string
	answer int
	method string
	ctype  string
	body   apitypes.Notification
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, deliveries: map[string][]delivery{}, released: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.release()
		r.srv.Close()
	})
	return r
}

func (r *receiver) url(path string) string { return r.srv.URL + path }

// release lets every /hold delivery, waiting or to come, answer.
func (r *receiver) release() { r.once.Do(func() { close(r.released) }) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	d := delivery{path: req.URL.Path, method: req.Method, ctype: req.Header.Get("Content-Type"), answer: http.StatusNoContent}
	if err := json.Unmarshal(b, &d.body); err != nil {
		r.t.Errorf("a delivery whose body is not a summary: %v: %q", err, b)
	}
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	switch d.path {
	case "/flaky":
		if len(r.deliveries[key]) == 0 {
			d.answer = http.StatusServiceUnavailable
		}
	case "/gone":
		d.answer = http.StatusGone
	case "/hold":
		r.holding++
		r.mu.Unlock()
		select {
		case <-r.released:
		case <-req.Context().Done(): // the attempt gave up: its worker died, say
		}
		r.mu.Lock()
		r.holding--
	}
	r.deliveries[key] = append(r.deliveries[key], d)
	r.mu.Unlock()
	w.WriteHeader(d.answer)
}

// of returns the deliveries of key, in order.
func (r *receiver) of(key string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.deliveries[key]...)
}

// keys lists every key delivered, sorted.
func (r *receiver) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.deliveries {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// held counts the /hold deliveries waiting for release.
func (r *receiver) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holding
}

// waitFor polls cond until it holds, within bound.
func waitFor(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", bound, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
