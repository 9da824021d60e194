package core

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// What handlers and notifications are given when they run. Both are built
// at dispatch from committed state in which every task they wait for has
// ended, so every dispatch of one of them, by this leader or the next,
// builds the same: a notification delivered again after its worker died
// carries the same body and the same delivery key.

// Environment of a shell handler, besides its env.
const (
	EnvDAGStatus   = "ORION_DAG_STATUS"   // how the DAG's tasks ended: succeeded, failed or cancelled
	EnvFailedTasks = "ORION_FAILED_TASKS" // the ids of those that failed, comma-separated, at most MaxNotifiedFailures
	EnvFailedCount = "ORION_FAILED_COUNT" // how many failed
)

// Notification is the JSON body a DAG's notify entry sends when the DAG
// ends. Users' webhooks read it: its JSON is the API's
// apitypes.Notification, field for field (a test there keeps them equal).
type Notification struct {
	DAG         string    `json:"dag"`
	Name        string    `json:"name"`
	Run         int       `json:"run"`
	Status      string    `json:"status"` // succeeded, failed or cancelled
	SubmittedAt time.Time `json:"submitted_at"`
	// EndedAt is when the last of the DAG's tasks and handlers ended.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Counts has the DAG's tasks and handlers by status.
	Counts map[string]int `json:"counts"`
	// FailedTasks lists the tasks that failed (their own attempts, not a
	// dependency's), at most MaxNotifiedFailures of the FailedCount.
	FailedTasks []string `json:"failed_tasks"`
	FailedCount int      `json:"failed_count"`
	Delivery    string   `json:"delivery"`
}

// MaxNotifiedFailures bounds the failed task ids a notification lists,
// and a handler's ORION_FAILED_TASKS.
const MaxNotifiedFailures = 100

// notifySpec is the http task that delivers notification i: its body and
// delivery headers are added at dispatch (notifyRequest).
func notifySpec(n *model.Notification, i int) model.Task {
	return model.Task{ID: model.NotifyID(i), Kind: model.KindHTTP, URL: n.URL, Method: n.Method,
		Headers: n.Headers, MaxRetries: n.MaxRetries, Timeout: n.Timeout,
		// Any 2xx answer delivers it: webhooks answer 200, 202 or 204.
		ExpectStatus: 0}
}

// hookSpec completes s, the (rendered) spec an attempt of t runs, for a
// handler or a notification, from committed state when the attempt is
// sent; a task's spec is returned as it is.
func (c *Core) hookSpec(t *task, spec *model.Task) model.Task {
	s := *spec // spec may be t's stored spec: complete a copy
	instanceEnv(t, &s)
	switch d := t.dag; d.role(t.idx) {
	case roleHandler:
		// Only a shell task reads its environment; the others carry it
		// unread, which costs nothing and keeps one spec per handler.
		failed, n := d.failedTasks(d.nTasks)
		s.Env = maps.Clone(s.Env)
		if s.Env == nil {
			s.Env = make(map[string]string, 3)
		}
		s.Env[EnvDAGStatus] = string(d.outcome(roleTask))
		s.Env[EnvFailedTasks] = strings.Join(failed, ",")
		s.Env[EnvFailedCount] = strconv.Itoa(n)
	case roleNotify:
		i := int(t.idx - d.nTasks - d.nHandlers)
		key := DeliveryKey(d.id, d.rec.Run, i)
		s.Headers = maps.Clone(s.Headers)
		if s.Headers == nil {
			s.Headers = make(map[string]string, 2)
		}
		s.Headers["Content-Type"] = "application/json"
		s.Headers["Idempotency-Key"] = key
		s.Body = d.notification(key)
	}
	return s
}

// DeliveryKey names one delivery of notification i of a DAG's run: sent
// as its Idempotency-Key, the same for each attempt.
func DeliveryKey(dag string, run, i int) string {
	return dag + "/" + strconv.Itoa(run) + "/" + strconv.Itoa(i)
}

// failedTasks lists the tasks before end (the DAG file's, or those and its
// handlers) that failed, in order, at most MaxNotifiedFailures of
// them, and counts them all. It reads every task: it runs once per handler
// or notification attempt, not per event.
func (d *dagRun) failedTasks(end int32) ([]string, int) {
	var ids []string
	n := 0
	for i := range d.tasks[:end] {
		if t := &d.tasks[i]; t.status == Failed {
			if n++; len(ids) < MaxNotifiedFailures {
				ids = append(ids, t.id())
			}
		}
	}
	return ids, n
}

// notification is the JSON summary a notification sends.
func (d *dagRun) notification(key string) string {
	failed, n := d.failedTasks(d.nTasks + d.nHandlers)
	if failed == nil {
		failed = []string{}
	}
	v := Notification{DAG: d.id, Name: d.rec.Name, Run: d.rec.Run, Status: string(d.end()),
		SubmittedAt: d.rec.SubmittedAt, Counts: make(map[string]int), FailedTasks: failed, FailedCount: n, Delivery: key}
	var last time.Time
	for i := range d.tasks[:d.nTasks+d.nHandlers] {
		if r := d.tasks[i].rec; r != nil && r.Run == d.rec.Run && r.FinishedAt != nil && r.FinishedAt.After(last) {
			last = *r.FinishedAt
		}
	}
	if !last.IsZero() {
		v.EndedAt = &last
	}
	for r := roleTask; r <= roleHandler; r++ {
		for s := Status(0); s < numStatuses; s++ {
			if k := d.byRole[r][s]; k > 0 {
				v.Counts[s.String()] += int(k)
			}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "{}" // strings, numbers and times: it cannot fail
	}
	return string(b)
}
