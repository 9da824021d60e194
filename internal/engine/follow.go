package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/store"
)

// reload replaces the state with a snapshot of etcd; the core must not be
// leading. Retries until ctx ends, since a replica without state is useless.
func (e *Engine) reload(ctx context.Context) error {
	snap, err := retry(ctx, e.clock, loadRetry, e.log, "loading state from etcd", e.load)
	if err != nil {
		return err
	}
	e.applySnapshot(snap)
	return nil
}

// load reads the whole state once. It has no deadline of its own: the store
// bounds each page of the read, so a large state loads as long as it makes
// progress (a deadline for the whole once had a restarted replica retry a
// read that never fitted, forever).
func (e *Engine) load(ctx context.Context) (*store.Snapshot, error) {
	return e.st.Load(ctx)
}

// loadRetry is the pause between reads of the whole state that failed.
const loadRetry = 500 * time.Millisecond

// applySnapshot replaces the state with one read at one revision.
func (e *Engine) applySnapshot(snap *store.Snapshot) {
	for _, bad := range snap.Bad {
		e.m.BadValues.Inc()
		e.log.Warn("skipping a value that does not decode", zap.Error(bad))
	}
	for _, err := range e.c.Restore(snap.Rev, snap.DAGs, snap.Tasks) {
		e.m.ApplyErrors.Inc()
		e.log.Warn("skipping a record that does not fit", zap.Error(err))
	}
	e.publishRev()
	e.bigReads.restored(e.c)
	e.seenRev = max(e.seenRev, snap.Rev)
	// Leading from this snapshot (after a re-read), the barrier waits for
	// the workers its term record lists (early.go).
	e.readTermRecord(snap.Term)
	if e.cfg.OnReload != nil {
		e.cfg.OnReload(snap.Rev)
	}
	e.m.AppliedRevision.Set(float64(snap.Rev))
	e.log.Info("state loaded from etcd", zap.Int64("revision", snap.Rev),
		zap.Int("dags", len(snap.DAGs)), zap.Int("task_records", len(snap.Tasks)))
	e.publishStatus()
}

// reloadAsync re-reads the whole state in the background and, once the loop
// has applied it, runs then. The loop goes on meanwhile: reads answer from
// the state applied so far (with its revision), writes are refused (this
// replica does not lead while it reloads), and an etcd without quorum
// costs a stalled reload, never a stalled replica. A reload asked while
// one runs only adds its continuation.
func (e *Engine) reloadAsync(ctx context.Context, then func(ctx context.Context)) {
	if prev := e.afterLoad; prev != nil && then != nil {
		e.afterLoad = func(ctx context.Context) { prev(ctx); then(ctx) }
	} else if then != nil {
		e.afterLoad = then
	}
	if e.loading {
		return
	}
	e.loading = true
	e.publishStatus()
	go func() {
		snap, err := retry(ctx, e.clock, loadRetry, e.log, "loading state from etcd", e.load)
		if err != nil {
			return // ctx ended
		}
		select {
		case e.loadDone <- snap:
		case <-ctx.Done():
		}
	}()
}

// onLoaded applies a background reload and runs what waited for it.
func (e *Engine) onLoaded(ctx context.Context, snap *store.Snapshot) {
	e.loading = false
	if e.c.IsLeader() {
		// Belt-and-braces: a replica begins to lead only from a reload's
		// continuation or with no reload under way, and no longer takes
		// a second election result (startCampaign). Were a reload asked
		// for before it began to lead to land now, its state, caught up
		// to the election and applying its own commits since, is the
		// newer one (the snapshot may lack commits in flight).
		e.log.Warn("a re-read of etcd finished after this replica began to lead; keeping the leader's state",
			zap.Int64("revision", snap.Rev), zap.Int64("applied_revision", e.c.Rev()))
	} else {
		e.applySnapshot(snap)
	}
	then := e.afterLoad
	e.afterLoad = nil
	if then != nil {
		then(ctx)
	}
}

// startWatch follows the log from the revision after the last one applied
// (invariant I4: the same revisions in the same order give the same state).
// The whole /orion/v1/ prefix is watched so that election and registry
// changes also show how far etcd has gone.
func (e *Engine) startWatch(ctx context.Context) {
	e.stopWatch()
	wctx, cancel := context.WithCancel(ctx)
	e.watchStop = cancel
	e.watchFrom = e.c.Rev() + 1
	e.watchCh = e.st.Watch(wctx, e.watchFrom)
}

func (e *Engine) stopWatch() {
	if e.watchStop != nil {
		e.watchStop()
		e.watchStop = nil
	}
	e.watchCh = nil
	e.watchRetry = nil
}

// watchRetryDelay spaces restarts of a watch that keeps ending (a closed
// client ends every new watch at once), so a standby never spins.
const watchRetryDelay = 100 * time.Millisecond

// watchEnded stops following after the watch ended for a reason other than
// compaction and restarts it from the last applied revision a moment later.
func (e *Engine) watchEnded(ctx context.Context, err error) {
	e.stopWatch()
	if ctx.Err() != nil {
		return
	}
	// Without quorum every restart ends at once: log the first and then
	// one in fifty (every 5 s), not ten lines a second.
	if e.watchFailures%50 == 0 {
		e.log.Warn("watch ended; restarting", zap.Error(err), zap.Duration("in", watchRetryDelay), zap.Int("in_a_row", e.watchFailures+1))
	}
	e.watchFailures++
	e.watchRetry = e.clock.After(watchRetryDelay)
}

// onWatch applies what a standby's watch delivered.
func (e *Engine) onWatch(ctx context.Context, wr store.WatchEvent) {
	if e.c.IsLeader() {
		return // a response already in the channel when leadership began
	}
	if wr.Compacted {
		// Our next revision was compacted away: re-read everything at one
		// revision and watch on from there.
		e.log.Warn("watch fell behind compaction; re-reading etcd", zap.Int64("compacted", wr.CompactRev))
		e.stopWatch()
		e.reloadAsync(ctx, func(ctx context.Context) {
			if !e.c.IsLeader() {
				e.startWatch(ctx)
			}
		})
		return
	}
	if wr.Err != nil {
		e.watchEnded(ctx, wr.Err)
		return
	}
	e.watchFailures = 0
	if wr.HeaderRev > e.etcdRev {
		e.etcdRev = wr.HeaderRev
	}
	if wr.Progress && wr.HeaderRev > e.seenRev {
		e.seenRev = wr.HeaderRev
	}
	e.seenRev = max(e.seenRev, wr.MaxRev)
	for _, err := range wr.Bad {
		e.m.BadValues.Inc()
		e.log.Warn("skipping a value that does not decode", zap.Error(err))
	}
	for i := range wr.Entries {
		en := &wr.Entries[i]
		// Every event of one transaction carries the same revision, so
		// "already applied" cannot be judged by comparing with the last
		// applied revision; the watch starts after what was applied.
		if en.Rev < e.watchFrom {
			continue
		}
		e.apply(en)
	}
}

// readTermRecord takes what the term before left in its record (nil: none):
// its leader, the workers its barrier must wait for, the incarnation.
func (e *Engine) readTermRecord(rec *store.TermRecord) {
	if rec == nil {
		rec = &store.TermRecord{}
	}
	e.prevLeader, e.prevWorkers, e.incarnation = rec.Name, rec.Workers, rec.Incarnation
}

// catchUpTimeout bounds a new leader's catch-up through its watch.
const catchUpTimeout = time.Second

// catchUp applies the watch until it has shown everything the terms before
// wrote.
//
// The target is the revision that decided the election, read with the term
// record in the same transaction (store.Elected): every write of the terms
// before precedes it, so the new leader reads nothing more on its way to
// lead.
func (e *Engine) catchUp(ctx context.Context, term store.Term) error {
	if e.watchCh == nil {
		return errors.New("not following the log")
	}
	// The loop waits here (the new leader must not act on a stale state):
	// a watch that cannot deliver within the bound is replaced by a
	// background re-read, so reads queued behind it wait at most this.
	rctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	el := term.Elected()
	e.readTermRecord(el.Prev)
	target := el.Rev
	for e.seenRev < target {
		if err := e.st.RequestProgress(rctx); err != nil {
			return err
		}
		select {
		case wr, ok := <-e.watchCh:
			if !ok {
				return errors.New("watch closed")
			}
			e.onWatch(ctx, wr)
			if e.watchCh == nil {
				return errors.New("watch restarted")
			}
		case <-rctx.Done():
			return fmt.Errorf("caught up to %d of %d: %w", e.seenRev, target, rctx.Err())
		}
	}
	return nil
}
