// Package events is Orion's live event stream: every replica turns the log
// entries it applies into events, keeps the latest ones in a ring buffer and
// fans them out to subscribers over Server-Sent Events or WebSocket. Since
// every replica applies the same entries in the same order, a client may
// follow any replica and, after a reconnect, resume from the cursor of the
// last event it saw, on the same replica or another, without a gap or a
// duplicate.
//
// # Transport
//
//	GET /api/v1/events?since=CURSOR      text/event-stream (SSE)
//	GET /api/v1/events/ws?since=CURSOR   WebSocket, one JSON event per text message
//
// Every message is one JSON object, an Event, described below. SSE frames
// carry no "event:" field, so EventSource.onmessage receives all of them;
// events that have a cursor also carry it as the SSE "id:", so the browser
// resumes by itself after a reconnect (its Last-Event-ID header wins over
// the since parameter). SSE sends a comment line every 15 s as a heartbeat;
// WebSocket sends ping frames.
//
// # Cursors and resuming
//
// A cursor names a position in the applied log: "REV" or "REV:N". etcd
// commits several entries in one transaction at one revision, so events of
// one revision are numbered 1, 2, ... in the order applied: "1234:2" is the
// second event of revision 1234, and "1234" means all of revision 1234.
// Treat cursors as opaque strings; never parse them as numbers.
//
//	since absent      live events from now on, nothing older
//	since=REV         every event after revision REV: use the "revision" a
//	                  REST read returned, so the stream continues exactly
//	                  where that snapshot ends
//	since=REV:N       every event after that one: the "id" of the last event
//	                  received
//
// If the replica no longer holds every event after the cursor (its buffer
// keeps the last 10,000; a restart or a re-read of etcd starts it afresh), the
// stream starts with a "resync" event: reload state through REST, then apply
// only the events whose rev is greater than the revision the REST answer
// reports. Events may repeat what a REST answer already shows; they never
// skip anything without a resync saying so.
//
// # Event JSON (stable; fields are omitted when empty)
//
// Task state changed (one per task record committed):
//
//	{"type":"task", "id":"1234:1", "rev":1234, "time":"2026-...Z",
//	 "dag":"etl-1", "task":"extract", "status":"running", "attempt":1,
//	 "retries":0, "worker":"n1/4242-a1b2c3", "event":"dispatch",
//	 "exit_code":0, "error":"...", "started_at":"...", "finished_at":"...",
//	 "retry_at":"...", "cascade":true, "cause":"extract", "output_bytes":42}
//
// status is a task status (pending ready running retrying succeeded failed
// upstream_failed cancelled skipped); event is what happened (dispatch
// succeed fail timeout retry requeue orphan cascade cancel, or for a skipped
// task why: condition trigger_rule not_needed); error is cut to 512 bytes;
// cascade and cause mark upstream_failed records written by a failure
// cascade, cause naming the task whose failure started it; output_bytes is
// the size of the outputs a success published (not their values: read
// them with GET /api/v1/dags/{dag}/tasks/{task}). A DAG's handlers and
// notifications are tasks too: "on_exit", "notify[0]".
//
// DAG record written (submitted, retried, finished, cancelled):
//
//	{"type":"dag", "id":"1234:3", "rev":1234, "time":"...", "dag":"etl-1",
//	 "name":"nightly ETL", "status":"running", "run":1, "tasks":12,
//	 "submitted_at":"...", "finished_at":"...", "cancel_requested":true}
//
// tasks is the number of tasks, handlers and notifications included; a new
// DAG has status running and run 1, a retried one a higher run;
// cancel_requested marks a running DAG whose cancellation waits for its
// handlers and notifications. Load the graph itself from
// GET /api/v1/dags/{dag}.
//
// DAG deleted by the retention policy:
//
//	{"type":"dag_deleted", "id":"1300:1", "rev":1300, "time":"...", "dag":"etl-1"}
//
// Metrics snapshot, every second (not part of the log: no id, no rev):
//
//	{"type":"metrics", "time":"...", "metrics":{"node":"n1", "role":"leader",
//	 "leader":"n1", "revision":1234, "lag":0, "tasks":{"running":3,...},
//	 "dags":4, "queue_size":2, "running":3, "totals":{"started":..,
//	 "succeeded":..,"failed":..,"retried":..,"upstream_failed":..,
//	 "cancelled":..,"skipped":..,"dags_submitted":..,"dags_finished":..},
//	 "throughput":12.5, "throughput_window_s":10, "dropped_events":0,
//	 "subscribers":2, "dispatch_p50_ms":0.4, "dispatch_p99_ms":3.1,
//	 "worker_slots":8, "workers_busy":3, "workers":[{"id","slots","busy"}],
//	 "replicas":[{"name","role","applied_revision","lag","reachable"}]}}
//
// totals count what this replica applied since it started; throughput is
// tasks that succeeded or failed per second over the window; the dispatch
// percentiles cover the last window and are present only where dispatches
// happen (the leader) and there were some.
//
// Leadership changed (seen within a second; "leader" is "" while there is
// none):
//
//	{"type":"leader", "time":"...", "node":"n2", "leader":"n1"}
//
// System event, e.g. the demo's crash and recovery:
//
//	{"type":"system", "time":"...", "node":"n1", "event":"crash", "meta":{...}}
//
// Gap: no longer sent (a subscriber that reads slowly goes on from the
// buffer at its own pace, and gets a resync if the buffer moved past it);
// clients written for it may keep handling it.
//
//	{"type":"gap", "time":"...", "since":"1234:2", "dropped":1500}
//
// Resync: the events after "since" are not available. Reload state through
// REST and ignore events whose rev is not greater than the revision it
// reports. "id" (and "rev") is where the stream continues: events after it
// follow.
//
//	{"type":"resync", "id":"1500:3", "rev":1500, "time":"...", "since":"900"}
//
// Clients must ignore unknown types and fields: new ones may be added.
package events

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// Event types.
const (
	TypeTask       = "task"
	TypeDAG        = "dag"
	TypeDAGDeleted = "dag_deleted"
	TypeMetrics    = "metrics"
	TypeLeader     = "leader"
	TypeSystem     = "system"
	TypeGap        = "gap" // no longer sent; see the package documentation
	TypeResync     = "resync"
)

// MaxErrorLen bounds the error text a task event carries.
const MaxErrorLen = 512

// Event is one message of the stream; see the package documentation for the
// JSON of each type. Events of the log (task, dag, dag_deleted) have Rev > 0.
type Event struct {
	Type string    `json:"type"`
	ID   string    `json:"id,omitempty"` // cursor; set when the event is delivered
	Rev  int64     `json:"rev,omitempty"`
	Time time.Time `json:"time"`

	DAG        string     `json:"dag,omitempty"`
	Task       string     `json:"task,omitempty"`
	Name       string     `json:"name,omitempty"`
	Status     string     `json:"status,omitempty"`
	Run        int        `json:"run,omitempty"`
	Tasks      int        `json:"tasks,omitempty"`
	Attempt    int        `json:"attempt,omitempty"`
	Retries    int        `json:"retries,omitempty"`
	Worker     string     `json:"worker,omitempty"`
	Event      string     `json:"event,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	RetryAt    *time.Time `json:"retry_at,omitempty"`
	Cascade    bool       `json:"cascade,omitempty"`
	Cause      string     `json:"cause,omitempty"`
	// OutputBytes is the size of the outputs a success published.
	OutputBytes int `json:"output_bytes,omitempty"`

	SubmittedAt     *time.Time `json:"submitted_at,omitempty"`
	CancelRequested bool       `json:"cancel_requested,omitempty"`

	Node    string            `json:"node,omitempty"`
	Leader  *string           `json:"leader,omitempty"` // leader events: "" means no leader
	Since   string            `json:"since,omitempty"`
	Dropped int64             `json:"dropped,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	Metrics *Metrics          `json:"metrics,omitempty"`

	idx int             // position among the events of Rev, from 1; set by Publish
	seq uint64          // log events: 1 + the hub's sequence number; set by Publish
	rec *core.DAGRecord // dag events: the record applied (shared, read-only)
}

// Cursor returns the event's position; the zero Cursor for events that are
// not part of the log.
func (e *Event) Cursor() Cursor { return Cursor{Rev: e.Rev, Idx: e.idx} }

// DAGRecord returns the record a dag event was made from, or nil. It is
// shared with the scheduler's state: never modify it.
func (e *Event) DAGRecord() *core.DAGRecord { return e.rec }

// FromEntry converts an applied log entry. It copies what it needs, so the
// entry may be reused; it is cheap enough to call on the scheduler's loop.
func FromEntry(e *core.Entry) Event {
	now := time.Now().UTC()
	switch {
	case e.Task != "":
		ev := Event{Type: TypeTask, Rev: e.Rev, Time: now, DAG: e.DAG, Task: e.Task}
		if t := e.T; t != nil {
			ev.Status = t.Status.String()
			ev.Attempt, ev.Retries, ev.Worker, ev.Event = t.Attempt, t.Retries, t.Worker, t.Event
			ev.ExitCode, ev.Error = t.ExitCode, truncate(t.Error, MaxErrorLen)
			ev.StartedAt, ev.FinishedAt, ev.RetryAt = t.StartedAt, t.FinishedAt, t.RetryAt
			ev.Cascade, ev.Cause = t.Cascade, t.Cause
			ev.OutputBytes = model.OutputsBytes(t.Outputs)
		}
		return ev
	case e.Delete:
		return Event{Type: TypeDAGDeleted, Rev: e.Rev, Time: now, DAG: e.DAG}
	default:
		ev := Event{Type: TypeDAG, Rev: e.Rev, Time: now, DAG: e.DAG, rec: e.D}
		if d := e.D; d != nil {
			ev.Name, ev.Status, ev.Run, ev.Tasks = d.Name, string(d.Status), d.Run, len(d.Tasks)+len(d.Handlers())+len(d.Notify)
			ev.FinishedAt, ev.CancelRequested = d.FinishedAt, d.CancelRequested
			if !d.SubmittedAt.IsZero() {
				t := d.SubmittedAt
				ev.SubmittedAt = &t
			}
		}
		return ev
	}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
// The result shares s's memory: no allocation unless it is cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Cursor is a position in the applied log: the Idx-th event of revision Rev.
// Idx == All stands for every event of Rev.
type Cursor struct {
	Rev int64
	Idx int
}

// All, as a Cursor's Idx, covers every event of its revision.
const All = int(^uint32(0) >> 1)

// RevCursor is the cursor after every event of revision rev.
func RevCursor(rev int64) Cursor { return Cursor{Rev: rev, Idx: All} }

// Less reports whether c comes before d.
func (c Cursor) Less(d Cursor) bool {
	if c.Rev != d.Rev {
		return c.Rev < d.Rev
	}
	return c.Idx < d.Idx
}

// String renders the cursor as clients send it back: "REV" or "REV:N".
func (c Cursor) String() string {
	if c.Idx == All {
		return strconv.FormatInt(c.Rev, 10)
	}
	return strconv.FormatInt(c.Rev, 10) + ":" + strconv.Itoa(c.Idx)
}

// ParseCursor reads "REV" or "REV:N" (REV ≥ 0, N ≥ 1).
func ParseCursor(s string) (Cursor, error) {
	s = strings.TrimSpace(s)
	revStr, idxStr, hasIdx := strings.Cut(s, ":")
	rev, err := strconv.ParseInt(revStr, 10, 64)
	if err != nil || rev < 0 {
		return Cursor{}, &CursorError{Value: s}
	}
	if !hasIdx {
		return RevCursor(rev), nil
	}
	idx, err := strconv.Atoi(idxStr)
	if err != nil || idx < 1 || idx >= All {
		return Cursor{}, &CursorError{Value: s}
	}
	return Cursor{Rev: rev, Idx: idx}, nil
}

// CursorError is a since value that is not a cursor.
type CursorError struct{ Value string }

func (e *CursorError) Error() string {
	return "since " + strconv.Quote(e.Value) + " is not a cursor: want a revision (\"1234\") or an event id (\"1234:2\")"
}
