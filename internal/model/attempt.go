package model

import (
	"fmt"
	"time"
)

// AttemptID names one execution of one task. Attempt numbers start at 1 and
// never repeat for a task, so a late result of an old attempt can be told
// apart from the current one.
type AttemptID struct {
	DAG     string `json:"dag"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

func (id AttemptID) String() string { return fmt.Sprintf("%s/%s#%d", id.DAG, id.Task, id.Attempt) }

// Attempt is what an executor is asked to run.
type Attempt struct {
	AttemptID
	Spec Task `json:"spec"`
	// Fence is the fence revision of the leader that dispatched the
	// attempt (its election key's create revision; 0 when unknown). It
	// reaches a shell task as ORION_LEADER_FENCE, so that a task, or a
	// drill recording its runs, can tell which leader's term ran it.
	Fence int64 `json:"fence,omitempty"`
	// Incarnation is the keyspace's incarnation (the term record's): a
	// pod task's pod is named after it and the attempt, so that an etcd
	// wiped and started again, whose attempt numbers start over, never
	// takes an old pod for one of its own.
	Incarnation string `json:"incarnation,omitempty"`
	// Submission is the revision that created the DAG's record: which
	// submission of the DAG's id the attempt is of. A DAG deleted and
	// submitted again starts its attempt numbers over; a pod task's pod
	// is named after the submission too, so that the new DAG never
	// takes the old one's pod (kept after a failure, or left behind) for
	// its own. It is in the log (the record's create revision), so every
	// leader gives an attempt the same.
	Submission int64 `json:"submission,omitempty"`
	// Handover marks the dispatch of an attempt that another worker
	// started and lost (a pod task's): its pod may exist already, and is
	// adopted by name rather than created again.
	Handover bool `json:"handover,omitempty"`
	// Stop marks the hand-over of an attempt whose DAG was cancelled
	// while it had no worker: its pod, if it exists, is deleted, and none
	// is created.
	Stop bool `json:"stop,omitempty"`
	// MaxOutputBytes bounds the outputs the attempt may publish (the
	// leader's max_output_bytes; 0: DefaultMaxOutputBytes). Over it the
	// attempt fails: the leader would refuse them.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
}

// Outcome is how an attempt ended.
type Outcome string

const (
	Succeeded Outcome = "succeeded"
	Failed    Outcome = "failed"    // non-zero exit, bad HTTP status, injected failure, start error
	TimedOut  Outcome = "timed_out" // ran past Spec.Timeout and was killed
	Cancelled Outcome = "cancelled" // Cancel was called; the result is informational
)

// Result reports the end of an attempt.
type Result struct {
	AttemptID
	Worker     string    `json:"worker"`
	Outcome    Outcome   `json:"outcome"`
	ExitCode   int       `json:"exit_code"` // -1 when there is none (killed, http, noop)
	Error      string    `json:"error,omitempty"`
	OutputTail string    `json:"output_tail,omitempty"` // last TailBytes of stdout+stderr
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Outputs are what a successful attempt publishes (ParseOutputs); the
	// leader checks them where they enter (CheckOutputs) and commits them
	// with the success.
	Outputs Outputs `json:"outputs,omitempty"`
}

// TailBytes is how much of an attempt's output travels with its result and is
// stored in the task record; the full log stays on the executor's disk.
const TailBytes = 4096
