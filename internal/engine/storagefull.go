package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/store"
)

// Storage full is a state of the leader, not a crash. etcd at its backend
// quota (the NOSPACE alarm) refuses every transaction that puts anything,
// before applying any of it, and accepts deletes. So on that refusal the
// leader knows the outcome and keeps leading:
//
//   - submissions in the refused batch are withdrawn and answered with a
//     *StorageFullError (the API's 507), and so is every submission proposed
//     while the state holds, at once, without a round trip to etcd;
//   - everything else (task transitions, cancellations, retries) stays
//     pending in its order, so no transition is lost or reordered, and is
//     sent again after a backoff on the engine's clock;
//   - retention's deletes go ahead meanwhile, alone, since they are what
//     frees space (they wait only behind entries of their own DAG).
//
// The state ends when the retry is due: the next transaction tries
// everything that is pending, and either commits (etcd has room again,
// which Orion's own members arrange by themselves: internal/etcdmember) or
// is refused and the state returns with a longer backoff.

// ErrStorageFull is what a write refused because etcd is full matches
// (errors.Is); the error itself is a *StorageFullError.
var ErrStorageFull = errors.New("storage full")

// StorageFullError is a submission refused because etcd reached its backend
// quota: nothing of it was written.
type StorageFullError struct {
	DAG   string
	Cause error // the store's error, a *store.NoSpaceError naming the quota when etcd told it
}

func (e *StorageFullError) Error() string {
	var ns *store.NoSpaceError
	if errors.As(e.Cause, &ns) && ns.Guard {
		return fmt.Sprintf("storage full: %v. DAG %s was not written. DAGs already accepted stay readable and go on; "+
			"finished DAGs are deleted ahead of their retention, oldest first, to make room. "+
			"Retry later with the same DAG id, cancel or delete DAGs, or raise the quota", e.Cause, e.DAG)
	}
	return fmt.Sprintf("storage full: %v. DAG %s was not written. DAGs already accepted stay readable, and their tasks go on "+
		"once etcd has room: Orion's own etcd members (embedded, `orion etcd`) compact, defragment and disarm the alarm by themselves; "+
		"an external etcd needs etcdctl compact, defrag and alarm disarm (docs/operations.md#storage-full). "+
		"Retry later with the same DAG id, shorten the retention, or raise the quota", e.Cause, e.DAG)
}

func (e *StorageFullError) Is(target error) bool { return target == ErrStorageFull }
func (e *StorageFullError) Unwrap() error        { return e.Cause }

// Backoff of the retries while etcd is full: the first comes soon (an
// Orion-run member disarms within seconds when history filled it), later
// ones no more often than storageRetryMax, each costing one refused
// transaction.
const (
	storageRetryBase = 250 * time.Millisecond
	storageRetryMax  = 4 * time.Second
)

// storageFull is the leader's storage-full state; the zero value is "not
// full".
type storageFull struct {
	term    store.Term // the term it was seen in (leaving leadership resets it)
	cause   error      // the last refusal
	retryAt time.Time  // when pending puts are sent again
	backoff time.Duration
	endedAt time.Time // when the last episode's retry came due
}

func (s *storageFull) active() bool { return s.cause != nil }

// onNoSpace handles a transaction etcd refused for its quota. The
// committed prefix (of an earlier transaction of the same call) is applied
// already; the rest was not written.
func (e *Engine) onNoSpace(ctx context.Context, cr commitResult) {
	rest := cr.batch[len(cr.res.Revs):]
	kept := make([]core.Entry, 0, len(rest)+len(e.pending))
	for _, en := range rest {
		if e.refuseSubmission(&en, cr.err) {
			continue
		}
		kept = append(kept, en)
	}
	e.pending = append(kept, e.pending...)

	now := e.clock.Now()
	fs := &e.full
	backoff := storageRetryBase
	if fs.term == e.term && (fs.active() || now.Sub(fs.endedAt) < 2*fs.backoff+time.Second) {
		// Refused again right after a retry: etcd is still full.
		backoff = min(2*fs.backoff, storageRetryMax)
	}
	var ns *store.NoSpaceError
	switch {
	case fs.active():
	case errors.As(cr.err, &ns) && ns.Guard:
		e.log.Warn("etcd's database is near its quota: Orion holds its writes short of etcd's NOSPACE alarm (so that leases and "+
			"a new leader's writes still fit); submissions are refused with 507 and task transitions held until there is room. "+
			"Finished DAGs are deleted ahead of their retention meanwhile", zap.Error(cr.err), zap.Int("held", len(kept)))
	default:
		e.log.Warn("etcd is full (NOSPACE): submissions are refused with 507 and task transitions held until it has room. "+
			"Orion's own etcd members recover by themselves; for an external etcd run:\n"+store.ExternalNoSpaceRecipe,
			zap.Error(cr.err), zap.Int("held", len(kept)))
	}
	*fs = storageFull{term: e.term, cause: cr.err, retryAt: now.Add(backoff), backoff: backoff, endedAt: fs.endedAt}
	e.m.StorageFull.Set(1)
	e.wakeAt(ctx, backoff)
}

// holdForStorage decides, before a transaction starts, what may go while
// etcd is full. It reports true when nothing may go now. Submissions
// proposed meanwhile are refused at once.
func (e *Engine) holdForStorage() bool {
	fs := &e.full
	if !fs.active() {
		return false
	}
	if !e.clock.Now().Before(fs.retryAt) {
		// Try everything again; a refusal brings the state back.
		fs.cause, fs.endedAt = nil, e.clock.Now()
		e.m.StorageFull.Set(0)
		return false
	}
	kept := e.pending[:0]
	for i := range e.pending {
		if !e.refuseSubmission(&e.pending[i], fs.cause) {
			kept = append(kept, e.pending[i])
		}
	}
	if len(kept) < len(e.pending) {
		e.acks.rearranged()
	}
	clear(e.pending[len(kept):])
	e.pending = kept
	if e.termRecordDue || len(e.pending) == 0 {
		// Nothing left, or the term record is due: a put, which would
		// get any delete beside it refused.
		return true
	}
	// A delete goes ahead of the held puts unless an earlier entry of its
	// own DAG is held (the order within a DAG is the log's).
	held := map[string]bool{}
	for i, en := range e.pending {
		if en.Delete && !held[en.DAG] {
			copy(e.pending[1:i+1], e.pending[:i])
			e.pending[0] = en
			e.acks.rearranged()
			e.solo = 1 // alone: one put beside it would get it refused
			return false
		}
		held[en.DAG] = true
	}
	return true
}

// refuseSubmission withdraws en if it is a submission not yet written,
// answering its callers with a *StorageFullError, and reports whether it
// did.
func (e *Engine) refuseSubmission(en *core.Entry, cause error) bool {
	if en.D == nil || en.Delete || !e.c.WithdrawSubmit(en.DAG) {
		return false
	}
	e.m.StorageFullRefused.Inc()
	e.log.Warn("submission refused: etcd is full", zap.String("dag", en.DAG))
	e.failWaitersOf(en.DAG, &StorageFullError{DAG: en.DAG, Cause: cause})
	return true
}

// wakeAt runs the loop once d from now (on the engine's clock), so the held
// entries are sent when their retry is due even if nothing else happens.
func (e *Engine) wakeAt(ctx context.Context, d time.Duration) {
	due := e.clock.After(d) // armed now, on the loop: a test's clock sees it
	go func() {
		select {
		case <-due:
			_ = e.do(ctx, func() {})
		case <-ctx.Done():
		}
	}()
}
