// Package firer runs schedules: the leader-only Firer that turns due
// ticks into DAG runs, and the Service behind the API's schedule routes.
//
// Exactly once: the run of a tick has an id derived from the schedule and
// the tick (schedule.RunID) and is created through the engine's ordinary
// submission, which is fenced and create-if-absent; the cursor then moves
// past the tick, fenced too. A leader that dies between the two leaves a
// cursor behind its last run: its successor, which applied the whole log
// before it leads, plans the same tick, derives the same id, finds the DAG
// and moves on. A tick no leader saw in time is the catch-up policy's.
package firer

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/store"
)

// Engine is what schedules need of the replica's engine
// (*engine.Engine).
type Engine interface {
	Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error)
	// DAGs and DAGState read the replica's state (engine/reads.go).
	DAGs(ctx context.Context, q core.DAGQuery) ([]core.DAGSummary, int64, error)
	DAGState(ctx context.Context, id string) (core.DAGStatus, int, bool, error)
	LeaderFence(ctx context.Context) (store.Fence, error)
}

var _ Engine = (*engine.Engine)(nil)

// Store is what schedules need of etcd (*store.Etcd).
type Store interface {
	Schedules(ctx context.Context) ([]store.StoredSchedule, []error, error)
	Schedule(ctx context.Context, id string) (store.StoredSchedule, bool, error)
	CountSchedules(ctx context.Context) (int, error)
	PutSchedule(ctx context.Context, f store.Fence, sc *schedule.Schedule, modRev int64) (int64, error)
	DeleteSchedule(ctx context.Context, f store.Fence, id string, modRev int64) (int64, error)
	PutCursor(ctx context.Context, f store.Fence, id string, createRev int64, c store.Cursor) (int64, error)
}

var _ Store = (*store.Etcd)(nil)

// Clock is the Firer's time: the only source, so a test drives it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures a Firer.
type Config struct {
	// Engine returns the replica's current engine (a demo crash replaces
	// it).
	Engine  func() Engine
	Store   Store
	Clock   Clock // nil: the wall clock
	Metrics *metrics.Schedules
	// BadValues counts schedule values in etcd that do not decode.
	BadValues interface{ Inc() }
	Logger    *zap.Logger
	// Rescan bounds how long the Firer goes without re-reading the
	// schedules (edits made with etcdctl; the API's writes wake it at
	// once). Default 5 s.
	Rescan time.Duration
}

// Timings of the firing loop.
const (
	defaultRescan = 5 * time.Second
	waitPoll      = 250 * time.Millisecond // a tick waits for a run to finish
	errorRetry    = time.Second            // after a write that failed
	submitTimeout = 10 * time.Second
)

// Firer fires due ticks while this replica leads. SetLeading starts and
// stops it; it is idle otherwise.
type Firer struct {
	cfg  Config
	log  *zap.Logger
	poke chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	track  chan trackedRun
}

type trackedRun struct{ schedule, run string }

// NewFirer returns an idle Firer.
func NewFirer(cfg Config) *Firer {
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSchedules(metrics.New().Registry)
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = defaultRescan
	}
	return &Firer{cfg: cfg, log: cfg.Logger, poke: make(chan struct{}, 1), track: make(chan trackedRun, 64)}
}

// SetLeading starts the firing loop when leading turns true and stops it
// when it turns false. It never blocks (the engine calls it on its loop).
func (f *Firer) SetLeading(leading bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		f.cancel()
		f.cancel = nil
	}
	if leading {
		ctx, cancel := context.WithCancel(context.Background())
		f.cancel = cancel
		go f.run(ctx)
	}
}

// Stop stops the loop, if it runs.
func (f *Firer) Stop() { f.SetLeading(false) }

// Poke makes the loop re-read the schedules now (one changed).
func (f *Firer) Poke() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// Track tells the loop of a run started outside it (a trigger), so that it
// counts against max_active_runs before the next scan finds it.
func (f *Firer) Track(scheduleID, runID string) {
	select {
	case f.track <- trackedRun{scheduleID, runID}:
	default:
	}
	f.Poke()
}

// loop is one term's firing state.
type loop struct {
	*Firer
	eng   Engine
	fence store.Fence
	scan  time.Time // last full scan of the DAGs for runs

	mu     sync.Mutex                 // active: the schedules of a pass fire at once
	active map[string]map[string]bool // schedule → its runs that may still be running
}

// fireParallel bounds the schedules a pass fires at once. Fired one after
// the other, each tick cost its submission's commit and its cursor's (two
// etcd round trips): 100 schedules ticking every second made passes of
// seconds on a 3-member cluster, and their ticks fired late, two at a time
// (issue 27). Fired at once, the submissions share the engine's group
// commits and the cursors go to etcd together.
const fireParallel = 64

func (f *Firer) run(ctx context.Context) {
	l := &loop{Firer: f, eng: f.cfg.Engine()}
	for {
		fctx, cancel := context.WithTimeout(ctx, submitTimeout)
		fence, err := l.eng.LeaderFence(fctx)
		cancel()
		if err == nil {
			l.fence = fence
			break
		}
		if ctx.Err() != nil || errors.Is(err, engine.ErrNotLeader) || errors.Is(err, engine.ErrStopped) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-f.cfg.Clock.After(errorRetry):
		}
	}
	f.log.Info("firing schedules", zap.Int64("fence_revision", l.fence.Rev))
	for {
		wait, over := l.pass(ctx)
		if over || ctx.Err() != nil {
			f.log.Info("stopped firing schedules")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-f.poke:
		case r := <-f.track:
			l.add(r.schedule, r.run)
		case <-f.cfg.Clock.After(wait):
		}
	}
}

func (l *loop) add(scheduleID, runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active == nil {
		l.active = make(map[string]map[string]bool)
	}
	if l.active[scheduleID] == nil {
		l.active[scheduleID] = make(map[string]bool)
	}
	l.active[scheduleID][runID] = true
}

// refreshActive learns which runs of each schedule still run: a scan of
// every DAG at the start of a term and every so often (runs started by
// others), the runs it knows of in between.
func (l *loop) refreshActive(ctx context.Context, now time.Time) error {
	l.mu.Lock()
	full := l.active == nil || now.Sub(l.scan) > 10*l.cfg.Rescan
	l.mu.Unlock()
	qctx, cancel := context.WithTimeout(ctx, submitTimeout)
	defer cancel()
	if full {
		runs, _, err := l.eng.DAGs(qctx, core.DAGQuery{Status: core.DAGRunning, Keep: func(d *core.DAGSummary) bool {
			_, _, _, ok := schedule.ParseRunID(d.ID)
			return ok
		}})
		if err != nil {
			return err
		}
		active := make(map[string]map[string]bool)
		for _, d := range runs {
			sid, _, _, _ := schedule.ParseRunID(d.ID)
			if active[sid] == nil {
				active[sid] = make(map[string]bool)
			}
			active[sid][d.ID] = true
		}
		l.mu.Lock()
		l.active, l.scan = active, now
		l.mu.Unlock()
		return nil
	}
	l.mu.Lock()
	var ids []string
	for _, runs := range l.active {
		for id := range runs {
			ids = append(ids, id)
		}
	}
	l.mu.Unlock()
	ended := make(map[string]bool)
	for _, id := range ids {
		st, _, ok, err := l.eng.DAGState(qctx, id)
		if err != nil {
			return err
		}
		if !ok || st != core.DAGRunning {
			ended[id] = true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for sid, runs := range l.active {
		for id := range runs {
			if ended[id] {
				delete(runs, id)
			}
		}
		if len(runs) == 0 {
			delete(l.active, sid)
		}
	}
	return nil
}

// pass plans and fires every schedule once; it returns how long to wait
// before the next pass, and over when the term has ended.
func (l *loop) pass(ctx context.Context) (wait time.Duration, over bool) {
	now := l.cfg.Clock.Now()
	began := time.Now() // the pass's own duration, on the wall clock
	defer func() { l.cfg.Metrics.Pass.Observe(time.Since(began).Seconds()) }()
	wait = l.cfg.Rescan
	rctx, cancel := context.WithTimeout(ctx, submitTimeout)
	scheds, bad, err := l.cfg.Store.Schedules(rctx)
	cancel()
	if err != nil {
		l.log.Warn("reading the schedules failed", zap.Error(err))
		return errorRetry, false
	}
	for _, b := range bad {
		l.log.Warn("a schedule value does not decode; skipped", zap.Error(b))
		if l.cfg.BadValues != nil {
			l.cfg.BadValues.Inc()
		}
	}
	l.cfg.Metrics.Count.Set(float64(len(scheds)))
	if err := l.refreshActive(ctx, now); err != nil {
		if isOver(err) {
			return 0, true
		}
		return errorRetry, false
	}
	// Every schedule at once (fireParallel at most); each fires its own
	// due ticks in order.
	waits := make([]time.Duration, len(scheds))
	overs := make([]bool, len(scheds))
	sem := make(chan struct{}, fireParallel)
	var wg sync.WaitGroup
	for i := range scheds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			waits[i], overs[i] = l.fire(ctx, &scheds[i], now)
		}()
	}
	wg.Wait()
	for i := range scheds {
		if overs[i] {
			return 0, true
		}
		if w := waits[i]; w > 0 && w < wait {
			wait = w
		}
	}
	// The waits count from the pass's start, and the loop waits from its
	// end: without this each pass would start later than the last by the
	// time it took, and the ticks it fires drift late until they are
	// (measured: passes of 270 ms, ticks fired 0.3 s late at the median).
	return max(wait-l.cfg.Clock.Now().Sub(now), time.Millisecond), false
}

// activeRuns is how many runs of a schedule may still be running.
func (l *loop) activeRuns(scheduleID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.active[scheduleID])
}

// fire handles one schedule's due ticks at now and returns when it wants
// the next pass (0: no preference).
func (l *loop) fire(ctx context.Context, sc *store.StoredSchedule, now time.Time) (wait time.Duration, over bool) {
	if sc.Paused {
		return 0, false
	}
	comp, err := sc.Compile()
	if err != nil {
		l.log.Warn("a schedule does not compile; skipped", zap.String("schedule", sc.ID), zap.Error(err))
		return 0, false
	}
	cursor := sc.CreatedAt
	if sc.Cursor != nil {
		cursor = sc.Cursor.Tick
	}
	plan := comp.Plan(schedule.State{Cursor: cursor, Active: l.activeRuns(sc.ID)}, now)
	newCursor, lastRun := plan.Cursor, ""
	if sc.Cursor != nil {
		lastRun = sc.Cursor.Run
	}
	m := l.cfg.Metrics
	if plan.Dropped > 0 {
		m.Skipped.WithLabelValues(schedule.DropCatchup).Add(float64(plan.Dropped))
		l.log.Info("late ticks dropped by the catch-up policy", zap.String("schedule", sc.ID),
			zap.Int("ticks", plan.Dropped), zap.Bool("at_least", plan.Many), zap.String("catchup", sc.Catchup))
	}
	for _, a := range plan.Actions {
		if !a.Fire {
			m.Skipped.WithLabelValues(a.Drop).Inc()
			l.log.Info("tick dropped", zap.String("schedule", sc.ID), zap.Time("tick", a.Tick), zap.String("reason", a.Drop))
			continue
		}
		runID := schedule.RunID(sc.ID, a.Tick)
		created, err := l.submit(ctx, &sc.Schedule, runID, a.Tick)
		if err != nil {
			if isOver(err) {
				return 0, true
			}
			l.log.Warn("firing a tick failed; it is tried again", zap.String("schedule", sc.ID), zap.String("run", runID), zap.Error(err))
			newCursor, wait = a.Tick.Add(-time.Nanosecond), errorRetry
			break
		}
		lastRun = runID
		l.add(sc.ID, runID)
		if created {
			m.Fired.Inc()
			// On time is the rule, and with many schedules ticking every
			// second a line per tick would be most of the log.
			lvl := zap.DebugLevel
			if a.Late {
				m.Late.Inc()
				lvl = zap.InfoLevel
			}
			l.log.Log(lvl, "tick fired", zap.String("schedule", sc.ID), zap.String("run", runID),
				zap.Time("tick", a.Tick), zap.Duration("late_by", now.Sub(a.Tick)))
		} else {
			l.log.Info("tick's run already exists", zap.String("schedule", sc.ID), zap.String("run", runID))
		}
	}
	if newCursor.After(cursor) {
		c := store.Cursor{Tick: newCursor.UTC(), Run: lastRun, At: now.UTC(), Fence: l.fence.Rev}
		wctx, cancel := context.WithTimeout(ctx, submitTimeout)
		_, err := l.cfg.Store.PutCursor(wctx, l.fence, sc.ID, sc.CreateRev, c)
		cancel()
		switch {
		case errors.Is(err, store.ErrFenced):
			return 0, true
		case errors.Is(err, store.ErrScheduleChanged):
			// Deleted or re-created meanwhile: the next pass reads it.
			wait = time.Millisecond
		case err != nil:
			l.log.Warn("recording a schedule's cursor failed; its ticks are planned again", zap.String("schedule", sc.ID), zap.Error(err))
			wait = errorRetry
		}
	}
	if plan.Waiting && (wait == 0 || wait > waitPoll) {
		wait = waitPoll
	}
	if !plan.Wake.IsZero() {
		if d := plan.Wake.Sub(now); wait == 0 || d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return wait, false
}

// submit creates a tick's run; created is false when it existed already
// (an earlier leader fired it).
func (l *loop) submit(ctx context.Context, sc *schedule.Schedule, runID string, tick time.Time) (created bool, err error) {
	sctx, cancel := context.WithTimeout(ctx, submitTimeout)
	defer cancel()
	d, err := sc.RunDAG(runID, tick)
	if err != nil {
		l.log.Error("a tick's run is not a valid DAG; the tick is dropped", zap.String("run", runID), zap.Error(err))
		return false, nil
	}
	res, err := l.eng.Submit(sctx, d)
	var ce *core.Error
	var ve *dag.ValidationError
	switch {
	case err == nil:
		return res.Created, nil
	case errors.As(err, &ce) && ce.Code == core.CodeConflict:
		// It exists, from the schedule as it was before an update.
		return false, nil
	case errors.As(err, &ve):
		// Cannot become valid by waiting; the schedule's validation
		// should have refused it.
		l.log.Error("a tick's run is not a valid DAG; the tick is dropped", zap.String("run", runID), zap.Error(err))
		return false, nil
	}
	return false, err
}

// isOver reports an error that means this replica no longer leads.
func isOver(err error) bool {
	return errors.Is(err, engine.ErrNotLeader) || errors.Is(err, engine.ErrStopped) ||
		errors.Is(err, engine.ErrCrashed) || errors.Is(err, store.ErrFenced) || errors.Is(err, context.Canceled)
}
