package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/model"
)

func request(method, path, token string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func tokensFile(entries ...string) []byte {
	if len(entries) == 0 {
		return []byte("tokens: []\n")
	}
	return []byte("tokens:\n" + strings.Join(entries, "\n") + "\n")
}

func entry(name, role, token string, extra ...string) string {
	return "  - {name: " + name + ", role: " + role + ", sha256: " + Digest(token) + strings.Join(extra, "") + "}"
}

// The role each kind of request needs: reads a viewer, day-to-day writes an
// operator, the rest of the writes (and any write not named) an admin, the
// worker stream a worker.
func TestRequired(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         Role
	}{
		{"GET", "/api/v1/dags", Viewer},
		{"GET", "/api/v1/dags/x/tasks/y/log", Viewer},
		{"GET", "/api/v1/events", Viewer},
		{"GET", "/metrics", Viewer},
		{"HEAD", "/", Viewer},
		{"POST", "/api/v1/dags", Operator},
		{"POST", "/api/v1/dag", Operator},
		{"POST", "/api/v1/dags/x/cancel", Operator},
		{"POST", "/api/v1/dags/x/retry", Operator},
		{"POST", "/api/v1/schedules/s/pause", Operator},
		{"POST", "/api/v1/schedules/s/resume", Operator},
		{"POST", "/api/v1/schedules/s/trigger", Operator},
		{"DELETE", "/api/v1/dags/x", Admin},
		{"POST", "/api/v1/schedules", Admin},
		{"DELETE", "/api/v1/schedules/s", Admin},
		{"POST", "/api/v1/demo/crash", Admin},
		{"POST", "/admin/simulate-crash", Admin},
		{"POST", "/api/v1/dags//cancel", Admin},
		{"POST", "/api/v1/dags/x/cancel/more", Admin},
		{"PUT", "/api/v1/dags", Admin},
		{"POST", "/api/v1/something-new", Admin},
		{"GET", WorkerStreamPath, Worker},
	} {
		if got := Required(c.method, c.path); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, got, c.want)
		}
	}
}

func TestPermits(t *testing.T) {
	viewer, operator, admin := Principal{Name: "v", Role: Viewer}, Principal{Name: "o", Role: Operator}, Principal{Name: "a", Role: Admin}
	worker, cluster := Principal{Name: "w", Role: Worker, WorkerIDs: []string{"*"}}, Principal{Name: "cluster", Role: Admin, Cluster: true}
	for _, c := range []struct {
		p            Principal
		method, path string
		ok           bool
	}{
		{viewer, "GET", "/api/v1/dags", true},
		{viewer, "POST", "/api/v1/dags", false},
		{viewer, "GET", WorkerStreamPath, false},
		{operator, "POST", "/api/v1/dags", true},
		{operator, "DELETE", "/api/v1/dags/x", false},
		{operator, "GET", WorkerStreamPath, false},
		{admin, "DELETE", "/api/v1/dags/x", true},
		{admin, "GET", "/api/v1/dags", true},
		{admin, "GET", WorkerStreamPath, false},
		{worker, "GET", WorkerStreamPath, true},
		{worker, "GET", "/api/v1/leader", true},
		{worker, "GET", "/api/v1/dags", false},
		{worker, "POST", "/api/v1/dags", false},
		{cluster, "GET", WorkerStreamPath, true},
		{cluster, "DELETE", "/api/v1/dags/x", true},
	} {
		if _, ok := Permits(c.p, c.method, c.path); ok != c.ok {
			t.Errorf("%s (%s) %s %s: %v, want %v", c.p.Name, c.p.Role, c.method, c.path, ok, c.ok)
		}
	}
}

func TestKeyring(t *testing.T) {
	k := NewKeyring("")
	if k.Enabled() {
		t.Error("no token: enabled")
	}
	k = NewKeyring("cluster-token-0123456789")
	tokens, err := Parse(tokensFile(entry("ci", "operator", "ci-token"), entry("w", "worker", "w-token", ", worker_ids: [gpu-*], labels: {pool: gpu}")))
	if err != nil {
		t.Fatal(err)
	}
	k.Set(tokens)
	for _, c := range []struct {
		token string
		name  string
		role  Role
		ok    bool
	}{
		{"cluster-token-0123456789", "cluster", Admin, true},
		{"ci-token", "ci", Operator, true},
		{"w-token", "w", Worker, true},
		{"ci-token ", "ci", Operator, true}, // spaces around are not part of it
		{"nope", "", None, false},
		{"", "", None, false},
	} {
		p, ok := k.Authenticate(request("GET", "/", c.token))
		if ok != c.ok || p.Name != c.name || p.Role != c.role {
			t.Errorf("token %q: %+v %v", c.token, p, ok)
		}
	}
	r := request("GET", "/", "")
	r.Header.Set("Authorization", "Basic Y2k6dG9rZW4=")
	if _, ok := k.Authenticate(r); ok {
		t.Error("Basic authorization accepted")
	}
}

// A worker token binds the ids and labels its workers may claim.
func TestMayBeWorker(t *testing.T) {
	w := Principal{Name: "gpu", Role: Worker, WorkerIDs: []string{"gpu-*", "spare"}, Labels: model.Labels{"pool": "gpu", "zone": "a"}}
	for _, c := range []struct {
		id     string
		labels model.Labels
		want   string
	}{
		{"gpu-1", model.Labels{"pool": "gpu"}, ""},
		{"gpu-1/4242-9f3a1c", model.Labels{"pool": "gpu"}, ""},
		{"cpu-1/gpu-1", nil, `may not run a worker named "cpu-1"`},
		{"spare", nil, ""},
		{"gpu-2", model.Labels{"pool": "gpu", "zone": "a"}, ""},
		{"cpu-1", nil, `may not run a worker named "cpu-1"`},
		{"gpu-1", model.Labels{"pool": "cpu"}, "may not claim label pool=cpu"},
		{"gpu-1", model.Labels{"orion.io/pods": "true"}, "may not claim label orion.io/pods=true"},
	} {
		if got := w.MayBeWorker(c.id, c.labels); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s %v: %q, want %q", c.id, c.labels, got, c.want)
		}
	}
	if got := (Principal{Name: "ci", Role: Operator}).MayBeWorker("w1", nil); !strings.Contains(got, "needs a worker token") {
		t.Errorf("operator: %q", got)
	}
	if got := Anonymous.MayBeWorker("anything", model.Labels{"pool": "x"}); got != "" {
		t.Errorf("anonymous: %q", got)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		body []byte
		want string
	}{
		{tokensFile(entry("ci", "root", "x")), `role "root" is invalid`},
		{tokensFile("  - {name: ci, role: viewer, sha256: abc}"), "sha256 must be 64 hex digits"},
		{tokensFile(entry("ci", "viewer", "x"), entry("ci", "admin", "y")), `name "ci" is given twice`},
		{tokensFile(entry("a", "viewer", "same"), entry("b", "admin", "same")), "the same token as a"},
		{tokensFile(entry("a b", "viewer", "x")), `name "a b" is invalid`},
		{tokensFile(entry("w", "worker", "x")), "a worker token needs worker_ids"},
		{tokensFile(entry("v", "viewer", "x", ", worker_ids: [a]")), "worker_ids and labels are for worker tokens"},
		{tokensFile(entry("w", "worker", "x", ", worker_ids: ['[']")), `worker_ids pattern "[" is invalid`},
		{tokensFile(entry("w", "worker", "x", ", worker_ids: [a], labels: {'bad key': v}")), "label bad key=v is invalid"},
		{tokensFile(entry("v", "viewer", "x", ", token: plain")), "field token not found"},
		{[]byte("tokens: {name: x}"), "tokens file"},
		{[]byte(strings.Repeat("#", MaxFileBytes+1)), "bytes; at most"},
	} {
		_, err := Parse(c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80s: %v, want %q", c.body, err, c.want)
		}
	}
	if _, err := Parse(nil); err == nil || !strings.Contains(err.Error(), "no tokens: key") {
		t.Errorf("empty file: %v", err)
	}
	if toks, err := Parse([]byte("tokens: []\n")); err != nil || len(toks) != 0 {
		t.Errorf("tokens: []: %v %v", toks, err)
	}
	if _, err := Parse(tokensFile(entry("cluster", "viewer", "x"))); err == nil || !strings.Contains(err.Error(), "is Orion's own") {
		t.Errorf("a token named cluster: %v", err)
	}
}

// The file is read again when it changes: a new token works and a removed
// one is refused; a file that no longer parses keeps the tokens before.
func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens.yaml")
	write := func(b []byte) {
		t.Helper()
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	write(tokensFile(entry("old", "viewer", "old-token")))
	k := NewKeyring("cluster-token-0123456789")
	if err := Load(k, p); err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan error, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, k, p, 10*time.Millisecond, zaptest.NewLogger(t), func(err error) { outcomes <- err })
	}()
	defer func() { cancel(); <-done }()
	wait := func() error {
		t.Helper()
		select {
		case err := <-outcomes:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the watcher did not read the changed file")
			return nil
		}
	}
	authed := func(tok string) bool { _, ok := k.Authenticate(request("GET", "/", tok)); return ok }

	write(tokensFile(entry("new", "operator", "new-token")))
	if err := wait(); err != nil || !authed("new-token") || authed("old-token") {
		t.Fatalf("after rotation: %v new=%v old=%v", err, authed("new-token"), authed("old-token"))
	}
	write([]byte("tokens: [ {name: broken"))
	if err := wait(); err == nil || !authed("new-token") {
		t.Fatalf("a broken file: %v; new-token still works: %v", err, authed("new-token"))
	}
	write(tokensFile())
	if err := wait(); err != nil || authed("new-token") || !authed("cluster-token-0123456789") {
		t.Fatalf("every file token revoked: %v", err)
	}
}

// The bearer scheme in any case, spaces around the token; a prefix of the
// token, another scheme or none authorizes nothing, nor does a keyring
// without tokens.
func TestBearerForms(t *testing.T) {
	k := NewKeyring("s3cret")
	for h, want := range map[string]bool{"Bearer s3cret": true, "bearer  s3cret ": true, "Bearer s3cre": false, "Basic s3cret": false, "": false} {
		r := request("GET", "/", "")
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if _, got := k.Authenticate(r); got != want {
			t.Errorf("Authorization %q: %v, want %v", h, got, want)
		}
	}
	none := NewKeyring("")
	r := request("GET", "/", "")
	r.Header.Set("Authorization", "Bearer ")
	if _, ok := none.Authenticate(r); ok || none.Enabled() {
		t.Fatal("a keyring without tokens authorizes")
	}
}
