package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
)

// Session is a replica's lease: its registration and its election key hang
// on it, so both vanish when the process dies (after the TTL) or when the
// lease is revoked.
type Session interface {
	// Done is closed when the lease is gone (expired, revoked, or Close).
	Done() <-chan struct{}
	// Close revokes the lease: registration and candidacy go at once.
	Close() error
	// Orphan stops keeping the lease alive without revoking it, as a crash
	// would: it expires after its TTL.
	Orphan()
	// Release revokes the lease of a session whose keep-alives have given
	// up (Done closed): etcd extends every lease across its own leader
	// changes, so after a quorum loss the abandoned lease, and the election
	// key on it, would outlive the outage by a TTL and hold every candidate
	// back. One attempt, bounded by ctx; a lease already gone is success.
	Release(ctx context.Context) error
}

// Term is one tenure as leader, won by Campaign.
type Term interface {
	// Fence guards every write of the term (invariant I3).
	Fence() Fence
	// Won is when the election returned.
	Won() time.Time
	// Done is closed when the term is over: the lease is gone, so the fence
	// no longer holds and every further write will be rejected.
	Done() <-chan struct{}
	// Resign gives leadership up at once, so another replica wins without
	// waiting for the lease to expire. The session stays open.
	Resign(ctx context.Context) error
	// Elected is what etcd held when the election was decided.
	Elected() Elected
}

// Elected is what etcd held when an election was decided.
type Elected struct {
	// Rev is the revision of the read that found no older candidate: every
	// write of the terms before (fenced on keys already gone by then)
	// precedes it, so a follower that has applied through Rev may lead.
	Rev int64
	// Prev is the term record of the term before; nil when there is none.
	Prev *TermRecord
}

// WatchEvent is one response of the log watch, decoded.
type WatchEvent struct {
	Entries []core.Entry // log entries, each with its revision, in order
	Bad     []error      // values that did not decode (skipped, reported)
	// MaxRev is the highest revision among the response's events, log
	// entries or not (election and registry keys move etcd's revision too).
	MaxRev int64
	// HeaderRev is etcd's revision when it sent the response.
	HeaderRev int64
	// Progress marks a progress notification: the log holds nothing more
	// through HeaderRev.
	Progress bool
	// Compacted is set when the watch's start revision was compacted away:
	// the follower must re-read everything (Load) and watch on from there.
	Compacted  bool
	CompactRev int64
	// Err ends the watch for another reason; the channel closes after it.
	Err error
}

// Etcd is the store on a real etcd cluster: what the scheduling engine reads
// and writes, through one client.
type Etcd struct {
	cli    *clientv3.Client
	commit clientv3.KV // what the leader's transactions go through: cli's, or a Route's
	w      *Writer     // the current term's
	// knownLeader is the cluster view's leader (KnowLeaderFrom), or nil.
	knownLeader func() (Leader, bool)
	// OnSweep, when set, is told what each term's sweep of orphaned chunks
	// deleted (sweepChunks). Set it before the engine starts.
	OnSweep func(deleted int, err error)
	// guard keeps the leader's writes short of etcd's quota (GuardWith).
	guard *SpaceGauge

	// Set by Dial: the store owns cli and route; tls and dialMember are
	// the client's settings, for what reaches single members.
	owned      bool
	route      *Route
	tls        *tls.Config
	dialMember func(endpoint string) (*clientv3.Client, error)
}

// GuardWith has every fenced write of the leader (the log's transactions,
// schedules and their cursors) checked by g before it is sent, and counted
// in it once committed (space.go). Call it before the engine starts.
func (s *Etcd) GuardWith(g *SpaceGauge) { s.guard = g }

// NewEtcd returns the store on cli. The caller keeps ownership of cli. A
// member it dials on its own (DialMember) gets cli's endpoints' defaults:
// no TLS, no credentials; Dial's store dials with its client's settings.
func NewEtcd(cli *clientv3.Client) *Etcd {
	return &Etcd{cli: cli, commit: cli.KV, dialMember: func(endpoint string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	}}
}

// CommitThrough sends the leader's transactions through kv (a Route's KV)
// from the next term on. Call it before the engine starts.
func (s *Etcd) CommitThrough(kv clientv3.KV) { s.commit = kv }

// Client is the underlying etcd client, for tests and the store's own
// helpers: every other package asks the store.
func (s *Etcd) Client() *clientv3.Client { return s.cli }

// Load reads every DAG and task record at one revision (Load).
func (s *Etcd) Load(ctx context.Context) (*Snapshot, error) { return Load(ctx, s.cli.KV) }

// Watch follows the whole /orion/v1/ prefix from revision from, so that
// election and registry changes also show how far etcd has gone. The
// channel closes when ctx ends or after an event with Err or Compacted set.
func (s *Etcd) Watch(ctx context.Context, from int64) <-chan WatchEvent {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	in := s.cli.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	out := make(chan WatchEvent, 16)
	go func() {
		defer close(out)
		defer cancel()
		specs := newKnownSpecs()
		specs.read, specs.ctx = chunkReader(s.cli.KV, DefaultLimits), wctx
		for wr := range in {
			ev := decodeWatch(wr, specs)
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Err != nil || ev.Compacted {
				return
			}
		}
	}()
	return out
}

func decodeWatch(wr clientv3.WatchResponse, specs *knownSpecs) WatchEvent {
	ev := WatchEvent{HeaderRev: wr.Header.Revision, Progress: wr.IsProgressNotify()}
	if err := wr.Err(); err != nil || wr.Canceled {
		if wr.CompactRevision > 0 || errors.Is(err, rpctypes.ErrCompacted) {
			ev.Compacted, ev.CompactRev = true, wr.CompactRevision
			return ev
		}
		if err == nil {
			err = errors.New("watch cancelled")
		}
		ev.Err = err
		return ev
	}
	for _, e := range wr.Events {
		ev.MaxRev = max(ev.MaxRev, e.Kv.ModRevision)
		en, ok, err := specs.decodeEvent(e)
		var cre *chunkReadError
		switch {
		case errors.As(err, &cre):
			// The response is dropped whole: the follower watches again
			// from what it applied (or reloads, if that was compacted).
			out := WatchEvent{HeaderRev: wr.Header.Revision, Err: err}
			if errors.Is(err, rpctypes.ErrCompacted) {
				out.Err, out.Compacted = nil, true
			}
			return out
		case err != nil:
			ev.Bad = append(ev.Bad, err)
		case ok:
			ev.Entries = append(ev.Entries, en)
		}
	}
	return ev
}

// RequestProgress asks etcd for a progress notification on the watches of
// this client, so a follower learns that nothing it applies lies between
// its last event and etcd's revision.
func (s *Etcd) RequestProgress(ctx context.Context) error {
	return s.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
}

// OpenSession opens a session with the given TTL and registers the replica
// on it (/orion/v1/replicas/<name>).
func (s *Etcd) OpenSession(ctx context.Context, ttl time.Duration, reg ReplicaRecord) (Session, error) {
	sess, err := NewSession(ctx, s.cli, ttl)
	if err != nil {
		return nil, err
	}
	rec, _ := json.Marshal(reg)
	pctx, cancel := context.WithTimeout(ctx, SessionOpenTimeout)
	defer cancel()
	if _, err := s.cli.Put(pctx, ReplicaPrefix+reg.Name, string(rec), clientv3.WithLease(sess.Lease())); err != nil {
		_ = sess.Close()
		return nil, err
	}
	return etcdSession{sess}, nil
}

type etcdSession struct{ *LeaseSession }

func (s etcdSession) Release(ctx context.Context) error {
	_, err := s.Client().Revoke(ctx, s.Lease())
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// Campaign blocks until this replica leads on session or ctx ends (Campaign).
func (s *Etcd) Campaign(ctx context.Context, session Session, name string) (Term, error) {
	es, ok := session.(etcdSession)
	if !ok {
		return nil, errors.New("store: a session of another store")
	}
	return Campaign(ctx, es.LeaseSession, name)
}

// Begin takes the place of entries in the leader's chain of transactions,
// fenced on fence, after every batch begun before (Writer.Begin): the
// returned commit may be sent while earlier ones are in flight. A term
// record, when given, goes first into the first transaction: the term's
// first write.
func (s *Etcd) Begin(fence Fence, entries []core.Entry, lim Limits, term *TermRecord) PendingCommit {
	var extra []clientv3.Op
	if term != nil {
		rec, _ := json.Marshal(term)
		extra = append(extra, clientv3.OpPut(LeaderKey, string(rec)))
		// The term's first write: chunks a leader before it left without
		// their head are removed now, beside the term's work (chunks.go).
		go s.sweepChunks(fence)
	}
	if s.w == nil || s.w.Fence() != fence {
		s.w = NewWriter(s.commit, fence)
		s.w.guard = s.guard
	}
	return etcdPending{p: s.w.Begin(entries, lim, extra...), cli: s.cli}
}

// PendingCommit is a batch begun and not yet committed.
type PendingCommit interface {
	// Commit sends the batch once its predecessors are sent, and reports
	// the revision of each entry committed (a prefix, on an error).
	Commit(ctx context.Context) (Committed, error)
}

type etcdPending struct {
	p   *Pending
	cli *clientv3.Client
}

func (e etcdPending) Commit(ctx context.Context) (Committed, error) {
	res, err := e.p.Commit(ctx)
	return res, describeNoSpace(ctx, e.cli, err)
}

// Alarms lists etcd's raised alarms (Alarms).
func (s *Etcd) Alarms(ctx context.Context) ([]Alarm, error) { return Alarms(ctx, s.cli) }

// CurrentLeader reads who leads (CurrentLeader).
func (s *Etcd) CurrentLeader(ctx context.Context) (Leader, bool, error) {
	return CurrentLeader(ctx, s.cli.KV)
}

// Depose revokes the lease of the leader named suspect if it still leads:
// straight away when the cluster view given to KnowLeaderFrom names it the
// leader (DeposeKnown), after reading the election otherwise (Depose).
func (s *Etcd) Depose(ctx context.Context, suspect string) (bool, error) {
	if s.knownLeader != nil {
		if l, ok := s.knownLeader(); ok {
			return DeposeKnown(ctx, s.cli, suspect, l)
		}
	}
	return Depose(ctx, s.cli, suspect)
}

// KnowLeaderFrom gives Depose the leader as this replica's cluster view
// last saw it (ok false: it knows none). Call it before the engine starts.
func (s *Etcd) KnowLeaderFrom(known func() (Leader, bool)) { s.knownLeader = known }

// sweepChunks removes the chunks earlier terms left without a head
// (SweepOrphanChunks), once, at the start of the term fenced by fence. A
// failure (the term ended, etcd did not answer) leaves them to the next
// term: they are never loaded meanwhile.
func (s *Etcd) sweepChunks(fence Fence) {
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	n, err := SweepOrphanChunks(ctx, s.commit, fence)
	if s.OnSweep != nil {
		s.OnSweep(n, err)
	}
}
