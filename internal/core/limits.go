package core

import (
	"fmt"

	"github.com/orion-sched/orion/internal/apitypes"
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

// liveCount is a number of DAGs and of their tasks.
type liveCount struct{ dags, tasks int }

func (l *liveCount) add(d *dagRun, sign int) {
	l.dags += sign
	l.tasks += sign * len(d.tasks)
}

// sub removes one pending DAG of n tasks.
func (l *liveCount) sub(n int) {
	l.dags--
	l.tasks -= n
}

// Live returns the DAGs running and their tasks, as applied.
func (c *Core) Live() (dags, tasks int) { return c.live.dags, c.live.tasks }

// LimitError is a submission or retry refused by a global limit: Limit
// names the setting, Max its value.
type LimitError struct {
	Code  apitypes.Code // CodeTooManyLiveDAGs or CodeTooManyLiveTasks
	Limit string        // the setting: max_live_dags, max_live_tasks
	Max   int
	Msg   string
}

func (e *LimitError) Error() string { return e.Msg }

// admit checks that one more live DAG of n tasks fits the limits.
func (c *Core) admit(id string, n int) error {
	dags, tasks := c.live.dags+c.pendingLive.dags, c.live.tasks+c.pendingLive.tasks
	if m := c.cfg.MaxLiveDAGs; m > 0 && dags+1 > m {
		return &LimitError{Code: apitypes.CodeTooManyLiveDAGs, Limit: "max_live_dags", Max: m,
			Msg: fmt.Sprintf("DAG %s refused: %d DAGs are running, the most this server runs at once (max_live_dags %d); "+
				"retry once some have finished, or cancel some", id, dags, m)}
	}
	if m := c.cfg.MaxLiveTasks; m > 0 && tasks+n > m {
		msg := fmt.Sprintf("DAG %s refused: its %d tasks and the %d of the DAGs running would be more than this server holds at once "+
			"(max_live_tasks %d); retry once some DAGs have finished, or cancel some", id, n, tasks, m)
		if n > m {
			msg = fmt.Sprintf("DAG %s refused: its %d tasks are more than this server holds at once (max_live_tasks %d); split it", id, n, m)
		}
		return &LimitError{Code: apitypes.CodeTooManyLiveTasks, Limit: "max_live_tasks", Max: m, Msg: msg}
	}
	return nil
}

// proposeRetryLive counts a retry's DAG as pending until its record applies.
func (c *Core) proposeRetryLive(d *dagRun) {
	d.retrying = true
	c.pendingLive.dags++
	c.pendingLive.tasks += len(d.tasks)
}

// settleRetry ends the pending count of d's retry, when one was proposed:
// its record (or another) applied, or the DAG is gone.
func (c *Core) settleRetry(d *dagRun) {
	if d.retrying {
		d.retrying = false
		c.pendingLive.sub(len(d.tasks))
	}
}
