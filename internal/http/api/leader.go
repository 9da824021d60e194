package api

import (
	"net/http"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/kit"
)

// LeaderView is a replica's memory of the election and the replica
// registry, kept current by etcd watches.
type LeaderView interface {
	// Leader returns the view (without Node); known is false until the view
	// was first read, and changed is closed when the view next changes.
	Leader() (l apitypes.Leader, known bool, changed <-chan struct{})
}

// MaxLeaderWait bounds the wait parameter of GET /api/v1/leader.
const MaxLeaderWait = 5 * time.Second

// leader answers GET /api/v1/leader from memory: never an etcd request and
// never a call to another replica, so that every worker of the cluster can
// ask at once after a failover.
//
// ?suspect=<name>&wait=<duration> (both optional) is asked by a worker that
// just lost its stream to <name>: the answer is held, up to wait (at most
// MaxLeaderWait), until the view names a leader other than <name>. The
// worker then learns the successor in the one request, instead of polling
// while the standbys depose the old leader.
func (s *server) leader(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	suspect := q.Get("suspect")
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, "wait must be a duration such as 500ms", nil)
			return
		}
		wait = min(d, MaxLeaderWait)
	}
	l, known, changed := s.leaderView()
	if wait > 0 && changed != nil {
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
	hold:
		for !known || l.Leader == "" || l.Leader == suspect {
			select {
			case <-changed:
			case <-deadline.C:
				break hold
			case <-r.Context().Done():
				break hold
			}
			l, known, changed = s.leaderView()
		}
	}
	l.Node = s.node()
	if l.Replicas == nil {
		l.Replicas = []apitypes.ReplicaAddr{}
	}
	if !known || l.Leader == "" {
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeNotLeader, "no leader is known yet; retry shortly", nil)
		return
	}
	kit.WriteJSON(w, http.StatusOK, l)
}

// leaderView is the configured view, or for a lone process the process
// itself: the leader when it leads, at the revision it applied (changed is
// nil then: nothing to wait for).
func (s *server) leaderView() (l apitypes.Leader, known bool, changed <-chan struct{}) {
	if s.cfg.LeaderView != nil {
		return s.cfg.LeaderView.Leader()
	}
	st := s.status()
	me := apitypes.ReplicaAddr{Name: s.node(), APIURL: s.cfg.APIURL}
	l = apitypes.Leader{Replicas: []apitypes.ReplicaAddr{me}, Revision: st.AppliedRev}
	if st.Leader {
		l.Leader, l.LeaderURL = me.Name, me.APIURL
	}
	return l, true, nil
}
