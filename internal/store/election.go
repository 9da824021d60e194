package store

// The election: replicas campaign for the scheduler's leadership through
// etcd (concurrency.Session + Election) and the winner gets a fencing token.
// A single node campaigns too, so nothing changes when replicas are added:
// the token guards every write either way.

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// NewSession opens a session: a lease kept alive while this process lives.
// The replica's registration and its election key hang on it, so both vanish
// when the process dies (after the TTL) or when the lease is revoked.
func NewSession(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*concurrency.Session, error) {
	secs := int(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	// The lease is granted with a bound (an etcd without quorum would hold
	// the grant forever); ctx is the session's life (its keep-alives).
	gctx, cancel := context.WithTimeout(ctx, SessionOpenTimeout)
	lease, err := cli.Grant(gctx, int64(secs))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("leadership: session: %w", err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(secs), concurrency.WithLease(lease.ID), concurrency.WithContext(ctx))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SessionOpenTimeout)
		_, _ = cli.Revoke(rctx, lease.ID)
		cancel()
		return nil, fmt.Errorf("leadership: session: %w", err)
	}
	return s, nil
}

// SessionOpenTimeout bounds each request of opening a session (the lease
// grant, the registration).
const SessionOpenTimeout = 5 * time.Second

// etcdTerm is a Term won through a concurrency.Election.
type etcdTerm struct {
	fence    Fence
	won      time.Time
	session  *concurrency.Session
	election *concurrency.Election
}

func (t *etcdTerm) Fence() Fence                     { return t.fence }
func (t *etcdTerm) Won() time.Time                   { return t.won }
func (t *etcdTerm) Done() <-chan struct{}            { return t.session.Done() }
func (t *etcdTerm) Resign(ctx context.Context) error { return t.election.Resign(ctx) }

// Campaign blocks until this node is the leader or ctx ends. value is what
// `etcdctl elect -l` prints for the leader (the node's name).
func Campaign(ctx context.Context, session *concurrency.Session, value string) (Term, error) {
	election := concurrency.NewElection(session, ElectionPrefix)
	if err := election.Campaign(ctx, value); err != nil {
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
	resp, err := session.Client().Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("leadership: confirm key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(session.Lease()) {
		return nil, errors.New("leadership: election key vanished after campaign")
	}
	return &etcdTerm{
		fence:    Fence{Key: key, Rev: election.Rev()},
		won:      time.Now(),
		session:  session,
		election: election,
	}, nil
}

// Leader is the current leader as etcd sees it: the election key with the
// lowest create revision.
type Leader struct {
	Name  string
	Key   string
	Lease clientv3.LeaseID
	Rev   int64
}

// CurrentLeader reads who leads; ok is false when nobody campaigns.
func CurrentLeader(ctx context.Context, kv clientv3.KV) (Leader, bool, error) {
	resp, err := kv.Get(ctx, ElectionPrefix+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return Leader{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, false, nil
	}
	kv0 := resp.Kvs[0]
	return Leader{Name: string(kv0.Value), Key: string(kv0.Key), Lease: clientv3.LeaseID(kv0.Lease), Rev: kv0.CreateRevision}, true, nil
}

// Depose revokes the lease of the leader named suspect, if it still leads:
// its election key (and its registration) vanish at once and the next
// candidate's pending Campaign returns. Used when a standby sees the leader's
// stream drop. A false alarm costs a leadership change, never a double
// write: every write of the deposed leader is fenced on the key revoked here.
func Depose(ctx context.Context, cli *clientv3.Client, suspect string) (bool, error) {
	l, ok, err := CurrentLeader(ctx, cli)
	if err != nil || !ok || l.Name != suspect {
		return false, err
	}
	if _, err := cli.Revoke(ctx, l.Lease); err != nil {
		return false, fmt.Errorf("leadership: revoke %s's lease: %w", suspect, err)
	}
	return true, nil
}
