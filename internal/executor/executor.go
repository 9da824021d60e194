// Package executor runs task attempts: shell commands, HTTP calls, sleeps and
// no-ops. The scheduler talks to every executor through the Executor
// interface, so the local slots of a replica and a remote worker (which speaks
// to the leader over a stream) are interchangeable to it.
package executor

import (
	"fmt"
	"io"
	"time"

	"github.com/orion-sched/orion/internal/dag"
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
	Spec dag.Task `json:"spec"`
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
}

// TailBytes is how much of an attempt's output travels with its result and is
// stored in the task record; the full log stays on the executor's disk.
const TailBytes = 4096

// Executor runs attempts on a fixed number of slots.
type Executor interface {
	// ID names the worker in task records and in cluster status.
	ID() string
	// Slots is how many attempts may run at once.
	Slots() int
	// Start begins an attempt. It never blocks; the caller (the scheduling
	// loop) guarantees that a slot is free.
	Start(a Attempt)
	// Cancel stops an attempt: one not yet started never starts, one running
	// has its process group killed. Its result, if any, arrives as Cancelled.
	Cancel(id AttemptID)
	// Results delivers one Result per started attempt.
	Results() <-chan Result
	// InFlight lists the attempts started and not yet reported, so a new
	// leader can adopt them instead of running them again.
	InFlight() []AttemptID
	// OpenLog opens the full output of an attempt kept by this executor.
	OpenLog(id AttemptID) (io.ReadCloser, error)
	// Close cancels everything running and waits for it to stop.
	Close() error
}
