// Package executor runs task attempts: shell commands, HTTP calls, sleeps and
// no-ops. The scheduler talks to every executor through the Executor
// interface, so the local slots of a replica and a remote worker (which speaks
// to the leader over a stream) are interchangeable to it.
package executor

import (
	"io"

	"github.com/orion-sched/orion/internal/model"
)

// Executor runs attempts on a fixed number of slots.
type Executor interface {
	// ID names the worker in task records and in cluster status.
	ID() string
	// Slots is how many attempts may run at once.
	Slots() int
	// Start begins an attempt. It never blocks; the caller (the scheduling
	// loop) guarantees that a slot is free.
	Start(a model.Attempt)
	// Cancel stops an attempt: one not yet started never starts, one running
	// has its process group killed. Its result, if any, arrives as Cancelled.
	Cancel(id model.AttemptID)
	// Results delivers one Result per started attempt.
	Results() <-chan model.Result
	// InFlight lists the attempts started and not yet reported, so a new
	// leader can adopt them instead of running them again.
	InFlight() []model.AttemptID
	// OpenLog opens the full output of an attempt kept by this executor.
	OpenLog(id model.AttemptID) (io.ReadCloser, error)
	// Close cancels everything running and waits for it to stop.
	Close() error
}
