package core

import (
	"encoding/json"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// DAGRecord is the value of /orion/v1/dags/<id>: the DAG as submitted plus its
// summary status. It is written when the DAG is submitted, when it finishes,
// is cancelled or is retried; never per task, so its size does not multiply
// the cost of running tasks.
type DAGRecord struct {
	model.DAG
	// Spec, when set, says that the DAG's tasks are stored apart, in
	// chunks its record names (a DAG too large for one record: see
	// internal/store's chunks.go); the record itself then holds no tasks,
	// so writing it again (the DAG's end, a retry) stays small. Once
	// decoded, Tasks holds the tasks read from the chunks.
	Spec        *SpecRef   `json:"spec,omitempty"`
	Status      DAGStatus  `json:"status"`
	Run         int        `json:"run"` // 1 on submit, +1 per retry
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// CancelRequested marks a running DAG with handlers or notifications
	// that a user cancelled: its tasks are cancelled, then what runs at
	// its end runs, and then it is cancelled (Core.CancelDAG).
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// SpecRef names the chunks that hold a DAG's tasks, so that a reader can
// tell it has all of them: how many, how many tasks and bytes they hold
// in all, and the SHA-256 of their values in order.
type SpecRef struct {
	Chunks int    `json:"chunks"`
	Tasks  int    `json:"tasks"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// TaskRecord is the value of /orion/v1/tasks/<dag>/<task>: a task's runtime
// state. No key means the task is pending (or ready) as submitted, so a DAG's
// tasks cost nothing in etcd until they run.
type TaskRecord struct {
	Status Status `json:"status"`
	// Run is the DAG run this record belongs to. A record of an older run
	// describes a task that the DAG's retry has reset to pending; only its
	// attempt counter still counts.
	Run int `json:"run"`
	// Attempt is the number of the latest attempt (1-based). It never goes
	// back, so a late result of an old attempt can be recognised and dropped.
	Attempt int `json:"attempt"`
	// Retries counts failed attempts that consumed a retry in this run.
	Retries    int        `json:"retries"`
	Worker     string     `json:"worker,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	RetryAt    *time.Time `json:"retry_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	OutputTail string     `json:"output_tail,omitempty"`
	// Event is the last thing that happened to the task: dispatch, succeed,
	// fail, timeout, retry, requeue, orphan, cascade, cancel; or, on a
	// skipped record, why it was skipped: condition (its `when:` was
	// false), trigger_rule, not_needed (a handler or notification the
	// DAG's end does not call for).
	Event string `json:"event"`
	// Outcome is how the latest attempt ended (succeed, fail, timeout,
	// requeue, orphan), kept while the task waits for its next attempt.
	Outcome string `json:"outcome,omitempty"`
	// Cascade marks upstream_failed records written by the failure cascade:
	// replaying them must never run retry logic.
	Cascade bool   `json:"cascade,omitempty"`
	Cause   string `json:"cause,omitempty"` // the failed task a cascade started from
	// History holds the attempts before the latest one: the last
	// model.HistoryKept of them.
	History []AttemptSummary `json:"history,omitempty"`
	// HistoryOmitted counts the earlier attempts no longer listed in
	// History, so that a task retried a hundred times rewrites a record
	// of constant size, not one that grows with each attempt.
	HistoryOmitted int `json:"history_omitted,omitempty"`
	// Outputs are what the task published, committed with its success
	// (so they survive failover as the success does) and read by the
	// templates of the tasks downstream. Bounded by max_output_bytes.
	Outputs model.Outputs `json:"outputs,omitempty"`
	// Items are a map group's items, a JSON array, committed by its
	// expansion (event expand) and kept by its later records, so that a
	// standby, a restore and a retry expand it the same (mapgroup.go).
	Items json.RawMessage `json:"items,omitempty"`
	// Expanded is the run whose expansion made the group's instances
	// ready: a restore makes ready again those of this run not started.
	Expanded int `json:"expanded,omitempty"`
}

// MaxTaskRecordBytes is the most a task record without outputs encodes to,
// whatever its text: the leader cuts every field that carries text it did
// not choose (bound) to its model bound, and lists the last
// model.HistoryKept earlier attempts. It holds with every character
// escaped as JSON's longest form (\u0001 for a byte), and it is below the
// smallest record limit Orion accepts (etcd_max_request_bytes ≥ 64 KiB,
// less the store's 4 KiB for key and framing); the store's tests check
// both. A success's outputs come on top: TaskRecordBound.
const MaxTaskRecordBytes = 60 << 10

// TaskRecordBound is the most a task record encodes to when outputs may
// take maxOutputBytes (0: model.DefaultMaxOutputBytes): outputs are checked
// where they enter (model.CheckOutputs) and written as counted there. A
// replica refuses to start with an etcd_max_request_bytes whose record
// limit is below it, so no task record can make a transaction too large
// for etcd.
func TaskRecordBound(maxOutputBytes int) int {
	if maxOutputBytes <= 0 {
		maxOutputBytes = model.DefaultMaxOutputBytes
	}
	return MaxTaskRecordBytes + len(`,"outputs":`) + maxOutputBytes
}

// AttemptSummary is one finished attempt kept in a task's history.
type AttemptSummary struct {
	Attempt    int        `json:"attempt"`
	Worker     string     `json:"worker,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Outcome    string     `json:"outcome"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// Entry is one change to the log: a put of a DAG or task record, or the
// deletion of a finished DAG with all its tasks. Entries are what the leader
// proposes and what every replica applies once etcd has committed them.
type Entry struct {
	Rev    int64 // etcd revision that committed the entry; 0 while proposed
	DAG    string
	Task   string      // empty for DAG entries
	Delete bool        // DAG entries only: remove the DAG and its tasks
	D      *DAGRecord  // DAG put
	T      *TaskRecord // task put
	// Chunks are the encoded chunks of a DAG's tasks (D.Spec names them),
	// set on its submission only: each is committed, in a transaction of
	// its own, before D, which makes them visible.
	Chunks []string
	// Records, on a deletion, are the ids of the DAG's tasks (instances
	// included) that have a record in etcd: what deleting the DAG deletes.
	// etcd applies a transaction whole, about 10 µs a deleted key, and
	// renews no lease meanwhile, so the leader bounds the keys a
	// transaction deletes, and the store splits a larger deletion by them.
	Records []string
}

// IsTask reports whether the entry concerns a single task.
func (e *Entry) IsTask() bool { return e.Task != "" }
