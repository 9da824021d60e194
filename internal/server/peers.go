package server

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/workerstream"
)

// peersRetry is the pause before reading the registry again after etcd
// failed us (a lost member, a compacted watch).
const peersRetry = time.Second

// followPeers keeps the worker hub's peer list equal to the replica registry
// until ctx ends: it reads /orion/v1/replicas/ and reads it again after each
// change the watch reports. A worker learns every replica this way, also
// the ones that registered after it connected, and can find the next leader
// when the only address it was given is the replica that died.
func followPeers(ctx context.Context, info *clusterInfo, hub *workerstream.Hub, log *zap.Logger) {
	for ctx.Err() == nil {
		err := watchPeers(ctx, info, hub)
		if ctx.Err() != nil {
			return
		}
		log.Debug("following the replica registry failed; retrying", zap.Error(err), zap.Duration("in", peersRetry))
		select {
		case <-ctx.Done():
		case <-time.After(peersRetry):
		}
	}
}

// watchPeers publishes the registry, then again on every change, until the
// watch fails.
func watchPeers(ctx context.Context, info *clusterInfo, hub *workerstream.Hub) error {
	rev, err := publishPeers(ctx, info, hub)
	if err != nil {
		return err
	}
	// RequireLeader: a member cut off from its cluster ends the watch
	// rather than leaving it silent.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range info.cli.Watch(wctx, store.ReplicaPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if _, err := publishPeers(ctx, info, hub); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("the watch of the replica registry ended")
}

func publishPeers(ctx context.Context, info *clusterInfo, hub *workerstream.Hub) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, rev, err := info.replicas(rctx)
	if err != nil {
		return 0, err
	}
	peers := make([]workerstream.Peer, 0, len(addrs))
	for _, a := range addrs {
		if a.APIURL != "" {
			peers = append(peers, workerstream.Peer{Name: a.Name, URL: a.APIURL})
		}
	}
	hub.SetPeers(peers)
	return rev, nil
}
