package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
)

// fixedView is a LeaderView that never changes.
type fixedView struct {
	l     apitypes.Leader
	known bool
}

func (v fixedView) Leader() (apitypes.Leader, bool, <-chan struct{}) { return v.l, v.known, nil }

// TestLeader: GET /api/v1/leader answers the view with this replica's name,
// in its documented shape; 503 not_leader with Retry-After when no leader is
// known; 400 for a bad wait; and the bearer token like every API route.
func TestLeader(t *testing.T) {
	view := fixedView{known: true, l: apitypes.Leader{Leader: "n2", LeaderURL: "http://127.0.0.1:2",
		Replicas: []apitypes.ReplicaAddr{{Name: "n1", APIURL: "http://127.0.0.1:1"}, {Name: "n2", APIURL: "http://127.0.0.1:2"}},
		Revision: 42}}
	e := newEnv(t, func(c *Config) { c.LeaderView = view })
	r := e.do(t, "GET", "/api/v1/leader", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	wantKeys(t, r.object(t), "node", "leader", "leader_url", "replicas", "revision")
	var got apitypes.Leader
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := view.l
	want.Node = "node-1"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("leader = %+v, want %+v", got, want)
	}
	e.do(t, "GET", "/api/v1/leader?wait=soon", "").wantError(t, http.StatusBadRequest, "bad_request")

	for name, v := range map[string]fixedView{"not read yet": {}, "nobody leads": {known: true}} {
		e := newEnv(t, func(c *Config) { c.LeaderView = v })
		r := e.do(t, "GET", "/api/v1/leader", "")
		r.wantError(t, http.StatusServiceUnavailable, "not_leader")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", name)
		}
	}

	// A lone process (no view): itself when it leads, else no leader.
	e = newEnv(t, func(c *Config) { c.APIURL = "http://127.0.0.1:9" })
	r = e.do(t, "GET", "/api/v1/leader", "")
	if err := json.Unmarshal(r.body, &got); err != nil || r.code != http.StatusOK || got.Leader != "node-1" ||
		got.LeaderURL != "http://127.0.0.1:9" || got.Revision != 20 || len(got.Replicas) != 1 {
		t.Fatalf("lone leader: %d %s", r.code, r.body)
	}
	e.f.set(func(f *fakeBackend) { f.st = &engine.Status{Node: "node-1", AppliedRev: 7, Loaded: true} })
	e.do(t, "GET", "/api/v1/leader", "").wantError(t, http.StatusServiceUnavailable, "not_leader")

	e = newEnv(t, func(c *Config) { c.AuthToken, c.LeaderView = "s3cret", view })
	e.do(t, "GET", "/api/v1/leader", "").wantError(t, http.StatusUnauthorized, "unauthorized")
	if r := e.do(t, "GET", "/api/v1/leader", "", "Authorization", "Bearer s3cret"); r.code != http.StatusOK {
		t.Fatalf("with token: %d %s", r.code, r.body)
	}
}
