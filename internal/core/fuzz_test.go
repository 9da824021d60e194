package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// FuzzApply decodes arbitrary bytes into a sequence of log entries — DAG
// puts with any status and run, deletions, task records with any status,
// run, attempt and cascade flag, as a hand-edited etcd could hold — and
// applies them to a core, a replica or (when the first byte is odd) a
// leader with workers whose own proposals, dispatches, results and timers
// are interleaved with the entries. Apply must never panic; an entry it
// refuses must be an *ApplyError and leave Dump() unchanged; the core's
// counters must stay consistent with its tasks; and replaying the entries it
// accepted must rebuild the same state.
//
//	go test ./internal/core/ -run '^$' -fuzz FuzzApply -fuzztime 60s
func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	// A DAG, a dispatch, a success, a failure cascade, a DAG final record.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 0, 0, 2, 0, 1, 0, 3, 0, 0, 4, 0, 1, 0})
	f.Add([]byte{1, 0, 0, 1, 0, 0, 20, 21, 22, 3, 0, 0, 2, 0, 1, 0, 23, 24, 25, 26, 27, 28, 29, 30, 31})
	for seed := 0; seed < 8; seed++ {
		b := make([]byte, 200)
		x := uint32(seed*2654435761 + 1)
		for i := range b {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			b[i] = byte(x)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runFuzzApply(t, data)
	})
}

// fuzzShapes are the DAGs (tasks, handlers, notifications) a fuzzed DAG
// record can carry.
var fuzzShapes = []model.DAG{
	{Tasks: []model.Task{tk("a"), tk("b", "a"), tk("c", "a"), tk("d", "b", "c")}},
	{Tasks: []model.Task{tk("a"), tk("b", "a"), tk("c", "b")}},
	{Tasks: []model.Task{tk("a")}},
	{Tasks: []model.Task{tk("a"), tk("b")}},
	// Trigger rules, conditions, continue_on_failure, handlers and
	// notifications.
	{Tasks: []model.Task{withRules(tk("a"), "", "", true), withRules(tk("b", "a"), model.OneFailed, "", false),
		withRules(tk("c", "a"), model.AllDone, `tasks.a.status == "failed"`, false),
		withRules(tk("d", "b", "c"), model.NoneFailed, "false", false)},
		OnFailure: ptr(tk(model.OnFailureID)), OnExit: ptr(tk(model.OnExitID)),
		Notify: []model.Notification{{URL: "http://hook.test/", On: []string{"failed", "cancelled"}}}},
	{Tasks: []model.Task{tk("a"), withRules(tk("b", "a"), model.AllFailed, "dag.run", false),
		withRules(tk("c", "a", "b"), model.OneSuccess, "", true)},
		OnSuccess: ptr(tk(model.OnSuccessID)), Notify: []model.Notification{{URL: "http://hook.test/"}}},
	// Map groups: a literal, and one over an upstream's outputs.
	{Tasks: []model.Task{tk("a"), withEach(tk("m", "a"), `["x","y"]`, 1), withEach(tk("n", "a"), `"{{ tasks.a.outputs.list }}"`, 0),
		tk("b", "m", "n")}, OnExit: ptr(tk(model.OnExitID))},
}

func withEach(t model.Task, each string, maxActive int) model.Task {
	t.ForEach, t.MaxActive = model.ForEach(each), maxActive
	return t
}

func withRules(t model.Task, rule model.TriggerRule, when string, cont bool) model.Task {
	t.TriggerRule, t.When, t.ContinueOnFailure = rule, when, cont
	return t
}

func ptr(t model.Task) *model.Task { return &t }

// fuzzOtherSpecs lets a DAG record for an existing DAG carry another task
// list than the DAG's. TestBugDAGRecordWithOtherTasksPanics shows that this
// panics today; turn it off to fuzz for anything else.
var fuzzOtherSpecs = true

var fuzzTaskIDs = []string{"a", "b", "c", "d", "zz", "on_failure", "on_exit", "notify[0]", "m", "m[0]", "m[1]", "m[2]", "n", "n[0]"}

var fuzzItems = []string{`["x","y"]`, `["x","y","z"]`, `[]`, `{}`, `[1`, ``}

var fuzzDAGStatuses = []DAGStatus{DAGRunning, DAGSucceeded, DAGFailed, DAGCancelled, "paused"}

type fuzzIn struct{ b []byte }

func (in *fuzzIn) more() bool { return len(in.b) > 0 }

func (in *fuzzIn) next() int {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return int(v)
}

func (in *fuzzIn) pick(n int) int { return in.next() % n }

func runFuzzApply(t *testing.T, data []byte) {
	in := &fuzzIn{b: data}
	leader := in.next()%2 == 1
	c := New(Config{RetryBase: time.Millisecond, RetryCap: 4 * time.Millisecond, OrphanGrace: time.Millisecond})
	now := t0
	spare, spares := "s0", 0
	if leader {
		c.AddWorker("w1", 2, nil)
		c.AddWorker(spare, 1, nil)
		c.BecomeLeader(now)
	}
	var accepted []Entry
	var rev int64
	apply := func(e Entry) {
		if in.pick(4) != 0 {
			rev++ // else: the same revision as the previous entry, one transaction
		}
		e.Rev = rev
		before := c.Dump()
		err := c.Apply(&e)
		if err != nil {
			var ae *ApplyError
			if !errors.As(err, &ae) {
				t.Fatalf("%s: error %T %v, want *ApplyError", fmtEntry(&e), err, err)
			}
			if after := c.Dump(); after != before {
				t.Fatalf("%s: refused (%v) but changed the state\nbefore:\n%s\nafter:\n%s", fmtEntry(&e), err, before, after)
			}
			return
		}
		accepted = append(accepted, e)
		checkConsistent(t, c, fmtEntry(&e))
	}
	for steps := 0; in.more() && steps < 300; steps++ {
		op := in.pick(19)
		if !leader && op >= 10 {
			op %= 10
		}
		switch {
		case op < 3:
			apply(fuzzDAGEntry(in, c))
		case op == 3:
			apply(Entry{DAG: fuzzDAGID(in), Delete: true})
		case op < 10:
			apply(fuzzTaskEntry(in, c))
		case op < 13: // commit the leader's next proposals
			for _, e := range c.TakeProposals(1 + in.pick(3)) {
				apply(e)
			}
		case op == 13:
			c.Schedule(now)
		case op == 14:
			now = now.Add(time.Duration(in.pick(4)) * time.Millisecond)
			if t := fuzzTask(in, c); t != nil {
				r := model.Result{AttemptID: t.attemptID(), Outcome: []model.Outcome{model.Succeeded, model.Failed, model.TimedOut, model.Cancelled}[in.pick(4)], ExitCode: -1}
				if t.rec != nil {
					r.Worker = t.rec.Worker
				}
				if in.pick(4) == 0 {
					r.Worker = spare
				}
				c.Report(r, now)
			}
		case op == 15:
			if t := fuzzTask(in, c); t != nil {
				c.Fire(TimerKind(1+in.pick(2)), t.attemptID(), now)
			}
			if in.pick(8) == 0 {
				// A worker leaves and another joins. (Not under the same id:
				// see TestBugSlotAccountingAcrossWorkerRejoin. With one slot
				// per such worker, RemoveWorker's map-ordered re-queues stay
				// deterministic.)
				c.RemoveWorker(spare, now)
				spares++
				spare = fmt.Sprintf("s%d", spares)
				c.AddWorker(spare, 1, nil)
			}
		case op == 16:
			id := fuzzDAGID(in)
			switch in.pick(3) {
			case 0:
				_ = c.CancelDAG(id, now)
			case 1:
				_ = c.RetryDAG(id, now)
			default:
				_ = c.DeleteDAG(id, now)
			}
		case op == 17:
			now = now.Add(time.Duration(in.pick(4)) * time.Millisecond)
			c.Expire(now)
		case op == 18: // the leader steps down and takes over again
			c.StepDown()
			c.AddWorker("w1", 2, nil)
			c.AddWorker(spare, 1, nil)
			c.BecomeLeader(now)
		}
		c.TakeEffects()
	}
	// I4: the accepted entries rebuild the same state on a fresh replica.
	fresh := New(c.Config())
	for i := range accepted {
		e := accepted[i]
		if err := fresh.Apply(&e); err != nil {
			t.Fatalf("replaying accepted entry %d %s: %v", i, fmtEntry(&e), err)
		}
	}
	if a, b := c.Dump(), fresh.Dump(); a != b {
		t.Fatalf("replay differs\ncore:\n%s\nreplay:\n%s", a, b)
	}
}

func fuzzDAGID(in *fuzzIn) string { return []string{"d1", "d2", "d3"}[in.pick(3)] }

func fuzzDAGEntry(in *fuzzIn, c *Core) Entry {
	id := fuzzDAGID(in)
	if in.pick(32) == 0 {
		return Entry{DAG: id} // no record
	}
	shape := fuzzShapes[in.pick(len(fuzzShapes))]
	status := fuzzDAGStatuses[in.pick(len(fuzzDAGStatuses))]
	run := 1
	if d := c.dags[id]; d != nil {
		if !fuzzOtherSpecs || in.pick(8) != 0 {
			shape = d.rec.DAG
		}
		run = d.rec.Run + []int{0, 1, 0, 1, -1, 2}[in.pick(6)]
	} else if in.pick(8) == 0 {
		run = in.pick(3)
	}
	d := shape
	d.ID, d.Name, d.Tasks = id, id, append([]model.Task(nil), shape.Tasks...)
	return Entry{DAG: id, D: &DAGRecord{DAG: d, Status: status, Run: run, SubmittedAt: t0, CancelRequested: in.pick(6) == 0}}
}

func fuzzTaskEntry(in *fuzzIn, c *Core) Entry {
	id := fuzzDAGID(in)
	taskID := fuzzTaskIDs[in.pick(len(fuzzTaskIDs))]
	if in.pick(32) == 0 {
		return Entry{DAG: id, Task: taskID} // no record
	}
	status := Status(in.pick(int(numStatuses) + 1)) // numStatuses itself is invalid
	r := TaskRecord{Status: status, Run: 1, Event: "fuzz", Worker: []string{"w1", "s0", ""}[in.pick(3)]}
	attempt, run := 0, 1
	if d := c.dags[id]; d != nil {
		run = d.rec.Run
		if t := d.find(taskID); t != nil {
			attempt = t.attempt()
		}
	}
	// Mostly what a leader would write, sometimes off by one.
	if status == Running {
		attempt++
	}
	r.Attempt = attempt + []int{0, 0, 0, 1, -1}[in.pick(5)]
	r.Run = run + []int{0, 0, 0, 1, -1}[in.pick(5)]
	r.Cascade = status == UpstreamFailed
	if in.pick(8) == 0 {
		r.Cascade = !r.Cascade
	}
	if r.Cascade {
		r.Cause = "a"
	}
	r.Retries = in.pick(3)
	if status == Running && in.pick(2) == 0 {
		r.Event, r.Items, r.Expanded = EventExpand, json.RawMessage(fuzzItems[in.pick(len(fuzzItems))]), r.Run
	}
	return Entry{DAG: id, Task: taskID, T: &r}
}

// fuzzTask picks an existing task, or nil.
func fuzzTask(in *fuzzIn, c *Core) *task {
	id := fuzzDAGID(in)
	taskID := fuzzTaskIDs[in.pick(len(fuzzTaskIDs))]
	return c.lookup(id, taskID)
}

// checkConsistent asserts the core's derived bookkeeping agrees with its
// tasks: per-status counters, each DAG's unfinished count, and each task's
// count of dependencies that have not succeeded.
func checkConsistent(t *testing.T, c *Core, after string) {
	t.Helper()
	var total [numStatuses]int
	for _, id := range c.sortedDAGIDs() {
		d := c.dags[id]
		var counts [numStatuses]int32
		var byRole [numRoles][numStatuses]int32
		var cont [numRoles]int32
		remaining := 0
		var groupsRunning int32
		for _, g := range d.groups {
			var gc [numStatuses]int32
			for j := range g.inst {
				it := &g.inst[j]
				gc[it.status]++
				counts[it.status]++
				total[it.status]++
				if !it.status.Terminal() {
					remaining++
				}
			}
			if gc != g.counts {
				t.Fatalf("after %s: group %s/%s counts %v, instances say %v", after, id, d.tasks[g.idx].id(), g.counts, gc)
			}
		}
		for i := range d.tasks {
			tk := &d.tasks[i]
			if isGroup(tk) && tk.status == Running {
				groupsRunning++
			}
			if tk.status >= numStatuses {
				t.Fatalf("after %s: %s/%s has status %d", after, id, tk.id(), tk.status)
			}
			counts[tk.status]++
			total[tk.status]++
			if !tk.status.Terminal() {
				remaining++
			}
			var w, bad, skipped int32
			for _, j := range d.depsOf(int32(i)) {
				switch d.tasks[j].outcome() {
				case endedOK:
				case endedBad:
					bad++
					w++
				case endedSkipped:
					skipped++
					w++
				default:
					w++
				}
			}
			if w != tk.waiting || bad != tk.bad || skipped != tk.skipped {
				t.Fatalf("after %s: %s/%s waiting=%d bad=%d skipped=%d, but its dependencies say %d %d %d\n%s",
					after, id, tk.id(), tk.waiting, tk.bad, tk.skipped, w, bad, skipped, c.Dump())
			}
			r := d.role(tk.idx)
			byRole[r][tk.status]++
			if tk.status == Failed && tk.spec().ContinueOnFailure {
				cont[r]++
			}
		}
		if counts != d.counts {
			t.Fatalf("after %s: DAG %s counts %v, tasks say %v", after, id, d.counts, counts)
		}
		if byRole != d.byRole || cont != d.contFailed {
			t.Fatalf("after %s: DAG %s counts by role %v %v, tasks say %v %v", after, id, d.byRole, d.contFailed, byRole, cont)
		}
		if groupsRunning != d.groupsRunning {
			t.Fatalf("after %s: DAG %s groupsRunning=%d, tasks say %d", after, id, d.groupsRunning, groupsRunning)
		}
		if remaining != d.remaining {
			t.Fatalf("after %s: DAG %s remaining=%d, tasks say %d\n%s", after, id, d.remaining, remaining, c.Dump())
		}
	}
	if total != c.counts {
		t.Fatalf("after %s: counts %v, tasks say %v", after, fmt.Sprint(c.counts), fmt.Sprint(total))
	}
}
