// Package scheduler runs the single-owner scheduling loop: one goroutine owns
// the core state machine; the API, executors, timers, etcd commits and the
// election only send it events. On the leader the loop turns the core's
// proposals into fenced etcd transactions (group commit: what accumulates
// while one transaction is in flight goes into the next), applies them once
// committed, and performs the effects (dispatch, cancel, arm a timer).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/etcdlog"
	"github.com/orion-sched/orion/internal/executor"
	"github.com/orion-sched/orion/internal/leadership"
	"github.com/orion-sched/orion/internal/metrics"
)

// Config configures an Engine.
type Config struct {
	Node       string         // this replica's name: the election value
	Core       core.Config    // scheduling policy
	Limits     etcdlog.Limits // per-transaction limits
	SessionTTL time.Duration  // leadership lease TTL
	Retention  time.Duration  // finished DAGs are deleted after this; 0 keeps them
	Logger     *zap.Logger
	Metrics    *metrics.Metrics
	// Observer, when set, is called on the loop goroutine for every applied
	// entry. It must not block (the live event stream buffers and drops).
	Observer func(e *core.Entry)
	// DispatchObserver, when set, receives each attempt's ready→start
	// latency (benchmarks collect raw samples with it).
	DispatchObserver func(time.Duration)
}

// Engine is one replica's scheduler.
type Engine struct {
	cfg   Config
	cli   *clientv3.Client
	local executor.Executor
	log   *zap.Logger
	m     *metrics.Metrics

	reqs       chan func()
	elected    chan *leadership.Term
	commitDone chan commitResult

	// Owned by the loop goroutine.
	c              *core.Core
	term           *leadership.Term
	campaigning    bool
	pending        []core.Entry // proposals waiting for a transaction
	inflight       bool         // one transaction at a time: group commit
	timers         timerQueue
	timer          *time.Timer
	waiters        map[string][]*waiter
	heldResults    []executor.Result // results that arrived while not leader
	firstCommitDue bool

	status  atomic.Pointer[Status]
	commits atomic.Int64 // transactions committed
	entries atomic.Int64 // entries committed
	crash   chan struct{}
	done    chan struct{}
}

// Status is a cheap, possibly slightly stale view of the replica for probes
// and the cluster endpoint; it is refreshed by the loop.
type Status struct {
	Node       string    `json:"node"`
	Leader     bool      `json:"leader"`
	AppliedRev int64     `json:"applied_revision"`
	LeaderFor  time.Time `json:"leader_since,omitempty"`
	Loaded     bool      `json:"loaded"`
	Workers    []core.WorkerView
	Counts     map[core.Status]int
	DAGs       int
}

type commitResult struct {
	term    *leadership.Term
	batch   []core.Entry
	res     etcdlog.Committed
	err     error
	started time.Time
}

// Errors the API maps to status codes.
var (
	ErrNotLeader = errors.New("no leader: this replica is not the leader; retry shortly")
	ErrStopped   = errors.New("scheduler stopped")
	ErrUnknown   = errors.New("commit outcome unknown; retry with the same DAG id")
	ErrCrashed   = errors.New("scheduler crashed on request")
)

// New returns an engine; Run starts it.
func New(cfg Config, cli *clientv3.Client, local executor.Executor) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Limits.MaxOps <= 0 {
		cfg.Limits = etcdlog.DefaultLimits
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = time.Second
	}
	e := &Engine{
		cfg:        cfg,
		cli:        cli,
		local:      local,
		log:        cfg.Logger,
		m:          cfg.Metrics,
		reqs:       make(chan func(), 256),
		elected:    make(chan *leadership.Term, 1),
		commitDone: make(chan commitResult, 1),
		c:          core.New(cfg.Core),
		waiters:    make(map[string][]*waiter),
		crash:      make(chan struct{}),
		done:       make(chan struct{}),
	}
	e.status.Store(&Status{Node: cfg.Node})
	return e
}

// Crash stops the engine the way kill -9 stops a process's scheduler: the
// commit in flight is not waited for, leadership is not resigned (its lease
// expires) and the in-memory state is dropped. The demo console's "pull the
// plug" uses it; recovery is a new Engine reading etcd.
func (e *Engine) Crash() {
	select {
	case e.crash <- struct{}{}:
	case <-e.done:
	}
	<-e.done
}

// CommitStats returns the transactions and entries committed so far.
func (e *Engine) CommitStats() (txns, entries int64) { return e.commits.Load(), e.entries.Load() }

// Status returns the latest published status.
func (e *Engine) Status() *Status { return e.status.Load() }

// Done is closed when Run has returned.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Run loads the state from etcd, campaigns for leadership and runs the loop
// until ctx ends. On return the term, if any, has been resigned.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := e.reload(ctx); err != nil {
		return err
	}
	e.startCampaign(ctx)
	e.timer = time.NewTimer(time.Hour)
	defer e.timer.Stop()
	housekeeping := time.NewTicker(250 * time.Millisecond)
	defer housekeeping.Stop()
	lastExpire := time.Now()
	var results <-chan executor.Result
	if e.local != nil {
		results = e.local.Results()
	}
	for {
		var termDone <-chan struct{}
		if e.term != nil {
			termDone = e.term.Done()
		}
		select {
		case <-ctx.Done():
			e.shutdown()
			return nil
		case <-e.crash:
			// As kill -9 would: no commit drained, no resign; the lease is
			// left to expire and the state in memory is dropped with us.
			if e.term != nil {
				e.term.Abandon()
			}
			e.failWaiters(ErrCrashed)
			e.m.IsLeader.Set(0)
			e.status.Store(&Status{Node: e.cfg.Node})
			return ErrCrashed
		case fn := <-e.reqs:
			fn()
		case r := <-results:
			e.report(r)
			for i := 0; i < 1024; i++ { // drain a burst in one pass
				select {
				case r = <-results:
					e.report(r)
					continue
				default:
				}
				break
			}
		case cr := <-e.commitDone:
			e.onCommitted(ctx, cr)
		case <-e.timer.C:
			e.fireTimers()
		case term := <-e.elected:
			e.campaigning = false
			e.becomeLeader(ctx, term)
		case <-termDone:
			e.stepDown(ctx, "leadership lease lost")
		case now := <-housekeeping.C:
			if e.cfg.Retention > 0 && e.c.IsLeader() && now.Sub(lastExpire) > e.expireEvery() {
				lastExpire = now
				e.c.Expire(now.Add(-e.cfg.Retention))
			}
			e.publishStatus()
		}
		e.afterEvent(ctx)
	}
}

func (e *Engine) expireEvery() time.Duration {
	every := e.cfg.Retention / 10
	if every > time.Minute {
		every = time.Minute
	}
	if every < time.Second {
		every = time.Second
	}
	return every
}

// afterEvent lets the core dispatch into free slots, sends what it proposed
// to etcd, and performs its effects.
func (e *Engine) afterEvent(ctx context.Context) {
	if !e.c.IsLeader() {
		return
	}
	e.c.Schedule(time.Now())
	e.pending = append(e.pending, e.c.TakeProposals(0)...)
	e.flush(ctx)
	e.runEffects()
}

// flush starts the next transaction if none is in flight.
func (e *Engine) flush(ctx context.Context) {
	if e.inflight || len(e.pending) == 0 || e.term == nil {
		return
	}
	n, ops := 0, 0
	for n < len(e.pending) {
		k := 1
		if e.pending[n].Delete {
			k = 2
		}
		if ops+k > e.cfg.Limits.MaxOps && n > 0 {
			break
		}
		ops += k
		n++
	}
	batch := make([]core.Entry, n)
	copy(batch, e.pending[:n])
	e.pending = append(e.pending[:0], e.pending[n:]...)
	e.inflight = true
	term, lim, kv := e.term, e.cfg.Limits, e.cli.KV
	go func() {
		started := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := etcdlog.Commit(cctx, kv, term.Fence, batch, lim)
		cancel()
		e.commitDone <- commitResult{term: term, batch: batch, res: res, err: err, started: started}
	}()
}

func (e *Engine) onCommitted(ctx context.Context, cr commitResult) {
	e.inflight = false
	e.m.CommitLatency.Observe(time.Since(cr.started).Seconds())
	e.m.BatchSize.Observe(float64(len(cr.batch)))
	e.commits.Add(int64(cr.res.Txns))
	e.entries.Add(int64(len(cr.res.Revs)))
	for i, rev := range cr.res.Revs {
		en := &cr.batch[i]
		en.Rev = rev
		e.apply(en)
	}
	if cr.term != e.term {
		return // a commit of an earlier term; its committed prefix is applied
	}
	if cr.err != nil {
		if errors.Is(cr.err, etcdlog.ErrFenced) {
			e.m.FencedWrites.Inc()
			e.stepDown(ctx, "write rejected by the leadership fence")
			return
		}
		// The outcome of the rest is unknown: it may have committed. Rebuild
		// from etcd rather than guess.
		e.log.Warn("commit failed; resynchronising from etcd", zap.Error(cr.err))
		e.resync(ctx)
		return
	}
	if e.firstCommitDue && len(cr.res.Revs) > 0 {
		e.firstCommitDue = false
		e.m.TakeoverSeconds.Set(time.Since(e.term.Won).Seconds())
	}
}

// apply applies one committed entry and tells whoever waits for it.
func (e *Engine) apply(en *core.Entry) {
	if err := e.c.Apply(en); err != nil {
		e.m.ApplyErrors.Inc()
		e.log.Error("refused committed entry", zap.Error(err))
		return
	}
	e.m.AppliedRevision.Set(float64(en.Rev))
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
		case core.Ready:
			if en.T.Event == "orphan" {
				e.m.TasksOrphaned.Inc()
			}
		}
		return
	}
	switch {
	case en.Delete:
		e.m.RetentionDeletes.Inc()
	case en.D.Status == core.DAGRunning && en.D.Run == 1:
		e.m.DAGsSubmitted.Inc()
		e.m.TasksIngested.Add(float64(len(en.D.Tasks)))
	case en.D.Status.Terminal():
		e.m.DAGsFinished.WithLabelValues(string(en.D.Status)).Inc()
	}
}

func (e *Engine) report(r executor.Result) {
	if !e.c.IsLeader() {
		// Keep it: if this replica leads again it adopts the attempt and
		// needs its result. Bounded by the executor's slots.
		e.heldResults = append(e.heldResults, r)
		return
	}
	e.c.Report(r, time.Now())
}

func (e *Engine) runEffects() {
	for _, ef := range e.c.TakeEffects() {
		switch ef.Kind {
		case core.EffectDispatch:
			if e.local == nil || ef.Worker != e.local.ID() {
				e.log.Error("dispatch to unknown worker", zap.String("worker", ef.Worker))
				continue
			}
			if !ef.ReadyAt.IsZero() {
				lat := time.Since(ef.ReadyAt)
				e.m.DispatchLatency.Observe(lat.Seconds())
				if e.cfg.DispatchObserver != nil {
					e.cfg.DispatchObserver(lat)
				}
			}
			e.local.Start(ef.Attempt)
		case core.EffectCancel:
			if e.local != nil && ef.Worker == e.local.ID() {
				e.local.Cancel(ef.ID)
			}
		case core.EffectTimer:
			e.timers.push(timerItem{at: ef.At, kind: ef.Timer, id: ef.ID})
			e.resetTimer()
		}
	}
}

func (e *Engine) fireTimers() {
	now := time.Now()
	for e.timers.Len() > 0 && !e.timers.peek().at.After(now) {
		t := e.timers.pop()
		e.c.Fire(t.kind, t.id, now)
	}
	e.resetTimer()
}

func (e *Engine) resetTimer() {
	if e.timers.Len() == 0 {
		return
	}
	d := time.Until(e.timers.peek().at)
	if d < 0 {
		d = 0
	}
	e.timer.Reset(d)
}

// reload replaces the state with a snapshot of etcd; the core must not be
// leading. Retries until ctx ends, since a replica without state is useless.
func (e *Engine) reload(ctx context.Context) error {
	for {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		snap, err := etcdlog.Load(lctx, e.cli.KV)
		cancel()
		if err == nil {
			for _, bad := range snap.Bad {
				e.m.BadValues.Inc()
				e.log.Warn("skipping a value that does not decode", zap.Error(bad))
			}
			for _, err := range e.c.Restore(snap.Rev, snap.DAGs, snap.Tasks) {
				e.m.ApplyErrors.Inc()
				e.log.Warn("skipping a record that does not fit", zap.Error(err))
			}
			e.m.AppliedRevision.Set(float64(snap.Rev))
			e.log.Info("state loaded from etcd", zap.Int64("revision", snap.Rev),
				zap.Int("dags", len(snap.DAGs)), zap.Int("task_records", len(snap.Tasks)))
			e.publishStatus()
			return nil
		}
		e.log.Warn("loading state from etcd failed; retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *Engine) startCampaign(ctx context.Context) {
	if e.campaigning {
		return
	}
	e.campaigning = true
	go func() {
		for ctx.Err() == nil {
			term, err := leadership.Campaign(ctx, e.cli, e.cfg.Node, e.cfg.SessionTTL)
			if err == nil {
				select {
				case e.elected <- term:
				case <-ctx.Done():
					_ = term.Resign(context.Background())
				}
				return
			}
			if ctx.Err() == nil {
				e.log.Warn("campaign failed; retrying", zap.Error(err))
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
}

func (e *Engine) becomeLeader(ctx context.Context, term *leadership.Term) {
	// Read the log again at a revision after our election: whatever the
	// previous leader committed is in it.
	e.c.StepDown()
	if err := e.reload(ctx); err != nil {
		_ = term.Resign(context.Background())
		return
	}
	e.term = term
	e.firstCommitDue = true
	now := time.Now()
	if e.local != nil {
		e.c.AddWorker(e.local.ID(), e.local.Slots())
	}
	e.c.BecomeLeader(now)
	if e.local != nil {
		for _, id := range e.local.InFlight() {
			e.c.Adopt(e.local.ID(), id)
		}
	}
	held := e.heldResults
	e.heldResults = nil
	for _, r := range held {
		e.c.Report(r, now)
	}
	e.m.IsLeader.Set(1)
	e.m.LeaderChanges.Inc()
	e.log.Info("became leader", zap.String("node", e.cfg.Node), zap.String("election_key", term.Fence.Key),
		zap.Int64("fence_revision", term.Fence.Rev), zap.Duration("since_won", time.Since(term.Won)))
	e.publishStatus()
}

// stepDown leaves leadership: the volatile leader state goes, the state is
// re-read from etcd (a commit in flight may or may not have landed), and the
// replica campaigns again.
func (e *Engine) stepDown(ctx context.Context, why string) {
	if e.term == nil {
		return
	}
	e.log.Warn("stepping down", zap.String("reason", why))
	e.drainCommit(ctx)
	e.term = nil
	e.c.StepDown()
	e.pending = nil
	e.timers = nil
	e.m.IsLeader.Set(0)
	e.failWaiters(ErrNotLeader)
	if ctx.Err() == nil {
		_ = e.reload(ctx)
		e.startCampaign(ctx)
	}
	e.publishStatus()
}

// resync rebuilds the leader state from etcd after a commit whose outcome is
// unknown, keeping leadership if the term is still alive.
func (e *Engine) resync(ctx context.Context) {
	term := e.term
	e.term = nil
	e.c.StepDown()
	e.pending = nil
	e.timers = nil
	e.failWaiters(ErrUnknown)
	select {
	case <-term.Done():
		e.m.IsLeader.Set(0)
		_ = e.reload(ctx)
		e.startCampaign(ctx)
		return
	default:
	}
	e.becomeLeader(ctx, term)
}

// drainCommit waits for the transaction in flight, applying what committed.
func (e *Engine) drainCommit(ctx context.Context) {
	if !e.inflight {
		return
	}
	cr := <-e.commitDone
	e.inflight = false
	for i, rev := range cr.res.Revs {
		en := &cr.batch[i]
		en.Rev = rev
		e.apply(en)
	}
}

// shutdown finishes the commit in flight and resigns, so a standby can take
// over at once instead of waiting for the lease to expire.
func (e *Engine) shutdown() {
	e.drainCommit(context.Background())
	e.failWaiters(ErrStopped)
	if e.term != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := e.term.Resign(rctx); err != nil {
			e.log.Warn("resign failed; the lease will expire", zap.Error(err))
		} else {
			e.log.Info("resigned leadership")
		}
		cancel()
		e.term = nil
	}
	e.m.IsLeader.Set(0)
	e.publishStatus()
}

func (e *Engine) publishStatus() {
	s := &Status{Node: e.cfg.Node, Leader: e.c.IsLeader(), AppliedRev: e.c.Rev(), Loaded: true,
		Counts: e.c.Counts(), DAGs: e.c.DAGCount(), Workers: e.c.Workers()}
	if e.term != nil {
		s.LeaderFor = e.term.Won
	}
	e.status.Store(s)
	counts := s.Counts
	e.m.QueueSize.Set(float64(counts[core.Ready]))
	e.m.Running.Set(float64(counts[core.Running]))
	for st, n := range counts {
		e.m.TasksByStatus.WithLabelValues(st.String()).Set(float64(n))
	}
	for _, w := range s.Workers {
		e.m.WorkerSlots.WithLabelValues(w.ID).Set(float64(w.Slots))
		e.m.WorkerBusy.WithLabelValues(w.ID).Set(float64(w.Busy))
	}
}

// do runs fn on the loop goroutine.
func (e *Engine) do(ctx context.Context, fn func()) error {
	select {
	case e.reqs <- fn:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Query runs fn on the loop goroutine with the core, for reads. fn must copy
// what it needs and not keep references.
func (e *Engine) Query(ctx context.Context, fn func(c *core.Core)) error {
	ran := make(chan struct{})
	if err := e.do(ctx, func() { fn(e.c); close(ran) }); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-e.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SubmitResult says whether a submission created the DAG.
type SubmitResult struct {
	ID      string
	Created bool // false: an identical DAG with this id already existed
}

// Submit proposes a DAG and returns once it is committed. d must be
// normalized and validated; an empty id gets a fresh one.
func (e *Engine) Submit(ctx context.Context, d *dag.DAG) (SubmitResult, error) {
	if d.ID == "" {
		d.ID = dag.NewID(time.Now())
	}
	w := &waiter{kind: waitSubmit, ch: make(chan waitResult, 1)}
	err := e.do(ctx, func() {
		out, err := e.c.Submit(d, time.Now())
		switch {
		case err != nil:
			w.ch <- waitResult{err: err}
		case out == core.SubmitDuplicate:
			w.ch <- waitResult{}
		default:
			w.created = out == core.SubmitProposed
			e.waiters[d.ID] = append(e.waiters[d.ID], w)
		}
	})
	if err != nil {
		return SubmitResult{}, err
	}
	r, err := w.wait(ctx, e.done)
	return SubmitResult{ID: d.ID, Created: r.created}, err
}

// Cancel cancels a running DAG and returns once the cancellation is committed.
func (e *Engine) Cancel(ctx context.Context, id string) (core.DAGStatus, error) {
	return e.dagChange(ctx, id, waitCancel, e.c.CancelDAG)
}

// Retry starts a new run of a failed or cancelled DAG.
func (e *Engine) Retry(ctx context.Context, id string) (core.DAGStatus, error) {
	return e.dagChange(ctx, id, waitRetry, e.c.RetryDAG)
}

func (e *Engine) dagChange(ctx context.Context, id string, kind waitKind, fn func(string, time.Time) error) (core.DAGStatus, error) {
	w := &waiter{kind: kind, ch: make(chan waitResult, 1)}
	err := e.do(ctx, func() {
		if err := fn(id, time.Now()); err != nil {
			w.ch <- waitResult{err: err}
			return
		}
		e.waiters[id] = append(e.waiters[id], w)
	})
	if err != nil {
		return "", err
	}
	r, err := w.wait(ctx, e.done)
	return r.status, err
}

// Leader asks etcd which node leads (any replica can answer).
func (e *Engine) Leader(ctx context.Context) (string, error) {
	resp, err := e.cli.Get(ctx, etcdlog.ElectionPrefix+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

func (e *Engine) String() string { return fmt.Sprintf("engine(%s)", e.cfg.Node) }
