// Package engine runs the single-owner scheduling loop: one goroutine owns
// the core state machine; the API, executors, timers, etcd commits and the
// election only send it events. On the leader the loop turns the core's
// proposals into fenced etcd transactions (group commit: what accumulates
// while one transaction is in flight goes into the next), applies them once
// committed, and performs the effects (dispatch, cancel, arm a timer).
package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// Config configures an Engine.
type Config struct {
	Node   string       // this replica's name: the election value
	APIURL string       // where this replica's API is reachable (registered in etcd)
	Core   core.Config  // scheduling policy
	Limits store.Limits // per-transaction limits
	// CommitPipeline is how many transactions may be in flight at once (see
	// flush); 0 means 1.
	CommitPipeline int
	SessionTTL     time.Duration // leadership lease TTL
	Retention      time.Duration // finished DAGs are deleted after this; 0 keeps them
	Logger         *zap.Logger
	Metrics        *metrics.Metrics
	// Observer, when set, is called on the loop goroutine for every applied
	// entry. It must not block (the live event stream buffers and drops).
	Observer func(e *core.Entry)
	// OnReload, when set, is called on the loop goroutine after the state was
	// replaced by a snapshot read at rev (the event stream restarts there).
	OnReload func(rev int64)
	// DispatchObserver, when set, receives each attempt's ready→start
	// latency (benchmarks collect raw samples with it).
	DispatchObserver func(time.Duration)

	// Workers delivers the executors that connect to this replica's worker
	// hub (remote workers and every replica's own slots: there is no other
	// way to run an attempt); Results their results. HubWorkers adapts a
	// workerstream hub.
	Workers <-chan WorkerEvent
	Results <-chan model.Result
	// Clock is the engine's time (nil: the wall clock).
	Clock Clock

	// LeaderAnswers, when set, asks the named leader directly whether it is
	// alive (the server asks its /healthz with a short deadline). A standby
	// whose stream to the leader dropped deposes it only if it does not
	// answer: a stream can drop at this end too (this replica was paused,
	// or its own connection broke), and a healthy leader must not be
	// deposed for that. Nil: a dropped stream is evidence enough.
	LeaderAnswers func(ctx context.Context, name string) bool

	// Storage, when set, is what the leader knows of etcd's space: new
	// work is admitted only while the database in use stays under
	// StorageAdmission (a share) of its quota, and above it the leader
	// deletes finished DAGs early and compacts (admission.go).
	Storage          Storage
	StorageAdmission float64

	// OnLeading is called on the loop goroutine when this replica starts or
	// stops leading, so the worker hub accepts or closes connections (and the
	// pod label follows); term says which term it leads (zero when not).
	OnLeading func(leading bool, term Leading)
}

// Leading describes the term a replica began to lead.
type Leading struct {
	Previous    string      // the leader of the term before, when known
	Fence       store.Fence // the term's fence
	Incarnation string      // the keyspace's incarnation (store.TermRecord)
}

// WorkerEventKind says what happened to a remote worker.
type WorkerEventKind uint8

const (
	WorkerJoined       WorkerEventKind = iota + 1 // connected (or reconnected) with its in-flight attempts
	WorkerDisconnected                            // stream dropped: no new dispatches until it is back
	WorkerLeft                                    // did not come back in time: its attempts are orphans
	WorkerConfirmed                               // joined this term: it refuses older leaders from now on
	WorkerDraining                                // stopping: no new attempts; it finishes what it runs
)

// WorkerEvent is a remote worker's arrival or departure.
type WorkerEvent struct {
	Kind     WorkerEventKind
	ID       string
	Exec     Worker // WorkerJoined
	InFlight []model.AttemptID
	// Standalone: a worker process of its own, not a
	// replica's slots, which die with the replica. Only a standalone worker
	// gets attempts before their dispatch records commit (early.go): a
	// replica's slots would come back under a new id after a restart, and
	// every new leader would wait the orphan grace for the old one.
	Standalone bool
}

// Engine is one replica's scheduler.
type Engine struct {
	cfg   Config
	st    Store
	clock Clock
	log   *zap.Logger
	m     *metrics.Metrics

	reqs          chan func()
	elected       chan campaignWin
	commitDone    chan commitResult
	suspects      chan suspicion
	loadDone      chan *store.Snapshot
	sessionOpened chan store.Session

	// Owned by the loop goroutine.
	c             *core.Core
	session       store.Session
	term          store.Term
	campaignStop  context.CancelFunc // a campaign runs (nil once the loop took its win)
	campaigns     uint64             // numbers the campaigns started (campaignWin.campaign)
	won           store.Term         // a term won and not led yet: it waits for a re-read (onElected)
	execs         map[string]Worker
	acks          ackQueue          // results reported, until a committed batch makes them durable (acks.go)
	heldAcks      []resultRef       // results the core holds until their task's record in flight applies
	beforeJoin    resultsBeforeJoin // results that overtook their worker's join
	pending       []core.Entry      // proposals waiting for a transaction
	inflight      []*inflightCommit // transactions in flight, in the order begun (group commit, pipelined)
	commitSeq     uint64            // numbers the transactions begun
	solo          int               // the next solo pending entries go one per transaction (after a refused batch)
	maxOps        int               // operations per transaction after etcd refused more (0: Limits.MaxOps)
	full          storageFull       // etcd refused writes for its quota (storagefull.go)
	bigReads      bigReads          // the DAGs newest first, big DAGs' shapes (bigreads.go)
	timers        timerQueue
	timer         Timer
	waiters       map[string][]*waiter
	effects       []core.Effect   // runEffects' buffer, kept between calls
	deleting      map[string]bool // DAGs whose deletion a request proposed (the rest are retention's)
	revWaiters    []revWaiter     // WaitApplied calls, until the replica has applied their revision
	termRecordDue bool
	recordVer     uint64            // bumps when admitted changes (early.go)
	admitted      map[string]bool   // the workers the next term record lists
	joinSeq       map[string]uint64 // joined, early once a record begun at or after this seq commits
	awaiting      map[string]bool   // the barrier: workers of the term before not joined yet
	claimable     map[string]bool   // workers of the term before whose hellos may claim early attempts (early.go)
	barrierSince  time.Time         // when the barrier began
	prevWorkers   []string          // the term before's record's Workers
	incarnation   string            // the keyspace's, from the term before's record ("": none yet)
	recordWanted  bool              // a term record rewrite waits for etcd to have room
	watchCh       <-chan store.WatchEvent
	watchRetry    <-chan time.Time // a watch restart pending after the last one ended
	watchFailures int              // watches ended in a row (logged sparingly)
	watchStop     context.CancelFunc
	watchFrom     int64 // first revision the current watch delivers
	seenRev       int64 // highest revision the watch has shown us (events or progress)
	etcdRev       int64 // etcd's revision in the latest watch response header
	firstCommitAt time.Time
	counted       core.Stats // the core's counters already added to the metrics (countStats)
	deposing      bool
	loading       bool                      // a background reload runs (reloadAsync)
	afterLoad     func(ctx context.Context) // what waits for it
	opening       bool                      // a background session open runs (openSessionAsync)
	resyncTerm    store.Term                // the term a resync will lead on, if it lives
	retiring      bool                      // Retire was called: never campaign again
	retireReq     chan chan struct{}        // Retire's requests
	prevLeader    string                    // leader of the term before ours, from its term record

	// Storage admission (admission.go): loop-owned.
	press pressure
	// Why the last attempt to open a session failed (set off the loop).
	sessionErr atomic.Pointer[error]

	status  atomic.Pointer[Status]
	rev     atomic.Int64 // the core's revision, published by the loop (Rev)
	commits atomic.Int64 // transactions committed
	entries atomic.Int64 // entries committed
	crash   chan struct{}
	done    chan struct{}
}

// Status is a cheap, possibly slightly stale view of the replica for probes
// and the cluster endpoint; it is refreshed by the loop.
type Status struct {
	Node          string    `json:"node"`
	Leader        bool      `json:"leader"`
	AppliedRev    int64     `json:"applied_revision"`
	Lag           int64     `json:"lag"`
	LeaderSince   time.Time `json:"leader_since,omitempty"`
	FirstCommitAt time.Time `json:"first_commit_at,omitempty"`
	Loaded        bool      `json:"loaded"`
	// HoldsTerm is true while this replica leads, and while it re-reads
	// etcd after a commit whose outcome is unknown, to lead on in the same
	// term: a standby asking whether to depose it must hear "no" then.
	HoldsTerm bool `json:"holds_term"`
	// Problem says what keeps the replica from etcd, if anything: no
	// session (etcd unreachable or without quorum), or a re-read of the
	// state under way. Reads still answer from the applied state.
	Problem string `json:"problem,omitempty"`
	Workers []core.WorkerView
	Counts  map[core.Status]int
	DAGs    int
	// LiveTasks counts the tasks of the DAGs running (core.Live).
	LiveTasks int
	// Storage is etcd's space as this replica measures it (with
	// Config.Storage; nil before a first measurement).
	Storage *apitypes.Storage
}

// resultRef names a worker's result, to acknowledge once it is durable.
type resultRef struct {
	worker string
	id     model.AttemptID
}

type commitResult struct {
	seq     uint64 // the order it was begun in
	term    store.Term
	batch   []core.Entry
	acks    []resultRef // results durable once this transaction (and all before it) committed
	res     store.Committed
	err     error
	started time.Time
	record  *store.TermRecord // the term record it carried, if any
	// recordVer is the version of the record's worker list (early.go).
	recordVer uint64
}

// Errors the API maps to status codes.
var (
	ErrNotLeader = core.ErrNotLeader // the one not-leader error, the core's
	ErrStopped   = errors.New("scheduler stopped")
	ErrUnknown   = errors.New("commit outcome unknown; retry with the same DAG id")
	ErrCrashed   = errors.New("scheduler crashed on request")
)

// New returns an engine; Run starts it.
func New(cfg Config, st Store) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Limits.MaxOps <= 0 {
		cfg.Limits = store.DefaultLimits
	}
	if cfg.CommitPipeline <= 0 {
		cfg.CommitPipeline = 1
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	e := &Engine{
		cfg:           cfg,
		st:            st,
		clock:         cfg.Clock,
		log:           cfg.Logger,
		m:             cfg.Metrics,
		reqs:          make(chan func(), 256),
		elected:       make(chan campaignWin, 1),
		retireReq:     make(chan chan struct{}),
		commitDone:    make(chan commitResult, cfg.CommitPipeline),
		suspects:      make(chan suspicion, 4),
		loadDone:      make(chan *store.Snapshot),
		sessionOpened: make(chan store.Session),
		c:             core.New(cfg.Core),
		execs:         make(map[string]Worker),
		admitted:      make(map[string]bool),
		joinSeq:       make(map[string]uint64),
		waiters:       make(map[string][]*waiter),
		deleting:      make(map[string]bool),
		crash:         make(chan struct{}),
		done:          make(chan struct{}),
	}
	e.status.Store(&Status{Node: cfg.Node})
	for _, v := range core.Refusals() {
		e.m.RefusedClaims.WithLabelValues(v.String()) // every reason shows, at 0
	}
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

// Run loads the state from etcd, follows the log as a standby, campaigns
// for leadership and, once elected, leads, until ctx ends. On return the
// term, if any, has been resigned.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := e.reload(ctx); err != nil {
		return err
	}
	e.startWatch(ctx)
	if err := e.openSession(ctx); err != nil {
		return err
	}
	e.startCampaign(ctx)
	e.timer = e.clock.NewTimer(time.Hour)
	defer e.timer.Stop()
	housekeeping := e.clock.NewTicker(250 * time.Millisecond)
	defer housekeeping.Stop()
	lastExpire := e.clock.Now()
	for {
		select {
		case <-ctx.Done():
			e.shutdown()
			return nil
		case ack := <-e.retireReq:
			e.retire(ctx)
			close(ack)
		case <-e.crash:
			// As kill -9 would: no commit drained, no resign; the lease is
			// left to expire and the state in memory is dropped with us.
			if e.session != nil {
				e.session.Orphan()
			}
			e.failWaiters(ErrCrashed)
			e.m.IsLeader.Set(0)
			// The process lives on (a demo crash): what follows leadership
			// (worker streams, the pod label) must learn it is gone.
			if e.term != nil && e.cfg.OnLeading != nil {
				e.cfg.OnLeading(false, Leading{})
			}
			e.status.Store(&Status{Node: e.cfg.Node})
			return ErrCrashed
		case fn := <-e.reqs:
			fn()
		case r := <-e.cfg.Results:
			e.report(r)
			e.drainResults(e.cfg.Results)
		case ev := <-e.cfg.Workers:
			e.onWorker(ev)
		case cr := <-e.commitDone:
			e.onCommitted(ctx, cr)
		case wr, open := <-e.watchCh:
			if !open {
				// The store closed the channel (its context or client
				// ended) without saying why.
				e.watchEnded(ctx, errors.New("watch channel closed"))
				continue
			}
			e.onWatch(ctx, wr)
		case snap := <-e.loadDone:
			e.onLoaded(ctx, snap)
		case sess := <-e.sessionOpened:
			e.onSessionOpened(ctx, sess)
		case <-e.watchRetry:
			e.watchRetry = nil
			if e.watchCh == nil && !e.c.IsLeader() && !e.loading && ctx.Err() == nil {
				e.startWatch(ctx)
			}
		case <-e.timer.C():
			e.fireTimers()
		case w := <-e.elected:
			if w.campaign == e.campaigns {
				// The campaign running is over. A win of one stopped
				// before (its session lost) must not make the loop
				// forget the one that replaced it.
				e.campaignStop = nil
			}
			e.onElected(ctx, w.term)
		case <-e.sessionDone():
			e.onSessionLost(ctx)
		case s := <-e.suspects:
			e.depose(ctx, s)
		case now := <-housekeeping.C():
			if e.cfg.Retention > 0 && e.c.IsLeader() && now.Sub(lastExpire) > e.expireEvery() {
				lastExpire = now
				e.c.Expire(now.Add(-e.cfg.Retention))
			}
			e.relieve(ctx, e.clock.Now()) // not the tick's time, which may lag behind
			e.publishStatus()
		}
		e.afterEvent(ctx)
	}
}

// drainResults takes a burst of results in one pass of the loop.
func (e *Engine) drainResults(ch <-chan model.Result) {
	for i := 0; i < 1024; i++ {
		select {
		case r := <-ch:
			e.report(r)
		default:
			return
		}
	}
}

func (e *Engine) sessionDone() <-chan struct{} {
	if e.session == nil {
		return nil
	}
	return e.session.Done()
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
	e.resolveRevWaiters()
	if !e.c.IsLeader() {
		return
	}
	// While etcd is full nothing can be recorded: no attempt goes out
	// before its record then (storagefull.go).
	e.c.SuspendEarly(e.full.active())
	if len(e.awaiting) == 0 {
		e.c.Schedule(e.clock.Now()) // not during the barrier (early.go)
	}
	e.pending = append(e.pending, e.c.TakeProposals(0)...)
	if len(e.heldAcks) > 0 {
		e.releaseHeldAcks()
	}
	e.flush(ctx)
	if len(e.inflight) == 0 && len(e.pending) == 0 {
		// Everything proposed so far is committed: the results reported
		// since proposed nothing (stale, or moot) and are durable as is,
		// and every early attempt sent so far is recorded.
		e.ackResults(e.acks.takeAll())
		if e.shrinkAdmitted() {
			e.flush(ctx)
		}
	}
	e.runEffects()
	e.countStats()
}

// countStats adds to the metrics what the core has counted since the last
// call: a comparison of two small structs per event, and a few additions
// when something was counted.
func (e *Engine) countStats() {
	s := e.c.Stats()
	if s == e.counted {
		return
	}
	was := e.counted
	e.counted = s
	e.m.StaleResults.Add(float64(s.StaleResults - was.StaleResults))
	e.m.UnheldResults.Add(float64(s.UnheldResults - was.UnheldResults))
	for _, v := range core.Refusals() {
		if n := s.RefusedClaims[v] - was.RefusedClaims[v]; n > 0 {
			e.m.RefusedClaims.WithLabelValues(v.String()).Add(float64(n))
		}
	}
}

// resultsBeforeJoin keeps the results of workers whose join the loop has
// not seen yet, for when it does. Bounded: a result dropped here is not
// acknowledged, and its worker sends it again on its next stream.
type resultsBeforeJoin struct {
	by map[string][]model.Result
	n  int
}

const maxResultsBeforeJoin = 1 << 16

func (b *resultsBeforeJoin) add(r model.Result) {
	if b.n >= maxResultsBeforeJoin {
		return
	}
	if b.by == nil {
		b.by = make(map[string][]model.Result)
	}
	b.by[r.Worker] = append(b.by[r.Worker], r)
	b.n++
}

// take returns and forgets a worker's results.
func (b *resultsBeforeJoin) take(worker string) []model.Result {
	rs := b.by[worker]
	delete(b.by, worker)
	b.n -= len(rs)
	return rs
}

// reset forgets them all (the term ended: the workers send them again to
// the next leader).
func (b *resultsBeforeJoin) reset() { *b = resultsBeforeJoin{} }

// ackResults tells workers their results are durable. Every result comes
// from a worker the loop has seen join (report keeps those that overtake
// the join until it arrives); one that has left since gets no ack: its
// process sends the result again on its next stream, where it is moot and
// acknowledged, or is gone with it.
func (e *Engine) ackResults(refs []resultRef) {
	for _, r := range refs {
		if w := e.execs[r.worker]; w != nil {
			w.Ack(r.id, e.c.Recorded(r.worker, r.id))
		}
	}
}

// report hands a worker's result to the core and queues its acknowledgement
// for when what it proposed has committed. A standby drops it: its hub takes
// streams only while it leads, and a worker sends a result it has not had
// acknowledged to the next leader.
func (e *Engine) report(r model.Result) {
	if !e.c.IsLeader() {
		return
	}
	if _, known := e.execs[r.Worker]; !known {
		// A worker's join and its results reach the loop on different
		// channels; take the joins already queued first, so a result does
		// not overtake the hello that lists it.
		e.drainWorkerEvents()
		if _, known := e.execs[r.Worker]; !known {
			// The join is still on its way (the hub's events pass through
			// a relay). Decided after it, unacknowledged until then: the
			// join may adopt the attempt (one a dead leader sent early),
			// and taken before it, the result would look stale, be
			// acknowledged, and the adopted attempt would wait for a
			// result its worker had forgotten, its slot taken, until its
			// timeout.
			e.beforeJoin.add(r)
			return
		}
	}
	ref := resultRef{worker: r.Worker, id: r.AttemptID}
	switch e.c.Report(r, e.clock.Now()) {
	case core.ReportHeld:
		// Decided once the record in flight applies (releaseHeldAcks):
		// acknowledged with the record it becomes, not before.
		e.heldAcks = append(e.heldAcks, ref)
		return
	case core.ReportUnheld:
		// Counted (countStats) and moot: acknowledged like a stale one,
		// or its worker would send it to every leader for ever.
		e.log.Debug("result for an attempt the worker does not hold; dropped", zap.String("worker", r.Worker),
			zap.String("attempt", shortID(r.AttemptID)))
	}
	e.acks.add(ref)
}

// releaseHeldAcks moves the acknowledgements of held results that the core
// has now decided (their records are proposed) to those waiting for the
// transactions that make them durable (acks.go).
func (e *Engine) releaseHeldAcks() {
	kept := e.heldAcks[:0]
	for _, ref := range e.heldAcks {
		if e.c.Holds(ref.id) {
			kept = append(kept, ref)
		} else {
			e.acks.add(ref)
		}
	}
	clear(e.heldAcks[len(kept):])
	e.heldAcks = kept
}

// drainWorkerEvents handles the worker events already queued.
func (e *Engine) drainWorkerEvents() {
	for i := 0; i < 256; i++ {
		select {
		case ev := <-e.cfg.Workers:
			e.onWorker(ev)
		default:
			return
		}
	}
}

// onWorker registers a remote worker's arrival or departure with the core.
func (e *Engine) onWorker(ev WorkerEvent) {
	if !e.c.IsLeader() {
		return
	}
	if len(ev.ID) > model.MaxWorkerIDBytes {
		// Its id would go into the records of its attempts and into the
		// term record, past their bounds: it gets no work and is never
		// listed, whatever let its hello through.
		if ev.Kind == WorkerJoined {
			e.log.Warn("worker id too long; it gets no work", zap.Int("bytes", len(ev.ID)), zap.Int("limit", model.MaxWorkerIDBytes))
		}
		return
	}
	switch ev.Kind {
	case WorkerJoined:
		e.execs[ev.ID] = ev.Exec
		e.c.AddWorker(ev.ID, ev.Exec.Slots(), ev.Exec.Labels())
		// Only a worker the term before admitted to early attempts may
		// hold one the log does not show (early.go).
		e.c.AdmittedBefore(ev.ID, e.claimable[ev.ID])
		e.adopt(ev.ID, ev.InFlight)
		// A new stream: admitted to early attempts once it has confirmed
		// this term (early.go), whatever the stream before had.
		e.revokeEarly(ev.ID)
		for _, r := range e.beforeJoin.take(ev.ID) {
			e.report(r)
		}
		e.log.Info("worker joined", zap.String("worker", ev.ID), zap.Int("slots", ev.Exec.Slots()), zap.Stringer("labels", ev.Exec.Labels()), zap.Int("in_flight", len(ev.InFlight)))
	case WorkerDisconnected:
		// No new work until it reconnects; its attempts stay its own.
		e.c.AddWorker(ev.ID, 0, ev.Exec.Labels())
		e.log.Info("worker disconnected", zap.String("worker", ev.ID))
	case WorkerDraining:
		// Stopping (SIGTERM, a rollout): no new work; it finishes what it
		// runs, and its pod tasks' attempts go to others when it leaves.
		e.c.AddWorker(ev.ID, 0, ev.Exec.Labels())
		e.log.Info("worker draining: no new attempts for it", zap.String("worker", ev.ID))
	case WorkerConfirmed:
		// It refuses older leaders from now on: nothing it runs can come
		// from one that the log has not recorded.
		delete(e.claimable, ev.ID)
		e.c.AdmittedBefore(ev.ID, false)
		e.onConfirmed(ev.ID)
		if ev.Standalone && ev.Exec.Slots() > 0 {
			e.onEarlyJoin(ev.ID)
		}
	case WorkerLeft:
		delete(e.execs, ev.ID)
		e.beforeJoin.take(ev.ID)
		delete(e.joinSeq, ev.ID)
		e.c.RemoveWorker(ev.ID, e.clock.Now())
		e.m.WorkerSlots.DeleteLabelValues(ev.ID)
		e.m.WorkerBusy.DeleteLabelValues(ev.ID)
		e.log.Warn("worker left; its running attempts are re-queued (a pod task's is handed over to another worker)", zap.String("worker", ev.ID))
	}
}

// adopt judges the attempts a worker's hello lists (core.Adopt): it keeps
// what the log gave it and has the rest cancelled. One line says what was
// refused: a stale claim follows every failover (an unacknowledged result
// whose record committed); the others mean a worker claimed what was never
// its own.
func (e *Engine) adopt(worker string, claims []model.AttemptID) {
	var refused map[core.Claim]int
	var example map[core.Claim]model.AttemptID
	for _, id := range claims {
		v := e.c.Adopt(worker, id)
		if v.Adopted() || v == 0 {
			continue
		}
		if refused == nil {
			refused, example = make(map[core.Claim]int), make(map[core.Claim]model.AttemptID)
		}
		if refused[v] == 0 {
			example[v] = id
		}
		refused[v]++
	}
	if refused == nil {
		return
	}
	var fields []zap.Field
	foreign := false
	for _, v := range core.Refusals() {
		if refused[v] > 0 {
			fields = append(fields, zap.Int(v.String(), refused[v]))
			if v != core.ClaimStale {
				fields = append(fields, zap.String(v.String()+"_example", shortID(example[v])))
				foreign = true
			}
		}
	}
	switch {
	case foreign:
		e.log.Warn("worker claimed attempts the log never gave it; cancelled on the worker",
			append([]zap.Field{zap.String("worker", worker)}, fields...)...)
	case len(fields) > 0:
		e.log.Debug("worker reported attempts the log has moved past; cancelled on the worker",
			append([]zap.Field{zap.String("worker", worker)}, fields...)...)
	}
}

// shortID prints an attempt id for a log line, cut short: a claim's ids
// come from a worker and are not checked before the core looks them up.
func shortID(id model.AttemptID) string {
	s := id.String()
	if len(s) > 160 {
		return fmt.Sprintf("%q... (%d bytes)", s[:160], len(s))
	}
	return strconv.Quote(s)
}

func (e *Engine) runEffects() {
	e.effects = e.c.AppendEffects(e.effects[:0])
	defer clear(e.effects)
	for _, ef := range e.effects {
		switch ef.Kind {
		case core.EffectDispatch:
			ex := e.execs[ef.Worker]
			if ex == nil {
				e.log.Error("dispatch to unknown worker", zap.String("worker", ef.Worker))
				continue
			}
			if !ef.ReadyAt.IsZero() {
				lat := e.clock.Now().Sub(ef.ReadyAt)
				e.m.DispatchLatency.Observe(lat.Seconds())
				if e.cfg.DispatchObserver != nil {
					e.cfg.DispatchObserver(lat)
				}
			}
			a := ef.Attempt
			if e.term != nil {
				a.Fence = e.term.Fence().Rev
			}
			a.Incarnation = e.incarnation
			ex.Start(a)
		case core.EffectCancel:
			if ex := e.execs[ef.Worker]; ex != nil {
				if ef.Release {
					ex.Release(ef.ID)
				} else {
					ex.Cancel(ef.ID)
				}
			}
		case core.EffectTimer:
			e.timers.push(timerItem{at: ef.At, kind: ef.Timer, id: ef.ID})
			e.resetTimer()
		}
	}
}

func (e *Engine) fireTimers() {
	now := e.clock.Now()
	for e.timers.Len() > 0 && !e.timers.peek().at.After(now) {
		t := e.timers.pop()
		if t.kind == barrierTimer {
			e.endBarrier()
			continue
		}
		e.c.Fire(t.kind, t.id, now)
	}
	e.resetTimer()
}

func (e *Engine) resetTimer() {
	if e.timers.Len() == 0 {
		return
	}
	d := e.timers.peek().at.Sub(e.clock.Now())
	if d < 0 {
		d = 0
	}
	e.timer.Reset(d)
}

func (e *Engine) publishStatus() {
	s := &Status{Node: e.cfg.Node, Leader: e.c.IsLeader(), AppliedRev: e.c.Rev(), Loaded: true,
		Counts: e.c.Counts(), DAGs: e.c.DAGCount(), Workers: e.c.Workers()}
	_, s.LiveTasks = e.c.Live()
	s.Storage = e.storageView()
	if e.term != nil {
		s.LeaderSince, s.FirstCommitAt = e.term.Won(), e.firstCommitAt
	}
	s.HoldsTerm = e.term != nil
	if t := e.resyncTerm; t != nil {
		select {
		case <-t.Done():
		default:
			s.HoldsTerm = true
		}
	}
	switch {
	case e.session == nil:
		s.Problem = "no etcd session: etcd is unreachable or has no quorum; reopening it"
		if err := e.sessionErr.Load(); err != nil && store.IsNoSpace(*err) {
			// etcd answers, and refuses: under its NOSPACE alarm it grants
			// no lease. Orion's own writes never raise it (store/space.go).
			s.Problem = "no etcd session: etcd is full (its NOSPACE alarm is raised) and grants no lease, so this replica " +
				"cannot campaign; it tries again until etcd has room (Orion's own etcd members reclaim it by themselves; " +
				"otherwise compact, defragment and disarm it: README, \"Storage full\")"
		}
	case e.loading:
		s.Problem = "re-reading the state from etcd"
	}
	if !s.Leader && e.etcdRev > s.AppliedRev {
		s.Lag = e.etcdRev - max(s.AppliedRev, e.seenRev)
		if s.Lag < 0 {
			s.Lag = 0
		}
	}
	e.status.Store(s)
	e.m.ReplicaLag.Set(float64(s.Lag))
	dags, _ := e.c.Live()
	e.m.LiveDAGs.Set(float64(dags))
	e.m.LiveTasks.Set(float64(s.LiveTasks))
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
