package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	_, n, err := Ops(e)
	if err != nil {
		return err
	}
	if n > lim.RecordLimit() {
		return &TooLargeError{DAG: e.DAG, Size: n, Limit: lim.RecordLimit()}
	}
	return nil
}

// EntryOps is how many operations a transaction has for entries (and the
// term record): MaxOps less the commit marker every transaction carries.
func (l Limits) EntryOps() int { return max(1, l.MaxOps-1) }

// Committed reports the revision at which each entry was committed.
type Committed struct {
	Revs []int64 // parallel to the entries given to Commit
	Txns int     // transactions used
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

// Writer commits one leader's entries, one transaction after another.
//
// A transaction whose answer is lost (etcd's leader died with the proposal,
// a connection broke, a deadline passed) would leave its outcome unknown,
// and the leader would have to re-read all of etcd to learn it. Instead each
// transaction also compares CommitKey with the marker the Writer last wrote
// and sets a new one: sent again, it applies only if no earlier copy did,
// and when one did, the compare fails and the answer (CommitKey's value)
// says so, with the revision it committed at. So a transaction is sent
// again, with a growing deadline, until it is answered or ctx ends: an
// etcd leader change costs a commit one election, not a re-read.
type Writer struct {
	kv    clientv3.KV
	fence Fence
	last  string // CommitKey's value as of our last transaction
	known bool   // last has been read or written
	seq   uint64
}

// NewWriter returns a Writer for the leader holding fence.
func NewWriter(kv clientv3.KV, fence Fence) *Writer { return &Writer{kv: kv, fence: fence} }

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
	out := Committed{Revs: make([]int64, 0, len(entries))}
	ops := append([]clientv3.Op(nil), extra...)
	bytes, first := 0, 0
	flush := func(upto int) error {
		if len(ops) == 0 {
			return nil
		}
		rev, err := w.txn(ctx, ops)
		if err != nil {
			// NOSPACE refuses the whole transaction before applying it: a
			// known outcome, unlike a timeout, so it gets its own type.
			return mapNoSpace(err)
		}
		out.Txns++
		for i := first; i < upto; i++ {
			out.Revs = append(out.Revs, rev)
		}
		ops, bytes, first = ops[:0], 0, upto
		return nil
	}
	for i := range entries {
		eops, n, err := Ops(&entries[i])
		if err != nil {
			return out, fmt.Errorf("store: encode %s/%s: %w", entries[i].DAG, entries[i].Task, err)
		}
		if len(ops) > len(extra)*b2i(out.Txns == 0) && (len(ops)+len(eops) > lim.EntryOps() || bytes+n > lim.MaxBytes) {
			if err := flush(i); err != nil {
				return out, err
			}
		}
		ops = append(ops, eops...)
		bytes += n
	}
	return out, flush(len(entries))
}

// txn commits ops with the next marker, sending the transaction again while
// its outcome is unknown, and returns the revision it committed at.
func (w *Writer) txn(ctx context.Context, ops []clientv3.Op) (int64, error) {
	if !w.known {
		if err := w.readMarker(ctx); err != nil {
			return 0, err
		}
	}
	w.seq++
	// A JSON object like every value under the prefix; encoded by hand
	// so the bytes, which the next transaction compares, never vary.
	marker := fmt.Sprintf(`{"fence":%d,"seq":%d}`, w.fence.Rev, w.seq)
	expect := clientv3.Compare(clientv3.Value(CommitKey), "=", w.last)
	if w.last == "" {
		expect = clientv3.Compare(clientv3.CreateRevision(CommitKey), "=", 0)
	}
	// A transaction without puts (retention's deletes) carries no marker:
	// etcd at its quota (NOSPACE) refuses every transaction that puts
	// anything, a marker too, and accepts deletes, which is how space comes
	// back. Sent again it is harmless: the copy deletes nothing, and the
	// compare still holds only while no other leader wrote.
	puts := slices.ContainsFunc(ops, func(op clientv3.Op) bool { return op.IsPut() })
	then := ops[:len(ops):len(ops)]
	if puts {
		then = append(then, clientv3.OpPut(CommitKey, marker))
	}
	for attempt := firstAttempt; ; attempt *= 2 {
		actx, cancel := context.WithTimeout(ctx, attempt)
		resp, err := w.kv.Txn(actx).If(w.fence.cmp(), expect).Then(then...).Else(clientv3.OpGet(CommitKey)).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				if puts {
					w.last = marker
				}
				return resp.Header.Revision, nil
			}
			var cur string
			var rev int64
			if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) == 1 {
				cur, rev = string(rr.Kvs[0].Value), rr.Kvs[0].ModRevision
			}
			switch cur {
			case marker: // an earlier attempt committed
				w.last = marker
				return rev, nil
			case w.last: // the marker is ours: the fence failed
				return 0, ErrFenced
			default: // another leader wrote since
				w.known = false
				return 0, ErrFenced
			}
		}
		if ctx.Err() != nil || !unknownOutcome(err) {
			return 0, err
		}
	}
}

// readMarker learns CommitKey's value, before this Writer's first
// transaction.
func (w *Writer) readMarker(ctx context.Context) error {
	for attempt := firstAttempt; ; attempt *= 2 {
		actx, cancel := context.WithTimeout(ctx, attempt)
		resp, err := w.kv.Get(actx, CommitKey)
		cancel()
		if err == nil {
			w.last, w.known = "", true
			if len(resp.Kvs) == 1 {
				w.last = string(resp.Kvs[0].Value)
			}
			return nil
		}
		if ctx.Err() != nil || !unknownOutcome(err) {
			return err
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
}

// Load reads every DAG and task record at one revision, in pages, so a large
// state does not need one huge response.
func Load(ctx context.Context, kv clientv3.KV) (*Snapshot, error) {
	s := &Snapshot{}
	for _, prefix := range []string{DAGPrefix, TaskPrefix} {
		key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
			if s.Rev > 0 {
				opts = append(opts, clientv3.WithRev(s.Rev))
			}
			resp, err := kv.Get(ctx, key, opts...)
			if err != nil {
				return nil, err
			}
			if s.Rev == 0 {
				s.Rev = resp.Header.Revision
			}
			for _, item := range resp.Kvs {
				e, ok, err := DecodeKV(item)
				switch {
				case err != nil:
					s.Bad = append(s.Bad, err)
				case !ok:
				case e.Task == "":
					s.DAGs = append(s.DAGs, e)
				default:
					s.Tasks = append(s.Tasks, e)
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return s, nil
}
