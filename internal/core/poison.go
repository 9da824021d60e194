package core

import (
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// PoisonOutcome says what the leader did with a poison entry.
type PoisonOutcome uint8

const (
	// PoisonShrunk: the record goes again without its output tail, error
	// text and earlier attempts, its error saying so. Its transition (a
	// success, a failure, a dispatch) is kept.
	PoisonShrunk PoisonOutcome = iota + 1
	// PoisonFailed: an attempt's dispatch that cannot be recorded is given
	// up, and the task fails instead, with an error that says why.
	PoisonFailed
	// PoisonParked: nothing smaller can be written. The task (or the DAG,
	// for a DAG record) keeps its proposal in flight, so nothing more is
	// proposed for it in this term; a worker's result for it is not
	// acknowledged, and the next leader tries once more.
	PoisonParked
)

func (o PoisonOutcome) String() string {
	switch o {
	case PoisonShrunk:
		return "shrunk"
	case PoisonFailed:
		return "failed"
	case PoisonParked:
		return "parked"
	}
	return "none"
}

// poisonPrefix starts the error of a record written in place of one the
// store refused: it marks the record as such.
const poisonPrefix = "orion: etcd refused this task's record"

// maxPoisonCause bounds the store's reason quoted in such an error.
const maxPoisonCause = 200

func poisonNote(why string) string {
	return poisonPrefix + " (" + model.CutMiddle(why, maxPoisonCause) + "); its output tail, error text and earlier attempts were dropped: the attempt's log on its worker has them"
}

// Poisoned takes back an entry that the store refused alone for what it
// holds (too large for one etcd request): sent again it would be refused
// again, identically, so it is never sent again as is. why is the store's
// reason. For a task record it returns the record to commit in its place,
// first in line (entries behind it may depend on it: a dependent dispatched
// right behind a success), or nil; and the task entries behind it that
// must be dropped, unsent, because they depended on it. In order:
//
//   - a record with text to drop goes again without it (PoisonShrunk);
//   - a dispatch with nothing to drop is given up and the task fails with
//     a record that says why (PoisonFailed): a task whose attempt cannot be
//     recorded cannot run;
//   - anything else is parked (PoisonParked).
//
// A DAG record (its end, a cancellation, a retry) cannot be smaller than
// the submission the store took: the DAG is parked. A refused submission
// is the caller's (WithdrawSubmit).
func (c *Core) Poisoned(e Entry, why string, now time.Time) (*Entry, []Entry, PoisonOutcome) {
	c.now = now
	if !c.leader {
		return nil, nil, 0
	}
	if !e.IsTask() || e.T == nil {
		// The DAG's proposal stays in flight, and requests about it are
		// refused (requested).
		if d := c.dags[e.DAG]; d != nil {
			d.parked = true
		}
		return nil, nil, PoisonParked
	}
	t := c.lookup(e.DAG, e.Task)
	if t == nil || !t.inflight {
		return nil, nil, PoisonParked // its DAG is gone
	}
	rec := e.T
	note := poisonNote(why)
	if rec.OutputTail != "" || len(rec.History) > 0 || len(rec.Error) > len(note) && !strings.HasPrefix(rec.Error, poisonPrefix) {
		s := *rec
		s.OutputTail, s.Error = "", note
		s.HistoryOmitted += len(s.History)
		s.History = nil
		if t.early == rec {
			t.early = &s
		}
		return &Entry{DAG: e.DAG, Task: e.Task, T: &s}, nil, PoisonShrunk
	}
	if rec.Event == EventExpand && t.status == Ready && isGroup(t) {
		// A map group's items the store will not take (etcd's own limit
		// below etcd_max_request_bytes): the group cannot run.
		c.settleExpansion(t)
		f := &TaskRecord{Status: Failed, Run: t.dag.rec.Run, Attempt: rec.Attempt, Retries: t.retries(),
			Event: "fail", Outcome: "fail", FinishedAt: timePtr(now),
			Error: poisonPrefix + " (" + model.CutMiddle(why, maxPoisonCause) + ") when it expanded the map group: its items cannot be recorded"}
		return &Entry{DAG: e.DAG, Task: e.Task, T: f}, nil, PoisonFailed
	}
	if t.dispatching && t.status == Ready {
		c.abandonDispatch(t)
		// The attempt's number is used up (it may have been sent: an
		// early attempt), so that a late result of it is never taken for
		// a later attempt's.
		f := &TaskRecord{Status: Failed, Run: t.dag.rec.Run, Attempt: rec.Attempt, Retries: t.retries(),
			Event: "fail", Outcome: "fail", FinishedAt: timePtr(now),
			Error: poisonPrefix + " (" + model.CutMiddle(why, maxPoisonCause) + ") when it dispatched an attempt: the task cannot run"}
		f.HistoryOmitted = max(0, rec.Attempt-1)
		return &Entry{DAG: e.DAG, Task: e.Task, T: f}, nil, PoisonFailed
	}
	if t.dispatching {
		c.abandonDispatch(t)
	}
	if t.handingOver {
		c.abandonHandover(t)
	}
	var drop []Entry
	if rec.Status == Succeeded {
		// Dependents dispatched right behind the success (Schedule) would
		// commit a dispatch their state machine refuses: withdraw them.
		for _, j := range t.dag.dependentsOf(t.idx) {
			dep := &t.dag.tasks[j]
			if dep.dispatching && dep.status == Pending {
				c.abandonDispatch(dep) // dep stays in flight: parked with t
				drop = append(drop, Entry{DAG: dep.dag.id, Task: dep.id()})
			}
		}
	}
	return nil, drop, PoisonParked
}

// abandonDispatch gives up t's dispatch proposal, which will never be
// committed: the worker's slot and t's place under its limits are given
// back, and an attempt sent with its proposal is stopped. A result
// already reported for it is moot.
func (c *Core) abandonDispatch(t *task) {
	if t.early != nil {
		c.cancelEarly(t) // frees the slot it took
	} else if w := t.reserved; w != nil {
		w.busy--
	}
	c.endDispatch(t)
	t.stash = nil
}
