package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/orion-sched/orion/internal/kube"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// Waiting reasons of a container that never resolve: the attempt fails at
// once.
var hopeless = map[string]bool{"ErrImageNeverPull": true, "InvalidImageName": true}

// Waiting reasons that may resolve (a registry back, a Secret created):
// the attempt fails when one lasts StuckTimeout.
var stuck = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "CreateContainerConfigError": true,
	"CreateContainerError": true, "RunContainerError": true}

// follower follows one attempt's pod to its end.
type follower struct {
	r    *Runner
	a    model.Attempt
	name string
	o    *out
	res  *model.Result

	logs          *logStream
	running       atomic.Bool // the container runs (the log stream reconnects while it does)
	stuckSince    time.Time
	stuckReason   string
	unschedulable string // the scheduler's message, while it cannot place the pod
	last          *corev1.Pod
}

// follow watches the pod from its version pod until it ends, the attempt's
// context ends, or the worker's deadline for it passes.
func (f *follower) follow(ctx context.Context, pod *corev1.Pod) bool {
	// creationTimestamp has whole seconds: the pod may be up to a second
	// younger than it says.
	start := pod.CreationTimestamp.Time.Add(time.Second)
	if pod.CreationTimestamp.IsZero() {
		start = time.Now()
	}
	deadline := time.NewTimer(time.Until(start.Add(f.a.Spec.Timeout.D() + f.r.cfg.DeadlineSlack)))
	defer deadline.Stop()
	stuckTimer := time.NewTimer(time.Hour)
	stuckTimer.Stop()
	defer stuckTimer.Stop()
	defer func() {
		if f.logs != nil {
			f.logs.abandon()
		}
	}()

	if f.observe(pod, stuckTimer) {
		return f.end()
	}
	rv := pod.ResourceVersion
	backoff := 200 * time.Millisecond
	for {
		began := time.Now()
		events, w, err := f.watch(ctx, rv)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case kube.IsGone(err):
				rv = "" // too old: read the pod afresh
			case !kube.Temporary(err):
				f.r.log.Warn("watching a pod failed", zap.String("pod", f.name), zap.Error(err))
			}
		}
		for err == nil {
			select {
			case <-ctx.Done():
				w.Close()
				return f.interrupted(ctx)
			case <-deadline.C:
				w.Close()
				return f.timedOut()
			case <-stuckTimer.C:
				if f.observe(f.last, stuckTimer) {
					w.Close()
					return f.end()
				}
			case ev, open := <-events:
				if !open {
					err = io.EOF // the server ended the watch: renew it
					break
				}
				if ev.err != nil {
					err = ev.err
					if kube.IsGone(err) {
						rv = ""
					}
					break
				}
				rv = ev.Pod.ResourceVersion
				if ev.Type == "DELETED" {
					w.Close()
					return f.deleted(ev.Pod)
				}
				if f.observe(ev.Pod, stuckTimer) {
					w.Close()
					return f.end()
				}
				backoff = 200 * time.Millisecond
			}
		}
		w.Close()
		if ctx.Err() != nil {
			return f.interrupted(ctx)
		}
		if errors.Is(err, io.EOF) && time.Since(began) < time.Second && !sleepOr(ctx, deadline.C, backoff) {
			// Watches that end as soon as they begin: not in a tight loop.
			if ctx.Err() != nil {
				return f.interrupted(ctx)
			}
			return f.timedOut()
		}
		if rv == "" || !errors.Is(err, io.EOF) {
			// Read the pod again: events may have been missed.
			if !errors.Is(err, io.EOF) && !sleepOr(ctx, deadline.C, backoff) {
				if ctx.Err() != nil {
					return f.interrupted(ctx)
				}
				return f.timedOut()
			}
			backoff = min(2*backoff, maxRetryBackoff)
			p, gerr := f.r.client.GetPod(ctx, f.name)
			switch {
			case kube.IsNotFound(gerr):
				return f.deleted(f.last)
			case gerr == nil:
				rv = p.ResourceVersion
				if f.observe(p, stuckTimer) {
					return f.end()
				}
			}
		}
	}
}

// sleepOr waits d, or until ctx or c ends it first (false).
func sleepOr(ctx context.Context, c <-chan time.Time, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return false
	case <-t.C:
		return true
	}
}

type watchEvent struct {
	kube.Event
	err error
}

type closer interface{ Close() error }

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// watch starts a watch of the pod from rv and pumps its events into a
// channel, closed when it ends.
func (f *follower) watch(ctx context.Context, rv string) (<-chan watchEvent, closer, error) {
	w, err := f.r.client.WatchPod(ctx, f.name, rv, watchTimeout)
	if err != nil {
		return nil, nopCloser{}, err
	}
	ch := make(chan watchEvent, 16)
	go func() {
		defer close(ch)
		for {
			ev, err := w.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					select {
					case ch <- watchEvent{err: err}:
					case <-ctx.Done():
					}
				}
				return
			}
			select {
			case ch <- watchEvent{Event: ev}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, w, nil
}

// observe takes a new state of the pod; it reports true when the attempt
// has ended, with f.res set.
func (f *follower) observe(p *corev1.Pod, stuckTimer *time.Timer) bool {
	if p == nil {
		return false
	}
	f.last = p
	cs := container(p)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if f.unschedulable != c.Message {
				f.unschedulable = c.Message
				f.o.note("unschedulable: %s", cutMessage(c.Message))
			}
		}
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			f.unschedulable = ""
		}
	}
	switch p.Status.Reason {
	case "DeadlineExceeded":
		f.res.Outcome = model.TimedOut
		f.res.Error = fmt.Sprintf("DeadlineExceeded: the pod ran past its deadline (activeDeadlineSeconds, the task's timeout %s)", f.a.Spec.Timeout.D())
		f.setExit(cs)
		return true
	case "Evicted":
		f.res.Outcome = model.Failed
		f.res.Error = "Evicted: " + cutMessage(p.Status.Message)
		f.setExit(cs)
		return true
	}
	if cs != nil {
		switch {
		case cs.State.Terminated != nil:
			f.startLogs()
			f.running.Store(false)
			t := cs.State.Terminated
			f.res.ExitCode = int(t.ExitCode)
			if t.ExitCode == 0 {
				// Published only by a success, as a shell task's.
				f.res.Outcome = model.Succeeded
				f.outputs(t.Message)
			} else {
				f.res.Outcome = model.Failed
				f.res.Error = exitError(t, f.a)
			}
			return true
		case cs.State.Running != nil:
			f.stuckSince, f.stuckReason = time.Time{}, ""
			stuckTimer.Stop()
			f.running.Store(true)
			f.startLogs()
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			if hopeless[w.Reason] {
				f.res.Outcome = model.Failed
				f.res.Error = w.Reason + ": " + cutMessage(w.Message)
				f.removeAfterFailure()
				return true
			}
			if stuck[w.Reason] {
				if f.stuckSince.IsZero() {
					f.stuckSince = time.Now()
					stuckTimer.Reset(f.r.cfg.StuckTimeout)
					f.o.note("%s: %s (the attempt fails if it lasts %s)", w.Reason, cutMessage(w.Message), f.r.cfg.StuckTimeout)
				}
				f.stuckReason = w.Reason + ": " + cutMessage(w.Message)
				if time.Since(f.stuckSince) >= f.r.cfg.StuckTimeout {
					f.res.Outcome = model.Failed
					f.res.Error = fmt.Sprintf("%s (for %s)", f.stuckReason, time.Since(f.stuckSince).Round(time.Second))
					f.removeAfterFailure()
					return true
				}
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		f.res.Outcome, f.res.ExitCode = model.Succeeded, 0
		return true
	case corev1.PodFailed:
		f.res.Outcome = model.Failed
		f.res.Error = "pod failed"
		if p.Status.Reason != "" {
			f.res.Error = p.Status.Reason + ": " + cutMessage(p.Status.Message)
		}
		f.setExit(cs)
		return true
	}
	return false
}

// container is the status of the pod's one container, if it has one yet.
func container(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == podspec.Container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func (f *follower) setExit(cs *corev1.ContainerStatus) {
	if cs != nil && cs.State.Terminated != nil {
		f.res.ExitCode = int(cs.State.Terminated.ExitCode)
	}
}

// exitError says how a container ended that exited non-zero: "exit
// status 3" as a shell task's, with Kubernetes' reason when it adds one
// (OOMKilled, ContainerCannotRun...).
func exitError(t *corev1.ContainerStateTerminated, a model.Attempt) string {
	msg := fmt.Sprintf("exit status %d", t.ExitCode)
	switch t.Reason {
	case "", "Error", "Completed":
		return msg
	case "OOMKilled":
		msg = "OOMKilled: " + msg + " (the container used more memory than its limit"
		if spec, err := podspec.Decode(a.Spec.Pod); err == nil && spec.Resources != nil {
			if m, ok := spec.Resources.Limits[corev1.ResourceMemory]; ok {
				msg += ", " + m.String()
			}
		}
		return msg + ")"
	}
	msg = t.Reason + ": " + msg
	if t.Message != "" {
		msg += ": " + cutMessage(t.Message)
	}
	return msg
}

// startLogs starts streaming the container's log, once it has started.
func (f *follower) startLogs() {
	if f.logs == nil {
		f.logs = f.r.startLogs(f.name, f.o, f.running.Load)
	}
}

// end finishes an attempt whose pod ended: the rest of its log is read,
// and the pod is kept until the log records the result (Recorded).
func (f *follower) end() bool {
	f.running.Store(false)
	if f.logs != nil {
		f.logs.finish()
		f.logs = nil
	}
	if f.res.Outcome != model.Succeeded && f.res.Error != "" {
		f.o.note("%s", f.res.Error)
	}
	f.r.remember(f.a.AttemptID, f.name, f.res.Outcome != model.Succeeded)
	return true
}

// removeAfterFailure deletes a pod that will never run (an image it will
// never get): kept, it would wait for ever.
func (f *follower) removeAfterFailure() {
	f.r.remove(f.name, f.o)
}

// interrupted handles the end of the attempt's context: let go (the pod
// runs on, nothing is reported) or cancelled (the pod is deleted).
func (f *follower) interrupted(ctx context.Context) bool {
	if executor.LetGo(ctx) {
		return false
	}
	if f.logs != nil {
		f.logs.abandon()
		f.logs = nil
	}
	f.r.remove(f.name, f.o)
	f.res.Outcome, f.res.Error = model.Cancelled, "cancelled: pod "+f.name+" deleted"
	return true
}

// timedOut ends an attempt whose pod outlived its timeout and the slack
// (it never started, typically): the pod is deleted.
func (f *follower) timedOut() bool {
	if f.logs != nil {
		f.logs.abandon()
		f.logs = nil
	}
	why := "its pod did not end"
	switch {
	case f.unschedulable != "":
		why = "its pod was never scheduled: " + cutMessage(f.unschedulable)
	case f.stuckReason != "":
		why = "its container never started: " + f.stuckReason
	case f.last != nil:
		why = "its pod is " + phaseOf(f.last)
	}
	f.r.remove(f.name, f.o)
	f.res.Outcome = model.TimedOut
	f.res.Error = fmt.Sprintf("timed out after %s: %s", f.a.Spec.Timeout.D()+f.r.cfg.DeadlineSlack, why)
	f.o.note("%s", f.res.Error)
	return true
}

// deleted ends an attempt whose pod was deleted by someone else (kubectl,
// a node drain) before it ended.
func (f *follower) deleted(p *corev1.Pod) bool {
	f.running.Store(false)
	if f.logs != nil {
		f.logs.finish()
		f.logs = nil
	}
	f.res.Outcome = model.Failed
	f.res.Error = "pod " + f.name + " was deleted before it ended (by hand, or a node drain)"
	if p != nil {
		if cs := container(p); cs != nil && cs.State.Terminated != nil {
			f.res.ExitCode = int(cs.State.Terminated.ExitCode)
			f.res.Error += fmt.Sprintf(": exit status %d", cs.State.Terminated.ExitCode)
		}
	}
	f.o.note("%s", f.res.Error)
	return true
}
