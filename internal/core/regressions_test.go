package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// Regression tests: each shows a defect found while writing the transition,
// scenario and fuzz tests (since fixed), and says
// what it expects and why.

// leaderRig is a leader core fed by a harness-like log, for bugs that need
// the leader side.
func leaderRig(t *testing.T, workers ...string) *harness {
	h := newHarness(t, Config{})
	for _, w := range workers {
		h.c.AddWorker(w, 1, nil)
	}
	h.c.BecomeLeader(h.now)
	return h
}

func (h *harness) submitSpec(d model.DAG) {
	h.t.Helper()
	if _, err := h.c.Submit(&d, h.now); err != nil {
		h.t.Fatal(err)
	}
}

// dispatchAll submits d, commits it, schedules its ready tasks and commits
// their dispatches: they are then running.
func (h *harness) dispatchAll(d model.DAG) {
	h.t.Helper()
	h.submitSpec(d)
	h.commitAll()
	h.c.Schedule(h.now)
	h.commitAll()
}

func (h *harness) commitAll() string {
	h.out.Reset()
	h.commit(0)
	s := h.out.String()
	h.out.Reset()
	return s
}

func (h *harness) taskOf(dagID, taskID string) *task {
	h.t.Helper()
	t := h.c.lookup(dagID, taskID)
	if t == nil {
		h.t.Fatalf("no task %s/%s", dagID, taskID)
	}
	return t
}

func result(dagID, taskID string, attempt int, worker string, o model.Outcome) model.Result {
	r := model.Result{AttemptID: model.AttemptID{DAG: dagID, Task: taskID, Attempt: attempt}, Worker: worker, Outcome: o, ExitCode: -1}
	if o == model.Succeeded {
		r.ExitCode = 0
	}
	return r
}

// A DAG record for an existing DAG replaces the whole record, task list
// included, while the task table, index and dependency lists stay those of
// the first record: task i is then read as rec.Tasks[i], out of range when
// the new list is shorter. A hand-written (etcdctl) value is enough: Apply
// itself panics as soon as it pushes a task into the ready queue, and so
// does every Dump. ARCHITECTURE §3: hand-written values are "reported and
// skipped, never a crash". Expected: a DAG record whose DAG differs from the
// one held is refused with an ApplyError (core.go applyDAG, the re-put
// branch `d.rec = rec` and the transition branch `d.rec = rec`).
func TestRegressionDAGRecordWithOtherTasksPanics(t *testing.T) {
	r := newRig(t).must(dagPut(spec("d1", tk("a"), tk("b"), tk("c")), DAGRunning, 1))
	shrunk := dagPut(spec("d1", tk("a")), DAGRunning, 1)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Apply panicked on a re-put with another task list: %v", p)
			}
		}()
		if err := r.apply(shrunk); err == nil {
			t.Errorf("a re-put of DAG d1 with another task list was applied; want an ApplyError")
		}
		// The next DAG's ready tasks are compared with d1's in the queue.
		if err := r.apply(dagPut(spec("d2", tk("z")), DAGRunning, 1)); err != nil {
			t.Errorf("d2: %v", err)
		}
	}()
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Dump panicked: %v", p)
			}
		}()
		_ = r.c.Dump()
	}()
}

// applyDAG checks that a retry starts run+1 and that no record is of an
// older run, but accepts a final status (succeeded, failed, cancelled) of a
// *later* run: running run=1 → cancelled run=7 is applied. The DAG is then
// in run 7 while its task records say run 1, and Restore, which treats a
// task record of an earlier run as reset by a retry, rebuilds a different
// state from the same keys (I4). Expected: a record that is not a retry
// must keep the run (core.go applyDAG, the `rec.Run < d.rec.Run` check).
func TestRegressionDAGRecordMayJumpRuns(t *testing.T) {
	r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1), pPut(Failed, 1), xPut(UpstreamFailed, 0))
	r.refuse(dagPut(pair, DAGFailed, 7), "run")
	if t.Failed() {
		// Show the consequence: Restore from the latest values disagrees.
		fresh := New(Config{})
		dags := []Entry{dagPut(pair, DAGFailed, 7)}
		dags[0].Rev = 1
		tasks := []Entry{pPut(Failed, 1), xPut(UpstreamFailed, 0)}
		fresh.Restore(r.rev, dags, tasks)
		if a, b := r.c.Dump(), fresh.Dump(); a != b {
			t.Logf("applied:\n%s\nrestored from the same keys:\n%s", a, b)
		}
	}
}

// The table lists pending → ready as "derived on apply", yet applyTask
// accepts it as a record, with no check that the dependencies succeeded:
// {status: ready, attempt: 0} written for a task whose dependency has not
// run makes the leader dispatch it at once. Likewise failed → pending
// (documented as derived by a DAG retry) is accepted as a record in a
// running DAG and leaves the task pending with no dependency left to wait
// for: it never becomes ready and the DAG never finishes. Expected: records
// for derived-only transitions are refused (core.go applyTask), or at
// least a ready record requires waiting == 0.
func TestRegressionDerivedTransitionsAcceptedAsRecords(t *testing.T) {
	t.Run("pending → ready before the dependency ran", func(t *testing.T) {
		h := leaderRig(t, "w1", "w2")
		h.submitSpec(spec("d1", tk("a"), tk("b", "a")))
		h.commitAll()
		hand := Entry{DAG: "d1", Task: "b", T: &TaskRecord{Status: Ready, Run: 1, Event: "hand"}, Rev: 99}
		if err := h.c.Apply(&hand); err == nil {
			h.c.Schedule(h.now)
			for _, e := range h.c.outbox {
				if e.Task == "b" && e.T.Status == Running {
					t.Errorf("b dispatched while its dependency a is %s", h.taskOf("d1", "a").status)
				}
			}
		}
	})
	t.Run("failed → pending in a running DAG", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Failed, 1))
		r.refuse(xPut(Pending, 1), "")
		if t.Failed() {
			t.Logf("after the record:\n%s", r.c.Dump())
		}
	})
}

// RemoveWorker then AddWorker with the same id while a dispatch to that
// worker is being committed: Schedule counted the slot on the old worker
// object; the commit registers the attempt on the new one without counting
// it; the result then releases it, and busy goes to -1. The worker is then
// given more attempts than it has slots. Expected: busy never negative,
// never more attempts than slots (leader.go afterTaskApplied registers
// w.attempts[id] without w.busy++, relying on Schedule's increment on the
// worker object that may since have been replaced).
func TestRegressionSlotAccountingAcrossWorkerRejoin(t *testing.T) {
	h := leaderRig(t, "w1")
	h.submitSpec(spec("d1", tk("a"), tk("b"), tk("c")))
	h.commitAll()
	h.c.Schedule(h.now) // a → w1, busy 1/1
	h.c.RemoveWorker("w1", h.now)
	h.c.AddWorker("w1", 1, nil)
	h.commitAll() // a's dispatch commits: w1 (the new one) runs a#1
	h.c.Report(result("d1", "a", 1, "w1", model.Succeeded), h.now)
	for _, w := range h.c.Workers() {
		if w.Busy < 0 {
			t.Errorf("worker %s busy=%d", w.ID, w.Busy)
		}
	}
	h.commitAll()
	// Not needed for the bug, but shows its effect: w1 (1 slot) can now be
	// handed two attempts at once.
	h.c.Schedule(h.now)
	h.commitAll()
	running := 0
	for _, id := range []string{"b", "c"} {
		if h.taskOf("d1", id).status == Running {
			running++
		}
	}
	if running > 1 {
		t.Errorf("a worker with 1 slot runs %d attempts", running)
	}
}

// A standby never calls Schedule, so nothing ever pops its ready queue:
// every task that becomes ready is pushed (setStatus) and stays there, with
// its whole DAG, after it has run and after its DAG is deleted. The queue of
// a long-lived standby grows with every task ever run. Expected: a bounded
// queue on replicas (leave it empty on non-leaders and build it in
// BecomeLeader, which already pushes every ready task; or drop deleted
// DAGs' entries).
func TestRegressionStandbyReadyQueueGrowsForever(t *testing.T) {
	h := leaderRig(t, "w1")
	const n = 50
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("d%02d", i)
		h.dispatchAll(spec(id, tk("a")))
		h.c.Report(result(id, "a", 1, "w1", model.Succeeded), h.now)
		h.commitAll() // a succeeded
		h.commitAll() // DAG succeeded
	}
	h.now = h.now.Add(time.Hour)
	if got := h.c.Expire(h.now); got != n {
		t.Fatalf("expired %d", got)
	}
	h.commitAll()
	if h.standby.DAGCount() != 0 {
		t.Fatalf("standby holds %d DAGs", h.standby.DAGCount())
	}
	if q := h.standby.QueueLen(); q != 0 {
		t.Errorf("standby with no DAG left holds %d entries in its ready queue (leader: %d)", q, h.c.QueueLen())
	}
}

// All entries of one etcd transaction share its revision, and the ready
// queue breaks priority ties by the revision that created the DAG, then by
// the task's index in its DAG. Two DAGs submitted together therefore
// interleave: the second DAG's first task goes before the first DAG's
// second task, not in submission order (ARCHITECTURE §2 "then by
// submission order"). Worse, the remaining ties (same index) are broken by
// the heap's history, which after Restore is the iteration order of a map:
// the dispatch order is not "a function of committed state only" (heap.go).
// Expected: a total order, e.g. (priority, creation revision, position of
// the DAG in its transaction or DAG id, task index).
func TestRegressionReadyOrderOfDAGsCommittedTogether(t *testing.T) {
	h := leaderRig(t, "w1")
	h.c.AddWorker("w1", 3, nil)
	h.submitSpec(spec("d1", tk("a"), tk("b")))
	h.submitSpec(spec("d2", tk("a"), tk("b")))
	h.commitAll() // one transaction: both DAGs created at the same revision
	h.c.Schedule(h.now)
	var order []string
	for _, e := range h.c.outbox {
		order = append(order, e.DAG+"/"+e.Task)
	}
	if got, want := strings.Join(order, " "), "d1/a d1/b d2/a"; got != want {
		t.Errorf("dispatch order %s, want %s (d1 was submitted first)", got, want)
	}
}

// The orphan timer (or RemoveWorker) proposes to re-queue an attempt; while
// that proposal is being committed the worker reconnects and reports the
// attempt. Adopt checks only the applied state — still running, this
// attempt, this worker — and answers true ("adopted, not run again"). The
// re-queue then commits, the task runs again as a new attempt, and the
// adopted attempt is never cancelled: two attempts run at once on live
// workers and the first one's result is dropped as stale. Expected: Adopt
// refuses (and cancels) an attempt whose task has a record in flight, or
// the re-queue cancels the attempt on whichever worker adopted it
// (leader.go Adopt; afterTaskApplied for running → ready).
func TestRegressionAdoptWhileRequeueInFlight(t *testing.T) {
	h := leaderRig(t, "w1", "w2")
	h.dispatchAll(spec("d1", tk("a"))) // a#1 → w1
	// New leader; w1 has not reconnected yet.
	h.c = h.replay()
	h.shown = 0
	h.c.AddWorker("w2", 1, nil)
	h.c.BecomeLeader(h.now)
	h.c.TakeEffects()
	h.now = h.now.Add(2 * time.Second)
	h.c.Fire(TimerOrphan, model.AttemptID{DAG: "d1", Task: "a", Attempt: 1}, h.now) // re-queue proposed
	h.c.AddWorker("w1", 1, nil)
	adopted := h.c.Adopt("w1", model.AttemptID{DAG: "d1", Task: "a", Attempt: 1}).Adopted()
	cancelled := false
	for _, ef := range h.c.TakeEffects() {
		cancelled = cancelled || ef.Kind == EffectCancel
	}
	h.commitAll() // a → ready (orphan)
	for _, ef := range h.c.TakeEffects() {
		cancelled = cancelled || ef.Kind == EffectCancel
	}
	h.c.Schedule(h.now)
	h.commitAll() // a#2 dispatched
	if st := h.taskOf("d1", "a"); adopted && !cancelled && st.attempt() == 2 && st.status == Running {
		t.Errorf("Adopt(w1, d1/a#1) = true and a#1 was never cancelled, yet a#2 now runs on %s: two attempts at once", st.rec.Worker)
	}
}

// A failed attempt that is retried is summarized in the next attempt's
// history with outcome "retry": the summary is taken at dispatch from the
// task's latest record, which by then is the backoff timer's ready record
// (event "retry"), not the record that ended the attempt (event "fail" or
// "timeout"). The API's attempt history thus never shows why a retried
// attempt ended. Expected: outcome "fail" (or "timeout") for those
// attempts (leader.go Schedule → summarize(t.rec), Outcome: r.Event).
func TestRegressionHistoryOutcomeOfRetriedAttempt(t *testing.T) {
	h := leaderRig(t, "w1")
	a := tk("a")
	a.MaxRetries = 1
	h.dispatchAll(spec("d1", a))
	h.c.Report(result("d1", "a", 1, "w1", model.TimedOut), h.now)
	h.commitAll()
	h.now = h.now.Add(2 * time.Second)
	h.c.Fire(TimerRetry, model.AttemptID{DAG: "d1", Task: "a", Attempt: 1}, h.now)
	h.commitAll()
	h.c.Schedule(h.now)
	h.commitAll()
	v, _ := h.c.Task("d1", "a")
	var got []string
	for _, a := range v.History {
		got = append(got, fmt.Sprintf("#%d:%s", a.Attempt, a.Outcome))
	}
	if g := strings.Join(got, ","); g != "#1:timeout" {
		t.Errorf("history %s, want #1:timeout", g)
	}
}

// CancelDAG while the DAG's final record is in flight: the request is
// accepted (nil) and remembered in wantCancel, but the DAG then finishes
// (failed) and wantCancel is never cleared. When the failed DAG is later
// retried, applying the retry finds wantCancel still set and proposes
// cancelling the new run at once. Expected: a retried run is not cancelled
// by a request made against the previous one (leader.go CancelDAG /
// reconcileDAG: clear wantCancel when the DAG reaches a final status).
func TestRegressionStaleCancelKillsRetriedRun(t *testing.T) {
	h := leaderRig(t, "w1")
	h.dispatchAll(spec("d1", tk("a")))
	h.c.Report(result("d1", "a", 1, "w1", model.Failed), h.now)
	h.commitAll() // a failed; DAG failed proposed
	if err := h.c.CancelDAG("d1", h.now); err != nil {
		t.Fatalf("cancel: %v", err) // accepted: the DAG is still running
	}
	h.commitAll() // DAG failed
	if err := h.c.RetryDAG("d1", h.now); err != nil {
		t.Fatal(err)
	}
	out := h.commitAll() // run 2 starts
	if strings.Contains(out, "dag d1 cancelled") {
		t.Errorf("the retried run is cancelled by the earlier request:\n%s", out)
	}
}

// RemoveWorker re-queues the worker's attempts in the iteration order of a
// Go map, so the order of the proposals (and of the log) differs from run
// to run: the leader is not deterministic, which the package promises ("no
// randomness") and scenario tests rely on. Expected: a sorted order
// (leader.go RemoveWorker, `for aid, t := range w.attempts`).
func TestRegressionRemoveWorkerOrderIsRandom(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		h := leaderRig(t, "w1")
		h.c.AddWorker("w1", 4, nil)
		h.dispatchAll(spec("d1", tk("a"), tk("b"), tk("c"), tk("d")))
		h.c.RemoveWorker("w1", h.now)
		var order []string
		for _, e := range h.c.outbox {
			order = append(order, e.Task)
		}
		seen[strings.Join(order, " ")] = true
	}
	if len(seen) > 1 {
		t.Errorf("RemoveWorker proposed the same re-queues in %d different orders", len(seen))
	}
}

// sameSpec compares what two specs encode to: equal values without
// encoding them, specs that differ only in how an empty field is spelled
// (nil or empty) as the same DAG, and anything that encodes differently as
// different. The random part pins the rule the fast path must keep: over
// specs mutated field by field, sameSpec agrees with comparing encodings.
func TestSameSpec(t *testing.T) {
	mk := func() *model.DAG {
		d := &model.DAG{ID: "d", Name: "d", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}, {ID: "b", Kind: model.KindShell, Command: "true", DependsOn: []string{"a"}}}}
		d.Normalize()
		return d
	}
	a, b := mk(), mk()
	if !sameSpec(a, b) {
		t.Fatal("two equal specs differ")
	}
	b.Tasks[0].Env, b.Tasks[0].DependsOn = map[string]string{}, []string{}
	if !sameSpec(a, b) {
		t.Fatal("empty and nil env and dependencies must be the same spec")
	}
	b.Tasks[1].Command = "false"
	if sameSpec(a, b) {
		t.Fatal("specs with different commands are the same")
	}

	mutations := []func(d *model.DAG, r *rand.Rand){
		func(d *model.DAG, r *rand.Rand) { d.Name += "x" },
		func(d *model.DAG, r *rand.Rand) { d.MaxActiveTasks = r.Intn(2) },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Env = map[string]string{} },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Env = map[string]string{"K": "v"} },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Selector = nil },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Selector = map[string]string{} },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[0].DependsOn = []string{} },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[1].DependsOn = nil },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Priority = r.Intn(2) },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Fail = model.Probability(r.Intn(2)) / 2 },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Duration = model.Duration(r.Intn(2)) },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Timeout += model.Duration(r.Intn(2)) },
		func(d *model.DAG, r *rand.Rand) { d.Tasks[r.Intn(2)].Pool = []string{"", "gpu"}[r.Intn(2)] },
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		a, b := mk(), mk()
		for k := r.Intn(4); k > 0; k-- {
			mutations[r.Intn(len(mutations))](a, r)
		}
		for k := r.Intn(4); k > 0; k-- {
			mutations[r.Intn(len(mutations))](b, r)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if got, want := sameSpec(a, b), bytes.Equal(ja, jb); got != want {
			t.Fatalf("sameSpec = %v, encodings equal = %v:\n%s\n%s", got, want, ja, jb)
		}
	}
}

// A worker whose clock is far off reports a finish in year 10000, which no
// record can hold (the store refuses a time RFC 3339 cannot write, as
// encoding/json did). Expected: the result is recorded with the leader's
// time instead, so the task still finishes (leader.go decide).
func TestResultFromAWorkerClockBeyondYear9999(t *testing.T) {
	h := leaderRig(t, "w1")
	h.dispatchAll(spec("d1", tk("a")))
	r := result("d1", "a", 1, "w1", model.Succeeded)
	r.FinishedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	h.c.Report(r, h.now)
	h.commitAll()
	a := h.taskOf("d1", "a")
	if a.status != Succeeded || a.rec.FinishedAt == nil || !a.rec.FinishedAt.Equal(h.now) {
		t.Fatalf("task a: %s, finished at %v; want succeeded at the leader's time %v", a.status, a.rec.FinishedAt, h.now)
	}
}

// earlyRig is a leader with worker w1 allowed early attempts, and DAG d's
// one task a dispatched to it: proposed, sent, not committed.
func earlyRig(t *testing.T) *harness {
	h := leaderRig(t, "w1")
	h.c.AllowEarly("w1", true)
	h.submitSpec(model.DAG{ID: "d", Name: "d", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}})
	h.commitAll()
	h.c.Schedule(h.now)
	return h
}

// An attempt sent early (AllowEarly) whose dispatch record the state
// machine then refuses (a hand-written record for the task committed
// first) runs on its worker with no record to say so. Expected: the
// attempt is cancelled on its worker, its slot freed, and the task, still
// ready, queued again and dispatched anew.
func TestEarlyDispatchRefusedRecordCancelsTheAttempt(t *testing.T) {
	h := earlyRig(t)
	effects := h.c.TakeEffects()
	if len(effects) != 1 || effects[0].Kind != EffectDispatch {
		t.Fatalf("want the attempt sent with its proposal, got %v", effects)
	}
	// A record for attempt 1 written by hand gets in first: the leader's
	// own dispatch of attempt 1 is then refused.
	hand := Entry{DAG: "d", Task: "a", T: &TaskRecord{Status: Running, Run: 1, Attempt: 1, Worker: "elsewhere", Event: "dispatch"}}
	h.c.outbox = append([]Entry{hand}, h.c.outbox...)
	h.commitAll()
	var cancelled bool
	for _, ef := range h.c.TakeEffects() {
		if ef.Kind == EffectCancel && ef.Worker == "w1" && ef.ID.Attempt == 1 {
			cancelled = true
		}
	}
	if !cancelled {
		t.Errorf("the refused early attempt was not cancelled on w1")
	}
	if w := h.c.Workers()[0]; w.Busy != 0 {
		t.Errorf("w1 busy=%d after its attempt was cancelled", w.Busy)
	}
	if a := h.taskOf("d", "a"); a.early != nil || a.inflight || a.dispatching {
		t.Errorf("task keeps leader state: early=%v inflight=%v dispatching=%v", a.early, a.inflight, a.dispatching)
	}
}

// A DAG deleted while an attempt of it was sent early and its record not
// applied: the record can never apply. Expected: the attempt is cancelled
// on its worker and its slot freed.
func TestEarlyDispatchOfADeletedDAGIsCancelled(t *testing.T) {
	h := earlyRig(t)
	h.c.TakeEffects()
	h.c.outbox = append([]Entry{{DAG: "d", Delete: true}}, h.c.outbox...) // by hand: etcdctl del
	if out := h.commitAll(); !strings.Contains(out, "effect: cancel d/a#1 on w1") {
		t.Errorf("the early attempt of the deleted DAG was not cancelled:\n%s", out)
	}
	if w := h.c.Workers()[0]; w.Busy != 0 {
		t.Errorf("w1 busy=%d", w.Busy)
	}
}

// While etcd is full nothing can be recorded; an attempt sent early would
// run with no record ever to say so. Expected: with early attempts
// suspended, a dispatch to a worker allowed them goes out only once its
// record is committed.
func TestSuspendedEarlyAttemptsWaitForTheirRecord(t *testing.T) {
	h := leaderRig(t, "w1")
	h.c.AllowEarly("w1", true)
	h.c.SuspendEarly(true)
	h.submitSpec(model.DAG{ID: "d", Name: "d", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}})
	h.commitAll()
	h.c.Schedule(h.now)
	if effects := h.c.TakeEffects(); len(effects) != 0 {
		t.Fatalf("sent before its record: %v", effects)
	}
	if out := h.commitAll(); !strings.Contains(out, "effect: dispatch d/a#1 to w1") {
		t.Fatalf("not sent once recorded:\n%s", out)
	}
}
