package kubelabel

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
)

// fakeAPI records JSON merge patches of pod labels as the Kubernetes API
// server would apply them.
type fakeAPI struct {
	mu     sync.Mutex
	labels map[string]string // pod → value of the key
	fail   int               // next N patches fail with 500
	order  []string          // "pod=value" of each patch applied
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPatch || r.Header.Get("Content-Type") != "application/merge-patch+json" || r.Header.Get("Authorization") != "Bearer tok" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	parts := strings.Split(r.URL.Path, "/") // /api/v1/namespaces/NS/pods/NAME
	if len(parts) != 7 || parts[4] != "ns" {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		http.Error(w, "try later", http.StatusInternalServerError)
		return
	}
	pod := parts[6]
	if pod == "gone" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var body struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.labels[pod] = body.Metadata.Labels["orion.io/role"]
	f.order = append(f.order, pod+"="+f.labels[pod])
	w.Write([]byte(`{}`))
}

func (f *fakeAPI) get(pod string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.labels[pod]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLabelsFollowLeadership(t *testing.T) {
	api := &fakeAPI{labels: map[string]string{}, fail: 2}
	srv := httptest.NewServer(api)
	defer srv.Close()
	l := New("orion.io/role", "ns", "orion-1", srv.URL, func() (string, error) { return "tok", nil }, srv.Client(), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)

	l.Leading(false, "")
	waitFor(t, "standby label despite two failures", func() bool { return api.get("orion-1") == "standby" })
	api.mu.Lock()
	api.labels["orion-0"] = "leader" // the previous leader, frozen
	api.mu.Unlock()
	l.Leading(true, "orion-0")
	waitFor(t, "leader label", func() bool { return api.get("orion-1") == "leader" && api.get("orion-0") == "standby" })
	l.Leading(true, "gone") // a previous leader whose pod no longer exists
	l.Leading(false, "")
	waitFor(t, "back to standby", func() bool { return api.get("orion-1") == "standby" })
}

// A new leader's own label is written before the previous leader's, and a
// stepping-down replica's before anything else it still has to write.
func TestOwnLabelFirst(t *testing.T) {
	for i := 0; i < 20; i++ { // map order varies between runs: try it often
		api := &fakeAPI{labels: map[string]string{}}
		srv := httptest.NewServer(api)
		l := New("orion.io/role", "ns", "orion-1", srv.URL, func() (string, error) { return "tok", nil }, srv.Client(), nil, nil)
		l.Leading(true, "orion-2")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		waitFor(t, "both labels", func() bool { return api.get("orion-1") == "leader" && api.get("orion-2") == "standby" })
		cancel()
		<-done
		srv.Close()
		if got := strings.Join(api.order, " "); got != "orion-1=leader orion-2=standby" {
			t.Fatalf("patches in the order %q, want this pod's own label first", got)
		}
	}
}
