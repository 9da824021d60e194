package store

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

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
// transaction.
func Commit(ctx context.Context, kv clientv3.KV, fence Fence, entries []core.Entry, lim Limits, extra ...clientv3.Op) (Committed, error) {
	out := Committed{Revs: make([]int64, 0, len(entries))}
	ops := append([]clientv3.Op(nil), extra...)
	bytes, first := 0, 0
	flush := func(upto int) error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := kv.Txn(ctx).If(fence.cmp()).Then(ops...).Commit()
		if err != nil {
			// NOSPACE refuses the whole transaction before applying it: a
			// known outcome, unlike a timeout, so it gets its own type.
			return mapNoSpace(err)
		}
		if !resp.Succeeded {
			return ErrFenced
		}
		out.Txns++
		for i := first; i < upto; i++ {
			out.Revs = append(out.Revs, resp.Header.Revision)
		}
		ops, bytes, first = ops[:0], 0, upto
		return nil
	}
	for i := range entries {
		eops, n, err := Ops(&entries[i])
		if err != nil {
			return out, fmt.Errorf("store: encode %s/%s: %w", entries[i].DAG, entries[i].Task, err)
		}
		if len(ops) > len(extra)*b2i(out.Txns == 0) && (len(ops)+len(eops) > lim.MaxOps || bytes+n > lim.MaxBytes) {
			if err := flush(i); err != nil {
				return out, err
			}
		}
		ops = append(ops, eops...)
		bytes += n
	}
	return out, flush(len(entries))
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
