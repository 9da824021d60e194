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
