package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/api"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// replicaOn registers name on a fresh session and campaigns for it, as a
// replica does; the session is returned to end it.
func replicaOn(t *testing.T, cli *clientv3.Client, name string) interface{ Lease() clientv3.LeaseID } {
	t.Helper()
	ctx := context.Background()
	sess, err := store.NewSession(ctx, cli, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	rec, _ := json.Marshal(store.ReplicaRecord{Name: name, APIURL: "http://127.0.0.1/" + name})
	if _, err := cli.Put(ctx, store.ReplicaPrefix+name, string(rec), clientv3.WithLease(sess.Lease())); err != nil {
		t.Fatal(err)
	}
	// The key concurrency.Election.Campaign writes; written directly because
	// Campaign blocks for all but the first and resigns when cancelled.
	key := fmt.Sprintf("%s/%x", store.ElectionPrefix, sess.Lease())
	if _, err := cli.Put(ctx, key, name, clientv3.WithLease(sess.Lease())); err != nil {
		t.Fatal(err)
	}
	return sess
}

// runView starts a leaderView until the test ends.
func runView(t *testing.T, lv *leaderView) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); lv.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// awaitLeader waits until the view names want (or no leader for "").
func awaitLeader(t *testing.T, lv *leaderView, want string, replicas int) apitypes.Leader {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, known, changed := lv.Leader()
		if known && l.Leader == want && len(l.Replicas) == replicas {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view is %+v (known %v); want leader %q with %d replicas", l, known, want, replicas)
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestLeaderViewFollowsTheElection: on a real etcd, the view names the
// first campaigner with its API URL, the next one once the leader's session
// is revoked (its registration going with it), and drops a replica whose
// lease expires without a revoke.
func TestLeaderViewFollowsTheElection(t *testing.T) {
	_, cli := etcdtest.Start(t)
	lv := newLeaderView(store.NewEtcd(cli), zap.NewNop())
	runView(t, lv)
	awaitLeader(t, lv, "", 0)

	s1 := replicaOn(t, cli, "n1")
	replicaOn(t, cli, "n2")
	awaitLeader(t, lv, "n1", 2)
	if addr, ok := lv.LeaderAddr(); !ok || addr != (apitypes.ReplicaAddr{Name: "n1", APIURL: "http://127.0.0.1/n1"}) {
		t.Fatalf("LeaderAddr %+v %v", addr, ok)
	}

	if _, err := cli.Revoke(context.Background(), s1.Lease()); err != nil {
		t.Fatal(err)
	}
	l := awaitLeader(t, lv, "n2", 1)
	if l.LeaderURL != "http://127.0.0.1/n2" || l.Replicas[0].Name != "n2" {
		t.Fatalf("after n1's revoke: %+v", l)
	}

	// A lease nobody keeps alive: the replica vanishes when it expires.
	lease, err := cli.Grant(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(store.ReplicaRecord{Name: "n3", APIURL: "http://127.0.0.1/n3"})
	if _, err := cli.Put(context.Background(), store.ReplicaPrefix+"n3", string(rec), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, lv, "n2", 2)
	awaitLeader(t, lv, "n2", 1)
}

// TestLeaderViewRecoversFromAWatchError: the first watch fails the way a
// compaction makes it fail (its start revision is compacted away by the
// time it starts, a real etcd error); the view reads everything again,
// watches on, and follows the changes made after.
func TestLeaderViewRecoversFromAWatchError(t *testing.T) {
	_, cli := etcdtest.Start(t)
	lv := newLeaderView(store.NewEtcd(cli), zap.NewNop())
	calls, firstErr := 0, make(chan error, 1)
	lv.follow = func(ctx context.Context, publish func(store.ClusterView)) error {
		calls++
		if calls > 1 {
			return store.FollowCluster(ctx, cli, publish)
		}
		err := store.FollowCluster(ctx, cli, func(v store.ClusterView) {
			publish(v)
			// Move etcd on and compact past the revision just read,
			// before the watch from it starts.
			if _, err := cli.Put(ctx, "/elsewhere", "x"); err != nil {
				t.Error(err)
			}
			resp, err := cli.Put(ctx, "/elsewhere", "y")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				t.Error(err)
			}
		})
		firstErr <- err
		return err
	}
	runView(t, lv)
	select {
	case err := <-firstErr:
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("first follow returned %v, want a compaction", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first follow never failed")
	}
	replicaOn(t, cli, "n1")
	awaitLeader(t, lv, "n1", 1)
}

// idleBackend is an api.Backend with nothing in it: the leader endpoint
// must not need one.
type idleBackend struct{}

func (idleBackend) Submit(context.Context, *model.DAG) (engine.SubmitResult, error) {
	return engine.SubmitResult{}, errors.New("idle")
}
func (idleBackend) Cancel(context.Context, string) (core.DAGStatus, error) {
	return "", errors.New("idle")
}
func (idleBackend) Retry(context.Context, string, int) (core.DAGStatus, error) {
	return "", errors.New("idle")
}
func (idleBackend) Delete(context.Context, string) error { return errors.New("idle") }
func (idleBackend) DAGs(context.Context, core.DAGQuery) ([]core.DAGSummary, int64, error) {
	return nil, 0, errors.New("idle")
}
func (idleBackend) DAGHead(context.Context, string, int) (engine.HeadRead, error) {
	return engine.HeadRead{}, errors.New("idle")
}
func (idleBackend) Tasks(context.Context, string, engine.TasksQuery) (engine.TasksRead, error) {
	return engine.TasksRead{}, errors.New("idle")
}
func (idleBackend) Task(context.Context, string, string) (engine.TaskRead, error) {
	return engine.TaskRead{}, errors.New("idle")
}
func (idleBackend) Instances(context.Context, string, string, int, int) (engine.InstancesRead, error) {
	return engine.InstancesRead{}, errors.New("idle")
}
func (idleBackend) DAGState(context.Context, string) (core.DAGStatus, int, bool, error) {
	return "", 0, false, errors.New("idle")
}
func (idleBackend) Rev() int64                               { return 0 }
func (idleBackend) Status() *engine.Status                   { return &engine.Status{Node: "n2"} }
func (idleBackend) Leader(context.Context) (string, error)   { return "", errors.New("idle") }
func (idleBackend) WaitApplied(context.Context, int64) error { return errors.New("idle") }

// getLeader asks h for GET /api/v1/leader with query q.
func getLeader(t *testing.T, h http.Handler, q string) (*httptest.ResponseRecorder, apitypes.Leader) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/api/v1/leader"+q, nil)
	req.Host, req.RemoteAddr = "127.0.0.1", "127.0.0.1:5000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var l apitypes.Leader
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
	}
	return rec, l
}

// TestLeaderEndpointAnswersFromMemory: GET /api/v1/leader answers from the
// view with etcd gone (the member stopped and the client closed), holds a
// worker's question about a suspect leader until the view names its
// successor, and answers 503 with Retry-After before any view was read.
func TestLeaderEndpointAnswersFromMemory(t *testing.T) {
	member, cli := etcdtest.Start(t)
	lv := newLeaderView(store.NewEtcd(cli), zap.NewNop())
	h := api.New(api.Config{Backend: idleBackend{}, Node: "n2", LeaderView: lv, Logger: zap.NewNop()})

	rec, _ := getLeader(t, h, "")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("before the first read: %d %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	var e apitypes.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != apitypes.CodeNotLeader {
		t.Fatalf("503 body %s (%v)", rec.Body, err)
	}

	runView(t, lv)
	s1 := replicaOn(t, cli, "n1")
	replicaOn(t, cli, "n2")
	awaitLeader(t, lv, "n1", 2)

	// A worker that lost n1 asks, and is answered when n1 is deposed.
	type answer struct {
		rec *httptest.ResponseRecorder
		l   apitypes.Leader
	}
	held := make(chan answer, 1)
	go func() {
		rec, l := getLeader(t, h, "?suspect=n1&wait=5s")
		held <- answer{rec, l}
	}()
	select {
	case a := <-held:
		t.Fatalf("answered %d %+v while n1 still leads", a.rec.Code, a.l)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := cli.Revoke(context.Background(), s1.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-held:
		if a.rec.Code != http.StatusOK || a.l.Leader != "n2" || a.l.LeaderURL != "http://127.0.0.1/n2" {
			t.Fatalf("held answer %d %s", a.rec.Code, a.rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was never answered")
	}
	want := awaitLeader(t, lv, "n2", 1)

	// etcd gone: the answer is the last view, unchanged. (The client first:
	// the member then stops at once instead of draining its streams.)
	_ = cli.Close()
	if err := member.Close(); err != nil {
		t.Logf("closing the member: %v", err)
	}
	rec, got := getLeader(t, h, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("with etcd gone: %d %s", rec.Code, rec.Body)
	}
	want.Node = "n2"
	if got.Node != want.Node || got.Leader != want.Leader || got.LeaderURL != want.LeaderURL ||
		got.Revision != want.Revision || got.Revision == 0 || len(got.Replicas) != 1 || got.Replicas[0] != want.Replicas[0] {
		t.Fatalf("with etcd gone: %+v, want %+v", got, want)
	}
	// Still the suspect's successor at once, no wait.
	start := time.Now()
	if rec, got := getLeader(t, h, "?suspect=n1&wait=5s"); rec.Code != http.StatusOK || got.Leader != "n2" || time.Since(start) > time.Second {
		t.Fatalf("suspect n1 with n2 leading: %d %+v after %s", rec.Code, got, time.Since(start))
	}
}
