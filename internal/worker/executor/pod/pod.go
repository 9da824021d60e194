// Package pod runs pod tasks for a worker: each attempt is one Kubernetes
// pod, named after the attempt (podspec.Name), created if absent and
// followed to its end; its log is streamed into the attempt's log while it
// runs, and its end (exit code, and the reason when there is one: OOMKilled,
// an image that cannot be pulled, Evicted, DeadlineExceeded, unschedulable)
// becomes the attempt's result.
//
// The pod outlives the worker. A worker that stops (Close) or is told that
// the attempt is another's (Release) lets it go and reports nothing; the
// leader hands the attempt to another worker, whose Run finds the pod by
// name and follows it from where it is. Only a cancellation or the task's
// timeout deletes a running pod (its grace period, then forced). A finished
// pod is deleted once the log has recorded its result (Recorded): at once
// after a success, after a while after a failure (kept for kubectl), and
// any left behind by a worker that died first is swept later.
package pod

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/orion-sched/orion/internal/kube"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// Defaults of Config.
const (
	DefaultStuckTimeout    = 2 * time.Minute
	DefaultDeleteFailed    = 10 * time.Minute
	DefaultGCAfter         = time.Hour
	DefaultKillGrace       = 2 * time.Second
	DefaultDeadlineSlack   = 30 * time.Second
	watchTimeout           = 5 * time.Minute // the server ends a watch after this; it is renewed
	logDrain               = 2 * time.Second // a finished container's log stream gets this long to end
	maxRemembered          = 20000           // finished attempts awaiting Recorded
	maxRetryBackoff        = 5 * time.Second
	deleteWait             = 10 * time.Second // beyond the grace, before a forced delete
	terminationMessageHint = 4096
)

// Config configures a Runner.
type Config struct {
	Client *kube.Client
	// StuckTimeout is how long a container may wait on an error that may
	// resolve itself (an image pull failing, a Secret or ConfigMap that
	// does not exist) before the attempt fails. Errors that never resolve
	// (ErrImageNeverPull, InvalidImageName) fail it at once.
	StuckTimeout time.Duration
	// DeleteSucceeded and DeleteFailed are how long a finished pod is kept
	// once its result is recorded: 0 deletes a succeeded pod at once; a
	// failed one is kept DeleteFailed (for kubectl describe and logs).
	DeleteSucceeded time.Duration
	DeleteFailed    time.Duration
	// GCAfter: a finished pod still there this long after it ended (its
	// worker died before deleting it) is deleted by any worker's sweep.
	GCAfter time.Duration
	// KillGrace is the grace period of a cancelled or timed-out pod's
	// container, before it is deleted by force.
	KillGrace time.Duration
	// DeadlineSlack: the pod's own deadline (activeDeadlineSeconds) is the
	// task's timeout; the worker gives up this much later, counted from
	// the pod's creation, for a pod the kubelet never started (never
	// scheduled, say).
	DeadlineSlack time.Duration
	Logger        *zap.Logger
}

// Runner is the executor.PodRunner of a worker.
type Runner struct {
	cfg    Config
	client *kube.Client
	log    *zap.Logger

	mu       sync.Mutex
	finished map[model.AttemptID]finishedPod // awaiting Recorded
	order    []model.AttemptID               // the same, oldest first
}

type finishedPod struct {
	name   string
	failed bool
}

var _ executor.PodRunner = (*Runner)(nil)

// New returns a Runner on cfg.Client.
func New(cfg Config) *Runner {
	if cfg.StuckTimeout <= 0 {
		cfg.StuckTimeout = DefaultStuckTimeout
	}
	if cfg.DeleteFailed < 0 {
		cfg.DeleteFailed = 0
	}
	if cfg.DeleteSucceeded < 0 {
		cfg.DeleteSucceeded = 0
	}
	if cfg.GCAfter <= 0 {
		cfg.GCAfter = DefaultGCAfter
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.DeadlineSlack <= 0 {
		cfg.DeadlineSlack = DefaultDeadlineSlack
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Runner{cfg: cfg, client: cfg.Client, log: cfg.Logger, finished: make(map[model.AttemptID]finishedPod)}
}

// out serializes the attempt's log: the pod's lines and Orion's own notes
// ("orion: ...") come from two goroutines.
type out struct {
	mu sync.Mutex
	w  io.Writer
}

func (o *out) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Write(p)
}

func (o *out) note(format string, args ...any) {
	fmt.Fprintf(o, "orion: "+format+"\n", args...)
}

// Run runs attempt a (executor.PodRunner).
func (r *Runner) Run(ctx context.Context, a model.Attempt, w io.Writer, res *model.Result) bool {
	o := &out{w: w}
	name := podspec.Name(a)
	fail := func(format string, args ...any) bool {
		res.Outcome, res.Error = model.Failed, fmt.Sprintf(format, args...)
		o.note("%s", res.Error)
		return true
	}
	if a.Stop {
		// Cancelled while nobody followed it: delete the pod if it was
		// ever made, make none.
		r.remove(name, o)
		res.Outcome, res.Error = model.Cancelled, "cancelled: pod "+name+" deleted"
		return true
	}
	spec, err := podspec.Decode(a.Spec.Pod)
	if err != nil {
		return fail("%v", err)
	}
	pod, adopted, err := r.ensure(ctx, podspec.Build(a, spec, r.client.Namespace()), a)
	switch {
	case executor.LetGo(ctx):
		return false
	case ctx.Err() != nil:
		// Cancelled while creating: the create may have gone through.
		r.remove(name, o)
		res.Outcome, res.Error = model.Cancelled, "cancelled"
		return true
	case err != nil:
		return fail("%v", err)
	}
	if adopted {
		o.note("adopted pod %s/%s (%s, created %s)", r.client.Namespace(), name, phaseOf(pod), pod.CreationTimestamp.UTC().Format(time.RFC3339))
	} else {
		o.note("created pod %s/%s", r.client.Namespace(), name)
	}
	f := &follower{r: r, a: a, name: name, o: o, res: res}
	return f.follow(ctx, pod)
}

// ensure creates the attempt's pod unless it exists, and returns it. The
// name is the attempt's, so that whoever tries, as often as it tries,
// makes one pod: a create that meets the name taken adopts the pod,
// provided it is this attempt's (podspec.Owns). Errors the API server
// would answer again (403, 422) are returned; others are retried until ctx
// ends.
func (r *Runner) ensure(ctx context.Context, want *corev1.Pod, a model.Attempt) (*corev1.Pod, bool, error) {
	backoff := 100 * time.Millisecond
	for {
		var pod *corev1.Pod
		var err error
		adopted := false
		if a.Handover {
			// Handed over: the pod is there, most likely; read it first,
			// so a pod that exists is never sent again.
			if pod, err = r.client.GetPod(ctx, want.Name); err == nil {
				adopted = true
			} else if kube.IsNotFound(err) {
				pod, err = r.client.CreatePod(ctx, want)
			}
		} else {
			pod, err = r.client.CreatePod(ctx, want)
		}
		if kube.IsAlreadyExists(err) {
			pod, err = r.client.GetPod(ctx, want.Name)
			adopted = err == nil
			if kube.IsNotFound(err) {
				continue // deleted in between: create it
			}
		}
		if err == nil {
			if adopted && !podspec.Owns(pod, a) {
				return nil, false, fmt.Errorf("pod %s exists and is not this attempt's (its annotations name another): not adopted", want.Name)
			}
			return pod, adopted, nil
		}
		if !kube.Temporary(err) {
			return nil, false, fmt.Errorf("creating pod %s: %v", want.Name, err)
		}
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		r.log.Warn("pod create failed; retrying", zap.String("pod", want.Name), zap.Error(err))
		if !sleep(ctx, backoff) {
			return nil, false, ctx.Err()
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func phaseOf(p *corev1.Pod) string {
	if p.Status.Phase == "" {
		return "Pending"
	}
	return string(p.Status.Phase)
}

// remove deletes a pod and waits until it is gone: KillGrace for its
// container to stop on SIGTERM, then by force. It runs on its own context:
// the attempt's has ended (a cancellation).
func (r *Runner) remove(name string, o *out) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.KillGrace+2*deleteWait)
	defer cancel()
	grace := int64((r.cfg.KillGrace + time.Second - 1) / time.Second)
	if err := r.deleteRetrying(ctx, name, &grace); err != nil {
		o.note("deleting pod %s: %v", name, err)
		return
	}
	deadline := time.Now().Add(r.cfg.KillGrace + deleteWait)
	for {
		_, err := r.client.GetPod(ctx, name)
		if kube.IsNotFound(err) {
			o.note("pod %s deleted", name)
			return
		}
		if time.Now().After(deadline) {
			break
		}
		if !sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	zero := int64(0)
	if err := r.deleteRetrying(ctx, name, &zero); err != nil {
		o.note("deleting pod %s by force: %v", name, err)
		return
	}
	o.note("pod %s deleted by force after its grace period", name)
}

func (r *Runner) deleteRetrying(ctx context.Context, name string, grace *int64) error {
	backoff := 100 * time.Millisecond
	for {
		err := r.client.DeletePod(ctx, name, grace)
		if err == nil || !kube.Temporary(err) {
			return err
		}
		if !sleep(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// remember keeps a finished attempt's pod until its result is recorded.
func (r *Runner) remember(id model.AttemptID, name string, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.finished[id]; !ok {
		r.order = append(r.order, id)
	}
	r.finished[id] = finishedPod{name: name, failed: failed}
	for len(r.order) > maxRemembered {
		// The sweep deletes those forgotten here.
		delete(r.finished, r.order[0])
		r.order = r.order[1:]
	}
}

// Recorded deletes the pod of an attempt whose result the log recorded, per
// the policy (executor.PodRunner).
func (r *Runner) Recorded(id model.AttemptID) {
	r.mu.Lock()
	fp, ok := r.finished[id]
	delete(r.finished, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	after := r.cfg.DeleteSucceeded
	if fp.failed {
		after = r.cfg.DeleteFailed
	}
	del := func() {
		ctx, cancel := context.WithTimeout(context.Background(), deleteWait)
		defer cancel()
		zero := int64(0)
		if err := r.deleteRetrying(ctx, fp.name, &zero); err != nil {
			r.log.Warn("deleting a finished pod failed; the sweep will", zap.String("pod", fp.name), zap.Error(err))
		}
	}
	if after <= 0 {
		go del()
		return
	}
	time.AfterFunc(after, del)
}

// Sweep deletes, every interval until ctx ends, the finished pods of pod
// tasks that are still there GCAfter after they ended: their worker died
// before its policy deleted them (or they belong to an earlier
// incarnation). Every worker sweeps; a pod deleted twice is no error.
func (r *Runner) Sweep(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.sweepOnce(ctx, time.Now())
		if err != nil {
			r.log.Warn("sweeping finished pods failed", zap.Error(err))
		} else if n > 0 {
			r.log.Info("swept finished pods", zap.Int("deleted", n))
		}
	}
}

func (r *Runner) sweepOnce(ctx context.Context, now time.Time) (int, error) {
	list, err := r.client.ListPods(ctx, podspec.Selector)
	if err != nil {
		return 0, err
	}
	n := 0
	zero := int64(0)
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		if now.Sub(endedAt(p)) < r.cfg.GCAfter {
			continue
		}
		if err := r.client.DeletePod(ctx, p.Name, &zero); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// endedAt is when a finished pod ended: its container's end, else its
// last condition change, else its creation.
func endedAt(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && !t.FinishedAt.IsZero() {
			return t.FinishedAt.Time
		}
	}
	var at time.Time
	for _, c := range p.Status.Conditions {
		if c.LastTransitionTime.After(at) {
			at = c.LastTransitionTime.Time
		}
	}
	if at.IsZero() {
		at = p.CreationTimestamp.Time
	}
	return at
}

// logStream copies a container's log into the attempt's log, following it
// while it runs; on a stream that ends early (the connection dropped) it
// reconnects from the last line's time, skipping what it has.
type logStream struct {
	r    *Runner
	name string
	o    *out
	done chan struct{}
	stop context.CancelFunc
	last time.Time // time of the last line written
}

func (r *Runner) startLogs(name string, o *out, running func() bool) *logStream {
	ctx, cancel := context.WithCancel(context.Background())
	ls := &logStream{r: r, name: name, o: o, done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(ls.done)
		ls.run(ctx, running)
	}()
	return ls
}

func (ls *logStream) run(ctx context.Context, running func() bool) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		var since *time.Time
		if !ls.last.IsZero() {
			s := ls.last
			since = &s
		}
		rc, err := ls.r.client.Logs(ctx, ls.name, kube.LogOptions{Container: podspec.Container, Follow: true, Since: since})
		if err == nil {
			err = ls.copy(rc)
			rc.Close()
			if err == nil && !running() {
				return // the container ended and its log with it
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !kube.Temporary(err) && !errors.Is(err, io.ErrUnexpectedEOF) {
			// The container is not started yet (400), or the pod is
			// gone: the follower starts the log again when it runs.
			ls.r.log.Debug("pod log not available", zap.String("pod", ls.name), zap.Error(err))
			return
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// copy writes each line without its timestamp, skipping lines no later
// than the last one written (a reconnection's overlap).
func (ls *logStream) copy(rc io.Reader) error {
	br := bufio.NewReaderSize(rc, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			ls.line(line)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the buffer: the rest follows as is.
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				ls.o.Write(line)
			}
			if err == nil {
				continue
			}
			fallthrough
		case err != nil:
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func (ls *logStream) line(line []byte) {
	sp := bytes.IndexByte(line, ' ')
	if sp > 0 && sp < 40 {
		if ts, err := time.Parse(time.RFC3339Nano, string(line[:sp])); err == nil {
			if !ls.last.IsZero() && !ts.After(ls.last) {
				return
			}
			ls.last = ts
			line = line[sp+1:]
		}
	}
	ls.o.Write(line)
}

// finish waits (at most logDrain) for the stream to end by itself, the
// container having ended, then stops it.
func (ls *logStream) finish() {
	t := time.NewTimer(logDrain)
	defer t.Stop()
	select {
	case <-ls.done:
	case <-t.C:
		ls.stop()
		<-ls.done
	}
	ls.stop()
}

// abandon stops the stream at once.
func (ls *logStream) abandon() {
	ls.stop()
	<-ls.done
}

// cutMessage bounds a message quoted from Kubernetes in an error.
func cutMessage(s string) string {
	return model.CutMiddle(strings.TrimSpace(s), 512)
}
