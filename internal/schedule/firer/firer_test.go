package firer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/store"
)

// fakeClock is the Firer's time, moved by the test.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) After(time.Duration) <-chan time.Time {
	return make(chan time.Time) // the tests call pass themselves
}

// fakeEngine is a leading core that commits every proposal at once, as the
// engine does once etcd answers.
type fakeEngine struct {
	c     *core.Core
	rev   int64
	clock *fakeClock
	fence store.Fence
}

func newFakeEngine(clock *fakeClock) *fakeEngine {
	e := &fakeEngine{c: core.New(core.Config{}), clock: clock, fence: store.Fence{Key: "k", Rev: 7}}
	e.c.BecomeLeader(clock.now)
	return e
}

func (e *fakeEngine) Submit(_ context.Context, d *model.DAG) (engine.SubmitResult, error) {
	out, err := e.c.Submit(d, e.clock.now)
	if err != nil {
		return engine.SubmitResult{}, err
	}
	for _, en := range e.c.TakeProposals(0) {
		e.rev++
		en.Rev = e.rev
		if err := e.c.Apply(&en); err != nil {
			return engine.SubmitResult{}, err
		}
	}
	return engine.SubmitResult{ID: d.ID, Created: out == core.SubmitProposed}, nil
}

func (e *fakeEngine) DAGs(_ context.Context, q core.DAGQuery) ([]core.DAGSummary, int64, error) {
	return e.c.DAGs(q), e.c.Rev(), nil
}

func (e *fakeEngine) DAGState(_ context.Context, id string) (core.DAGStatus, int, bool, error) {
	st, run, ok := e.c.DAGState(id)
	return st, run, ok, nil
}

func (e *fakeEngine) LeaderFence(context.Context) (store.Fence, error) { return e.fence, nil }

// fakeStore keeps schedules and cursors in memory, fenced on a revision.
type fakeStore struct {
	mu        sync.Mutex // the schedules of a pass fire at once
	scheds    map[string]store.StoredSchedule
	fence     int64 // the current term's fence revision
	cursorErr error // returned once by the next PutCursor
}

func (s *fakeStore) Schedules(context.Context) ([]store.StoredSchedule, []error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.StoredSchedule
	for _, sc := range s.scheds {
		out = append(out, sc)
	}
	return out, nil, nil
}

func (s *fakeStore) CountSchedules(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.scheds), nil
}

func (s *fakeStore) Schedule(_ context.Context, id string) (store.StoredSchedule, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.scheds[id]
	return sc, ok, nil
}

func (s *fakeStore) PutSchedule(_ context.Context, f store.Fence, sc *schedule.Schedule, modRev int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Rev != s.fence {
		return 0, store.ErrFenced
	}
	old := s.scheds[sc.ID]
	s.scheds[sc.ID] = store.StoredSchedule{Schedule: *sc, CreateRev: 1, ModRev: old.ModRev + 1, Cursor: old.Cursor}
	return 1, nil
}

func (s *fakeStore) DeleteSchedule(_ context.Context, f store.Fence, id string, modRev int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.scheds, id)
	return 1, nil
}

func (s *fakeStore) PutCursor(_ context.Context, f store.Fence, id string, createRev int64, c store.Cursor) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cursorErr; err != nil {
		s.cursorErr = nil
		return 0, err
	}
	if f.Rev != s.fence {
		return 0, store.ErrFenced
	}
	sc := s.scheds[id]
	sc.Cursor = &c
	s.scheds[id] = sc
	return 1, nil
}

type bundle struct {
	clock *fakeClock
	eng   *fakeEngine
	st    *fakeStore
	m     *metrics.Schedules
	l     *loop
}

func newBundle(t *testing.T, spec schedule.Spec) *bundle {
	t.Helper()
	b := &bundle{clock: &fakeClock{now: time.Date(2026, 11, 25, 15, 45, 0, 0, time.UTC)}}
	b.eng = newFakeEngine(b.clock)
	b.st = &fakeStore{scheds: map[string]store.StoredSchedule{}, fence: 7}
	b.m = metrics.NewSchedules(metrics.New().Registry)
	spec.Normalize()
	sc := schedule.Schedule{ID: "tick", Spec: spec, CreatedAt: b.clock.now,
		DAG: model.DAG{ID: "tick", Name: "tick", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop, MaxRetries: 1, Timeout: model.Duration(time.Minute)}}}}
	b.st.scheds["tick"] = store.StoredSchedule{Schedule: sc, CreateRev: 1, ModRev: 1}
	b.newTerm()
	return b
}

// newTerm starts a loop as a new leader would, on the same log.
func (b *bundle) newTerm() {
	f := NewFirer(Config{Engine: func() Engine { return b.eng }, Store: b.st, Clock: b.clock, Metrics: b.m})
	b.l = &loop{Firer: f, eng: b.eng, fence: store.Fence{Key: "k", Rev: b.st.fence}}
}

func (b *bundle) at(t *testing.T, d time.Duration) (time.Duration, bool) {
	t.Helper()
	b.clock.now = time.Date(2026, 11, 25, 15, 45, 0, 0, time.UTC).Add(d)
	return b.l.pass(context.Background())
}

func (b *bundle) runs() []string {
	var out []string
	for _, d := range b.eng.c.DAGs(core.DAGQuery{}) {
		out = append(out, d.ID)
	}
	return out
}

// A leader that created a tick's run and died before moving the cursor:
// its successor plans the same tick, finds the run and moves on.
func TestFirerSuccessorFindsTheRun(t *testing.T) {
	b := newBundle(t, schedule.Spec{Cron: "@every 1s"})
	if wait, _ := b.at(t, 500*time.Millisecond); wait != 500*time.Millisecond {
		t.Errorf("wait before the first tick: %s", wait)
	}
	b.st.cursorErr = errors.New("leader died")
	b.at(t, time.Second+10*time.Millisecond)
	if got := b.st.scheds["tick"].Cursor; got != nil {
		t.Fatalf("cursor moved: %+v", got)
	}
	b.st.fence = 9
	b.newTerm()
	b.at(t, time.Second+800*time.Millisecond)
	if got := strings.Join(b.runs(), " "); got != "tick-20261125T154501Z" {
		t.Fatalf("runs: %s", got)
	}
	if c := b.st.scheds["tick"].Cursor; c == nil || !c.Tick.Equal(b.clock.now.Truncate(time.Second)) || c.Fence != 9 {
		t.Fatalf("cursor %+v", c)
	}
	if n := testutil.ToFloat64(b.m.Fired); n != 1 {
		t.Errorf("fired %v, want 1", n)
	}
}

// A deposed leader's cursor write is refused and its loop ends.
func TestFirerStopsWhenFenced(t *testing.T) {
	b := newBundle(t, schedule.Spec{Cron: "@every 1s"})
	b.st.fence = 8 // another leader won
	if _, over := b.at(t, time.Second); !over {
		t.Fatal("the loop went on after its fence was lost")
	}
}

// Overlap skip: a run still running (no worker takes its task) makes the
// next ticks drop; queue makes them wait, and the catch-up policy then
// decides.
func TestFirerOverlap(t *testing.T) {
	b := newBundle(t, schedule.Spec{Cron: "@every 1s", Overlap: schedule.OverlapSkip})
	b.at(t, time.Second)
	b.at(t, 2*time.Second)
	b.at(t, 3*time.Second)
	if got := strings.Join(b.runs(), " "); got != "tick-20261125T154501Z" {
		t.Fatalf("runs: %s", got)
	}
	if n := testutil.ToFloat64(b.m.Skipped.WithLabelValues(schedule.DropOverlap)); n != 2 {
		t.Errorf("skipped for overlap %v, want 2", n)
	}

	b = newBundle(t, schedule.Spec{Cron: "@every 1s", Overlap: schedule.OverlapQueue})
	b.at(t, time.Second)
	wait, _ := b.at(t, 2*time.Second)
	if wait != waitPoll {
		t.Errorf("a waiting tick polls every %s, not %s", waitPoll, wait)
	}
	if c := b.st.scheds["tick"].Cursor; c == nil || !c.Tick.Equal(time.Date(2026, 11, 25, 15, 45, 1, 0, time.UTC)) {
		t.Fatalf("the queued tick moved the cursor: %+v", c)
	}
	// The first run finishes: cancel it (no worker runs it here).
	if err := b.eng.c.CancelDAG("tick-20261125T154501Z", b.clock.now); err != nil {
		t.Fatal(err)
	}
	for _, en := range b.eng.c.TakeProposals(0) {
		b.eng.rev++
		en.Rev = b.eng.rev
		if err := b.eng.c.Apply(&en); err != nil {
			t.Fatal(err)
		}
	}
	b.at(t, 2*time.Second+300*time.Millisecond)
	if got := strings.Join(b.runs(), " "); !strings.Contains(got, "tick-20261125T154502Z") {
		t.Fatalf("the queued tick did not fire once the slot freed: %s", got)
	}
}

// Paused schedules fire nothing; resumed, the catch-up policy applies to
// the ticks missed meanwhile.
func TestFirerPausedThenResumed(t *testing.T) {
	b := newBundle(t, schedule.Spec{Cron: "@every 1s", Catchup: schedule.CatchupLatest, Paused: true})
	b.at(t, 5*time.Second)
	if len(b.runs()) != 0 {
		t.Fatalf("a paused schedule fired: %v", b.runs())
	}
	sc := b.st.scheds["tick"]
	sc.Paused = false
	b.st.scheds["tick"] = sc
	b.at(t, 5*time.Second+200*time.Millisecond)
	if got := strings.Join(b.runs(), " "); got != "tick-20261125T154505Z" {
		t.Fatalf("runs after resume: %s", got)
	}
	if n := testutil.ToFloat64(b.m.Skipped.WithLabelValues(schedule.DropCatchup)); n != 4 {
		t.Errorf("skipped for catch-up %v, want 4", n)
	}
}

// barrierEngine holds every submission until want of them are in flight
// at once, then commits them all: a firer that submitted its schedules'
// ticks one after the other would wait on it forever (here: until the
// test's deadline ends the submissions).
type barrierEngine struct {
	*fakeEngine
	mu      sync.Mutex
	want    int
	waiting int
	open    chan struct{}
}

func (e *barrierEngine) Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error) {
	e.mu.Lock()
	if e.waiting++; e.waiting == e.want {
		close(e.open)
	}
	e.mu.Unlock()
	select {
	case <-e.open:
	case <-ctx.Done():
		return engine.SubmitResult{}, ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fakeEngine.Submit(ctx, d)
}

// A pass fires its schedules at once, not one after the other (issue 27:
// 100 schedules ticking every second, each tick two etcd round trips in a
// row, made passes of seconds and fired their ticks late): every due
// tick's submission is in flight before any is answered, and each tick is
// fired once, its cursor recorded.
func TestFirerFiresSchedulesAtOnce(t *testing.T) {
	const n = 40
	b := newBundle(t, schedule.Spec{Cron: "@every 1s"})
	tmpl := b.st.scheds["tick"]
	delete(b.st.scheds, "tick")
	for i := range n {
		sc := tmpl
		sc.ID = fmt.Sprintf("s%02d", i)
		sc.DAG.ID, sc.DAG.Name = sc.ID, sc.ID
		b.st.scheds[sc.ID] = sc
	}
	eng := &barrierEngine{fakeEngine: b.eng, want: n, open: make(chan struct{})}
	f := NewFirer(Config{Engine: func() Engine { return eng }, Store: b.st, Clock: b.clock, Metrics: b.m})
	b.l = &loop{Firer: f, eng: eng, fence: store.Fence{Key: "k", Rev: b.st.fence}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.at(t, time.Second+10*time.Millisecond)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the pass did not end: its submissions were not in flight at once")
	}
	if got := len(b.runs()); got != n {
		t.Fatalf("%d runs, want %d: %v", got, n, b.runs())
	}
	for id, sc := range b.st.scheds {
		if sc.Cursor == nil || !sc.Cursor.Tick.Equal(time.Date(2026, 11, 25, 15, 45, 1, 0, time.UTC)) {
			t.Errorf("cursor of %s: %+v", id, sc.Cursor)
		}
	}
	if fired := testutil.ToFloat64(b.m.Fired); fired != n {
		t.Errorf("fired %v, want %d", fired, n)
	}
}
