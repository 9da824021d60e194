package executor

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// PodRunner runs pod tasks' attempts for a Local executor: a pod per
// attempt, which outlives the worker (package pod, on a Kubernetes API).
type PodRunner interface {
	// Run creates attempt a's pod unless it exists (or, with a.Stop,
	// deletes it), follows it to its end, writes its log to out as it
	// runs, and sets r's Outcome, ExitCode and Error. It enforces the
	// task's timeout itself, counted from the pod's creation, so that an
	// attempt handed over does not start its time again. When ctx ends
	// with ErrLetGo (the worker is closing, or the attempt was released)
	// it returns false at once and leaves the pod alone: nothing is
	// reported, and the worker that holds the attempt next adopts it. When
	// ctx ends otherwise (a cancellation) it deletes the pod.
	Run(ctx context.Context, a model.Attempt, out io.Writer, r *model.Result) (reported bool)
	// Recorded is told that a's result is the log's: the pod may be
	// deleted, per the worker's policy.
	Recorded(id model.AttemptID)
}

// ErrLetGo is the cause of a pod attempt's context when the worker lets
// the attempt go rather than stopping it (Close, Release).
var ErrLetGo = errors.New("let go: the attempt is another worker's to follow")

// LetGo reports whether ctx ended because its attempt was let go.
func LetGo(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrLetGo) }

// runPod runs a pod attempt on the PodRunner, its log and tail kept as a
// shell attempt's are. It reports whether a result is due.
func (l *Local) runPod(ctx context.Context, a model.Attempt, r *model.Result) bool {
	logPath := l.LogPath(a.AttemptID)
	if err := syscall.Unlink(logPath); err != nil && err != syscall.ENOENT {
		r.Outcome, r.Error = model.Failed, "open log: remove "+logPath+": "+err.Error()
		return true
	}
	l.noteShell(a.AttemptID) // until the pod prints, its log is empty, not missing
	out := &outputWriter{path: logPath}
	defer out.close()
	reported := l.pods.Run(ctx, a, out, r)
	r.OutputTail = out.tail.String()
	return reported
}

// Release lets an attempt go: a pod attempt stops being followed here,
// its pod left running for the worker that holds it now, and nothing is
// reported; any other attempt is cancelled (Cancel).
func (l *Local) Release(id model.AttemptID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.runs[id]
	if !ok || e.cancelled {
		return
	}
	if e.a.Spec.Kind == model.KindPod {
		e.letGo = true
		l.cancelLocked(e, ErrLetGo)
		return
	}
	l.cancelLocked(e, errCancelled)
}

// Recorded passes on that the log recorded a result of this executor's.
func (l *Local) Recorded(id model.AttemptID) {
	if l.pods != nil {
		l.pods.Recorded(id)
	}
}

// StopTaking makes the executor refuse new attempts other than pod tasks',
// each reported Cancelled at once (the leader runs it elsewhere, no retry
// consumed; it has not started), while those running finish: a worker's
// drain. A pod attempt is still taken: following it costs nothing, and
// refused it would have to be handed over again anyway.
func (l *Local) StopTaking() {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
}

// WaitIdle waits until no attempt other than a pod task's runs or is
// queued, or ctx ends. Pod attempts are not waited for: they are let go by
// Close, and adopted by another worker.
func (l *Local) WaitIdle(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if l.busyOutsidePods() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (l *Local) busyOutsidePods() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.runs {
		if e.a.Spec.Kind != model.KindPod {
			n++
		}
	}
	return n
}

// Running counts the attempts running or queued here, pod attempts apart.
func (l *Local) Running() (others, pods int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.runs {
		if e.a.Spec.Kind == model.KindPod {
			pods++
		} else {
			others++
		}
	}
	return others, pods
}
