package core

import (
	"fmt"

	"github.com/orion-sched/orion/internal/model"
)

// Global limits on live work (Config.MaxLiveDAGs, MaxLiveTasks). A DAG is
// live from its submission (or retry) until it finishes; its tasks count
// with it, finished or not, since they stay in memory and in etcd with it.
//
// The counts are part of the replicated state (every replica keeps them as
// it applies the log, so a new leader starts from the right ones), and the
// check is the leader's, in Submit and RetryDAG: the core sees every
// submission in order, so the limit holds exactly, which a count checked at
// each replica's API could not (two standbys would each admit the last
// place). Proposals not applied yet count too (pendingLive): a burst of
// submissions in one group commit cannot overshoot.

// liveCount is a number of DAGs, of their tasks, and of the bytes their
// records will take when written again (RecordBytes).
type liveCount struct{ dags, tasks, bytes int }

func (l *liveCount) add(d *dagRun, sign int) {
	l.dags += sign
	l.tasks += sign * (len(d.tasks) + d.instances)
	l.bytes += sign * RecordBytes(&d.rec.DAG)
}

// addSpec and subSpec count a pending DAG.
func (l *liveCount) addSpec(d *model.DAG) {
	l.dags++
	l.tasks += len(d.Tasks)
	l.bytes += RecordBytes(d)
}

func (l *liveCount) subSpec(d *model.DAG) {
	l.dags--
	l.tasks -= len(d.Tasks)
	l.bytes -= RecordBytes(d)
}

// Live returns the DAGs running and their tasks, as applied.
func (c *Core) Live() (dags, tasks int) { return c.live.dags, c.live.tasks }

// LiveRecordBytes is what the records of the DAGs running will take when
// each is written again, as it is when the DAG finishes or is cancelled:
// the storage admission keeps room for it (scheduler/admission.go).
func (c *Core) LiveRecordBytes() int { return c.live.bytes }

// RecordBytes estimates the size of d's record in etcd from its strings
// (model.DAG.DecodedBytes) and what JSON adds to each task: a function of
// the spec alone, so every replica counts the same. A DAG's record holds
// its whole spec, and every change of the DAG's status writes it again.
func RecordBytes(d *model.DAG) int {
	return int(d.DecodedBytes()) + 160*len(d.Tasks) + 512
}

// LimitError is a submission or retry refused by a global limit: Limit
// names the setting, Max its value.
type LimitError struct {
	Code  ErrCode // CodeTooManyLiveDAGs, CodeTooManyLiveTasks or CodeTooManySchedules
	Limit string  // the setting: max_live_dags, max_live_tasks
	Max   int
	Msg   string
}

func (e *LimitError) Error() string { return e.Msg }

// admit checks that one more live DAG of n tasks fits the limits.
func (c *Core) admit(id string, n int) error {
	dags, tasks := c.live.dags+c.pendingLive.dags, c.live.tasks+c.pendingLive.tasks
	if m := c.cfg.MaxLiveDAGs; m > 0 && dags+1 > m {
		return &LimitError{Code: CodeTooManyLiveDAGs, Limit: "max_live_dags", Max: m,
			Msg: fmt.Sprintf("DAG %s refused: %d DAGs are running, the most this server runs at once (max_live_dags %d); "+
				"retry once some have finished, or cancel some", id, dags, m)}
	}
	if m := c.cfg.MaxLiveTasks; m > 0 && tasks+n > m {
		msg := fmt.Sprintf("DAG %s refused: its %d tasks and the %d of the DAGs running would be more than this server holds at once "+
			"(max_live_tasks %d); retry once some DAGs have finished, or cancel some", id, n, tasks, m)
		if n > m {
			msg = fmt.Sprintf("DAG %s refused: its %d tasks are more than this server holds at once (max_live_tasks %d); split it", id, n, m)
		}
		return &LimitError{Code: CodeTooManyLiveTasks, Limit: "max_live_tasks", Max: m, Msg: msg}
	}
	return nil
}

// proposeRetryLive counts a retry's DAG as pending until its record applies.
func (c *Core) proposeRetryLive(d *dagRun) {
	d.retrying = true
	c.pendingLive.addSpec(&d.rec.DAG)
}

// settleRetry ends the pending count of d's retry, when one was proposed:
// its record (or another) applied, or the DAG is gone.
func (c *Core) settleRetry(d *dagRun) {
	if d.retrying {
		d.retrying = false
		c.pendingLive.subSpec(&d.rec.DAG)
	}
}

// RetrySpec returns the spec of a finished DAG that a retry would run again
// (failed or cancelled, its tasks stopped), or nil. The caller must not
// modify it.
func (c *Core) RetrySpec(id string) *model.DAG {
	d := c.dags[id]
	if d == nil || (d.rec.Status != DAGFailed && d.rec.Status != DAGCancelled) {
		return nil
	}
	return &d.rec.DAG
}
