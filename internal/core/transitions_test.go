package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// These tests pin the transition tables of status.go and the checks Apply
// makes on every record, by applying crafted entries to a replica core whose
// state was built by applying real entries.

// rig applies entries to a replica (non-leader) core, round-tripping each
// through JSON as etcd would.
type rig struct {
	t   *testing.T
	c   *Core
	rev int64
}

func newRig(t *testing.T) *rig { return &rig{t: t, c: New(Config{})} }

func (r *rig) apply(e Entry) error {
	r.t.Helper()
	r.rev++
	e = roundTrip(r.t, e)
	e.Rev = r.rev
	return r.c.Apply(&e)
}

func (r *rig) must(entries ...Entry) *rig {
	r.t.Helper()
	for _, e := range entries {
		if err := r.apply(e); err != nil {
			r.t.Fatalf("setup: %v\n%s", err, r.c.Dump())
		}
	}
	return r
}

// refuse applies e and asserts that it is refused with an *ApplyError whose
// message contains want, leaving the state as it was.
func (r *rig) refuse(e Entry, want string) {
	r.t.Helper()
	before, counts := r.c.Dump(), r.c.Counts()
	err := r.apply(e)
	var ae *ApplyError
	switch {
	case err == nil:
		r.t.Errorf("%s: applied, want an error containing %q\n%s", fmtEntry(&e), want, r.c.Dump())
		return
	case !errors.As(err, &ae):
		r.t.Errorf("%s: error %T %v, want *ApplyError", fmtEntry(&e), err, err)
	case !strings.Contains(err.Error(), want):
		r.t.Errorf("%s: error %q, want it to contain %q", fmtEntry(&e), err, want)
	}
	if after := r.c.Dump(); after != before {
		r.t.Errorf("%s: refused entry changed the state\nbefore:\n%s\nafter:\n%s", fmtEntry(&e), before, after)
	}
	if after := r.c.Counts(); fmt.Sprint(after) != fmt.Sprint(counts) {
		r.t.Errorf("%s: refused entry changed the counts: %v → %v", fmtEntry(&e), counts, after)
	}
}

func (r *rig) status(dagID, taskID string) Status {
	r.t.Helper()
	v, ok := r.c.Task(dagID, taskID)
	if !ok {
		r.t.Fatalf("no task %s/%s", dagID, taskID)
	}
	return v.Status
}

func (r *rig) dagStatus(id string) DAGStatus {
	r.t.Helper()
	s, ok := r.c.Summary(id)
	if !ok {
		r.t.Fatalf("no DAG %s", id)
	}
	return s.Status
}

func spec(id string, tasks ...model.Task) model.DAG {
	return model.DAG{ID: id, Name: id, Tasks: tasks}
}

func tk(id string, deps ...string) model.Task {
	return model.Task{ID: id, Kind: model.KindNoop, DependsOn: deps, Timeout: model.Duration(time.Minute)}
}

// pair is the DAG most tests use: x depends on p.
var pair = spec("d", tk("p"), tk("x", "p"))

func dagPut(d model.DAG, status DAGStatus, run int) Entry {
	return Entry{DAG: d.ID, D: &DAGRecord{DAG: d, Status: status, Run: run, SubmittedAt: t0}}
}

func taskPut(dagID, taskID string, rec TaskRecord) Entry {
	return Entry{DAG: dagID, Task: taskID, T: &rec}
}

// rec builds a task record the way the leader would for that status.
func rec(s Status, run, attempt int) TaskRecord {
	r := TaskRecord{Status: s, Run: run, Attempt: attempt, Event: "test"}
	if attempt > 0 {
		r.Worker = "w1"
	}
	switch s {
	case Retrying:
		r.Retries = 1
	case UpstreamFailed:
		r.Cascade, r.Cause = true, "p"
	}
	return r
}

// Shorthands for the records of pair's tasks in run 1.
func pPut(s Status, attempt int) Entry { return taskPut("d", "p", rec(s, 1, attempt)) }
func xPut(s Status, attempt int) Entry { return taskPut("d", "x", rec(s, 1, attempt)) }

// documentedTaskTransitions is the table in the comment above
// taskTransitions in status.go, transcribed literally.
func documentedTaskTransitions() map[[2]Status]bool {
	m := map[[2]Status]bool{}
	add := func(from Status, to ...Status) {
		for _, s := range to {
			m[[2]Status{from, s}] = true
		}
	}
	add(Pending, Ready)                       // all dependencies succeeded (derived on apply)
	add(Pending, UpstreamFailed)              // cascade from a failed ancestor
	add(Ready, UpstreamFailed)                //
	add(Running, UpstreamFailed)              //
	add(Retrying, UpstreamFailed)             //
	add(Ready, Running)                       // the leader dispatched an attempt
	add(Ready, Succeeded)                     // dispatch and success in one record
	add(Ready, Failed)                        // its dispatch record cannot be stored (poison)
	add(Running, Succeeded, Failed, Retrying) //
	add(Running, Ready)                       // orphan: no retry consumed
	add(Running, Running)                     // a pod attempt handed over (TestHandoverRecord)
	add(Retrying, Ready)                      // the backoff timer fired
	add(Pending, Cancelled)                   // * → cancelled (non-terminal states)
	add(Ready, Cancelled)                     //
	add(Running, Cancelled)                   //
	add(Retrying, Cancelled)                  //
	add(Failed, Pending)                      // the DAG was retried (derived)
	add(UpstreamFailed, Pending)              //
	add(Cancelled, Pending)                   //
	add(Pending, Skipped)                     // its trigger rule says skip, or a handler is not needed
	add(Ready, Skipped)                       // its condition is false
	add(Skipped, Pending)                     // the DAG was retried (derived)
	add(Succeeded, Pending)                   // the DAG was retried: a handler or notification (derived)
	return m
}

// TestTaskTransitionTableMatchesDoc checks allowed() against the table that
// status.go documents, over every (from, to) pair and a few out-of-range
// values.
func TestTaskTransitionTableMatchesDoc(t *testing.T) {
	doc := documentedTaskTransitions()
	for from := Status(0); from < numStatuses; from++ {
		for to := Status(0); to < numStatuses; to++ {
			if got, want := allowed(from, to), doc[[2]Status{from, to}]; got != want {
				t.Errorf("allowed(%s, %s) = %v; the table in status.go's comment says %v", from, to, got, want)
			}
		}
	}
	for _, s := range []Status{numStatuses, 200} {
		for o := Status(0); o <= numStatuses; o++ {
			if allowed(s, o) || allowed(o, s) {
				t.Errorf("allowed accepts out-of-range status %d with %s", s, o)
			}
		}
	}
	for s := Status(0); s < numStatuses; s++ {
		if got, want := s.Terminal(), s >= Succeeded; got != want {
			t.Errorf("%s.Terminal() = %v", s, got)
		}
		if p, err := ParseStatus(s.String()); err != nil || p != s {
			t.Errorf("ParseStatus(%q) = %v, %v", s, p, err)
		}
	}
}

// taskStates builds each task status for x in pair, in a running DAG of run
// 1, by applying the entries that lead there. It returns x's attempt number.
var taskStates = map[Status]func(r *rig) int{
	Pending: func(r *rig) int { return 0 },
	Ready: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Succeeded, 1))
		return 0
	},
	Running: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1))
		return 1
	},
	Retrying: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Retrying, 1))
		return 1
	},
	Succeeded: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Succeeded, 1))
		return 1
	},
	Failed: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Failed, 1))
		return 1
	},
	UpstreamFailed: func(r *rig) int {
		r.must(pPut(Running, 1), pPut(Failed, 1), xPut(UpstreamFailed, 0))
		return 0
	},
	Cancelled: func(r *rig) int {
		r.must(xPut(Cancelled, 0))
		return 0
	},
	Skipped: func(r *rig) int {
		r.must(xPut(Skipped, 0))
		return 0
	},
}

// TestTaskTransitionsApply applies, for every (from, to) pair, the record the
// leader would write for `to` on a task in status `from`: exactly the pairs
// recordAllowed() permits are applied, and every other one, derived-only
// transitions included, is refused with an *ApplyError that leaves the state
// unchanged.
func TestTaskTransitionsApply(t *testing.T) {
	for from := Status(0); from < numStatuses; from++ {
		for to := Status(0); to < numStatuses; to++ {
			t.Run(from.String()+"→"+to.String(), func(t *testing.T) {
				r := newRig(t)
				r.must(dagPut(pair, DAGRunning, 1))
				attempt := taskStates[from](r)
				if got := r.status("d", "x"); got != from {
					t.Fatalf("setup reached %s, want %s", got, from)
				}
				if from == Running && to == Running {
					// Only a pod task's hand-over: TestHandoverRecord.
					r.refuse(taskPut("d", "x", rec(to, 1, attempt)), "except to hand its attempt over")
					return
				}
				if to == Running || (from == Ready && (to == Succeeded || to == Failed)) {
					attempt++ // a record that starts an attempt
				}
				e := taskPut("d", "x", rec(to, 1, attempt))
				if !recordAllowed(from, to) {
					r.refuse(e, "a record cannot move a task from "+from.String()+" to "+to.String())
					return
				}
				if err := r.apply(e); err != nil {
					t.Fatalf("legal transition refused: %v", err)
				}
				if got := r.status("d", "x"); got != to {
					t.Fatalf("status %s after applying %s", got, to)
				}
			})
		}
	}
}

// TestTaskTransitionsDerived checks the transitions Apply makes by itself:
// pending → ready when the last dependency succeeds, and the DAG retry's
// reset of failed, upstream_failed and cancelled tasks to pending.
func TestTaskTransitionsDerived(t *testing.T) {
	d := spec("d", tk("a"), tk("b"), tk("c", "a", "b"), tk("e", "c"), tk("f"))
	r := newRig(t).must(dagPut(d, DAGRunning, 1))
	want := func(states string) {
		t.Helper()
		var got []string
		for _, id := range []string{"a", "b", "c", "e", "f"} {
			got = append(got, id+"="+r.status("d", id).String())
		}
		if g := strings.Join(got, " "); g != states {
			t.Errorf("got  %s\nwant %s", g, states)
		}
	}
	want("a=ready b=ready c=pending e=pending f=ready")
	put := func(id string, s Status, attempt int) Entry { return taskPut("d", id, rec(s, 1, attempt)) }
	r.must(put("a", Running, 1), put("a", Succeeded, 1))
	want("a=succeeded b=ready c=pending e=pending f=ready")
	r.must(put("b", Running, 1), put("b", Succeeded, 1))
	want("a=succeeded b=succeeded c=ready e=pending f=ready")
	c := rec(Failed, 1, 1)
	r.must(put("c", Running, 1), taskPut("d", "c", c))
	e := rec(UpstreamFailed, 1, 0)
	e.Cause = "c"
	r.must(taskPut("d", "e", e), put("f", Cancelled, 0), dagPut(d, DAGFailed, 1))
	want("a=succeeded b=succeeded c=failed e=upstream_failed f=cancelled")
	r.must(dagPut(d, DAGRunning, 2))
	want("a=succeeded b=succeeded c=ready e=pending f=ready")
	// Attempt numbers survive the retry; the retry budget does not.
	if v, _ := r.c.Task("d", "c"); v.Attempts != 1 || v.Retries != 0 {
		t.Errorf("c after retry: attempts=%d retries=%d, want 1 and 0", v.Attempts, v.Retries)
	}
	r.refuse(taskPut("d", "c", rec(Running, 2, 1)), "dispatch of attempt 1 after attempt 1")
	r.must(taskPut("d", "c", rec(Running, 2, 2)))
}

// documentedDAGTransitions is the comment above dagTransitions.
var documentedDAGTransitions = map[[2]DAGStatus]bool{
	{DAGRunning, DAGSucceeded}: true,
	{DAGRunning, DAGFailed}:    true,
	{DAGRunning, DAGCancelled}: true,
	{DAGFailed, DAGRunning}:    true,
	{DAGCancelled, DAGRunning}: true,
}

var dagStatuses = []DAGStatus{DAGRunning, DAGSucceeded, DAGFailed, DAGCancelled}

// dagStates builds pair in each DAG status (run 1) through real entries.
var dagStates = map[DAGStatus]func(r *rig){
	DAGRunning: func(r *rig) {},
	DAGSucceeded: func(r *rig) {
		r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Succeeded, 1), dagPut(pair, DAGSucceeded, 1))
	},
	DAGFailed: func(r *rig) {
		r.must(pPut(Running, 1), pPut(Failed, 1), xPut(UpstreamFailed, 0), dagPut(pair, DAGFailed, 1))
	},
	DAGCancelled: func(r *rig) {
		r.must(dagPut(pair, DAGCancelled, 1), pPut(Cancelled, 0), xPut(Cancelled, 0))
	},
}

// TestDAGTransitions covers every (from, to) pair of DAG statuses, each with
// the record the leader would write (a retry starts run 2; anything else
// keeps run 1). From a running DAG whose tasks have not finished only a
// cancellation can be applied; the preconditions are covered one by one in
// TestDAGPreconditions. A record repeating the current status and run is a
// no-op re-put.
func TestDAGTransitions(t *testing.T) {
	for _, from := range dagStatuses {
		for _, to := range dagStatuses {
			if got, want := dagAllowed(from, to), documentedDAGTransitions[[2]DAGStatus{from, to}]; got != want {
				t.Errorf("dagAllowed(%s, %s) = %v; status.go documents %v", from, to, got, want)
			}
			t.Run(string(from)+"→"+string(to), func(t *testing.T) {
				r := newRig(t)
				r.must(dagPut(pair, DAGRunning, 1))
				dagStates[from](r)
				run := 1
				if to == DAGRunning && from != DAGRunning {
					run = 2
				}
				e := dagPut(pair, to, run)
				legal := dagAllowed(from, to) && !(from == DAGRunning && to != DAGCancelled)
				switch {
				case from == to:
					before := r.c.Dump()
					if err := r.apply(e); err != nil {
						t.Fatalf("re-put refused: %v", err)
					}
					if after := r.c.Dump(); after != before {
						t.Errorf("re-put changed the state\nbefore:\n%s\nafter:\n%s", before, after)
					}
				case legal:
					if err := r.apply(e); err != nil {
						t.Fatalf("legal transition refused: %v", err)
					}
					if got := r.dagStatus("d"); got != to {
						t.Errorf("status %s, want %s", got, to)
					}
				case !dagAllowed(from, to):
					r.refuse(e, fmt.Sprintf("DAG cannot go from %s to %s", from, to))
				default:
					r.refuse(e, "DAG cannot")
				}
			})
		}
	}
}

// TestDAGPreconditions: a DAG succeeds only when every task has, fails only
// when none is unfinished (and not all succeeded), and is retried only into
// the next run once every task has finished.
func TestDAGPreconditions(t *testing.T) {
	running := func(r *rig) {} // every case starts from the DAG's creation
	cases := []struct {
		name  string
		setup func(r *rig)
		entry Entry
		err   string // empty: applied
	}{
		{"succeed with every task succeeded", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Succeeded, 1))
		}, dagPut(pair, DAGSucceeded, 1), ""},
		{"succeed with a task running", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1))
		}, dagPut(pair, DAGSucceeded, 1), "DAG cannot succeed with 1 tasks unfinished and 0 failed"},
		{"succeed with a task failed", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Failed, 1))
		}, dagPut(pair, DAGSucceeded, 1), "DAG cannot succeed with 0 tasks unfinished and 1 failed"},
		{"fail with a task unfinished", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Failed, 1))
		}, dagPut(pair, DAGFailed, 1), "DAG cannot fail while 1 tasks are unfinished"},
		{"fail with every task succeeded", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Succeeded, 1), xPut(Running, 1), xPut(Succeeded, 1))
		}, dagPut(pair, DAGFailed, 1), "DAG cannot fail"},
		{"fail with every task finished, one failed", func(r *rig) {
			r.must(pPut(Running, 1), pPut(Failed, 1), xPut(UpstreamFailed, 0))
		}, dagPut(pair, DAGFailed, 1), ""},
		{"cancel with tasks running", func(r *rig) {
			r.must(pPut(Running, 1))
		}, dagPut(pair, DAGCancelled, 1), ""},
		{"cancel with an older run", running, dagPut(pair, DAGCancelled, 0), "a cancelled record for run 0, DAG is in run 1"},
		{"retry a failed DAG into run 2", dagStates[DAGFailed], dagPut(pair, DAGRunning, 2), ""},
		{"retry a failed DAG into run 3", dagStates[DAGFailed], dagPut(pair, DAGRunning, 3), "a retry must start run 2, got 3"},
		{"retry a failed DAG into the same run", dagStates[DAGFailed], dagPut(pair, DAGRunning, 1), "a retry must start run 2, got 1"},
		{"retry a cancelled DAG into run 2", dagStates[DAGCancelled], dagPut(pair, DAGRunning, 2), ""},
		{"retry a cancelled DAG whose tasks are still stopping", func(r *rig) {
			r.must(pPut(Running, 1), dagPut(pair, DAGCancelled, 1))
		}, dagPut(pair, DAGRunning, 2), "cannot retry while 2 tasks are not finished"},
		{"retry a succeeded DAG", dagStates[DAGSucceeded], dagPut(pair, DAGRunning, 2), "DAG cannot go from succeeded to running"},
		{"retry twice", func(r *rig) {
			dagStates[DAGFailed](r)
			r.must(dagPut(pair, DAGRunning, 2))
		}, dagPut(pair, DAGRunning, 3), "DAG cannot go from running to running"},
		{"a failed run 2 then retried into run 3", func(r *rig) {
			dagStates[DAGFailed](r)
			r.must(dagPut(pair, DAGRunning, 2))
			f := rec(Failed, 2, 2)
			r.must(taskPut("d", "p", rec(Running, 2, 2)), taskPut("d", "p", f))
			u := rec(UpstreamFailed, 2, 0)
			r.must(taskPut("d", "x", u), dagPut(pair, DAGFailed, 2))
		}, dagPut(pair, DAGRunning, 3), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t).must(dagPut(pair, DAGRunning, 1))
			tc.setup(r)
			if tc.err != "" {
				r.refuse(tc.entry, tc.err)
				return
			}
			if err := r.apply(tc.entry); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := r.dagStatus("d"); got != tc.entry.D.Status {
				t.Errorf("status %s, want %s", got, tc.entry.D.Status)
			}
		})
	}
}

// TestDAGRecordChecks: what a DAG entry must be to be applied at all.
func TestDAGRecordChecks(t *testing.T) {
	r := newRig(t)
	r.refuse(Entry{DAG: "d"}, "DAG entry without a record")
	r.refuse(dagPut(pair, DAGFailed, 1), "a new DAG must be running in run 1, got failed in run 1")
	r.refuse(dagPut(pair, DAGRunning, 2), "a new DAG must be running in run 1, got running in run 2")
	r.refuse(dagPut(pair, DAGStatus("paused"), 1), "a new DAG must be running in run 1")
	r.refuse(dagPut(spec("d"), DAGRunning, 1), "DAG has no tasks")
	r.refuse(dagPut(spec("d", tk("a"), tk("a")), DAGRunning, 1), `duplicate task id "a"`)
	r.refuse(dagPut(spec("d", tk("a", "zz")), DAGRunning, 1), `task "a" depends on unknown task "zz"`)
	r.must(dagPut(pair, DAGRunning, 1))
	r.refuse(dagPut(pair, DAGStatus("paused"), 1), "DAG cannot go from running to paused")
	r.refuse(Entry{DAG: "d"}, "DAG entry without a record")

	// Deleting an unknown DAG is a no-op; deleting a DAG removes its tasks.
	before := r.c.Dump()
	if err := r.apply(Entry{DAG: "nope", Delete: true}); err != nil || r.c.Dump() != before {
		t.Errorf("delete of an unknown DAG: %v\n%s", err, r.c.Dump())
	}
	r.must(Entry{DAG: "d", Delete: true})
	if r.c.DAGCount() != 0 || r.c.Counts()[Ready] != 0 || r.c.Counts()[Pending] != 0 {
		t.Errorf("after delete: %d DAGs, counts %v", r.c.DAGCount(), r.c.Counts())
	}
	r.refuse(pPut(Running, 1), "unknown DAG")
	// The id can be used again: a new DAG.
	r.must(dagPut(pair, DAGRunning, 1))
}

// TestTaskRecordChecks: what a task record must be, beyond a legal
// transition, to be applied.
func TestTaskRecordChecks(t *testing.T) {
	t.Run("unknown DAG or task, no record", func(t *testing.T) {
		r := newRig(t)
		r.refuse(taskPut("nope", "p", rec(Running, 1, 1)), "unknown DAG")
		r.must(dagPut(pair, DAGRunning, 1))
		r.refuse(taskPut("d", "zz", rec(Running, 1, 1)), `DAG has no task "zz"`)
		r.refuse(Entry{DAG: "d", Task: "p"}, "task entry without a record")
	})
	t.Run("running needs the next attempt number", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1))
		r.refuse(pPut(Running, 0), "dispatch of attempt 0 after attempt 0")
		r.refuse(pPut(Running, 2), "dispatch of attempt 2 after attempt 0")
		r.must(pPut(Running, 1), pPut(Ready, 1)) // orphan: back to ready, same attempt
		r.refuse(pPut(Running, 1), "dispatch of attempt 1 after attempt 1")
		r.refuse(pPut(Running, 3), "dispatch of attempt 3 after attempt 1")
		r.must(pPut(Running, 2))
	})
	t.Run("other records keep the attempt number", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1))
		r.refuse(pPut(Succeeded, 2), "succeeded record for attempt 2, latest is 1")
		r.refuse(pPut(Succeeded, 0), "succeeded record for attempt 0, latest is 1")
		r.refuse(pPut(Retrying, 2), "retrying record for attempt 2, latest is 1")
		r.refuse(pPut(Cancelled, 0), "cancelled record for attempt 0, latest is 1")
		r.refuse(xPut(UpstreamFailed, 1), "upstream_failed record for attempt 1, latest is 0")
		r.must(pPut(Retrying, 1), pPut(Ready, 1), pPut(Running, 2), pPut(Succeeded, 2))
	})
	t.Run("cascade flag if and only if upstream_failed", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1))
		noFlag := rec(UpstreamFailed, 1, 0)
		noFlag.Cascade = false
		r.refuse(taskPut("d", "x", noFlag), "cascade flag false on a upstream_failed record")
		for _, s := range []Status{Failed, Succeeded, Retrying, Cancelled, Ready} {
			flagged := rec(s, 1, 1)
			flagged.Cascade = true
			r.refuse(taskPut("d", "p", flagged), "cascade flag true on a "+s.String()+" record")
		}
		flagged := rec(Cancelled, 1, 0)
		flagged.Cascade = true
		r.refuse(taskPut("d", "x", flagged), "cascade flag true on a cancelled record")
		r.must(pPut(Failed, 1), xPut(UpstreamFailed, 0))
	})
	t.Run("the run must be the DAG's", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1))
		r.refuse(taskPut("d", "p", rec(Running, 2, 1)), "record of run 2, DAG is in run 1")
		r.refuse(taskPut("d", "p", rec(Running, 0, 1)), "record of run 0, DAG is in run 1")
		r.must(pPut(Running, 1), pPut(Failed, 1), xPut(UpstreamFailed, 0), dagPut(pair, DAGFailed, 1), dagPut(pair, DAGRunning, 2))
		// A late record of run 1 cannot touch run 2.
		r.refuse(pPut(Running, 2), "record of run 1, DAG is in run 2")
		r.must(taskPut("d", "p", rec(Running, 2, 2)))
	})
	t.Run("no dispatch in a DAG that is not running", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1), dagPut(pair, DAGCancelled, 1))
		if r.status("d", "p") != Ready {
			t.Fatalf("p is %s", r.status("d", "p"))
		}
		r.refuse(pPut(Running, 1), "dispatch in a cancelled DAG")
		// Finishing the cancellation is fine.
		r.must(pPut(Cancelled, 0), xPut(Cancelled, 0))
		// After the retry, dispatching is allowed again.
		r.must(dagPut(pair, DAGRunning, 2), taskPut("d", "p", rec(Running, 2, 1)))
	})
	t.Run("a record never repeats the current status", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1))
		r.refuse(pPut(Running, 2), "a record cannot move a task from running to running")
		r.must(pPut(Succeeded, 1))
		r.refuse(pPut(Succeeded, 1), "a record cannot move a task from succeeded to succeeded")
	})
	t.Run("an invalid status", func(t *testing.T) {
		r := newRig(t).must(dagPut(pair, DAGRunning, 1))
		before := r.c.Dump()
		e := pPut(Status(42), 0)
		e.Rev = 99
		err := r.c.Apply(&e) // not round-tripped: JSON cannot carry it
		var ae *ApplyError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "a record cannot move a task from ready to status(42)") {
			t.Errorf("got %v", err)
		}
		if r.c.Dump() != before {
			t.Errorf("state changed")
		}
	})
}

// TestApplyErrorLeavesRevision pins a detail: a refused entry still advances
// Rev, the position from which a replica goes on reading the log.
func TestApplyErrorLeavesRevision(t *testing.T) {
	r := newRig(t).must(dagPut(pair, DAGRunning, 1))
	e := pPut(Succeeded, 2) // skips attempt 1
	e.Rev = 10
	if err := r.c.Apply(&e); err == nil {
		t.Fatal("applied")
	}
	if r.c.Rev() != 10 {
		t.Errorf("Rev %d after a refused entry at 10", r.c.Rev())
	}
}

// AppendEffects hands the effects over like TakeEffects, and both the
// core's slice and the caller's are used again: the leader takes effects
// after every event, and fresh slices were most of what it allocated.
func TestAppendEffectsReusesSlices(t *testing.T) {
	c := New(Config{})
	c.effects = append(make([]Effect, 0, 4), Effect{Kind: EffectCancel, Worker: "w1"}, Effect{Kind: EffectCancel, Worker: "w2"})
	backing := &c.effects[:1][0]
	got := c.AppendEffects([]Effect{{Worker: "kept"}})
	if len(got) != 3 || got[0].Worker != "kept" || got[1].Worker != "w1" || got[2].Worker != "w2" {
		t.Fatalf("appended %+v", got)
	}
	if len(c.effects) != 0 || c.effects[:1][0].Worker != "" {
		t.Fatalf("the core kept %+v (its slice not cleared)", c.effects[:1])
	}
	c.effects = append(c.effects, Effect{Kind: EffectCancel, Worker: "w3"})
	if &c.effects[0] != backing {
		t.Fatal("the core's slice was not used again")
	}
	again := c.AppendEffects(got[:0])
	if len(again) != 1 || again[0].Worker != "w3" || &again[0] != &got[0] {
		t.Fatalf("appended %+v, not into the caller's slice", again)
	}
	if len(c.TakeEffects()) != 0 {
		t.Fatal("effects taken twice")
	}
}

// TestHandoverRecord pins the one running → running record: a pod task's
// current attempt handed over to another worker. Any other is refused and
// changes nothing.
func TestHandoverRecord(t *testing.T) {
	pod := tk("x")
	pod.Kind = model.KindPod
	pod.Pod = []byte(`{"image":"busybox"}`)
	shell := tk("s")
	d := spec("d", pod, shell)
	handover := func(task string, attempt int, worker, event string) Entry {
		r := rec(Running, 1, attempt)
		r.Worker, r.Event = worker, event
		return taskPut("d", task, r)
	}
	r := newRig(t).must(dagPut(d, DAGRunning, 1), handover("x", 1, "w1", "dispatch"), handover("s", 1, "w1", "dispatch"))
	r.refuse(handover("s", 1, "w2", "handover"), "only a pod task's attempt outlives its worker")
	r.refuse(handover("x", 1, "w2", "dispatch"), "except to hand its attempt over")
	r.refuse(handover("x", 2, "w2", "handover"), "hand-over of attempt 2, latest is 1")
	r.refuse(handover("x", 1, "w1", "handover"), "holds the attempt already")
	r.must(handover("x", 1, "w2", "handover"))
	if v, _ := r.c.Task("d", "x"); v.Status != Running || v.Attempts != 1 || v.Worker != "w2" {
		t.Fatalf("after the hand-over: %+v", v)
	}
	// And on: the same attempt ends on its new worker.
	done := rec(Succeeded, 1, 1)
	done.Worker = "w2"
	r.must(taskPut("d", "x", done))
}

// hooked is pair with an on_exit handler and a notification.
var hooked = func() model.DAG {
	d := spec("h", tk("p"), tk("x", "p"))
	d.OnExit = &model.Task{ID: model.OnExitID, Kind: model.KindNoop, Timeout: model.Duration(time.Minute)}
	d.Notify = []model.Notification{{URL: "http://hook.test/", Timeout: model.Duration(time.Minute)}}
	return d
}()

func hookedPut(status DAGStatus, run int, cancelRequested bool) Entry {
	e := dagPut(hooked, status, run)
	e.D.CancelRequested = cancelRequested
	return e
}

// What a cancel_requested record may do, and what may happen under it.
func TestCancelRequestedChecks(t *testing.T) {
	put := func(id string, s Status, run, attempt int) Entry { return taskPut("h", id, rec(s, run, attempt)) }
	r := newRig(t)
	r.refuse(hookedPut(DAGRunning, 1, true), "a new DAG must be running in run 1")
	r.must(hookedPut(DAGRunning, 1, false), put("p", Running, 1, 1), put("p", Succeeded, 1, 1), hookedPut(DAGRunning, 1, true))
	r.refuse(hookedPut(DAGRunning, 1, false), "a DAG's cancellation cannot be withdrawn")
	// The DAG file's tasks may not start; its handlers and notifications
	// may, once the tasks have ended.
	r.refuse(put("x", Running, 1, 1), "dispatch of a task in a DAG being cancelled")
	r.must(put("x", Cancelled, 1, 0))
	if got := r.status("h", model.OnExitID); got != Ready {
		t.Fatalf("on_exit is %s once the tasks were cancelled, want ready", got)
	}
	if got := r.status("h", "notify[0]"); got != Pending {
		t.Fatalf("notify[0] is %s while on_exit runs, want pending", got)
	}
	r.must(put(model.OnExitID, Running, 1, 1), put(model.OnExitID, Succeeded, 1, 1))
	if got := r.status("h", "notify[0]"); got != Ready {
		t.Fatalf("notify[0] is %s once on_exit ended, want ready", got)
	}
	r.refuse(hookedPut(DAGFailed, 1, true), "DAG cannot fail while 1 tasks are unfinished")
	r.must(put("notify[0]", Running, 1, 1), put("notify[0]", Failed, 1, 1))
	r.refuse(hookedPut(DAGSucceeded, 1, true), "DAG cannot succeed with 0 tasks unfinished and 1 failed")
	r.must(hookedPut(DAGCancelled, 1, true))
	r.refuse(hookedPut(DAGRunning, 2, true), "a retry cannot start cancelled")
	// The retry runs the handler and the notification again, succeeded
	// or not: the derived transitions succeeded → pending and
	// failed → pending.
	r.must(hookedPut(DAGRunning, 2, false))
	for _, id := range []string{"p", "x", model.OnExitID, "notify[0]"} {
		want := Pending
		switch id {
		case "p":
			want = Succeeded // kept
		case "x":
			want = Ready
		}
		if got := r.status("h", id); got != want {
			t.Errorf("%s is %s in run 2, want %s", id, got, want)
		}
	}
}

// A skipped task goes back to pending when its DAG is retried, and is
// judged again.
func TestSkippedResetByRetry(t *testing.T) {
	r := newRig(t).must(dagPut(pair, DAGRunning, 1), pPut(Running, 1), pPut(Failed, 1), xPut(Skipped, 0), dagPut(pair, DAGFailed, 1))
	r.must(dagPut(pair, DAGRunning, 2))
	if got := r.status("d", "x"); got != Pending {
		t.Errorf("x is %s after the retry, want pending", got)
	}
}
