package workerstream

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/model"
)

// The route the API's middleware gives the worker role is the stream's.
func TestWorkerStreamPathIsAuths(t *testing.T) {
	if Path != auth.WorkerStreamPath {
		t.Fatalf("workerstream.Path %q, auth.WorkerStreamPath %q", Path, auth.WorkerStreamPath)
	}
}

// serveAs serves h's stream with the principal a test header names, as the
// API's middleware would put it in the request.
func serveAs(t *testing.T, h *Hub, who map[string]auth.Principal) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := who[r.Header.Get("X-Test-As")]
		h.Handler().ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + Path
}

// A worker token's holder may say hello only as the workers its token
// names, with its labels; and while its worker is connected, no other
// token may take its id (evicting it and killing what it runs), a new
// process of its own token and the cluster token excepted.
func TestIdentityHoldsItsWorkerID(t *testing.T) {
	var c counts
	cfg := HubConfig{}
	c.hook(&cfg)
	h := newHub(t, "L", cfg)
	url := serveAs(t, h, map[string]auth.Principal{
		"a":       {Name: "pool-a", Role: auth.Worker, WorkerIDs: []string{"w*"}, Labels: model.Labels{"pool": "a"}},
		"b":       {Name: "pool-b", Role: auth.Worker, WorkerIDs: []string{"w*"}},
		"viewer":  {Name: "grafana", Role: auth.Viewer},
		"cluster": {Name: "cluster", Role: auth.Admin, Cluster: true},
	})
	dial := func(as string, hello *Hello) *wsWorker {
		t.Helper()
		r := dialWSAs(t, url, as)
		if err := r.send(Msg{Type: TypeHello, Hello: hello}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	refused := func(r *wsWorker, reason string, final bool, want string) {
		t.Helper()
		m := r.until(TypeRefused)
		if m == nil || m.Refusal == nil || m.Refusal.Reason != reason || m.Refusal.Final != final || !strings.Contains(m.Refusal.Message, want) {
			t.Fatalf("got %+v, want a refusal %s (final %v) with %q", m, reason, final, want)
		}
	}

	withLabels := goodHello("w1/1-a")
	withLabels.Labels = model.Labels{"pool": "b"}
	refused(dial("a", withLabels), RefusedIdentity, true, "may not claim label pool=b")
	refused(dial("a", goodHello("x1/1-a")), RefusedIdentity, true, `may not run a worker named "x1"`)
	refused(dial("viewer", goodHello("w1/1-a")), RefusedIdentity, true, "needs a worker token")

	dial("a", goodHello("w1/1-a"))
	wantEvent(t, h, Joined, "w1/1-a")
	// Another token, the same id: refused while w1 is there, not for good.
	stolen := goodHello("w1/1-a")
	stolen.Instance = "i2"
	refused(dial("b", stolen), RefusedHeld, false, `worker "w1/1-a" is connected with another token; token "pool-b" may not replace it`)
	// Its own token's new process takes it over, as a restart does.
	dial("a", stolen)
	wantEvent(t, h, Disconnected, "w1/1-a")
	wantEvent(t, h, Left, "w1/1-a")
	wantEvent(t, h, Joined, "w1/1-a")
	// So may the cluster's.
	again := goodHello("w1/1-a")
	again.Instance = "i3"
	dial("cluster", again)
	wantEvent(t, h, Disconnected, "w1/1-a")
	wantEvent(t, h, Left, "w1/1-a")
	wantEvent(t, h, Joined, "w1/1-a")
	// Nor may a worker token take a worker the cluster token holds (a
	// replica's own slots), nor speak for a replica.
	cl := goodHello("s1/2-b")
	dial("cluster", cl)
	wantEvent(t, h, Joined, "s1/2-b")
	refused(dial("b", goodHello("s1/2-b")), RefusedIdentity, true, `may not run a worker named "s1"`)
	wide := auth.Principal{Name: "wide", Role: auth.Worker, WorkerIDs: []string{"*"}}
	url2 := serveAs(t, h, map[string]auth.Principal{"wide": wide})
	r := dialWSAs(t, url2, "wide")
	taken := goodHello("s1/2-b")
	taken.Instance = "i9"
	if err := r.send(Msg{Type: TypeHello, Hello: taken}); err != nil {
		t.Fatal(err)
	}
	refused(r, RefusedHeld, false, "connected with another token")
	asReplica := goodHello("w5/1-a")
	asReplica.Replica = "s1"
	r = dialWSAs(t, url2, "wide")
	if err := r.send(Msg{Type: TypeHello, Hello: asReplica}); err != nil {
		t.Fatal(err)
	}
	refused(r, RefusedIdentity, true, `may not speak for replica "s1"`)
	if got, _ := c.get(); got[RefusedIdentity] != 5 || got[RefusedHeld] != 2 {
		t.Errorf("refusals counted %v", got)
	}
}
