package store

// The cluster view: who leads and which replicas are registered, followed
// with one read and one watch, so that a replica can answer "where is the
// leader?" from memory instead of reading etcd for every question (workers
// ask it at every failover, all at once).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterView is the election and the replica registry as of Revision.
type ClusterView struct {
	// Revision is the etcd revision the view reflects.
	Revision int64
	// Leader is the campaigner with the lowest create revision (as
	// CurrentLeader decides); HasLeader is false when nobody campaigns.
	Leader    Leader
	HasLeader bool
	// Replicas are the registered replicas, sorted by name; records that do
	// not decode (written by hand) are left out.
	Replicas []ReplicaRecord
}

// Replica returns the registered replica named name.
func (v ClusterView) Replica(name string) (ReplicaRecord, bool) {
	for _, r := range v.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return ReplicaRecord{}, false
}

// clusterViewStart and clusterViewEnd span the election keys, the term
// record and the registry (in that key order) and nothing else of the
// layout: one range read and one watch cover both the leader and the
// replicas at one revision. The term record is written once per term and
// ignored here.
var (
	clusterViewStart = ElectionPrefix + "/"
	clusterViewEnd   = clientv3.GetPrefixRangeEnd(ReplicaPrefix)
)

// clusterState is the decoded content of the followed range.
type clusterState struct {
	rev        int64
	candidates map[string]Leader        // election key → campaigner
	replicas   map[string]ReplicaRecord // registry key → record
}

func (s *clusterState) apply(kv *mvccpb.KeyValue, deleted bool) {
	key := string(kv.Key)
	switch {
	case strings.HasPrefix(key, clusterViewStart):
		if deleted {
			delete(s.candidates, key)
			return
		}
		s.candidates[key] = Leader{Name: string(kv.Value), Key: key, Lease: clientv3.LeaseID(kv.Lease), Rev: kv.CreateRevision}
	case strings.HasPrefix(key, ReplicaPrefix):
		var r ReplicaRecord
		if deleted || json.Unmarshal(kv.Value, &r) != nil || r.Name == "" {
			delete(s.replicas, key)
			return
		}
		s.replicas[key] = r
	}
}

func (s *clusterState) view() ClusterView {
	v := ClusterView{Revision: s.rev, Replicas: make([]ReplicaRecord, 0, len(s.replicas))}
	for _, c := range s.candidates {
		if !v.HasLeader || c.Rev < v.Leader.Rev {
			v.Leader, v.HasLeader = c, true
		}
	}
	for _, r := range s.replicas {
		v.Replicas = append(v.Replicas, r)
	}
	sort.Slice(v.Replicas, func(i, j int) bool { return v.Replicas[i].Name < v.Replicas[j].Name })
	return v
}

// clusterReadTimeout bounds one read of the view: without quorum a
// linearizable read waits, and the caller would rather retry (or answer
// from what it has) than hang.
const clusterReadTimeout = 2 * time.Second

// ReadCluster reads the election and the registry once, at one revision.
func ReadCluster(ctx context.Context, kv clientv3.KV) (ClusterView, error) {
	st, err := readCluster(ctx, kv)
	if err != nil {
		return ClusterView{}, err
	}
	return st.view(), nil
}

func readCluster(ctx context.Context, kv clientv3.KV) (*clusterState, error) {
	rctx, cancel := context.WithTimeout(ctx, clusterReadTimeout)
	defer cancel()
	resp, err := kv.Get(rctx, clusterViewStart, clientv3.WithRange(clusterViewEnd))
	if err != nil {
		return nil, fmt.Errorf("cluster view: read: %w", err)
	}
	st := &clusterState{rev: resp.Header.Revision, candidates: map[string]Leader{}, replicas: map[string]ReplicaRecord{}}
	for _, kv := range resp.Kvs {
		st.apply(kv, false)
	}
	return st, nil
}

// FollowCluster reads the election and the registry at one revision,
// publishes the view, then watches from the next revision and publishes the
// view again after every change, until the watch fails or ctx ends. It
// returns the reason it stopped (ctx's error when ctx ended); the caller
// calls it again to recover, which reads everything afresh (after a
// compaction too). The watch requires an etcd leader, so a member cut off
// from its cluster ends it instead of leaving the view silently stale.
func FollowCluster(ctx context.Context, cli *clientv3.Client, publish func(ClusterView)) error {
	st, err := readCluster(ctx, cli)
	if err != nil {
		return err
	}
	publish(st.view())

	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, clusterViewStart, clientv3.WithRange(clusterViewEnd), clientv3.WithRev(st.rev+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("cluster view: watch: %w", err)
		}
		if len(wr.Events) == 0 {
			continue // a progress notification: nothing changed
		}
		for _, ev := range wr.Events {
			st.apply(ev.Kv, ev.Type == clientv3.EventTypeDelete)
			st.rev = max(st.rev, ev.Kv.ModRevision)
		}
		publish(st.view())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("cluster view: the watch ended")
}
