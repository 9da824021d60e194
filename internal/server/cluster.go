package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/apitypes"
	"github.com/orion-sched/orion/internal/store"
)

// clusterInfo answers the API's questions about the cluster from etcd (the
// replica registry, the election, the member list) and the worker hub.
type clusterInfo struct {
	cli     *clientv3.Client
	workers func() []apitypes.Worker
}

func (c *clusterInfo) Replicas(ctx context.Context) ([]apitypes.ReplicaAddr, error) {
	out, _, err := c.replicas(ctx)
	return out, err
}

// replicas reads the replica registry, sorted by name, and the revision it
// was read at.
func (c *clusterInfo) replicas(ctx context.Context) ([]apitypes.ReplicaAddr, int64, error) {
	resp, err := c.cli.Get(ctx, store.ReplicaPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := make([]apitypes.ReplicaAddr, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r store.ReplicaRecord
		if json.Unmarshal(kv.Value, &r) == nil && r.Name != "" {
			out = append(out, apitypes.ReplicaAddr{Name: r.Name, APIURL: r.APIURL})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, resp.Header.Revision, nil
}

func (c *clusterInfo) LeaderAddr(ctx context.Context) (apitypes.ReplicaAddr, bool, error) {
	l, ok, err := store.CurrentLeader(ctx, c.cli)
	if err != nil || !ok {
		return apitypes.ReplicaAddr{}, false, err
	}
	resp, err := c.cli.Get(ctx, store.ReplicaPrefix+l.Name)
	if err != nil {
		return apitypes.ReplicaAddr{}, false, err
	}
	addr := apitypes.ReplicaAddr{Name: l.Name}
	if len(resp.Kvs) == 1 {
		var r store.ReplicaRecord
		if json.Unmarshal(resp.Kvs[0].Value, &r) == nil {
			addr.APIURL = r.APIURL
		}
	}
	return addr, true, nil
}

func (c *clusterInfo) Members(ctx context.Context) ([]apitypes.EtcdMember, error) {
	resp, err := c.cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var leaderID uint64
	if len(c.cli.Endpoints()) > 0 {
		if st, err := c.cli.Status(ctx, c.cli.Endpoints()[0]); err == nil {
			leaderID = st.Leader
		}
	}
	out := make([]apitypes.EtcdMember, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, apitypes.EtcdMember{Name: m.Name, ID: fmt.Sprintf("%x", m.ID), ClientURLs: m.ClientURLs,
			PeerURLs: m.PeerURLs, IsLeader: m.ID == leaderID})
	}
	return out, nil
}

func (c *clusterInfo) Workers() []apitypes.Worker {
	if c.workers == nil {
		return nil
	}
	return c.workers()
}
