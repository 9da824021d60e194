package kit

import (
	"context"
	"net/http"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// ClusterInfo is what a replica knows of the cluster beyond its own state.
// Nil means a lone process: the cluster endpoint describes only this node
// and writes are never forwarded.
type ClusterInfo interface {
	// Replicas lists the registered replicas (name and API URL).
	Replicas(ctx context.Context) ([]apitypes.ReplicaAddr, error)
	// LeaderAddr names the leader and its API URL; ok is false when there is
	// no leader.
	LeaderAddr(ctx context.Context) (addr apitypes.ReplicaAddr, ok bool, err error)
	// Members lists the etcd cluster's members.
	Members(ctx context.Context) ([]apitypes.EtcdMember, error)
	// Workers describes the workers connected to this replica's hub (the
	// leader's view; empty elsewhere).
	Workers() []apitypes.Worker
}

// DefaultMaxBodyBytes bounds a submitted DAG when no limit is configured.
const DefaultMaxBodyBytes = 1 << 20

// LeaderTimeout bounds the etcd read that finds the leader.
const LeaderTimeout = 3 * time.Second

// Forwarder sends a write a standby received to the leader and relays the
// leader's answer: the API's and the seed API's submissions share it.
type Forwarder struct {
	Cluster ClusterInfo  // nil: never forward
	Node    string       // this replica's name
	Client  *http.Client // nil: http.DefaultClient
	Token   string       // the cluster's bearer token ("" for none)
	Timeout time.Duration
	// AwaitRev: see Relay.AwaitRev.
	AwaitRev func(ctx context.Context, rev int64) error
}

// Forward relays r (with body, or none when nil) to the leader, copying the
// request headers named. forwarded is false, and nothing written, when
// there is nothing to forward to (see Leader). err is set, and nothing
// written, when the leader did not answer; the caller answers both cases in
// its own error shape (503 not_leader with Retry-After).
func (f Forwarder) Forward(w http.ResponseWriter, r *http.Request, body []byte, headers []string) (leader string, forwarded bool, err error) {
	addr, ok := f.Leader(r)
	if !ok {
		return "", false, nil
	}
	return addr.Name, true, f.To(w, r, addr, body, headers)
}

// Leader finds the leader to forward r to. ok is false when there is none:
// no cluster, a request already forwarded once, no leader, or this replica
// named as leader.
func (f Forwarder) Leader(r *http.Request) (addr apitypes.ReplicaAddr, ok bool) {
	if f.Cluster == nil || r.Header.Get(ForwardedHeader) != "" {
		return addr, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), LeaderTimeout)
	addr, ok, err := f.Cluster.LeaderAddr(ctx)
	cancel()
	if err != nil || !ok || addr.APIURL == "" || addr.Name == f.Node {
		return apitypes.ReplicaAddr{}, false
	}
	return addr, true
}

// To relays r to the leader at addr and copies its answer to w; an error
// means the leader did not answer and nothing was written.
func (f Forwarder) To(w http.ResponseWriter, r *http.Request, addr apitypes.ReplicaAddr, body []byte, headers []string) error {
	return Relay{
		Client: f.Client, To: addr.APIURL, From: f.Node, Token: f.Token,
		Timeout:  f.Timeout,
		Headers:  headers,
		Set:      map[string]string{LeaderHeader: addr.Name},
		AwaitRev: f.AwaitRev,
	}.Do(w, r, body)
}
