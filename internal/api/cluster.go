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

	"github.com/orion-sched/orion/internal/scheduler"
)

// ClusterInfo is what a replica knows of the cluster beyond its own state.
// Nil means a lone process: the cluster endpoint describes only this node
// and writes are never forwarded.
type ClusterInfo interface {
	// Replicas lists the registered replicas (name and API URL).
	Replicas(ctx context.Context) ([]ReplicaAddr, error)
	// LeaderAddr names the leader and its API URL; ok is false when there is
	// no leader.
	LeaderAddr(ctx context.Context) (addr ReplicaAddr, ok bool, err error)
	// Members lists the etcd cluster's members.
	Members(ctx context.Context) ([]EtcdMember, error)
	// Workers describes the workers connected to this replica's hub (the
	// leader's view; empty elsewhere).
	Workers() []WorkerInfo
}

// ReplicaAddr is a replica's registration.
type ReplicaAddr struct {
	Name   string `json:"name"`
	APIURL string `json:"api_url"`
}

// EtcdMember is one etcd cluster member.
type EtcdMember struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	ClientURLs []string `json:"client_urls"`
	PeerURLs   []string `json:"peer_urls"`
	IsLeader   bool     `json:"is_leader"`
}

// WorkerInfo is a worker as the leader's hub sees it.
type WorkerInfo struct {
	ID        string    `json:"id"`
	Replica   string    `json:"replica,omitempty"` // set for a replica's own slots
	Slots     int       `json:"slots"`
	Busy      int       `json:"busy"`
	Running   int       `json:"running"` // attempts the worker reports in flight
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
}

// SelfResponse answers GET /api/v1/cluster/self: this replica alone.
type SelfResponse struct {
	Name            string       `json:"name"`
	Role            string       `json:"role"`
	APIURL          string       `json:"api_url,omitempty"`
	AppliedRevision int64        `json:"applied_revision"`
	Lag             int64        `json:"lag"`
	LeaderSince     *time.Time   `json:"leader_since,omitempty"`
	FirstCommitAt   *time.Time   `json:"first_commit_at,omitempty"`
	PID             int          `json:"pid"`
	Workers         []WorkerInfo `json:"workers,omitempty"`
}

// ForwardedHeader marks a write a standby forwarded to the leader; a request
// carrying it is never forwarded again.
const ForwardedHeader = "X-Orion-Forwarded-By"

func (s *server) role() string {
	if s.status().Leader {
		return "leader"
	}
	return "standby"
}

func (s *server) self() SelfResponse {
	st := s.status()
	out := SelfResponse{Name: s.node(), Role: s.role(), APIURL: s.cfg.APIURL, AppliedRevision: st.AppliedRev, Lag: st.Lag, PID: s.cfg.PID}
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
func (s *server) workers(st *scheduler.Status) []WorkerInfo {
	byID := map[string]*WorkerInfo{}
	var out []WorkerInfo
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
		out = append(out, WorkerInfo{ID: w.ID, Slots: w.Slots, Busy: w.Busy, Connected: true})
	}
	if out == nil {
		out = []WorkerInfo{}
	}
	return out
}

func (s *server) clusterSelf(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.self())
}

// forward sends a write to the leader when this replica is not it, and
// reports whether it did (the response is then written). body is the
// request body already read, or nil to stream r.Body.
func (s *server) forward(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if s.cfg.Cluster == nil || s.status().Leader {
		return false
	}
	if r.Header.Get(ForwardedHeader) != "" {
		return false // forwarded once already: answer not_leader here
	}
	ctx, cancel := context.WithTimeout(r.Context(), leaderTimeout)
	leader, ok, err := s.cfg.Cluster.LeaderAddr(ctx)
	cancel()
	if err != nil || !ok || leader.APIURL == "" || leader.Name == s.node() {
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
	err = Relay{
		Client: s.cfg.HTTPClient, To: leader.APIURL, From: s.node(), Token: s.cfg.AuthToken,
		Timeout:  s.cfg.WriteTimeout,
		Headers:  []string{"Content-Type", "Idempotency-Key", "Accept"},
		Set:      map[string]string{"X-Orion-Leader": leader.Name},
		AwaitRev: s.b.WaitApplied,
	}.Do(w, r, body)
	if err != nil {
		s.log.Warn("forwarding a write to the leader failed", zap.String("leader", leader.Name), zap.Error(err))
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "not_leader",
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
	ctx, cancel := context.WithTimeout(r.Context(), leaderTimeout)
	defer cancel()
	leader, err := s.b.Leader(ctx)
	if err != nil {
		s.log.Warn("reading the leader from etcd failed", zap.Error(err))
		leader = ""
		if st.Leader {
			leader = node
		}
	}
	resp := ClusterResponse{
		Node:            node,
		Leader:          leader,
		AppliedRevision: st.AppliedRev,
		Lag:             st.Lag,
		Workers:         []WorkerInfo{},
		Etcd:            EtcdInfo{Endpoints: s.cfg.EtcdEndpoints},
	}
	if resp.Etcd.Endpoints == nil {
		resp.Etcd.Endpoints = []string{}
	}
	me := s.self()
	if s.cfg.Cluster == nil {
		resp.Replicas = []Replica{replicaOf(me, true)}
		if st.Leader {
			resp.Workers = s.workers(st)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	addrs, err := s.cfg.Cluster.Replicas(ctx)
	if err != nil {
		s.log.Warn("reading replicas from etcd failed", zap.Error(err))
	}
	selves := make([]SelfResponse, len(addrs))
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
			sr = SelfResponse{Name: a.Name, APIURL: a.APIURL, Role: "unknown"}
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
		resp.Replicas = []Replica{replicaOf(me, true)}
	}
	if resp.Workers == nil {
		resp.Workers = []WorkerInfo{}
	}
	if members, err := s.cfg.Cluster.Members(ctx); err == nil {
		resp.Etcd.Members = members
	}
	writeJSON(w, http.StatusOK, resp)
}

func replicaOf(sr SelfResponse, reachable bool) Replica {
	return Replica{Name: sr.Name, Role: sr.Role, APIURL: sr.APIURL, AppliedRevision: sr.AppliedRevision, Lag: sr.Lag,
		LeaderSince: sr.LeaderSince, FirstCommitAt: sr.FirstCommitAt, PID: sr.PID, Reachable: reachable}
}

func (s *server) fetchSelf(ctx context.Context, a ReplicaAddr) (SelfResponse, bool) {
	if a.APIURL == "" {
		return SelfResponse{}, false
	}
	fctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, strings.TrimRight(a.APIURL, "/")+"/api/v1/cluster/self", nil)
	if err != nil {
		return SelfResponse{}, false
	}
	if s.cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.AuthToken)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return SelfResponse{}, false
	}
	defer resp.Body.Close()
	var sr SelfResponse
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&sr) != nil {
		return SelfResponse{}, false
	}
	if sr.APIURL == "" {
		sr.APIURL = a.APIURL
	}
	return sr, true
}
