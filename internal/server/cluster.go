package server

import (
	"context"
	"fmt"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/store"
)

// clusterInfo answers the API's questions about the cluster: the leader and
// the replicas from the replica's in-memory view (no etcd request, so they
// answer at once while etcd is slow or without quorum), the etcd members
// with bounded requests that no single member can hold up, and the workers
// from the hub.
type clusterInfo struct {
	etcd    *store.Etcd
	view    *leaderView
	workers func() []apitypes.Worker
}

// memberTimeout bounds the member list and each member's status.
const memberTimeout = time.Second

// current is the view, or one read of etcd before the view's first read.
func (c *clusterInfo) current(ctx context.Context) (store.ClusterView, error) {
	if v, known := c.view.snapshot(); known {
		return v, nil
	}
	return c.etcd.ReadCluster(ctx)
}

func (c *clusterInfo) Replicas(ctx context.Context) ([]apitypes.ReplicaAddr, error) {
	v, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	return replicaAddrs(v), nil
}

func (c *clusterInfo) LeaderAddr(ctx context.Context) (apitypes.ReplicaAddr, bool, error) {
	v, err := c.current(ctx)
	if err != nil {
		return apitypes.ReplicaAddr{}, false, err
	}
	addr, ok := leaderAddr(v)
	return addr, ok, nil
}

// WatchLeader is the view's leader and a channel closed when the view
// changes: a forwarded write is abandoned the moment its leader is deposed
// (kit.LeaderWatch).
func (c *clusterInfo) WatchLeader() (apitypes.ReplicaAddr, bool, <-chan struct{}) {
	l, known, changed := c.view.Leader()
	if !known || l.Leader == "" {
		return apitypes.ReplicaAddr{}, false, changed
	}
	return apitypes.ReplicaAddr{Name: l.Leader, APIURL: l.LeaderURL}, true, changed
}

// Members lists the etcd members and marks etcd's leader. Every member is
// asked for its status at once and the first answer names the leader: a
// dead member, even the first endpoint, costs nothing but its own timeout.
func (c *clusterInfo) Members(ctx context.Context) ([]apitypes.EtcdMember, error) {
	lctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	members, err := c.etcd.Members(lctx)
	if err != nil {
		return nil, err
	}
	leaderID := c.etcdLeader(ctx)
	out := make([]apitypes.EtcdMember, 0, len(members))
	for _, m := range members {
		out = append(out, apitypes.EtcdMember{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), ClientURLs: m.ClientURLs,
			PeerURLs: m.PeerURLs, IsLeader: leaderID != 0 && m.ID == leaderID})
	}
	return out, nil
}

// etcdLeader is the raft leader's member id by the first member to answer
// within memberTimeout, or 0.
func (c *clusterInfo) etcdLeader(ctx context.Context) uint64 {
	eps := c.etcd.Endpoints()
	if len(eps) == 0 {
		return 0
	}
	sctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	answers := make(chan uint64, len(eps))
	for _, ep := range eps {
		go func() {
			st, err := c.etcd.Status(sctx, ep)
			if err != nil || st.Leader == 0 {
				answers <- 0
				return
			}
			answers <- st.Leader
		}()
	}
	for range eps {
		if id := <-answers; id != 0 {
			return id
		}
	}
	return 0
}

// Alarms lists etcd's raised alarms, within memberTimeout, through the
// client's balancer: alarms are cluster state, so any member answers.
func (c *clusterInfo) Alarms(ctx context.Context) ([]apitypes.EtcdAlarm, error) {
	actx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	alarms, err := c.etcd.Alarms(actx)
	if err != nil {
		return nil, err
	}
	var out []apitypes.EtcdAlarm
	for _, a := range alarms {
		al := apitypes.EtcdAlarm{MemberID: fmt.Sprintf("%x", a.MemberID), Alarm: a.Type}
		if a.Type == "NOSPACE" {
			al.Message = "the member's backend reached its quota: etcd refuses writes (submissions get 507 storage_full) " +
				"until it is compacted, defragmented and the alarm disarmed; Orion's own members do it by themselves"
		}
		out = append(out, al)
	}
	return out, nil
}

func (c *clusterInfo) Workers() []apitypes.Worker {
	if c.workers == nil {
		return nil
	}
	return c.workers()
}
