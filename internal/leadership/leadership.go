// Package leadership campaigns for the scheduler's leadership through etcd
// (concurrency.Session + Election) and hands the winner a fencing token.
//
// A single node campaigns too, so nothing changes when replicas are added:
// the token guards every write either way.
package leadership

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/orion-sched/orion/internal/etcdlog"
)

// Term is one tenure as leader. It ends when Done is closed (the session's
// lease expired or was revoked) or when Resign is called.
type Term struct {
	Fence    etcdlog.Fence
	Lease    clientv3.LeaseID
	Won      time.Time
	session  *concurrency.Session
	election *concurrency.Election
}

// Done is closed when the term is over: the lease is gone, so the fence no
// longer holds and every further write will be rejected.
func (t *Term) Done() <-chan struct{} { return t.session.Done() }

// Resign gives leadership up at once so another replica can win without
// waiting for the lease to expire, then closes the session.
func (t *Term) Resign(ctx context.Context) error {
	err := t.election.Resign(ctx)
	// Whatever Resign answered, revoke the lease: the key goes with it.
	if cerr := t.session.Close(); err == nil {
		err = cerr
	}
	return err
}

// Abandon ends the term without resigning or revoking, as a crash would: the
// lease is left to expire. Used by demos that simulate a crashed leader.
func (t *Term) Abandon() { t.session.Orphan() }

// Campaign blocks until this node is the leader or ctx ends. value is what
// `etcdctl elect -l` prints for the leader (the node's name).
func Campaign(ctx context.Context, cli *clientv3.Client, value string, ttl time.Duration) (*Term, error) {
	secs := int(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(secs), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("leadership: session: %w", err)
	}
	election := concurrency.NewElection(session, etcdlog.ElectionPrefix)
	if err := election.Campaign(ctx, value); err != nil {
		session.Close()
		return nil, fmt.Errorf("leadership: campaign: %w", err)
	}
	// Campaign can return after the session died (etcd issue 19597): make
	// sure the lease is alive and our key still exists before acting on it.
	select {
	case <-session.Done():
		return nil, errors.New("leadership: session ended while campaigning")
	default:
	}
	key := election.Key()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		session.Close()
		return nil, fmt.Errorf("leadership: confirm key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(session.Lease()) {
		session.Close()
		return nil, errors.New("leadership: election key vanished after campaign")
	}
	return &Term{
		Fence:    etcdlog.Fence{Key: key, Rev: election.Rev()},
		Lease:    session.Lease(),
		Won:      time.Now(),
		session:  session,
		election: election,
	}, nil
}
