package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/orion-sched/orion/internal/core"
)

// Fence is the leader's fencing token: its election key and the revision that
// created it. A transaction guarded by it commits only while that key still
// exists unchanged, i.e. while this leader's term lasts (invariant I3).
type Fence struct {
	Key string
	Rev int64
}

func (f Fence) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev)
}

// ErrFenced means the leader's term is over: its write was rejected whole.
var ErrFenced = errors.New("store: fence lost: this node is no longer the leader")

// Limits bound one transaction. etcd refuses more than --max-txn-ops (128 by
// default) operations or --max-request-bytes (1.5 MiB) per request.
type Limits struct {
	MaxOps int
	// MaxBytes is the value bytes a batch collects before it starts another
	// transaction; a single larger record goes alone.
	MaxBytes int
	// MaxRequest is etcd's --max-request-bytes: no record may come close
	// (RecordLimit), since etcd refuses the whole transaction that carries
	// it.
	MaxRequest int
}

// DefaultLimits match etcd's defaults, leaving room for keys and framing.
var DefaultLimits = Limits{MaxOps: 128, MaxBytes: 1 << 20, MaxRequest: 3 << 19}

// recordOverhead is what a transaction adds to its largest value: the key
// (ids are at most 128 bytes each), the fence comparison, the leader's term
// record that a term's first transaction carries, and protobuf framing.
const recordOverhead = 4 << 10

// RecordLimit is the largest value a record may encode to.
func (l Limits) RecordLimit() int {
	req := l.MaxRequest
	if req <= 0 {
		req = DefaultLimits.MaxRequest
	}
	return req - recordOverhead
}

// TooLargeError is a record that etcd would refuse: nothing was sent.
type TooLargeError struct {
	DAG   string
	Size  int // the encoded value
	Limit int // RecordLimit
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("DAG %s encodes to %d bytes; one etcd request holds at most %d for a record "+
		"(etcd_max_request_bytes less %d for its key and framing)", e.DAG, e.Size, e.Limit, recordOverhead)
}

// CheckSize encodes e as Commit would and reports a *TooLargeError when its
// value does not fit one etcd request. Leaders call it before an entry joins
// a batch, so that one oversized record never fails the others committed
// with it.
func CheckSize(e *core.Entry, lim Limits) error {
	_, err := Measure(e, lim)
	return err
}

// Measure is CheckSize that also returns what e's puts cost against etcd's
// quota (space.go).
func Measure(e *core.Entry, lim Limits) (cost int64, err error) {
	ps, err := pieces(e)
	if err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.bytes > lim.RecordLimit() {
			return 0, &TooLargeError{DAG: e.DAG, Size: p.bytes, Limit: lim.RecordLimit()}
		}
		cost += opsCost(p.ops)
	}
	return cost, nil
}

// EntryOps is how many operations a transaction has for entries (and the
// term record): MaxOps less the commit marker every transaction carries.
func (l Limits) EntryOps() int { return max(1, l.MaxOps-1) }

// Committed reports the revision at which each entry was committed.
type Committed struct {
	Revs   []int64 // parallel to the entries given to Commit
	Txns   int     // transactions used
	Resent int     // transactions refused because they reached etcd before their predecessor, and sent again
	// Retried counts attempts sent again after etcd did not answer one in
	// time (a proposal lost with a raft leader, a dead member) or dropped
	// it: each cost the attempt's bound (250 ms, then doubled) or 10 ms.
	Retried int
}

// Commit writes entries in order, in as few fenced transactions as the limits
// allow (one, normally: the caller sizes batches). Entries keep their order;
// all entries of one transaction share its revision. On ErrFenced or another
// error, a prefix of the entries may have been committed: Revs holds the
// revisions of that prefix, so the caller can apply exactly what committed.
// A transaction refused for a full etcd (NOSPACE) returns a *NoSpaceError:
// that transaction applied nothing.
//
// extra operations (the leader's term record) go first into the first
// transaction. Commit is a one-off Writer (see Writer for what a
// transaction whose answer is lost costs).
func Commit(ctx context.Context, kv clientv3.KV, fence Fence, entries []core.Entry, lim Limits, extra ...clientv3.Op) (Committed, error) {
	return NewWriter(kv, fence).Commit(ctx, entries, lim, extra...)
}

// CommitKey holds the marker of the last transaction a leader committed
// ({"fence":<fence revision>,"seq":<sequence>}). Every transaction compares it with the
// marker it expects and sets its own, which makes a transaction safe to send
// again: see Writer.
const CommitKey = Prefix + "commit"

// Writer commits one leader's entries, in order, with up to several
// transactions in flight.
//
// A transaction whose answer is lost (etcd's leader died with the proposal,
// a connection broke, a deadline passed) would leave its outcome unknown,
// and the leader would have to re-read all of etcd to learn it. Instead each
// transaction also compares CommitKey with the marker the transaction
// before it wrote and sets a new one: sent again, it applies only if no
// earlier copy did, and when one did, the compare fails and the answer
// (CommitKey's value) says so, with the revision it committed at. So a
// transaction is sent again, with a growing deadline, until it is answered
// or ctx ends: an etcd leader change costs a commit one election, not a
// re-read.
//
// The same chain of markers orders transactions sent without waiting for
// the one before (Begin, then Commit from another goroutine): each can
// apply only after its predecessor did, whatever order etcd receives them
// in. One that arrives first is refused with the predecessor's predecessor
// marker in CommitKey, waits for the predecessor's outcome and is sent
// again; if the predecessor failed, so does it, unapplied.
type Writer struct {
	kv    clientv3.KV
	fence Fence
	guard *SpaceGauge // nil: no guard (space.go)

	mu    sync.Mutex
	base  string // CommitKey's value before the chain began (when known)
	known bool
	seq   uint64
	tail  *txnSlot // the transaction begun last
}

// txnSlot is one transaction of the chain.
type txnSlot struct {
	ops     []clientv3.Op
	marker  string // the marker it sets; "" when it puts nothing (see send)
	prev    *txnSlot
	done    chan struct{} // closed once err, rev and after are set
	err     error
	rev     int64
	after   string // CommitKey's value once it applied
	resent  bool   // refused for arriving before its predecessor applied, and sent again
	retried int    // attempts sent again after no answer, or a dropped proposal
	cost    int64  // what its puts cost against etcd's quota (counted when a guard is set)
}

func (t *txnSlot) finish(rev int64, after string, err error) {
	t.rev, t.after, t.err = rev, after, err
	t.prev = nil // the chain behind a finished transaction is not needed
	close(t.done)
}

// failed reports a finished transaction that did not apply (or whose
// outcome is unknown).
func (t *txnSlot) failed() bool {
	select {
	case <-t.done:
		return t.err != nil
	default:
		return false
	}
}

// PredecessorError fails a transaction because the one before it in the
// chain failed: it cannot have applied unless that one did. Err is the
// predecessor's error, so errors.Is sees through to it.
type PredecessorError struct{ Err error }

func (e *PredecessorError) Error() string {
	return "store: the transaction before this one failed: " + e.Err.Error()
}
func (e *PredecessorError) Unwrap() error { return e.Err }

// NewWriter returns a Writer for the leader holding fence. Its markers'
// sequence starts from the clock, so two Writers of one fence (a one-off
// Commit beside the leader's) never set the same marker.
func NewWriter(kv clientv3.KV, fence Fence) *Writer {
	return &Writer{kv: kv, fence: fence, seq: uint64(time.Now().UnixNano())}
}

// Fence is the fence the Writer commits under.
func (w *Writer) Fence() Fence { return w.fence }

// First bound of one attempt of a transaction; it doubles with each attempt.
// Commits take milliseconds, tens under load; an attempt that has not
// answered in a quarter of a second most likely lost its proposal with an
// etcd leader (its election takes about as long), and the next attempt goes
// to the new one. A slow attempt sent again costs one more request, never a
// second commit.
const firstAttempt = 250 * time.Millisecond

// Commit is the package-level Commit, on this Writer's fence and markers.
func (w *Writer) Commit(ctx context.Context, entries []core.Entry, lim Limits, extra ...clientv3.Op) (Committed, error) {
	return w.Begin(entries, lim, extra...).Commit(ctx)
}

// Pending is a batch begun and not yet committed: see Writer.Begin.
type Pending struct {
	w     *Writer
	slots []*txnSlot
	upto  []int // entries carried by slots[:i+1]
	n     int   // entries in all
	err   error // the batch could not be encoded: nothing was begun
}

// Begin takes its place in the chain for entries, split into as few
// transactions as the limits allow (one, normally: the caller sizes
// batches), after every transaction begun before. It does no I/O: Commit
// sends them, and may run while earlier batches are still in flight.
// extra operations (the leader's term record) go first into the first
// transaction.
func (w *Writer) Begin(entries []core.Entry, lim Limits, extra ...clientv3.Op) *Pending {
	p := &Pending{w: w, n: len(entries)}
	var groups [][]clientv3.Op
	ops := append([]clientv3.Op(nil), extra...)
	bytes := 0
	for i := range entries {
		ps, err := pieces(&entries[i])
		if err != nil {
			p.err = fmt.Errorf("store: encode %s/%s: %w", entries[i].DAG, entries[i].Task, err)
			return p
		}
		for _, pc := range ps {
			// A chunk goes in a transaction of its own (with the term
			// record, if it is the term's first).
			if len(ops) > len(extra)*b2i(len(groups) == 0) && (pc.alone || len(ops)+len(pc.ops) > lim.EntryOps() || bytes+pc.bytes > lim.MaxBytes) {
				groups, p.upto = append(groups, ops), append(p.upto, i)
				ops, bytes = nil, 0
			}
			ops = append(ops, pc.ops...)
			bytes += pc.bytes
			if pc.alone {
				groups, p.upto = append(groups, ops), append(p.upto, i)
				ops, bytes = nil, 0
			}
		}
	}
	if len(ops) > 0 {
		groups, p.upto = append(groups, ops), append(p.upto, len(entries))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range groups {
		prev := w.tail
		if prev != nil && prev.failed() {
			// The chain broke: start a new one from CommitKey's value in
			// etcd, read again.
			prev, w.known = nil, false
		}
		t := &txnSlot{ops: g, prev: prev, done: make(chan struct{})}
		// A transaction without puts (retention's deletes) carries no
		// marker: etcd at its quota (NOSPACE) refuses every transaction
		// that puts anything, a marker too, and accepts deletes, which is
		// how space comes back. Sent again it is harmless: the copy deletes
		// nothing, and the compare still holds only while no other leader
		// wrote.
		if slices.ContainsFunc(g, func(op clientv3.Op) bool { return op.IsPut() }) {
			w.seq++
			// A JSON object like every value under the prefix; encoded by
			// hand so the bytes, which the next transaction compares, never
			// vary.
			t.marker = fmt.Sprintf(`{"fence":%d,"seq":%d}`, w.fence.Rev, w.seq)
		}
		p.slots = append(p.slots, t)
		w.tail = t
	}
	return p
}

// Commit sends the batch's transactions in order, each after its
// predecessor in the chain has applied, and reports the revision each entry
// committed at. On an error a prefix of the entries may have committed:
// Revs holds the revisions of that prefix. A transaction refused for a full
// etcd (NOSPACE) returns a *NoSpaceError: it applied nothing, nor did any
// transaction after it.
func (p *Pending) Commit(ctx context.Context) (Committed, error) {
	out := Committed{Revs: make([]int64, 0, p.n)}
	if p.err != nil {
		return out, p.err
	}
	for i, t := range p.slots {
		rev, after, err := p.w.send(ctx, t)
		if t.resent {
			out.Resent++
		}
		out.Retried += t.retried
		if err != nil {
			// NOSPACE, too many operations and too many bytes refuse
			// the whole transaction before applying it: known outcomes,
			// unlike a timeout, so they get the store's own errors.
			err = mapRefused(err)
			t.finish(0, "", err)
			for _, rest := range p.slots[i+1:] {
				rest.finish(0, "", &PredecessorError{Err: err})
			}
			p.w.mu.Lock()
			p.w.known = false
			p.w.mu.Unlock()
			return out, err
		}
		t.finish(rev, after, nil)
		if p.w.guard != nil {
			p.w.guard.Wrote(t.cost)
		}
		out.Txns++
		from := 0
		if i > 0 {
			from = p.upto[i-1]
		}
		for j := from; j < p.upto[i]; j++ {
			out.Revs = append(out.Revs, rev)
		}
	}
	return out, nil
}

// expectAfter is CommitKey's value a transaction requires: the marker its
// predecessor sets (or, for one that sets none, what it left), or at the
// head of a chain what etcd holds, read once.
func (w *Writer) expectAfter(ctx context.Context, prev *txnSlot) (string, error) {
	switch {
	case prev != nil && prev.marker != "":
		return prev.marker, nil
	case prev != nil:
		return prev.after, nil // finished: send waited for it
	}
	w.mu.Lock()
	known, base := w.known, w.base
	w.mu.Unlock()
	if known {
		return base, nil
	}
	base, err := w.readMarker(ctx)
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	w.base, w.known = base, true
	w.mu.Unlock()
	return base, nil
}

// send commits t, sending it again while its outcome is unknown, and
// returns the revision it committed at and CommitKey's value after it.
func (w *Writer) send(ctx context.Context, t *txnSlot) (int64, string, error) {
	prev := t.prev
	if prev != nil && prev.marker == "" {
		// A predecessor that sets no marker cannot order what follows it:
		// wait for it.
		select {
		case <-prev.done:
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
	if prev != nil && prev.failed() {
		return 0, "", &PredecessorError{Err: prev.err}
	}
	if t.marker != "" && w.guard != nil {
		// Checked once, before the first attempt: refused by the guard,
		// nothing was sent, a known outcome like etcd's NOSPACE.
		t.cost = opsCost(t.ops) + PutCost(CommitKey, len(t.marker))
		if err := w.guard.Check(t.cost); err != nil {
			return 0, "", err
		}
	}
	for attempt := firstAttempt; ; attempt *= 2 {
		expect, err := w.expectAfter(ctx, prev)
		if err != nil {
			return 0, "", err
		}
		after := t.marker
		if after == "" {
			after = expect
		}
		cmp := clientv3.Compare(clientv3.Value(CommitKey), "=", expect)
		if expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(CommitKey), "=", 0)
		}
		then := t.ops[:len(t.ops):len(t.ops)]
		if t.marker != "" {
			then = append(then, clientv3.OpPut(CommitKey, t.marker))
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		resp, err := w.kv.Txn(actx).If(w.fence.cmp(), cmp).Then(then...).Else(clientv3.OpGet(CommitKey)).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				return resp.Header.Revision, after, nil
			}
			var cur string
			var rev int64
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
				cur, rev = string(rr.Kvs[0].Value), rr.Kvs[0].ModRevision
			}
			switch {
			case t.marker != "" && cur == t.marker: // an earlier attempt committed
				return rev, after, nil
			case cur == expect: // the marker is as expected: the fence failed
				return 0, "", ErrFenced
			case prev != nil && !t.resent:
				// Sent before its predecessor applied (CommitKey still
				// held an older value when etcd answered): wait for it,
				// then go again, at once and with the first bound. After
				// that a refusal is an answer.
				select {
				case <-prev.done:
				case <-ctx.Done():
					return 0, "", ctx.Err()
				}
				if prev.err != nil {
					return 0, "", &PredecessorError{Err: prev.err}
				}
				t.resent = true
				attempt = firstAttempt / 2
				continue
			case t.marker != "" && w.later(cur, t.marker):
				// An earlier attempt committed and so did the transaction
				// behind it (both answers lost, as when etcd's leader dies
				// with them): CommitKey's history says at which revision.
				r, err := w.revisionOf(ctx, t.marker, rev)
				if err != nil {
					return 0, "", err
				}
				return r, after, nil
			default: // another leader wrote since
				return 0, "", ErrFenced
			}
		}
		if ctx.Err() != nil {
			return 0, "", err
		}
		if proposalDropped(err) {
			if err := pause(ctx, droppedPause); err != nil {
				return 0, "", err
			}
			t.retried++
			continue
		}
		if !unknownOutcome(err) {
			return 0, "", err
		}
		t.retried++
	}
}

// proposalDropped reports etcd's raft refusing a proposal outright: while
// etcd's leader hands its leadership over (MoveLeader, which Orion's
// leader asks for to keep it off its own node, or a member stopping
// gracefully) it drops every proposal, and etcd answers "raft proposal
// dropped" (gRPC Unknown). Nothing was applied: the transaction goes
// again droppedPause later, once the new leader serves, instead of failing
// the commit (which made the leader re-read etcd).
func proposalDropped(err error) bool {
	return err != nil && strings.Contains(err.Error(), "raft proposal dropped")
}

// droppedPause spaces transactions sent again after a dropped proposal: a
// leadership transfer takes a few milliseconds, and each refusal comes at
// once.
const droppedPause = 10 * time.Millisecond

// pause waits d, or returns ctx's error if it ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// marker is a commit marker's content.
type marker struct {
	Fence int64  `json:"fence"`
	Seq   uint64 `json:"seq"`
}

func parseMarker(s string) (marker, bool) {
	var m marker
	return m, s != "" && json.Unmarshal([]byte(s), &m) == nil
}

// later reports whether cur is a marker this Writer set after mine.
func (w *Writer) later(cur, mine string) bool {
	c, ok1 := parseMarker(cur)
	m, ok2 := parseMarker(mine)
	return ok1 && ok2 && c.Fence == w.fence.Rev && m.Fence == w.fence.Rev && c.Seq > m.Seq
}

// revisionOf finds the revision at which CommitKey took the value mine,
// walking its history back from the revision at (a later marker of ours:
// at most the transactions in flight). An unreadable history (compacted)
// leaves the outcome unknown.
func (w *Writer) revisionOf(ctx context.Context, mine string, at int64) (int64, error) {
	for i := 0; i < 16; i++ {
		resp, err := w.kv.Get(ctx, CommitKey, clientv3.WithRev(at-1))
		if err != nil {
			return 0, fmt.Errorf("store: a transaction committed, its revision unknown: %w", err)
		}
		if len(resp.Kvs) != 1 {
			break
		}
		kv := resp.Kvs[0]
		if string(kv.Value) == mine {
			return kv.ModRevision, nil
		}
		if !w.later(string(kv.Value), mine) {
			break
		}
		at = kv.ModRevision
	}
	return 0, fmt.Errorf("store: a transaction committed, its revision unknown: %w", context.DeadlineExceeded)
}

// readMarker reads CommitKey's value, at the head of a chain.
func (w *Writer) readMarker(ctx context.Context) (string, error) {
	for attempt := firstAttempt; ; attempt *= 2 {
		actx, cancel := context.WithTimeout(ctx, attempt)
		resp, err := w.kv.Get(actx, CommitKey)
		cancel()
		if err == nil {
			if len(resp.Kvs) == 1 {
				return string(resp.Kvs[0].Value), nil
			}
			return "", nil
		}
		if ctx.Err() != nil || !unknownOutcome(err) {
			return "", err
		}
	}
}

// unknownOutcome reports an error after which a request may or may not have
// been applied and is worth sending again: a deadline, a lost connection,
// an etcd leader change or election. Refusals (too large, no space, auth)
// are answers, not losses.
func unknownOutcome(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch {
	case errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrGRPCNoLeader),
		errors.Is(err, rpctypes.ErrGRPCTimeout), errors.Is(err, rpctypes.ErrGRPCTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrGRPCLeaderChanged):
		return true
	}
	st, ok := status.FromError(err)
	return ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// LeaderKey holds the current leader's term record, written as the first
// commit of every term: who leads, since when, at which fence revision. Its
// mod revision is the term's first committed write.
const LeaderKey = Prefix + "leader"

// ReplicaPrefix holds one key per live replica, on the replica's session
// lease: its name and API URL, so workers and other replicas can find it.
const ReplicaPrefix = Prefix + "replicas/"

// Snapshot is the whole log state read at one revision.
type Snapshot struct {
	Rev   int64
	DAGs  []core.Entry
	Tasks []core.Entry
	Bad   []error // values that did not decode; skipped
	// Term is the term record at Rev, if one was written and decodes.
	Term *TermRecord
}

// Paging of Load. etcd counts every key from a page's start to the range's
// end to answer each page (a Range always reports its total count), so
// pages of a fixed thousand keys cost a time quadratic in the state: with
// 700,000 task records under load, longer than a replica waited, and a
// restarted replica never came back. Pages grow while their answers stay
// under loadPageBytes, never beyond what the largest record seen so far
// allows (a task with an output tail is ten times one without, a DAG record
// a hundred), and shrink in proportion when one was over. Each page gets
// its own time, and a page that ran out of it or was too large is asked
// again in a quarter of the size, so a large state loads by making
// progress rather than within one deadline for the whole.
const (
	loadFirstPage   = 256
	loadMaxPage     = 1 << 16
	loadPageBytes   = 8 << 20
	loadPageTimeout = 15 * time.Second
)

// Load reads every DAG and task record at one revision, in pages (above),
// so a large state does not need one huge response.
func Load(ctx context.Context, kv clientv3.KV) (*Snapshot, error) {
	s := &Snapshot{}
	ch := newLoadChunks()
	for _, prefix := range []string{DAGPrefix, TaskPrefix} {
		key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
		limit, largest := loadFirstPage, 0
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit))}
			if s.Rev > 0 {
				opts = append(opts, clientv3.WithRev(s.Rev))
			}
			pctx, cancel := context.WithTimeout(ctx, loadPageTimeout)
			resp, err := kv.Get(pctx, key, opts...)
			timedOut := pctx.Err() != nil
			cancel()
			if err != nil {
				tooLarge := status.Code(err) == codes.ResourceExhausted
				if ctx.Err() == nil && limit > 1 && (timedOut || tooLarge) {
					limit = max(1, limit/4)
					continue
				}
				return nil, err
			}
			if s.Rev == 0 {
				s.Rev = resp.Header.Revision
			}
			size := 0
			decoded := decodeAll(resp.Kvs, decodeLoaded)
			for i, item := range resp.Kvs {
				n := len(item.Key) + len(item.Value)
				size += n
				largest = max(largest, n)
				if ch.take(item) {
					continue
				}
				e, ok, err := decoded[i].e, decoded[i].ok, decoded[i].err
				switch {
				case err != nil:
					s.Bad = append(s.Bad, err)
				case !ok:
				case e.Task == "":
					ch.head(len(s.DAGs), e.D)
					s.DAGs = append(s.DAGs, e)
				default:
					s.Tasks = append(s.Tasks, e)
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			limit = nextPage(limit, size, largest)
		}
	}
	s.DAGs, s.Bad = ch.attach(s.DAGs, s.Bad)
	pctx, cancel := context.WithTimeout(ctx, loadPageTimeout)
	resp, err := kv.Get(pctx, LeaderKey, clientv3.WithRev(s.Rev))
	cancel()
	if err != nil {
		return nil, err
	}
	if s.Term, err = decodeTermRecord(resp.Kvs); err != nil {
		s.Bad = append(s.Bad, err)
	}
	return s, nil
}

// decodedKV is one key's record as DecodeKV read it.
type decodedKV struct {
	e   core.Entry
	ok  bool
	err error
}

// loadDecodeRun is about how many value bytes one goroutine of decodeAll
// decodes: a DAG record of 1000 tasks is about 75 KB, a task record a few
// hundred bytes.
const loadDecodeRun = 256 << 10

// decodeAll decodes a page of Load, in kvs' order, on up to GOMAXPROCS
// goroutines, each a run of consecutive keys of about loadDecodeRun bytes.
// Decoding the records (the DAG specs' JSON, their validation and the
// garbage they make) was three quarters of a cold load's CPU, one record
// after another on one core (BenchmarkColdLoad); records decode
// independently of one another.
func decodeAll(kvs []*mvccpb.KeyValue, decode func(*mvccpb.KeyValue) (core.Entry, bool, error)) []decodedKV {
	out := make([]decodedKV, len(kvs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := 0; i < len(kvs); {
		j, n := i, 0
		for j < len(kvs) && (j == i || n < loadDecodeRun) {
			n += len(kvs[j].Value)
			j++
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i, j int) {
			defer wg.Done()
			for k := i; k < j; k++ {
				out[k].e, out[k].ok, out[k].err = decode(kvs[k])
			}
			<-sem
		}(i, j)
		i = j
	}
	wg.Wait()
	return out
}

// decodeLoaded is how Load decodes a key of its pages: a DAG record
// without its chunks, which the loop takes in order and attaches once the
// prefix is read (chunks.go), and is not decoded here.
func decodeLoaded(item *mvccpb.KeyValue) (core.Entry, bool, error) {
	if _, _, chunk := parseChunkKey(string(item.Key)); chunk {
		return core.Entry{}, false, nil
	}
	return decodeKVWith(item, decodeHeadEntry)
}

// nextPage is the number of keys Load asks for after a page of limit keys
// whose answer was size bytes, with largest the largest record seen.
func nextPage(limit, size, largest int) int {
	switch {
	case size > loadPageBytes:
		limit = int(int64(limit) * loadPageBytes / int64(size))
	case 2*size <= loadPageBytes:
		limit *= 2
	}
	if largest > 0 {
		limit = min(limit, loadPageBytes/largest)
	}
	return max(1, min(limit, loadMaxPage))
}

// decodeTermRecord decodes the term record a read of LeaderKey returned:
// nil when there is none.
func decodeTermRecord(kvs []*mvccpb.KeyValue) (*TermRecord, error) {
	if len(kvs) != 1 {
		return nil, nil
	}
	var rec TermRecord
	if err := json.Unmarshal(kvs[0].Value, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", LeaderKey, err)
	}
	return &rec, nil
}
