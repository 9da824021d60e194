package workerstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiclient "github.com/orion-sched/orion/internal/client"
)

// fakeView plays the replicas' watched view of the election for
// GET /api/v1/leader: one leader for all, changed by the test, with the
// endpoint's hold (?suspect=&wait=) as the API implements it.
type fakeView struct {
	mu      sync.Mutex
	leader  string
	urls    map[string]string
	changed chan struct{}
}

func (v *fakeView) set(leader string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.leader = leader
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *fakeView) get() (string, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leader, v.changed
}

func (v *fakeView) handler(node string, asked *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		suspect := r.URL.Query().Get("suspect")
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		deadline := time.After(wait)
		leader, changed := v.get()
	hold:
		for wait > 0 && leader == suspect {
			select {
			case <-changed:
				leader, changed = v.get()
			case <-deadline:
				break hold
			case <-r.Context().Done():
				return
			}
		}
		v.mu.Lock()
		ans := apiclient.Leader{Node: node, Leader: leader, LeaderURL: v.urls[leader], Revision: 1}
		for _, n := range []string{"n1", "n2", "n3"} {
			ans.Replicas = append(ans.Replicas, apiclient.ReplicaAddr{Name: n, APIURL: v.urls[n]})
		}
		v.mu.Unlock()
		_ = json.NewEncoder(w).Encode(ans)
	}
}

// TestDialerAsksOnceAFailover: three replicas, three workers each given
// only the first replica's address. Each worker asks one question to join,
// and one per failover, also when the replicas learn of the new leader only
// a while after the workers lost the old one (the held answer): the
// question count is the "workers × servers × replicas" brought to
// "workers".
func TestDialerAsksOnceAFailover(t *testing.T) {
	view := &fakeView{leader: "n1", urls: map[string]string{}, changed: make(chan struct{})}
	names := []string{"n1", "n2", "n3"}
	hubs := map[string]*Hub{}
	srvs := map[string]*httptest.Server{}
	asked := map[string]*atomic.Int64{}
	for _, n := range names {
		h := NewHub(HubConfig{Leader: n, StaleAfter: testStaleAfter, Logger: testLogger(t).Named(n)})
		t.Cleanup(func() { _ = h.Close() })
		asked[n] = &atomic.Int64{}
		mux := http.NewServeMux()
		mux.Handle("GET "+Path, h.Handler())
		mux.HandleFunc("GET /api/v1/leader", view.handler(n, asked[n]))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		hubs[n], srvs[n] = h, srv
		view.urls[n] = srv.URL
	}
	var peers []Peer
	for _, n := range names {
		peers = append(peers, Peer{Name: n, URL: srvs[n].URL})
	}
	total := func() (sum int64) {
		for _, a := range asked {
			sum += a.Load()
		}
		return sum
	}
	hubs["n1"].SetLeading(true)
	hubs["n1"].SetPeers(peers)

	const workers = 3
	for i := range workers {
		d := NewHTTPDialer([]string{srvs["n1"].URL}, "", nil)
		runAgent(t, AgentConfig{Exec: newLocal(t, fmt.Sprintf("w%d/1-aa", i)), Dial: d.Dial, OnPeers: d.SetPeers,
			StaleAfter: testStaleAfter})
	}
	for range workers {
		nextEvent(t, hubs["n1"]) // joined
	}
	if got := total(); got != workers {
		t.Fatalf("%d questions to join, want %d", got, workers)
	}

	for _, step := range [][2]string{{"n1", "n2"}, {"n2", "n3"}} {
		from, to := step[0], step[1]
		before, beforeFrom := total(), asked[from].Load()
		hubs[to].SetPeers(peers)
		// The leader dies; its successor is known to the replicas only
		// a while later (the standbys depose it, the watch reports it).
		hubs[from].SetLeading(false)
		srvs[from].CloseClientConnections()
		time.Sleep(200 * time.Millisecond)
		hubs[to].SetLeading(true)
		view.set(to)
		joined := 0
		for joined < workers {
			if ev := nextEvent(t, hubs[to]); ev.Kind == Joined {
				joined++
			}
		}
		if got := total() - before; got != workers {
			t.Fatalf("failover %s→%s: %d questions, want one per worker (%d)", from, to, got, workers)
		}
		if n := asked[from].Load() - beforeFrom; n != 0 {
			t.Fatalf("failover %s→%s: the lost leader was asked %d times, want none", from, to, n)
		}
	}
}
