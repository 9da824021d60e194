package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/store"
)

// The pause before following the cluster again after etcd failed us (a lost
// member, a compacted watch, no etcd leader): it doubles from viewRetryMin
// while failures come quickly, and never exceeds viewRetryMax, so the view
// is re-read within a second of etcd coming back.
const (
	viewRetryMin = 50 * time.Millisecond
	viewRetryMax = time.Second
)

// leaderView is this replica's memory of who leads and which replicas are
// registered, kept by store.FollowCluster (one read, then one watch). The
// questions asked at every failover, by every worker and by this replica's
// own slots and hub, are answered from it without an etcd request, so a
// failover no longer multiplies etcd reads by the number of workers.
type leaderView struct {
	// probe asks a suspected leader whether it still leads (nil:
	// probeClient); with TLS, it verifies the leader's certificate.
	probe *http.Client
	log   *zap.Logger
	// onReplicas, when set, is told the registry whenever it changes (the
	// hub's peer list); it is called from run's goroutine, one at a time.
	onReplicas func([]apitypes.ReplicaAddr)
	// follow is the store's FollowCluster; a test wraps it to make etcd
	// fail it.
	follow func(ctx context.Context, publish func(store.ClusterView)) error

	mu      sync.Mutex
	view    store.ClusterView
	known   bool          // a first read succeeded
	changed chan struct{} // closed and replaced on every update
}

func newLeaderView(etcd *store.Etcd, log *zap.Logger) *leaderView {
	return &leaderView{log: log, follow: etcd.FollowCluster, changed: make(chan struct{})}
}

// ElectedLeader is the leader as the view last saw it; ok is false before
// a first read and while nobody campaigns. Depose takes its lease from it.
func (lv *leaderView) ElectedLeader() (store.Leader, bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.view.Leader, lv.known && lv.view.HasLeader
}

// run follows the cluster until ctx ends, starting over after each failure.
// The last view stays in place meanwhile: a stale answer costs a worker one
// failed dial, no answer at all would cost it every replica's.
func (lv *leaderView) run(ctx context.Context) {
	var last []apitypes.ReplicaAddr
	publish := func(v store.ClusterView) {
		addrs := replicaAddrs(v)
		lv.mu.Lock()
		lv.view, lv.known = v, true
		close(lv.changed)
		lv.changed = make(chan struct{})
		lv.mu.Unlock()
		if lv.onReplicas != nil && (last == nil || !slices.Equal(addrs, last)) {
			lv.onReplicas(addrs)
		}
		last = addrs
	}
	pause := viewRetryMin
	for ctx.Err() == nil {
		began := time.Now()
		err := lv.follow(ctx, publish)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > viewRetryMax {
			pause = viewRetryMin // it ran a while: this is a new failure, not the same one again
		}
		lv.log.Debug("following the election and the replica registry failed; reading them again",
			zap.Error(err), zap.Duration("in", pause))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, viewRetryMax)
	}
}

func replicaAddrs(v store.ClusterView) []apitypes.ReplicaAddr {
	out := make([]apitypes.ReplicaAddr, 0, len(v.Replicas))
	for _, r := range v.Replicas {
		out = append(out, apitypes.ReplicaAddr{Name: r.Name, APIURL: r.APIURL})
	}
	return out
}

// snapshot is the view as last read; known is false before the first read.
func (lv *leaderView) snapshot() (store.ClusterView, bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.view, lv.known
}

// leaderAddr names v's leader and its API URL (empty when it registered
// none); ok is false when nobody leads.
func leaderAddr(v store.ClusterView) (addr apitypes.ReplicaAddr, ok bool) {
	if !v.HasLeader {
		return addr, false
	}
	addr.Name = v.Leader.Name
	if r, ok := v.Replica(addr.Name); ok {
		addr.APIURL = r.APIURL
	}
	return addr, true
}

// LeaderAddr is leaderAddr of the view; ok is false also before the first
// read.
func (lv *leaderView) LeaderAddr() (apitypes.ReplicaAddr, bool) {
	v, known := lv.snapshot()
	if !known {
		return apitypes.ReplicaAddr{}, false
	}
	return leaderAddr(v)
}

// Leader is the view as GET /api/v1/leader shows it (without the node,
// which the API fills in); known is false before the first read, and
// changed is closed when the view next changes.
func (lv *leaderView) Leader() (l apitypes.Leader, known bool, changed <-chan struct{}) {
	lv.mu.Lock()
	v, known, changed := lv.view, lv.known, lv.changed
	lv.mu.Unlock()
	l = apitypes.Leader{Replicas: replicaAddrs(v), Revision: v.Revision}
	if addr, ok := leaderAddr(v); ok {
		l.Leader, l.LeaderURL = addr.Name, addr.APIURL
	}
	return l, known, changed
}

// probeClient asks a suspected leader whether it still leads. No keep-alive:
// each probe is rare and must not reuse a connection to a process that died.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

// leaderAnswers asks the replica named name, at its registered API URL,
// whether it holds the leadership term (GET /readyz, unauthenticated like every
// probe). It is the standbys' check before deposing a leader whose stream
// dropped: a killed leader refuses the connection at once, a frozen or
// cut-off one does not answer before ctx ends, and a healthy one answers
// "leader": true, so a stream that dropped at the standby's end (the
// standby was paused) deposes nobody.
func (lv *leaderView) leaderAnswers(ctx context.Context, name string) bool {
	v, _ := lv.snapshot()
	r, ok := v.Replica(name)
	if !ok || r.APIURL == "" {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.APIURL, "/")+"/readyz", nil)
	if err != nil {
		return false
	}
	probe := lv.probe
	if probe == nil {
		probe = probeClient
	}
	resp, err := probe.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	// 503 too: a leader re-reading etcd says not_ready, and still holds
	// its term.
	var ready apitypes.Ready
	if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&ready) != nil {
		return false
	}
	return ready.Leader || ready.Term
}
