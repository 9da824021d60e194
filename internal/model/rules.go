package model

import (
	"strconv"
	"strings"
	"time"
)

// TriggerRule says which outcomes of a task's dependencies let it run
// (Airflow's trigger rules). The core evaluates it as each dependency
// ends; docs/dag-file.md#trigger-rules has the table.
type TriggerRule string

const (
	AllSuccess TriggerRule = "all_success" // every dependency succeeded (the default)
	AllDone    TriggerRule = "all_done"    // every dependency ended, whatever its outcome
	OneSuccess TriggerRule = "one_success" // at least one dependency succeeded
	OneFailed  TriggerRule = "one_failed"  // at least one dependency failed or was upstream_failed
	NoneFailed TriggerRule = "none_failed" // every dependency ended and none failed (skipped ones count as fine)
	AllFailed  TriggerRule = "all_failed"  // every dependency failed or was upstream_failed
)

// TriggerRules lists the rules, the default first.
var TriggerRules = []TriggerRule{AllSuccess, AllDone, OneSuccess, OneFailed, NoneFailed, AllFailed}

// Rule returns the task's trigger rule, AllSuccess when it sets none.
func (t *Task) Rule() TriggerRule {
	if t.TriggerRule == "" {
		return AllSuccess
	}
	return t.TriggerRule
}

// The ids of a DAG's handlers: reserved, so that no task of the DAG file
// takes them.
const (
	OnSuccessID = "on_success"
	OnFailureID = "on_failure"
	OnExitID    = "on_exit"
)

// IsHandlerID reports whether id is one of the handlers' ids.
func IsHandlerID(id string) bool { return id == OnSuccessID || id == OnFailureID || id == OnExitID }

// Handler is one of a DAG's handlers with the id it runs under.
type Handler struct {
	ID   string
	Task *Task
}

// Handlers lists the DAG's declared handlers in the order Orion keeps
// them: on_success, on_failure, on_exit.
func (d *DAG) Handlers() []Handler {
	var out []Handler
	for _, h := range []Handler{{OnSuccessID, d.OnSuccess}, {OnFailureID, d.OnFailure}, {OnExitID, d.OnExit}} {
		if h.Task != nil {
			out = append(out, h)
		}
	}
	return out
}

// HasHooks reports whether anything runs after the DAG's tasks: a handler
// or a notification. Such a DAG is cancelled in two steps (see the core's
// CancelDAG).
func (d *DAG) HasHooks() bool {
	return d.OnSuccess != nil || d.OnFailure != nil || d.OnExit != nil || len(d.Notify) > 0
}

// Notification is a webhook told of a DAG's end: a POST (by default) of a
// JSON summary, sent by an http attempt that Orion adds to the DAG
// (NotifyID), so it has an http task's retries, timeout and bounds.
type Notification struct {
	URL string `json:"url"`
	// On lists the DAG statuses that send it (succeeded, failed,
	// cancelled); empty: all three.
	On         []string          `json:"on,omitempty"`
	Method     string            `json:"method,omitempty"`  // default POST
	Headers    map[string]string `json:"headers,omitempty"` // besides Content-Type and Idempotency-Key
	Timeout    Duration          `json:"timeout,omitempty"` // per attempt; default DefaultNotifyTimeout
	MaxRetries int               `json:"max_retries"`
}

// DefaultNotifyTimeout bounds one delivery attempt of a notification that
// sets no timeout.
const DefaultNotifyTimeout = 30 * time.Second

// NotifyStatuses are the DAG statuses a notification may name in On.
var NotifyStatuses = []string{"succeeded", "failed", "cancelled"}

// Sends reports whether the notification is sent for a DAG that ends with
// status.
func (n *Notification) Sends(status string) bool {
	if len(n.On) == 0 {
		return true
	}
	for _, s := range n.On {
		if s == status {
			return true
		}
	}
	return false
}

// NotifyID is the id of the task that delivers notification i. '[' is not
// valid in a task id of a DAG file, so it cannot clash with one.
func NotifyID(i int) string { return "notify[" + strconv.Itoa(i) + "]" }

func (d *DAG) normalizeHooks() {
	for _, h := range d.Handlers() {
		if h.Task.ID == "" {
			h.Task.ID = h.ID
		}
		h.Task.normalize()
	}
	if len(d.Notify) == 0 {
		d.Notify = nil
	}
	for i := range d.Notify {
		n := &d.Notify[i]
		n.URL = strings.TrimSpace(n.URL)
		n.Method = strings.ToUpper(strings.TrimSpace(n.Method))
		if n.Method == "" {
			n.Method = "POST"
		}
		for j := range n.On {
			n.On[j] = strings.ToLower(strings.TrimSpace(n.On[j]))
		}
		if len(n.On) == 0 {
			n.On = nil
		}
		if len(n.Headers) == 0 {
			n.Headers = nil
		}
		if n.Timeout == 0 {
			n.Timeout = Duration(DefaultNotifyTimeout)
		}
	}
}

// copyHooks gives d copies of its handlers and notifications, so that
// normalizing d leaves the caller's alone (Canonical).
func (d *DAG) copyHooks() {
	for _, p := range []**Task{&d.OnSuccess, &d.OnFailure, &d.OnExit} {
		if *p != nil {
			t := **p
			*p = &t
		}
	}
	if d.Notify != nil {
		d.Notify = append([]Notification{}, d.Notify...)
		for i := range d.Notify {
			d.Notify[i].On = append([]string(nil), d.Notify[i].On...)
		}
	}
}

// hookBytes counts the text of the handlers and notifications, for
// DecodedBytes.
func (d *DAG) hookBytes() int64 {
	var n int64
	for _, h := range d.Handlers() {
		n += h.Task.textBytes()
	}
	for i := range d.Notify {
		x := &d.Notify[i]
		n += int64(len(x.URL) + len(x.Method))
		for _, s := range x.On {
			n += int64(len(s))
		}
		for k, v := range x.Headers {
			n += int64(len(k) + len(v))
		}
	}
	return n
}
