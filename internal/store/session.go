package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaseSession is a lease this process keeps alive: the replica's
// registration and its election key hang on it. It replaces
// concurrency.Session, whose keep-alives (clientv3's) are scheduled by a
// loop that wakes every 500 ms: due TTL/3 after each answer, a renewal
// went out up to 833 ms after the last, which with Orion's 1 s TTL left
// 167 ms for the request, etcd and any pause of this process. A burst of
// work on a 2-core node (a thousand event streams filling their sockets, a
// GC cycle, another process) took longer than that, and the leader lost
// its lease with nothing wrong. LeaseSession renews every TTL/4 from a
// goroutine of its own, on the clock, each renewal bounded by the time the
// lease has left: 750 ms of slack.
type LeaseSession struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	donec  chan struct{}
}

// leaseHolder is what Campaign needs of a session (a LeaseSession, or a
// concurrency.Session).
type leaseHolder interface {
	Client() *clientv3.Client
	Lease() clientv3.LeaseID
	Done() <-chan struct{}
}

// NewSession opens a session: a lease kept alive while this process lives,
// or until ctx ends. The lease is granted with a bound (an etcd without
// quorum would hold the grant forever).
func NewSession(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*LeaseSession, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	granted := time.Now()
	gctx, cancel := context.WithTimeout(ctx, SessionOpenTimeout)
	lease, err := cli.Grant(gctx, secs)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("leadership: session: %w", err)
	}
	s := &LeaseSession{cli: cli, id: lease.ID, ttl: time.Duration(lease.TTL) * time.Second, donec: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(ctx)
	go s.keepAlive(granted.Add(s.ttl))
	return s, nil
}

// keepAlive renews the lease every TTL/4 until it cannot tell that the
// lease lives: etcd answers that it is gone, or no renewal was answered
// before the lease would have expired (deadline, counted from when each
// answered renewal was sent, so never later than etcd's own expiry). Then
// Done is closed.
//
// Renewals go out on the clock, not one after the answer to the other: a
// renewal slowed down (a busy etcd member forwarding it to its leader, a
// node short of CPU) does not hold back the next, which may get through
// first. At most maxRenewals are in flight, each bounded by the deadline.
func (s *LeaseSession) keepAlive(deadline time.Time) {
	defer close(s.donec)
	defer s.cancel()
	type answer struct {
		sent time.Time
		ttl  int64
		err  error
	}
	answers := make(chan answer, maxRenewals)
	inFlight := 0
	tick := time.NewTicker(s.ttl / 4)
	defer tick.Stop()
	expiry := time.NewTimer(time.Until(deadline))
	defer expiry.Stop()
	for {
		select {
		case <-tick.C:
			if inFlight == maxRenewals {
				continue
			}
			inFlight++
			sent := time.Now()
			kctx, cancel := context.WithDeadline(s.ctx, deadline)
			go func() {
				defer cancel()
				resp, err := s.cli.KeepAliveOnce(kctx, s.id)
				a := answer{sent: sent, err: err}
				if err == nil {
					a.ttl = resp.TTL
				}
				answers <- a
			}()
		case a := <-answers:
			inFlight--
			switch {
			case a.err == nil && a.ttl > 0:
				if d := a.sent.Add(time.Duration(a.ttl) * time.Second); d.After(deadline) {
					deadline = d
					expiry.Reset(time.Until(deadline))
				}
			case errors.Is(a.err, rpctypes.ErrLeaseNotFound):
				return // revoked or expired
			}
			// A failed renewal (no etcd leader, a member down) is tried
			// again at the next tick, for as long as the lease may live.
		case <-expiry.C:
			if time.Now().Before(deadline) {
				expiry.Reset(time.Until(deadline))
				continue
			}
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// maxRenewals bounds a session's renewals in flight at once.
const maxRenewals = 4

// Client returns the etcd client the lease was granted with.
func (s *LeaseSession) Client() *clientv3.Client { return s.cli }

// Lease returns the lease's id.
func (s *LeaseSession) Lease() clientv3.LeaseID { return s.id }

// Done is closed once the lease is, or may be, gone (or Orphan or Close
// was called).
func (s *LeaseSession) Done() <-chan struct{} { return s.donec }

// Orphan stops keeping the lease alive without revoking it, as a crash
// would: it expires after its TTL.
func (s *LeaseSession) Orphan() {
	s.cancel()
	<-s.donec
}

// Close stops the keep-alives and revokes the lease: everything on it goes
// at once.
func (s *LeaseSession) Close() error {
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.ttl)
	defer cancel()
	_, err := s.cli.Revoke(ctx, s.id)
	return err
}
