package server

import (
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/workerstream"
)

// hubPeers keeps the worker hub's peer list equal to the replica registry
// (the leaderView calls it on every change of the registry). A worker learns
// every replica this way, also the ones that registered after it connected,
// and can find the next leader when the only address it was given is the
// replica that died.
func hubPeers(hub *workerstream.Hub) func([]apitypes.ReplicaAddr) {
	return func(addrs []apitypes.ReplicaAddr) {
		peers := make([]workerstream.Peer, 0, len(addrs))
		for _, a := range addrs {
			if a.APIURL != "" {
				peers = append(peers, workerstream.Peer{Name: a.Name, URL: a.APIURL})
			}
		}
		hub.SetPeers(peers)
	}
}
