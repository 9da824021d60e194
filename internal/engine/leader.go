package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/store"
)

// openSession creates this replica's session and registers the replica on
// it. It retries until ctx ends: a replica that cannot reach etcd can do
// nothing useful.
func (e *Engine) openSession(ctx context.Context) error {
	s, err := retry(ctx, e.clock, sessionRetry, e.log, "opening an etcd session", e.tryOpenSession)
	if err != nil {
		return err
	}
	e.session = s
	return nil
}

// sessionRetry is the pause after an attempt to open a session failed (the
// store bounds each attempt; ctx is the session's life, not a deadline).
const sessionRetry = 200 * time.Millisecond

func (e *Engine) tryOpenSession(ctx context.Context) (store.Session, error) {
	host, _ := os.Hostname()
	reg := store.ReplicaRecord{Name: e.cfg.Node, APIURL: e.cfg.APIURL, PID: os.Getpid(), Host: host, StartedAt: e.clock.Now().UTC()}
	s, err := e.st.OpenSession(ctx, e.cfg.SessionTTL, reg)
	if err != nil {
		e.sessionErr.Store(&err) // the problem the status reports
	}
	return s, err
}

// openSessionAsync opens a new session in the background (the loop goes on
// serving reads while etcd has no quorum) and campaigns once it is open.
func (e *Engine) openSessionAsync(ctx context.Context) {
	if e.opening {
		return
	}
	e.opening = true
	e.publishStatus()
	go func() {
		s, err := retry(ctx, e.clock, sessionRetry, e.log, "opening an etcd session", e.tryOpenSession)
		if err != nil {
			return // ctx ended
		}
		select {
		case e.sessionOpened <- s:
		case <-ctx.Done():
			_ = s.Close()
		}
	}()
}

// onSessionOpened takes a session opened in the background and campaigns.
func (e *Engine) onSessionOpened(ctx context.Context, s store.Session) {
	e.opening = false
	e.sessionErr.Store(nil)
	e.session = s
	e.log.Info("etcd session open; campaigning")
	e.startCampaign(ctx)
	e.publishStatus()
}

// startCampaign campaigns on the current session, unless a campaign runs,
// this replica leads, or it won a term that waits for a re-read before it
// leads. The last matters: etcd's election key is the lease's, so a second
// campaign on the session that won wins again at once, with the same fence,
// and its result would reach the loop after the replica began to lead on
// the first (the quorum-loss drill: a resync's continuation, finding its
// own term over, campaigned again while the new term's win waited behind
// it for the same re-read).
func (e *Engine) startCampaign(ctx context.Context) {
	if e.campaignStop != nil || e.session == nil || e.term != nil || e.wonPending() || e.retiring {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	e.campaignStop = cancel
	e.campaigns++
	session, campaign := e.session, e.campaigns
	go func() {
		for cctx.Err() == nil {
			term, err := e.st.Campaign(cctx, session, e.cfg.Node)
			if err == nil {
				select {
				case e.elected <- campaignWin{term: term, campaign: campaign}:
				case <-cctx.Done():
					rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
					_ = term.Resign(rctx)
					rcancel()
				}
				return
			}
			select {
			case <-session.Done():
				return // the loop opens a new session and campaigns again
			default:
			}
			if cctx.Err() == nil {
				e.log.Warn("campaign failed; retrying", zap.Error(err))
				select {
				case <-e.clock.After(100 * time.Millisecond):
				case <-cctx.Done():
				}
			}
		}
	}()
}

// wonPending reports a term won on a live session and not led yet.
func (e *Engine) wonPending() bool {
	if e.won == nil {
		return false
	}
	select {
	case <-e.won.Done():
		e.won = nil // its session ended: a new one campaigns afresh
		return false
	default:
		return true
	}
}

// campaignWin is a campaign's result: the term and which campaign won it.
type campaignWin struct {
	term     store.Term
	campaign uint64
}

func (e *Engine) stopCampaign() {
	if e.campaignStop != nil {
		e.campaignStop()
		e.campaignStop = nil
	}
}

// onElected finishes following the log up to the election, then leads. The
// previous leader's writes all precede the revision at which our key became
// the oldest, so having applied everything up to etcd's current revision is
// enough: no full re-read unless the watch cannot catch up.
//
// While it waits for a re-read, the won term is e.won, so that nothing
// campaigns again on its session meanwhile (see startCampaign).
func (e *Engine) onElected(ctx context.Context, term store.Term) {
	if e.term != nil {
		// Belt-and-braces: startCampaign no longer campaigns while a won
		// term waits or while leading, which is how a second result
		// reached a leader in the quorum-loss drill. Were one to arrive,
		// catching up again would stop the leader's state from following
		// and re-read it under it.
		e.log.Warn("elected while already leading; keeping the current term",
			zap.Int64("fence_revision", e.term.Fence().Rev), zap.Int64("elected_fence_revision", term.Fence().Rev))
		return
	}
	select {
	case <-term.Done():
		if e.won == term {
			e.won = nil
		}
		e.log.Warn("won an election with a session that is already gone")
		return
	default:
	}
	if e.loading {
		// A reload is under way (a resync's, or the watch fell behind
		// compaction): lead once it is applied, after what already waits
		// for it.
		e.won = term
		e.reloadAsync(ctx, func(ctx context.Context) { e.onElected(ctx, term) })
		return
	}
	if err := e.catchUp(ctx, term); err != nil {
		e.log.Warn("could not catch up through the watch; re-reading etcd", zap.Error(err))
		e.stopWatch()
		e.won = term
		e.reloadAsync(ctx, func(ctx context.Context) { e.leadIfAlive(ctx, term) })
		return
	}
	e.becomeLeader(term)
}

// leadIfAlive leads in term after a reload, if the term outlived it;
// otherwise it follows the log and campaigns again, unless a later term
// was won meanwhile and waits for the same reload (a resync's term ended
// with its session, and the new session won): that one leads next, from
// its own continuation.
func (e *Engine) leadIfAlive(ctx context.Context, term store.Term) {
	if e.term != nil {
		return // belt-and-braces: nothing leads while a reload's continuations wait
	}
	if e.won == term {
		e.won = nil
	}
	select {
	case <-term.Done():
		e.log.Warn("the term ended while the state was being re-read")
		e.startWatch(ctx)
		e.startCampaign(ctx)
	default:
		e.becomeLeader(term)
	}
}

func (e *Engine) becomeLeader(term store.Term) {
	e.stopWatch()
	e.term = term
	e.won = nil
	e.termRecordDue = true
	e.firstCommitAt = time.Time{}
	e.execs = make(map[string]Worker)
	e.c.BecomeLeader(e.clock.Now())
	e.startBarrier(e.clock.Now())
	if e.cfg.OnLeading != nil {
		e.cfg.OnLeading(true, Leading{Previous: e.prevLeader, Fence: term.Fence(), Incarnation: e.incarnation})
	}
	e.m.IsLeader.Set(1)
	e.m.LeaderChanges.Inc()
	e.log.Info("became leader", zap.String("node", e.cfg.Node), zap.String("election_key", term.Fence().Key),
		zap.Int64("fence_revision", term.Fence().Rev), zap.Int64("applied_revision", e.c.Rev()),
		zap.Duration("since_won", e.clock.Now().Sub(term.Won())))
	e.publishStatus()
}

// Pipelining (Config.CommitPipeline > 1): while one transaction commits,
// the proposals made meanwhile go out in the next without waiting for it.
// The chain of commit markers (store.Writer) still applies them in order,
// and fails the later one, unapplied, if the earlier one fails. It pays on
// one member (the embedded one: the single node's throughput rose 1.1-1.8x
// with two in flight) and costs on a cluster. There the second transaction
// is often proposed before the first, refused by the marker's compare and
// sent again, a raft round lost: through two members, and also through one
// connection to the raft leader (store.Route), since etcd's gRPC server
// serves each request in a goroutine of its own. With 3 members on one host
// and 8 slots, half of the second transactions were sent again: 1.9-2.1k
// tasks/s with two in flight, 2.3-2.5k with one.

// inflightCommit is a transaction begun and not yet handled; its result
// may arrive before its predecessor's.
type inflightCommit struct {
	seq  uint64
	done bool
	cr   commitResult
}

// flush starts transactions for the pending proposals, up to
// Config.CommitPipeline in flight. A term's first transaction (its record), a commit after a
// refusal for size (one entry each) and a full etcd go one at a time.
func (e *Engine) flush(ctx context.Context) {
	e.takeRecordWish()
	for e.term != nil && (len(e.pending) > 0 || e.termRecordDue) {
		depth := e.cfg.CommitPipeline
		if e.termRecordDue || e.solo > 0 || e.full.active() || e.commitFailed() {
			depth = 1
		}
		if len(e.inflight) >= depth {
			return
		}
		if e.holdForStorage() {
			return // etcd is full: see storagefull.go
		}
		e.startCommit(ctx)
	}
}

// commitFailed reports a failed transaction waiting for those begun after
// it to finish (they fail too) before the loop handles it.
func (e *Engine) commitFailed() bool {
	for _, ic := range e.inflight {
		if ic.done && ic.cr.err != nil {
			return true
		}
	}
	return false
}

// startCommit sends the next batch of pending proposals.
func (e *Engine) startCommit(ctx context.Context) {
	n, ops := 0, 0
	if e.termRecordDue {
		ops = 1
	}
	lim := e.txnLimits()
	deleted := 0 // keys the transaction deletes: store.MaxDeletedKeys at most
	for n < len(e.pending) && (e.solo == 0 || n == 0) {
		k, del := 1, 0
		if e.pending[n].Delete {
			k = 3 // the DAG's key, its chunks, its tasks (store.Ops)
			del = store.DeletedKeys(&e.pending[n])
		}
		if (ops+k > lim.EntryOps() || deleted+del > store.MaxDeletedKeys) && n > 0 {
			break
		}
		ops += k
		deleted += del
		n++
	}
	if e.solo > 0 {
		e.solo--
	}
	batch := make([]core.Entry, n)
	copy(batch, e.pending[:n])
	e.pending = append(e.pending[:0], e.pending[n:]...)
	// Taken into this transaction: a success can no longer be folded into
	// these records (early.go).
	e.c.Seal(batch)
	// The results whose proposals this transaction completes are durable
	// once it commits (acks.go).
	acks := e.acks.taken(n, len(e.pending))
	if len(e.pending) == 0 {
		// This transaction carries the last of what was proposed so far:
		// every early attempt sent so far is recorded by it or before.
		e.shrinkAdmitted()
	}
	var rec *store.TermRecord
	if e.termRecordDue {
		rec = &store.TermRecord{Name: e.cfg.Node, APIURL: e.cfg.APIURL, Fence: e.term.Fence().Rev, Since: e.term.Won().UTC(),
			Workers: e.admittedList(), Incarnation: e.incarnation}
	}
	term, recordVer := e.term, e.recordVer
	seq := e.commitSeq
	e.commitSeq++
	e.inflight = append(e.inflight, &inflightCommit{seq: seq})
	pc := e.st.Begin(term.Fence(), batch, lim, rec)
	started := e.clock.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		res, err := pc.Commit(cctx)
		cancel()
		e.commitDone <- commitResult{seq: seq, term: term, batch: batch, acks: acks, res: res, err: err, started: started,
			record: rec, recordVer: recordVer}
	}()
}

// commitTimeout bounds one transaction, the store's attempts included
// (250, 500 ms, then the rest). A commit takes milliseconds, tens under
// load; one that has not answered in 1.5 s is waiting for an etcd without
// quorum, and the writes it carries are better answered "outcome unknown;
// retry" within 2 s than held: the replica re-reads etcd in the background
// and leads on if its term lives.
const commitTimeout = 1500 * time.Millisecond

// applyCommitted counts a transaction and applies the entries that
// committed, each at its revision.
func (e *Engine) applyCommitted(cr commitResult) {
	e.m.CommitLatency.Observe(e.clock.Now().Sub(cr.started).Seconds())
	e.m.BatchSize.Observe(float64(len(cr.batch)))
	e.m.CommitResends.Add(float64(cr.res.Resent))
	e.commits.Add(int64(cr.res.Txns))
	e.entries.Add(int64(len(cr.res.Revs)))
	for i, rev := range cr.res.Revs {
		en := &cr.batch[i]
		en.Rev = rev
		e.apply(en)
	}
}

// onCommitted takes a transaction's result. Results are handled in the
// order the transactions were begun: a later one that answered first waits
// for its predecessor. A failure is handled once every transaction begun
// after it has answered too (they cannot have applied without it), as one
// failure of all their entries.
func (e *Engine) onCommitted(ctx context.Context, cr commitResult) {
	e.markDone(cr)
	for len(e.inflight) > 0 && e.inflight[0].done {
		head := e.inflight[0].cr
		if head.err != nil {
			for _, ic := range e.inflight[1:] {
				if !ic.done {
					return // handled when the later ones have answered
				}
			}
			for _, ic := range e.inflight[1:] {
				// Their entries did not commit (or, if the head's outcome
				// is unknown, the resync below re-reads whatever did).
				head.batch = append(head.batch[:len(head.batch):len(head.batch)], ic.cr.batch...)
				head.acks = append(head.acks, ic.cr.acks...)
			}
			e.inflight = nil
			e.applyCommitted(head)
			if head.term == e.term {
				e.onCommitFailed(ctx, head)
			}
			return
		}
		e.inflight = e.inflight[1:]
		e.applyCommitted(head)
		if head.term == e.term {
			e.onCommitSucceeded(head)
		}
	}
}

// markDone records a transaction's result with its place among those in
// flight.
func (e *Engine) markDone(cr commitResult) {
	for _, ic := range e.inflight {
		if ic.seq == cr.seq {
			ic.done, ic.cr = true, cr
			return
		}
	}
}

func (e *Engine) onCommitSucceeded(cr commitResult) {
	e.ackResults(cr.acks)
	if cr.record == nil || cr.res.Txns == 0 {
		return
	}
	e.onRecordCommitted(cr)
	if e.firstCommitAt.IsZero() {
		e.firstCommitAt = e.clock.Now()
		took := e.firstCommitAt.Sub(e.term.Won())
		e.m.TakeoverSeconds.Set(took.Seconds())
		e.log.Info("first write of the term committed", zap.Duration("since_won", took), zap.Int("retried", cr.res.Retried))
		e.publishStatus()
	}
}

func (e *Engine) onCommitFailed(ctx context.Context, cr commitResult) {
	// Not acknowledged yet: if this replica goes on leading (a batch
	// refused for its size), they wait for the entries' next attempt;
	// if it leaves, its workers send them to the next leader.
	e.acks.putBack(cr.acks)
	if errors.Is(cr.err, store.ErrFenced) {
		e.m.FencedWrites.Inc()
		e.stepDown(ctx, "write rejected by the leadership fence")
		return
	}
	if errors.Is(cr.err, store.ErrNoSpace) {
		// etcd is at its quota: nothing of the batch was written, a
		// known outcome. Lead on; see storagefull.go.
		e.onNoSpace(ctx, cr)
		return
	}
	if rest := cr.batch[len(cr.res.Revs):]; tooManyOps(cr.err) && len(rest) > 1 && e.txnLimits().MaxOps > minTxnOps {
		// The members allow fewer operations per transaction than
		// max_txn_ops: nothing was applied. Halve the batches (512, 256,
		// then etcd's default 128 against default members) and send the
		// rest again, in order.
		e.maxOps = max(minTxnOps, e.txnLimits().MaxOps/2)
		e.log.Warn("etcd refused a transaction for its number of operations; batching fewer from now on (raise the members' --max-txn-ops to match max_txn_ops)",
			zap.Int("max_txn_ops", e.cfg.Limits.MaxOps), zap.Int("now", e.maxOps), zap.Error(cr.err))
		e.pending = append(append(make([]core.Entry, 0, len(rest)+len(e.pending)), rest...), e.pending...)
		return
	}
	if rest := cr.batch[len(cr.res.Revs):]; refusedWhole(cr.err) && len(rest) > 1 {
		// etcd refused the transaction for its size before applying
		// anything: a known outcome. Send the rest one entry per
		// transaction, so that one entry too large for etcd (which
		// CheckSize should have stopped) cannot fail its neighbours.
		e.log.Warn("etcd refused a batch as too large; committing its entries one by one",
			zap.Int("entries", len(rest)), zap.Error(cr.err))
		e.pending = append(append(make([]core.Entry, 0, len(rest)+len(e.pending)), rest...), e.pending...)
		e.solo = len(rest)
		return
	}
	if rest := cr.batch[len(cr.res.Revs):]; refusedWhole(cr.err) && len(rest) == 1 && rest[0].D != nil && e.c.WithdrawSubmit(rest[0].DAG) {
		// A submission alone in its transaction, refused for its size:
		// nothing was written, so it fails by itself and nothing else
		// moves (the leader stays).
		msg := fmt.Sprintf("etcd refused DAG %s as too large (%v): it is larger than the members' --max-request-bytes; "+
			"set etcd_max_request_bytes to the members' value so such DAGs are refused before they are sent", rest[0].DAG, cr.err)
		e.log.Warn("etcd refused a submission as too large", zap.String("dag", rest[0].DAG), zap.Error(cr.err))
		e.failWaitersOf(rest[0].DAG, &dag.ValidationError{Code: dag.CodeTooLarge, Message: msg, Details: []string{msg}})
		return
	}
	if rest := cr.batch[len(cr.res.Revs):]; tooLarge(cr.err) && len(rest) == 1 {
		// Any other entry refused alone for its size is a poison entry:
		// sent again it would be refused again, and a resync would only
		// propose it again. It fails alone (poison.go).
		e.onPoison(rest[0], cr.err)
		return
	}
	// The outcome of the rest is unknown: it may have committed. Rebuild
	// from etcd rather than guess.
	e.log.Warn("commit failed; resynchronising from etcd", zap.Error(cr.err))
	e.resync(ctx)
}

// minTxnOps is the fewest operations per transaction the engine lowers
// its batches to after refusals for their number (the store.Limits floor).
const minTxnOps = 4

// txnLimits are the limits of the next transaction: the configured ones,
// with fewer operations once etcd refused as many (maxOps; loop-owned).
func (e *Engine) txnLimits() store.Limits {
	lim := e.cfg.Limits
	if e.maxOps > 0 {
		lim.MaxOps = e.maxOps
	}
	return lim
}

// tooManyOps reports etcd's refusal of a transaction for its number of
// operations (--max-txn-ops), before applying any of it.
func tooManyOps(err error) bool { return errors.Is(err, store.ErrTooManyOps) }

// refusedWhole reports an error with which etcd (or the gRPC client, before
// sending) refused a transaction for its size, having applied none of it.
func refusedWhole(err error) bool {
	return tooManyOps(err) || tooLarge(err)
}

// tooLarge reports etcd's (or the gRPC client's) refusal of a transaction
// for its bytes, before applying any of it.
func tooLarge(err error) bool { return errors.Is(err, store.ErrRequestTooLarge) }

// apply applies one committed entry and tells whoever waits for it.
func (e *Engine) apply(en *core.Entry) {
	err := e.c.Apply(en)
	e.publishRev() // an entry refused still moves the revision
	if err != nil {
		e.m.ApplyErrors.Inc()
		e.log.Error("refused committed entry", zap.Error(err))
		return
	}
	e.m.AppliedRevision.Set(float64(en.Rev))
	e.bigReads.applied(e.c, en)
	if e.c.IsLeader() {
		e.count(en)
	}
	if en.Task == "" {
		e.resolveWaiters(en)
	}
	if e.cfg.Observer != nil {
		e.cfg.Observer(en)
	}
}

// count keeps the work counters; only the leader counts, so a cluster's
// replicas do not multiply them.
func (e *Engine) count(en *core.Entry) {
	if en.T != nil {
		switch en.T.Status {
		case core.Succeeded:
			e.m.TasksSucceeded.Inc()
		case core.Failed:
			e.m.TasksFailed.Inc()
		case core.Retrying:
			e.m.TasksRetried.Inc()
		case core.Cancelled:
			e.m.TasksCancelled.Inc()
		case core.UpstreamFailed:
			e.m.TasksUpstream.Inc()
		case core.Skipped:
			e.m.TasksSkipped.Inc()
		case core.Ready:
			if en.T.Event == "orphan" {
				e.m.TasksOrphaned.Inc()
			}
		}
		return
	}
	switch {
	case en.Delete && e.deleting[en.DAG]:
		delete(e.deleting, en.DAG)
		e.m.RequestedDeletes.Inc()
	case en.Delete && e.pressureDeleted(en.DAG, en.Rev):
		e.m.RetentionDeletes.Inc() // retention's, ahead of its time
	case en.Delete:
		e.m.RetentionDeletes.Inc()
	case en.D.Status == core.DAGRunning && en.D.Run == 1:
		e.m.DAGsSubmitted.Inc()
		e.m.TasksIngested.Add(float64(len(en.D.Tasks)))
	case en.D.Status.Terminal():
		e.m.DAGsFinished.WithLabelValues(string(en.D.Status)).Inc()
	}
}

// stepDown leaves leadership: the volatile leader state goes, and the replica
// follows the log again from what it applied (re-reading etcd only if a
// commit's outcome is unknown).
func (e *Engine) stepDown(ctx context.Context, why string) {
	if e.term == nil {
		return
	}
	e.log.Warn("stepping down", zap.String("reason", why))
	e.drainCommit()
	e.leaveLeadership(ErrNotLeader)
	// The next leader reads whom this term listed from its record: this
	// replica, should it lead again, must not wait for them a second time.
	e.admitted = make(map[string]bool)
	if ctx.Err() == nil {
		e.startWatch(ctx)
		e.startCampaign(ctx)
	}
	e.publishStatus()
}

func (e *Engine) leaveLeadership(waitErr error) {
	e.term = nil
	e.c.StepDown()
	e.pending = nil
	// Unacknowledged results stay with their workers, which send them to
	// the next leader (this replica again, after a resync).
	e.acks, e.heldAcks = ackQueue{}, nil
	e.beforeJoin.reset()
	e.timers = nil
	e.execs = make(map[string]Worker)
	e.full = storageFull{} // the next term learns afresh whether etcd is full
	e.press.deleting, e.press.starved = nil, false
	e.awaiting = nil
	e.m.AwaitedWorkers.Set(0)
	e.m.StorageFull.Set(0)
	e.m.IsLeader.Set(0)
	e.failWaiters(waitErr)
	clear(e.deleting)
	if e.cfg.OnLeading != nil {
		e.cfg.OnLeading(false, Leading{})
	}
}

// resync rebuilds the leader state from etcd after a commit whose outcome is
// unknown, keeping leadership if the term is still alive.
func (e *Engine) resync(ctx context.Context) {
	term := e.term
	e.leaveLeadership(ErrUnknown)
	// Still the term's holder while it re-reads: the standbys, whose
	// streams just dropped, ask this replica whether it leads, and must
	// not depose it for a resync (see Status.HoldsTerm).
	e.resyncTerm = term
	e.reloadAsync(ctx, func(ctx context.Context) {
		e.resyncTerm = nil
		e.leadIfAlive(ctx, term)
	})
}

// drainCommit waits for the transactions in flight and applies what
// committed, in order, up to the first that failed.
func (e *Engine) drainCommit() {
	for _, ic := range e.inflight {
		for !ic.done {
			e.markDone(<-e.commitDone)
		}
	}
	for _, ic := range e.inflight {
		e.applyCommitted(ic.cr)
		if ic.cr.err != nil {
			if errors.Is(ic.cr.err, store.ErrFenced) {
				// Counted whichever the loop saw first, the lease's end
				// or this refusal.
				e.m.FencedWrites.Inc()
			}
			break
		}
	}
	e.inflight = nil
}

// onSessionLost handles the end of this replica's lease: as leader its fence
// is gone, so it steps down at once; in any case it opens a new session,
// registers again and campaigns again.
func (e *Engine) onSessionLost(ctx context.Context) {
	e.log.Warn("etcd session lost (lease expired or revoked)")
	e.stopCampaign()
	if e.term != nil {
		e.stepDown(ctx, "leadership lease lost")
		e.stopCampaign()
	}
	e.releaseLease(ctx, e.session)
	e.session = nil
	e.openSessionAsync(ctx)
}

// releaseAttempt bounds one attempt to revoke a lost session's lease: an
// etcd without quorum answers no attempt, and the next one must go out
// soon after quorum returns.
const releaseAttempt = 500 * time.Millisecond

// releaseLease revokes a lost session's lease in the background, retrying
// until etcd answers. Without it, after a quorum loss every replica's old
// election key outlives the outage by a TTL (etcd extends leases when it
// elects a leader), and no new candidate can win until they expire.
func (e *Engine) releaseLease(ctx context.Context, lost store.Session) {
	if lost == nil {
		return
	}
	go func() {
		_, _ = retry(ctx, e.clock, sessionRetry, e.log, "revoking the lost session's lease", func(ctx context.Context) (struct{}, error) {
			actx, cancel := context.WithTimeout(ctx, releaseAttempt)
			defer cancel()
			return struct{}{}, lost.Release(actx)
		})
	}()
}

// SuspectLeader reports that the stream to the leader named name dropped. A
// standby confirms through etcd that this node still holds leadership and,
// if so, revokes its lease so the next candidate takes over at once.
func (e *Engine) SuspectLeader(name string) {
	select {
	case e.suspects <- suspicion{leader: name, at: e.clock.Now()}:
	default:
	}
}

// leaderProbeTimeout bounds the question to a suspected leader: a killed
// leader refuses at once, a frozen or cut-off one stays silent, and either
// costs a takeover no more than this. A leader starved of CPU answers late
// and cannot be told from a frozen one but by waiting: with 100 ms, on 2
// cores under 1,000 idle event streams, 4 flooding worker streams and
// orion bench (issue 27), standbys deposed a live leader 3 to 4 times a
// run (its stream silent 300 ms, then no answer within 100 ms; it answered
// in up to 290 ms, once stalled 550 ms). 500 ms keeps the watchdog about
// as patient as the lease (renewed every TTL/4: a 1 s lease survives a
// stall of about 750 ms, and stream_stale_after + this is 800 ms), and a
// frozen leader is still replaced within a second.
const leaderProbeTimeout = 500 * time.Millisecond

// suspicion is a dropped stream to a leader, and when it was reported.
type suspicion struct {
	leader string
	at     time.Time
}

func (e *Engine) depose(ctx context.Context, s suspicion) {
	name := s.leader
	if e.term != nil || name == e.cfg.Node || e.deposing {
		return
	}
	e.deposing = true
	taken := e.clock.Now()
	go func() {
		// How long each step took, in the log: a takeover is the sum.
		timing := func(probed, done time.Time) []zap.Field {
			return []zap.Field{zap.String("leader", name), zap.Duration("queued", taken.Sub(s.at)),
				zap.Duration("probe", probed.Sub(taken)), zap.Duration("depose", done.Sub(probed))}
		}
		if e.cfg.LeaderAnswers != nil {
			pctx, cancel := context.WithTimeout(ctx, leaderProbeTimeout)
			alive := e.cfg.LeaderAnswers(pctx, name)
			cancel()
			if alive {
				e.log.Info("the leader's stream dropped but the leader answers; not deposing it", zap.String("leader", name))
				_ = e.do(ctx, func() { e.deposing = false })
				return
			}
		}
		probed := e.clock.Now()
		ok, sent, err := e.deposeSent(ctx, name)
		done := append(timing(probed, e.clock.Now()), zap.Int("requests", sent))
		switch {
		case err != nil:
			e.log.Warn("could not depose the silent leader", append(done, zap.Error(err))...)
		case ok:
			e.log.Warn("deposed the leader after its stream dropped", done...)
		default:
			e.log.Info("the silent leader no longer leads", done...)
		}
		_ = e.do(ctx, func() { e.deposing = false })
	}()
}

// Revoking a silent leader's lease (Store.Depose) is sent again every
// deposeEvery, each request waiting up to deposeRequest for its answer,
// until one answers or deposeBound passes; the first answer decides.
//
// Why not one request: when the leader's machine took etcd's raft leader
// with it (a node loss), a request that reaches etcd before its followers
// notice is forwarded to the dead raft leader and lost: etcd never answers
// it, not even with an error. One request waited out its deadline while
// the dead leader's lease, renewed by etcd's election, ran out by itself:
// takeovers of 1.5-2 s. A request sent once the followers have noticed
// waits for their election and lands at once. Why not cancel each one
// before sending the next: the one that waits for the election is then
// cut off before it lands, which cost up to a period more. So a request
// lands at most deposeEvery after etcd's election. Measured over 10 node
// losses each, the first write committed this long after etcd's election:
// 21-118 ms with a request cut off and sent again every 100 ms, 15-95 ms
// with requests overlapping every 100 ms, 18-64 ms every 50 ms. Revoking
// is idempotent: a lease already gone makes Depose read who leads instead.
const (
	deposeEvery   = 50 * time.Millisecond
	deposeRequest = time.Second
	// Longer than the dead leader's lease (1 s, extended once by etcd's
	// election): by then it is gone either way.
	deposeBound = 3 * time.Second
)

// deposeSent revokes the suspect's lease as the constants above say. It
// returns the first answer and how many requests it sent (at most
// deposeBound/deposeEvery, at most deposeRequest/deposeEvery at once).
func (e *Engine) deposeSent(ctx context.Context, name string) (ok bool, sent int, err error) {
	dctx, cancel := context.WithTimeout(ctx, deposeBound)
	defer cancel() // the requests still waiting end with it
	type answer struct {
		ok  bool
		err error
	}
	most := int(deposeBound / deposeEvery)
	answers := make(chan answer, most) // never blocks a request that answers late
	send := func() {
		sent++
		go func() {
			rctx, rcancel := context.WithTimeout(dctx, deposeRequest)
			ok, err := e.st.Depose(rctx, name)
			rcancel()
			answers <- answer{ok, err}
		}()
	}
	tick := e.clock.NewTicker(deposeEvery)
	defer tick.Stop()
	send()
	failed := 0
	for {
		select {
		case a := <-answers:
			if a.err == nil {
				return a.ok, sent, nil
			}
			if failed++; failed == most {
				return false, sent, a.err
			}
			err = a.err
		case <-tick.C():
			if sent < most {
				send()
			}
		case <-dctx.Done():
			if err == nil {
				err = dctx.Err()
			}
			return false, sent, err
		}
	}
}

// Retire hands leadership over ahead of a shutdown: the replica finishes
// its commits in flight, resigns (a standby's campaign wins at once) and
// never campaigns again, but goes on following the log. Its API then goes
// on serving while it drains, forwarding writes to the new leader, instead
// of refusing them until the process exits. Retire returns once the term
// is resigned (or was not held).
func (e *Engine) Retire(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case e.retireReq <- ack:
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.await(ctx, ack)
}

func (e *Engine) retire(ctx context.Context) {
	e.retiring = true
	e.stopCampaign()
	e.won = nil
	term := e.term
	if term == nil {
		return
	}
	e.log.Info("handing leadership over before shutting down")
	e.drainCommit()
	e.leaveLeadership(ErrNotLeader)
	e.startWatch(ctx)
	resign(ctx, term, e.log)
	e.publishStatus()
}

// resign gives term up so that a standby's campaign wins at once instead of
// waiting for the lease to expire; a failure leaves it to the lease.
func resign(ctx context.Context, term store.Term, log *zap.Logger) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := term.Resign(rctx); err != nil {
		log.Warn("resign failed; the lease will expire", zap.Error(err))
		return
	}
	log.Info("resigned leadership")
}

// shutdown finishes the commit in flight and resigns, so a standby can take
// over at once instead of waiting for the lease to expire.
func (e *Engine) shutdown() {
	e.drainCommit()
	e.stopCampaign()
	e.stopWatch()
	term := e.term
	e.leaveLeadership(ErrStopped)
	if term != nil {
		resign(context.Background(), term, e.log) // the loop's context has ended
	}
	if e.session != nil {
		_ = e.session.Close() // revokes the lease: registration gone at once
	}
	e.publishStatus()
}
