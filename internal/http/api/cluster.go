package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/kit"
)

func (s *server) role() string {
	if s.status().Leader {
		return "leader"
	}
	return "standby"
}

func (s *server) self() apitypes.Self {
	st := s.status()
	out := apitypes.Self{Name: s.node(), Role: s.role(), APIURL: s.cfg.APIURL, AppliedRevision: st.AppliedRev, Lag: st.Lag, PID: s.cfg.PID,
		Problem: st.Problem}
	if !st.LeaderSince.IsZero() {
		t := st.LeaderSince
		out.LeaderSince = &t
	}
	if !st.FirstCommitAt.IsZero() {
		t := st.FirstCommitAt
		out.FirstCommitAt = &t
	}
	if st.Leader {
		out.Workers = s.workers(st)
	}
	return out
}

// workers merges the core's slot accounting with the hub's connection view.
func (s *server) workers(st *engine.Status) []apitypes.Worker {
	byID := map[string]*apitypes.Worker{}
	var out []apitypes.Worker
	if s.cfg.Cluster != nil {
		out = s.cfg.Cluster.Workers()
	}
	for i := range out {
		byID[out[i].ID] = &out[i]
	}
	for _, w := range st.Workers {
		if wi := byID[w.ID]; wi != nil {
			wi.Busy = w.Busy
			continue
		}
		out = append(out, apitypes.Worker{ID: w.ID, Slots: w.Slots, Labels: w.Labels, Busy: w.Busy, Connected: true})
	}
	if out == nil {
		out = []apitypes.Worker{}
	}
	return out
}

func (s *server) clusterSelf(w http.ResponseWriter, r *http.Request) {
	kit.WriteJSON(w, http.StatusOK, s.self())
}

// forward sends a write to the leader when this replica is not it, and
// reports whether it did (the response is then written). body is the
// request body already read, or nil to read r.Body once a leader is found.
func (s *server) forward(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if s.cfg.Cluster == nil || s.status().Leader {
		return false
	}
	f := kit.Forwarder{
		Cluster: s.cfg.Cluster, Node: s.node(), Client: s.cfg.HTTPClient, Token: s.cfg.AuthToken,
		Timeout: s.cfg.WriteTimeout, AwaitRev: s.b.WaitApplied,
	}
	leader, ok := f.Leader(r)
	if !ok {
		return false // the caller answers 503 not_leader with Retry-After
	}
	if body == nil {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			s.fail(w, r, err)
			return true
		}
		body = b
	}
	if err := f.To(w, r, leader, body, []string{"Content-Type", "Idempotency-Key", "Accept"}); err != nil {
		s.log.Warn("forwarding a write to the leader failed", zap.String("leader", leader.Name), zap.Error(err))
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeNotLeader,
			"this replica is not the leader and the leader "+leader.Name+" did not answer; retry shortly", nil)
	}
	return true
}

func (s *server) httpClient() *http.Client {
	if s.cfg.HTTPClient != nil {
		return s.cfg.HTTPClient
	}
	return http.DefaultClient
}

// cluster answers GET /api/v1/cluster: the leader, every replica with its role
// and applied revision (each asked over HTTP, briefly), the workers, and the
// etcd members.
func (s *server) cluster(w http.ResponseWriter, r *http.Request) {
	st := s.status()
	node := s.node()
	ctx, cancel := context.WithTimeout(r.Context(), kit.LeaderTimeout)
	defer cancel()
	leader, err := s.b.Leader(ctx)
	if err != nil {
		s.log.Warn("reading the leader from etcd failed", zap.Error(err))
		leader = ""
		if st.Leader {
			leader = node
		}
	}
	resp := apitypes.Cluster{
		Node:            node,
		Leader:          leader,
		AppliedRevision: st.AppliedRev,
		Lag:             st.Lag,
		Workers:         []apitypes.Worker{},
		Etcd:            apitypes.EtcdInfo{Endpoints: s.cfg.EtcdEndpoints, Storage: s.storage()},
	}
	if resp.Etcd.Endpoints == nil {
		resp.Etcd.Endpoints = []string{}
	}
	me := s.self()
	if s.cfg.Cluster == nil {
		resp.Replicas = []apitypes.Replica{replicaOf(me, true)}
		if st.Leader {
			resp.Workers = s.workers(st)
		}
		kit.WriteJSON(w, http.StatusOK, resp)
		return
	}
	addrs, err := s.cfg.Cluster.Replicas(ctx)
	if err != nil {
		s.log.Warn("reading replicas from etcd failed", zap.Error(err))
	}
	selves := make([]apitypes.Self, len(addrs))
	reach := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		if a.Name == node {
			selves[i], reach[i] = me, true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			selves[i], reach[i] = s.fetchSelf(ctx, a)
		}()
	}
	wg.Wait()
	for i, a := range addrs {
		sr := selves[i]
		if sr.Name == "" {
			sr = apitypes.Self{Name: a.Name, APIURL: a.APIURL, Role: "unknown"}
		}
		if sr.Name == leader {
			sr.Role = "leader"
			resp.LeaderURL = a.APIURL
			resp.Workers = sr.Workers
		} else if reach[i] {
			sr.Role = "standby"
		}
		resp.Replicas = append(resp.Replicas, replicaOf(sr, reach[i]))
	}
	if resp.Replicas == nil {
		resp.Replicas = []apitypes.Replica{replicaOf(me, true)}
	}
	if resp.Workers == nil {
		resp.Workers = []apitypes.Worker{}
	}
	if members, err := s.cfg.Cluster.Members(ctx); err == nil {
		resp.Etcd.Members = members
	}
	if al, ok := s.cfg.Cluster.(alarmLister); ok {
		if alarms, err := al.Alarms(ctx); err != nil {
			s.log.Warn("reading etcd's alarms failed", zap.Error(err))
		} else {
			resp.Etcd.Alarms = alarms
		}
	}
	kit.WriteJSON(w, http.StatusOK, resp)
}

// alarmLister is a ClusterInfo that also lists etcd's alarms (the server's
// does; it bounds the request and goes to any member).
type alarmLister interface {
	Alarms(ctx context.Context) ([]apitypes.EtcdAlarm, error)
}

func replicaOf(sr apitypes.Self, reachable bool) apitypes.Replica {
	return apitypes.Replica{Name: sr.Name, Role: sr.Role, APIURL: sr.APIURL, AppliedRevision: sr.AppliedRevision, Lag: sr.Lag,
		LeaderSince: sr.LeaderSince, FirstCommitAt: sr.FirstCommitAt, PID: sr.PID, Reachable: reachable, Problem: sr.Problem}
}

func (s *server) fetchSelf(ctx context.Context, a apitypes.ReplicaAddr) (apitypes.Self, bool) {
	if a.APIURL == "" {
		return apitypes.Self{}, false
	}
	fctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, strings.TrimRight(a.APIURL, "/")+"/api/v1/cluster/self", nil)
	if err != nil {
		return apitypes.Self{}, false
	}
	if s.cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.AuthToken)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return apitypes.Self{}, false
	}
	defer resp.Body.Close()
	var sr apitypes.Self
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&sr) != nil {
		return apitypes.Self{}, false
	}
	if sr.APIURL == "" {
		sr.APIURL = a.APIURL
	}
	return sr, true
}
