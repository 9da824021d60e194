package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// sim drives a leader core against a simulated log, workers and clock, with
// random successes, failures, timeouts, worker crashes and leader crashes,
// and checks the invariants after every step.
type sim struct {
	t        *testing.T
	rng      *rand.Rand
	c        *Core
	standby  *Core   // follows the committed log, as a hot standby does
	log      []Entry // committed entries, as a standby would decode them
	rev      int64
	now      time.Time
	timers   []Effect
	workers  map[string]bool                  // live workers
	labels   map[string]model.Labels          // each worker's labels
	running  map[model.AttemptID]*attempt     // attempts executing on workers
	finished map[model.AttemptID]bool         // attempts whose outcome was committed
	unacked  map[model.AttemptID]model.Result // results reported, sent again to a new leader
	nextW    int
	dags     int
	inTxn    []Entry // a transaction begun (sealed), not yet committed
}

type attempt struct {
	worker    string
	cancelled bool
}

func newSim(t *testing.T, seed uint64) *sim {
	s := &sim{
		t:   t,
		rng: rand.New(rand.NewPCG(seed, seed*7919)),
		c: New(Config{RetryBase: 10 * time.Millisecond, RetryCap: 80 * time.Millisecond, OrphanGrace: 50 * time.Millisecond,
			PoolLimits: map[string]int{"gpu": simGPULimit}}),
		now:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		workers:  map[string]bool{},
		labels:   map[string]model.Labels{},
		running:  map[model.AttemptID]*attempt{},
		finished: map[model.AttemptID]bool{},
		unacked:  map[model.AttemptID]model.Result{},
	}
	s.standby = New(s.c.cfg)
	for i := 0; i < 2; i++ {
		s.addWorker()
	}
	s.c.BecomeLeader(s.now)
	return s
}

// simGPULimit is the sim's pool limit for pool=gpu.
const simGPULimit = 2

// addWorker adds a worker, with the label pool=gpu when no live worker has it
// (so gpu tasks can always finish) and at random otherwise.
func (s *sim) addWorker() {
	s.nextW++
	id := fmt.Sprintf("w%d", s.nextW)
	gpu := s.rng.IntN(3) == 0
	if !gpu {
		gpu = true
		for w := range s.workers {
			if s.labels[w]["pool"] == "gpu" {
				gpu = false
			}
		}
	}
	s.labels[id] = nil
	if gpu {
		s.labels[id] = model.Labels{"pool": "gpu"}
	}
	s.workers[id] = true
	s.c.AddWorker(id, 1+s.rng.IntN(3), s.labels[id])
	s.c.AllowEarly(id, s.rng.IntN(3) > 0)
}

func (s *sim) randomDAG() *model.DAG {
	s.dags++
	n := 1 + s.rng.IntN(10)
	d := &model.DAG{ID: fmt.Sprintf("d%03d", s.dags), Name: "random"}
	if s.rng.IntN(3) == 0 {
		d.MaxActiveTasks = 1 + s.rng.IntN(2)
	}
	for i := 0; i < n; i++ {
		tk := model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop, Priority: s.rng.IntN(3),
			MaxRetries: s.rng.IntN(3), Timeout: model.Duration(time.Minute)}
		if s.rng.IntN(4) == 0 {
			tk.Pool = "gpu"
		}
		for j := 0; j < i; j++ {
			if s.rng.IntN(4) == 0 {
				tk.DependsOn = append(tk.DependsOn, fmt.Sprintf("t%d", j))
			}
		}
		s.randomRules(&tk)
		if s.rng.IntN(5) == 0 {
			// A map group of 0 to 4 items, at times bounded by max_active.
			items := make([]int, s.rng.IntN(5))
			b, _ := json.Marshal(items)
			tk.ForEach, tk.MaxActive = model.ForEach(b), s.rng.IntN(3)
		}
		d.Tasks = append(d.Tasks, tk)
	}
	s.randomHooks(d)
	return d
}

// randomRules gives a task, at random, a trigger rule, a condition over
// its dependencies' statuses or the run, and continue_on_failure.
func (s *sim) randomRules(tk *model.Task) {
	if s.rng.IntN(3) == 0 {
		tk.TriggerRule = model.TriggerRules[s.rng.IntN(len(model.TriggerRules))]
	}
	if s.rng.IntN(6) == 0 {
		tk.ContinueOnFailure = true
	}
	switch x := s.rng.IntN(10); {
	case x == 0:
		tk.When = "dag.run > 1"
	case x == 1:
		tk.When = "false"
	case x < 4 && len(tk.DependsOn) > 0:
		dep := tk.DependsOn[s.rng.IntN(len(tk.DependsOn))]
		tk.When = fmt.Sprintf("tasks[%q].status %s \"succeeded\"", dep, []string{"==", "!="}[s.rng.IntN(2)])
	case x == 4:
		tk.When = "dag.run" // not true or false: the task fails
	}
}

// randomHooks gives a DAG, at random, handlers and notifications.
func (s *sim) randomHooks(d *model.DAG) {
	hook := func() *model.Task {
		if s.rng.IntN(3) != 0 {
			return nil
		}
		return &model.Task{Kind: model.KindNoop, MaxRetries: s.rng.IntN(2), Timeout: model.Duration(time.Minute)}
	}
	d.OnSuccess, d.OnFailure, d.OnExit = hook(), hook(), hook()
	for i := s.rng.IntN(4); i > 1; i-- {
		n := model.Notification{URL: "http://hook.test/", MaxRetries: s.rng.IntN(2), Timeout: model.Duration(time.Minute)}
		for _, st := range model.NotifyStatuses {
			if s.rng.IntN(2) == 0 {
				n.On = append(n.On, st)
			}
		}
		d.Notify = append(d.Notify, n)
	}
	d.Normalize()
}

// commit takes a batch of proposals, gives it a revision, round-trips it
// through JSON as etcd would, and applies it.
func (s *sim) commit() {
	batch := s.inTxn
	if batch == nil {
		batch = s.c.TakeProposals(1 + s.rng.IntN(8))
		if len(batch) == 0 {
			return
		}
		s.c.Seal(batch) // encoded, as the engine does when it begins the transaction
		if s.rng.IntN(2) == 0 {
			s.inTxn = batch // in flight: results may come before it commits
			return
		}
	}
	s.inTxn = nil
	s.rev++
	for i := range batch {
		e := roundTrip(s.t, batch[i])
		e.Rev = s.rev
		s.checkBeforeApply(&e)
		s.log = append(s.log, e)
		if err := s.standby.Apply(&e); err != nil {
			s.t.Fatalf("standby apply: %v", err)
		}
		mine := batch[i]
		mine.Rev = s.rev
		if err := s.c.Apply(&mine); err != nil {
			s.t.Fatalf("leader apply: %v\n%s", err, s.c.Dump())
		}
	}
	s.handleEffects()
	s.checkLimits()
	s.c.Schedule(s.now)
}

// checkLimits asserts that the committed state never has more running tasks
// than a DAG's max_active_tasks or the gpu pool's limit allow.
func (s *sim) checkLimits() {
	for _, id := range s.c.sortedDAGIDs() {
		d := s.c.dags[id]
		// A running map group runs no attempt: its instances do.
		if lim := d.rec.MaxActiveTasks; lim > 0 && int(d.counts[Running]-d.groupsRunning) > lim {
			s.t.Fatalf("DAG %s runs %d tasks; max_active_tasks %d\n%s", id, d.counts[Running]-d.groupsRunning, lim, s.c.Dump())
		}
		for _, g := range d.groups {
			if lim := d.tasks[g.idx].spec().MaxActive; lim > 0 && int(g.counts[Running]) > lim {
				s.t.Fatalf("DAG %s: group %s runs %d instances; max_active %d\n%s", id, d.tasks[g.idx].id(), g.counts[Running], lim, s.c.Dump())
			}
		}
	}
	gpu := 0
	for _, d := range s.c.dags {
		d.each(func(t *task) {
			if t.status == Running && t.spec().Pool == "gpu" && !isGroup(t) {
				gpu++
			}
		})
	}
	if gpu > simGPULimit || gpu != s.c.poolRunning["gpu"] {
		s.t.Fatalf("%d gpu tasks run (counted %d); the limit is %d\n%s", gpu, s.c.poolRunning["gpu"], simGPULimit, s.c.Dump())
	}
}

func roundTrip(t *testing.T, e Entry) Entry {
	out := Entry{DAG: e.DAG, Task: e.Task, Delete: e.Delete}
	if e.D != nil {
		b, err := json.Marshal(e.D)
		if err != nil {
			t.Fatal(err)
		}
		out.D = new(DAGRecord)
		if err := json.Unmarshal(b, out.D); err != nil {
			t.Fatal(err)
		}
	}
	if e.T != nil {
		b, err := json.Marshal(e.T)
		if err != nil {
			t.Fatal(err)
		}
		out.T = new(TaskRecord)
		if err := json.Unmarshal(b, out.T); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkBeforeApply asserts invariants about an entry about to commit.
func (s *sim) checkBeforeApply(e *Entry) {
	if e.T == nil {
		return
	}
	id := model.AttemptID{DAG: e.DAG, Task: e.Task, Attempt: e.T.Attempt}
	switch e.T.Status {
	case Succeeded, Failed, Retrying:
		if s.finished[id] {
			s.t.Fatalf("attempt %v completed twice", id)
		}
		s.finished[id] = true
	}
}

func (s *sim) handleEffects() {
	for _, ef := range s.c.TakeEffects() {
		switch ef.Kind {
		case EffectDispatch:
			id := ef.Attempt.AttemptID
			d := s.c.dags[id.DAG]
			i, _ := d.indexOf(id.Task)
			t := &d.tasks[i]
			if v := s.c.verdict(t); v != run {
				s.t.Fatalf("%v dispatched while its trigger rule says %d\n%s", id, v, s.c.Dump())
			}
			for other, a := range s.running {
				if other.DAG == id.DAG && other.Task == id.Task && !a.cancelled && s.workers[a.worker] {
					s.t.Fatalf("%v dispatched while %v still runs on live worker %s", id, other, a.worker)
				}
			}
			if !s.labels[ef.Worker].Matches(ef.Attempt.Spec.Requires()) {
				s.t.Fatalf("%v requires %v, dispatched to %s with labels %v", id, ef.Attempt.Spec.Requires(), ef.Worker, s.labels[ef.Worker])
			}
			if !s.workers[ef.Worker] {
				continue // dispatched to a worker that died meanwhile: lost
			}
			s.running[id] = &attempt{worker: ef.Worker}
		case EffectCancel:
			if a := s.running[ef.ID]; a != nil {
				a.cancelled = true
			}
		case EffectTimer:
			s.timers = append(s.timers, ef)
		}
	}
}

func (s *sim) finishRandom() bool {
	ids := s.runningIDs()
	if len(ids) == 0 {
		return false
	}
	id := ids[s.rng.IntN(len(ids))]
	a := s.running[id]
	delete(s.running, id)
	r := model.Result{AttemptID: id, Worker: a.worker, ExitCode: 0, StartedAt: s.now, FinishedAt: s.now}
	defer func() { s.unacked[id] = r }()
	switch x := s.rng.IntN(10); {
	case a.cancelled:
		r.Outcome, r.ExitCode = model.Cancelled, -1
	case x < 6:
		r.Outcome = model.Succeeded
	case x < 9:
		r.Outcome, r.ExitCode = model.Failed, 1
	default:
		r.Outcome, r.ExitCode = model.TimedOut, -1
	}
	s.c.Report(r, s.now)
	s.c.Schedule(s.now)
	return true
}

func (s *sim) runningIDs() []model.AttemptID {
	ids := make([]model.AttemptID, 0, len(s.running))
	for id := range s.running {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	return ids
}

func (s *sim) fireNextTimer() bool {
	if len(s.timers) == 0 {
		return false
	}
	sort.SliceStable(s.timers, func(i, j int) bool { return s.timers[i].At.Before(s.timers[j].At) })
	tm := s.timers[0]
	s.timers = s.timers[1:]
	if tm.At.After(s.now) {
		s.now = tm.At
	}
	s.c.Fire(tm.Timer, tm.ID, s.now)
	s.c.Schedule(s.now)
	return true
}

func (s *sim) crashWorker() {
	var live []string
	for w := range s.workers {
		live = append(live, w)
	}
	sort.Strings(live)
	w := live[s.rng.IntN(len(live))]
	delete(s.workers, w)
	for id, a := range s.running {
		if a.worker == w {
			delete(s.running, id)
		}
	}
	s.c.RemoveWorker(w, s.now)
	s.addWorker()
	s.c.Schedule(s.now)
}

// crashLeader throws the leader away with its uncommitted proposals and
// builds a new one by replaying the committed log, as a standby would.
func (s *sim) crashLeader() {
	if got, want := s.standby.Dump(), s.c.Dump(); got != want {
		s.t.Fatalf("standby differs\nleader:\n%s\nstandby:\n%s", want, got)
	}
	fresh := s.standby
	s.inTxn = nil
	s.standby = s.restore()
	if got, want := s.standby.Dump(), s.c.Dump(); got != want {
		s.t.Fatalf("restore differs\nleader:\n%s\nrestore:\n%s", want, got)
	}
	for _, w := range liveWorkers(s.workers) {
		fresh.AddWorker(w, 1+s.rng.IntN(3), s.labels[w])
		// The term record lists the workers a term admitted to early
		// attempts, and those its own term before listed (the engine
		// keeps them listed until they leave): their hellos may claim
		// attempts the log does not show.
		old := s.c.workers[w]
		fresh.AdmittedBefore(w, old != nil && (old.early || old.before))
		fresh.AllowEarly(w, s.rng.IntN(3) > 0)
	}
	s.c = fresh
	s.timers = nil
	s.c.BecomeLeader(s.now)
	// Every live worker says hello, listing what it runs and the results
	// no leader acknowledged, before the new leader dispatches anything
	// (the engine's barrier): attempts sent before their dispatch record
	// committed are adopted, not run again. A legitimate claim is never
	// refused for a reason other than staleness: the log, or the term
	// before's early dispatch within the same labels and limits, gave it.
	for _, id := range s.runningIDs() {
		a := s.running[id]
		v := s.c.Adopt(a.worker, id)
		if !v.Adopted() {
			a.cancelled = true
		}
		if !v.Adopted() && v != ClaimStale {
			s.t.Fatalf("a legitimate claim of %s by %s refused: %s", id, a.worker, v)
		}
	}
	var results []model.AttemptID
	for id, r := range s.unacked {
		if s.finished[id] || !s.workers[r.Worker] {
			delete(s.unacked, id)
			continue
		}
		results = append(results, id)
	}
	sort.Slice(results, func(i, j int) bool { return results[i].String() < results[j].String() })
	for _, id := range results {
		r := s.unacked[id]
		s.c.Adopt(r.Worker, id)
		s.c.Report(r, s.now)
	}
	s.handleEffects()
	s.c.Schedule(s.now)
}

func (s *sim) replay() *Core { return replayLog(s.t, s.c.cfg, s.log) }

// checkReplay asserts I4: replaying the log, or restoring the latest value of
// every key, yields the leader's state.
func (s *sim) checkReplay() {
	want := s.c.Dump()
	if got := s.replay().Dump(); got != want {
		s.t.Fatalf("replay differs\nleader:\n%s\nreplay:\n%s", want, got)
	}
	if got := s.restore().Dump(); got != want {
		s.t.Fatalf("restore differs\nleader:\n%s\nrestore:\n%s", want, got)
	}
}

// restore rebuilds state as a cold start reads etcd at one revision.
func (s *sim) restore() *Core { return restoreLog(s.t, s.c.cfg, s.rev, s.log) }

func (s *sim) step() {
	switch x := s.rng.IntN(100); {
	case x < 4:
		if _, err := s.c.Submit(s.randomDAG(), s.now); err != nil {
			s.t.Fatal(err)
		}
	case x < 40:
		s.commit()
	case x < 70:
		s.finishRandom()
	case x < 80:
		s.fireNextTimer()
	case x < 82:
		s.crashWorker()
	case x < 84:
		s.crashLeader()
	case x < 86:
		ids := s.c.sortedDAGIDs()
		if len(ids) > 0 {
			id := ids[s.rng.IntN(len(ids))]
			switch s.rng.IntN(5) {
			case 0, 1:
				_ = s.c.CancelDAG(id, s.now)
			case 2, 3:
				_ = s.c.RetryDAG(id, s.now)
			default:
				_ = s.c.DeleteDAG(id, s.now)
			}
		}
	default:
		s.now = s.now.Add(time.Duration(s.rng.IntN(20)) * time.Millisecond)
	}
}

// drain runs the system without new work or faults until nothing is left.
func (s *sim) drain() {
	for i := 0; i < 100000; i++ {
		if s.c.PendingProposals() > 0 || s.inTxn != nil {
			s.commit()
			continue
		}
		if s.finishRandom() || s.fireNextTimer() {
			continue
		}
		return
	}
	s.t.Fatalf("system did not quiesce")
}

func (s *sim) checkFinal() {
	for _, id := range s.c.sortedDAGIDs() {
		d := s.c.dags[id]
		if !d.rec.Status.Terminal() || d.remaining != 0 {
			s.t.Fatalf("DAG %s not finished: %s remaining=%d\n%s", id, d.rec.Status, d.remaining, s.c.Dump())
		}
		if d.rec.Status == DAGCancelled {
			continue
		}
		if end := d.end(); d.rec.Status != end {
			s.t.Fatalf("DAG %s ended %s; its tasks say %s\n%s", id, d.rec.Status, end, s.c.Dump())
		}
		// Every task of this run ended as its trigger rule, judged from
		// how its dependencies ended, says: it ran (a false condition
		// skips it then), or it was skipped or upstream_failed.
		for i := range d.tasks {
			t := &d.tasks[i]
			if t.rec.Run != d.rec.Run {
				continue // succeeded in an earlier run, and kept by the retry
			}
			v, _ := s.c.verdictWhy(t)
			ok := false
			switch t.status {
			case Succeeded, Failed:
				ok = v == run
			case Skipped:
				ok = v == skip || v == run && (t.rec.Event == SkipCondition || t.rec.Event == SkipEmpty)
			case UpstreamFailed:
				ok = v == upstreamFailed
			}
			if !ok {
				s.t.Fatalf("DAG %s: %s ended %s (%s) where its rule says %d\n%s", id, t.id(), t.status, t.rec.Event, v, s.c.Dump())
			}
		}
	}
	s.checkReplay()
}

func TestRandomizedInvariants(t *testing.T) {
	runs := 3000
	if testing.Short() {
		runs = 500
	}
	for seed := uint64(1); seed <= uint64(runs); seed++ {
		s := newSim(t, seed)
		for i := 0; i < 3; i++ {
			if _, err := s.c.Submit(s.randomDAG(), s.now); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 300; i++ {
			s.step()
		}
		s.drain()
		s.checkFinal()
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

func liveWorkers(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
