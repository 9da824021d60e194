package store

// The election: replicas campaign for the scheduler's leadership through
// etcd (a lease kept alive by LeaseSession, concurrency.Election's keys)
// and the winner gets a fencing token.
// A single node campaigns too, so nothing changes when replicas are added:
// the token guards every write either way.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SessionOpenTimeout bounds each request of opening a session (the lease
// grant, the registration).
const SessionOpenTimeout = 5 * time.Second

// etcdTerm is a Term won by Campaign.
type etcdTerm struct {
	fence   Fence
	won     time.Time
	session leaseHolder
	elected Elected
}

func (t *etcdTerm) Fence() Fence          { return t.fence }
func (t *etcdTerm) Won() time.Time        { return t.won }
func (t *etcdTerm) Done() <-chan struct{} { return t.session.Done() }
func (t *etcdTerm) Elected() Elected      { return t.elected }

// Resign deletes the term's election key if it is still the one won
// (concurrency.Election's Resign): the next candidate's Campaign returns.
func (t *etcdTerm) Resign(ctx context.Context) error {
	_, err := t.session.Client().Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(t.fence.Key), "=", t.fence.Rev)).
		Then(clientv3.OpDelete(t.fence.Key)).Commit()
	return err
}

// Campaign blocks until this node is the leader, ctx ends or the session
// does. value is what `etcdctl elect -l` prints for the leader (the node's
// name).
//
// The keys and their order are concurrency.Election's (one key per lease
// under ElectionPrefix, the oldest leads), so etcdctl and Resign work as
// with it. The wait differs: the read that finds no older key also reads
// this node's own key and the term record, in one transaction. That read
// decides the election, confirms the key is still ours (Campaign could
// otherwise return after the session died: etcd issue 19597), and gives the
// new leader the term before and the revision to catch up to, where
// concurrency.Election would take three reads in a row, each a round trip
// to a quorum on the takeover's path.
func Campaign(ctx context.Context, session leaseHolder, value string) (Term, error) {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done(): // a key on a lease that is gone cannot lead
			cancel()
		case <-ctx.Done():
		}
	}()
	cli := session.Client()
	key := fmt.Sprintf("%s/%x", ElectionPrefix, session.Lease()) // concurrency.Election's
	// A campaign given up leaves the line, as concurrency.Election's does:
	// the key would otherwise stay on a session that lives on (a replica
	// that retires goes on serving while it drains) and hold back every
	// younger candidate once the leader goes. Also when its put failed: it
	// may have been applied. The key is the session's, so this relies on no
	// other campaign running on the same session (the engine campaigns
	// again only on a new session, or after this one returned).
	leave := func(err error) (Term, error) {
		if parent.Err() != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), leaveTimeout)
			_, _ = cli.Txn(rctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", session.Lease())).
				Then(clientv3.OpDelete(key)).Commit()
			rcancel()
		}
		return nil, fmt.Errorf("leadership: campaign: %w", err)
	}
	rev, err := electionKey(ctx, cli, key, session.Lease(), value)
	if err != nil {
		return leave(err)
	}
	for {
		resp, err := cli.Txn(ctx).Then(
			clientv3.OpGet(ElectionPrefix+"/", clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
			clientv3.OpGet(key),
			clientv3.OpGet(LeaderKey),
		).Commit()
		if err != nil {
			return leave(err)
		}
		if ahead := resp.Responses[0].GetResponseRange().Kvs; len(ahead) > 0 {
			// Wait for the newest older key to go, then look again: an
			// older one may remain (the order is by creation, and keys go
			// in any order).
			if err := waitDeleted(ctx, cli, string(ahead[0].Key), resp.Header.Revision); err != nil {
				return leave(err)
			}
			continue
		}
		mine := resp.Responses[1].GetResponseRange().Kvs
		if len(mine) == 0 || mine[0].Lease != int64(session.Lease()) || mine[0].CreateRevision != rev {
			return nil, errors.New("leadership: election key vanished while campaigning")
		}
		el := Elected{Rev: resp.Header.Revision}
		if r, err := decodeTermRecord(resp.Responses[2].GetResponseRange().Kvs); err == nil {
			el.Prev = r
		}
		return &etcdTerm{fence: Fence{Key: key, Rev: rev}, won: time.Now(), session: session, elected: el}, nil
	}
}

// leaveTimeout bounds the deletion of a given-up campaign's key.
const leaveTimeout = time.Second

// electionKey puts the lease's election key, or finds it from an earlier
// campaign on the same lease (with value again), and returns it with its
// create revision: its place in the line.
func electionKey(ctx context.Context, cli *clientv3.Client, key string, lease clientv3.LeaseID, value string) (int64, error) {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	kv := resp.Responses[0].GetResponseRange().Kvs[0]
	if string(kv.Value) != value {
		// The key keeps its place; only its value changes.
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision)).
			Then(clientv3.OpPut(key, value, clientv3.WithIgnoreLease())).Commit()
		if err != nil {
			return 0, err
		}
		if !r.Succeeded {
			return 0, errors.New("election key vanished while campaigning")
		}
	}
	return kv.CreateRevision, nil
}

// waitDeleted returns once key, which existed at rev, is deleted, or the
// history since rev is compacted (the caller reads again). A watch that
// ends otherwise (its member lost the etcd leader) is an error: the caller
// campaigns again after a pause instead of reading in a loop.
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if wr.CompactRevision != 0 {
				return nil
			}
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
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
	return revokeLeader(ctx, cli, l)
}

// revokeLeader revokes l's lease: its election key goes with it.
func revokeLeader(ctx context.Context, cli *clientv3.Client, l Leader) (bool, error) {
	if _, err := cli.Revoke(ctx, l.Lease); err != nil {
		return false, fmt.Errorf("leadership: revoke %s's lease: %w", l.Name, err)
	}
	return true, nil
}

// DeposeKnown is Depose for a leader this replica already knows, from the
// cluster view it follows: it revokes that leader's lease without reading
// the election first, one etcd request instead of two on the takeover
// path. Revoking a lease the view holds from before is harmless: if it
// is gone (etcd: lease not found), Depose reads who leads and decides; if
// it is an old lease of a process since restarted, its keys are gone
// already or go with the dead process anyway.
func DeposeKnown(ctx context.Context, cli *clientv3.Client, suspect string, known Leader) (bool, error) {
	if known.Name != suspect {
		return Depose(ctx, cli, suspect)
	}
	ok, err := revokeLeader(ctx, cli, known)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return Depose(ctx, cli, suspect)
	}
	return ok, err
}
