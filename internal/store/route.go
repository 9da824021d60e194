package store

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// Route carries the leader's transactions to etcd's raft leader through a
// connection of its own, when the leader is among the endpoints; every other
// request (reads, watches, leases) stays on the balanced client.
//
// Why: the balanced client sends each request to the next endpoint in turn.
// A transaction through a follower costs one more hop (the follower
// forwards the proposal to the raft leader), and two transactions in flight
// through two members reach the raft leader in either order: the second,
// proposed first, is refused by the commit marker's compare and sent again
// (see Writer). Through one connection to the raft leader they are proposed
// in the order they were sent, so pipelined commits pay.
//
// Order is a matter of speed only: the marker chain keeps the log correct
// whichever way a transaction goes. So the Route never waits for the
// leader: a transaction goes through the balanced client while the raft
// leader is unknown, its connection is not up, or the last transaction
// through it failed; a look-up runs in the background meanwhile, and again
// whenever a response shows a new raft term (a new election, maybe a new
// leader).
type Route struct {
	all       *clientv3.Client
	endpoints []string
	dial      func(endpoint string) (*clientv3.Client, error)
	log       *zap.Logger

	mu         sync.Mutex
	conns      map[string]*clientv3.Client // dialed endpoints
	pinned     *clientv3.Client            // the raft leader's, nil while unknown
	pinnedEP   string
	term       uint64 // raft term when pinned
	refreshing bool
	closed     bool
	ctx        context.Context
	cancel     context.CancelFunc
}

// routeLookupTimeout bounds the status request to one member in a look-up
// of the raft leader.
const routeLookupTimeout = 500 * time.Millisecond

// NewRoute returns the route for all's endpoints; dial opens a client to one
// of them with all's settings (TLS, auth). With fewer than two endpoints
// every request takes one connection already, and the Route is all's KV.
func NewRoute(all *clientv3.Client, endpoints []string, dial func(string) (*clientv3.Client, error), log *zap.Logger) *Route {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Route{all: all, endpoints: endpoints, dial: dial, log: log, conns: map[string]*clientv3.Client{}, ctx: ctx, cancel: cancel}
	r.lookupLocked()
	return r
}

// KV is what the leader's Writer commits through: Txn goes to the raft
// leader when known; Get, Put, Delete and Do take the balanced client. With
// one endpoint (the embedded member) it is the client's own KV: every
// transaction takes that one connection already.
func (r *Route) KV() clientv3.KV {
	if len(r.endpoints) < 2 {
		return r.all.KV
	}
	return routedKV{KV: r.all.KV, r: r}
}

// Pinned names the endpoint transactions go to, "" when they take the
// balanced client.
func (r *Route) Pinned() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pinnedEP
}

// Close closes the connections the Route opened (not all's).
func (r *Route) Close() {
	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.conns, r.pinned, r.pinnedEP = nil, nil, ""
	r.mu.Unlock()
	r.cancel()
	for _, c := range conns {
		_ = c.Close()
	}
}

// pick returns the client for the next transaction and the raft term it
// was pinned at (0 for the balanced client).
//
// Only a connection that is up takes a transaction: one that is not would
// hold it (the client waits for a connection) while the balanced client
// has others. That matters after a node loss: the member that died with
// the leader replica was etcd's raft leader, so it is the one a standby's
// route pinned, and gRPC shows its lost connection as idle, not failed,
// until asked for it; the new leader's first write waited a whole attempt
// (250 ms) on it.
func (r *Route) pick() (*clientv3.Client, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pinned == nil {
		r.lookupLocked()
		return r.all, 0
	}
	conn := r.pinned.ActiveConnection()
	switch conn.GetState() {
	case connectivity.Ready:
		return r.pinned, r.term
	case connectivity.Idle:
		// Unused for long, or just lost: have it connect for the next
		// transaction (a dead member's then fails, and is dropped).
		conn.Connect()
	case connectivity.Connecting:
	default: // failed or closed
		r.pinned, r.pinnedEP = nil, ""
	}
	r.lookupLocked() // the raft leader may have moved with it
	return r.all, 0
}

// answered notes the outcome of a transaction sent through c, pinned at
// term: an error or a new raft term unpins it and starts a look-up.
func (r *Route) answered(c *clientv3.Client, term uint64, resp *clientv3.TxnResponse, err error) {
	if term == 0 {
		return
	}
	if err == nil && resp != nil && resp.Header != nil && resp.Header.RaftTerm == term {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pinned == c {
		r.pinned, r.pinnedEP = nil, ""
	}
	r.lookupLocked()
}

// lookupLocked starts a look-up of the raft leader unless one runs.
func (r *Route) lookupLocked() {
	if r.refreshing || r.closed || len(r.endpoints) < 2 {
		return
	}
	r.refreshing = true
	go r.lookup()
}

// lookup asks every endpoint for its status at once and pins the one that
// reports itself the raft leader.
func (r *Route) lookup() {
	type answer struct {
		ep   string
		term uint64
	}
	found := make(chan answer, len(r.endpoints))
	var wg sync.WaitGroup
	for _, ep := range r.endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.ctx, routeLookupTimeout)
			defer cancel()
			st, err := r.all.Status(ctx, ep)
			if err == nil && st.Header != nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				found <- answer{ep, st.Header.RaftTerm}
			}
		}()
	}
	wg.Wait()
	close(found)
	var best answer
	for a := range found { // two leaders answer only across an election: the later term wins
		if a.term > best.term {
			best = a
		}
	}
	var c *clientv3.Client
	if best.ep != "" {
		r.mu.Lock()
		c = r.conns[best.ep]
		r.mu.Unlock()
		if c == nil {
			var err error
			if c, err = r.dial(best.ep); err != nil {
				r.log.Debug("cannot connect to etcd's raft leader; transactions take every endpoint in turn",
					zap.String("endpoint", best.ep), zap.Error(err))
				c = nil
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshing = false
	if r.closed {
		if c != nil && r.conns[best.ep] != c {
			_ = c.Close()
		}
		return
	}
	if c == nil {
		return // the next transaction through the balanced client asks again
	}
	r.conns[best.ep] = c
	if r.pinnedEP != best.ep {
		r.log.Debug("transactions go to etcd's raft leader", zap.String("endpoint", best.ep), zap.Uint64("raft_term", best.term))
	}
	r.pinned, r.pinnedEP, r.term = c, best.ep, best.term
}

// routedKV is a KV whose transactions take the Route.
type routedKV struct {
	clientv3.KV
	r *Route
}

func (k routedKV) Txn(ctx context.Context) clientv3.Txn {
	c, term := k.r.pick()
	return &routedTxn{Txn: c.KV.Txn(ctx), r: k.r, c: c, term: term}
}

type routedTxn struct {
	clientv3.Txn
	r    *Route
	c    *clientv3.Client
	term uint64
}

func (t *routedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *routedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *routedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *routedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	t.r.answered(t.c, t.term, resp, err)
	return resp, err
}
