package pod

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orion-sched/orion/internal/kube/kubetest"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// Each test runs pod attempts the way a worker does: on an executor.Local
// whose PodRunner is a Runner, against a fake API server over HTTP whose
// kubelet the test plays.

const inc = "INC"

type rig struct {
	t   *testing.T
	api *kubetest.API
	run *Runner
}

func newRig(t *testing.T, cfg Config) *rig {
	api := kubetest.New("jobs")
	t.Cleanup(api.Close)
	cfg.Client = api.Client()
	return &rig{t: t, api: api, run: New(cfg)}
}

// worker returns a new executor (a worker process) on the rig's runner.
func (r *rig) worker(id string) *executor.Local {
	l, err := executor.NewLocal(executor.LocalConfig{ID: id, Slots: 4, LogDir: r.t.TempDir(), Pods: r.run})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { l.Close() })
	return l
}

func attempt(task string, n int, pod string, timeout time.Duration) model.Attempt {
	return model.Attempt{AttemptID: model.AttemptID{DAG: "d1", Task: task, Attempt: n}, Incarnation: inc,
		Spec: model.Task{ID: task, Kind: model.KindPod, Pod: []byte(pod), Timeout: model.Duration(timeout)}}
}

func name(a model.Attempt) string { return podspec.Name(a) }

// result waits (bounded) for the executor's next result.
func result(t *testing.T, l *executor.Local) model.Result {
	t.Helper()
	select {
	case r := <-l.Results():
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no result within 20 s")
	}
	return model.Result{}
}

// noResult checks that nothing was reported, after the executor is idle.
func noResult(t *testing.T, l *executor.Local) {
	t.Helper()
	select {
	case r := <-l.Results():
		t.Fatalf("unexpected result %+v", r)
	default:
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readLog reads an attempt's log as it is ("" until the attempt has begun).
func readLog(t *testing.T, l *executor.Local, id model.AttemptID) string {
	t.Helper()
	rc, err := l.OpenLog(id)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

const busybox = `{"image":"busybox","command":["sh","-c","echo hi"],"resources":{"limits":{"memory":"64Mi"}}}`

func TestSucceedsStreamsItsLogAndIsDeletedOnceRecorded(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	r.api.OnCreate = func(n string) {
		go func() {
			r.api.Run(n)
			r.api.Log(n, "hello from the pod")
			r.api.Log(n, "second line")
			r.api.Finish(n, 0, "Completed", "rows=42\nstatus=ok")
		}()
	}
	w := r.worker("w1")
	w.Start(a)
	res := result(t, w)
	if res.Outcome != model.Succeeded || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	log := readLog(t, w, a.AttemptID)
	if got, _ := json.Marshal(res.Outputs); string(got) != `{"rows":"42","status":"ok"}` {
		t.Errorf("outputs %s, want rows and status from the termination message", got)
	}
	for _, want := range []string{"orion: created pod jobs/" + name(a), "hello from the pod\nsecond line\n"} {
		if !strings.Contains(log, want) || !strings.Contains(res.OutputTail, want) {
			t.Errorf("log and tail lack %q:\n%s", want, log)
		}
	}
	if p, ok := r.api.Pod(name(a)); !ok || p.Labels[podspec.LabelManagedBy] != podspec.ManagedBy {
		t.Fatalf("the finished pod is gone before its result is recorded, or unlabelled: %v", p)
	}
	w.Recorded(a.AttemptID)
	waitFor(t, "the pod deleted once its success is recorded", func() bool { _, ok := r.api.Pod(name(a)); return !ok })
}

// Whoever creates an attempt's pod, as often as it tries, makes one: a
// create whose answer was lost is tried again, meets the name taken, and
// adopts the pod.
func TestCreateIfAbsentMakesOnePod(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	r.api.FailCreates(1)
	w := r.worker("w1")
	w.Start(a)
	n := name(a)
	waitFor(t, "the pod created", func() bool { return r.api.Creates(n) >= 2 })
	r.api.Run(n)
	r.api.Finish(n, 0, "", "")
	if res := result(t, w); res.Outcome != model.Succeeded {
		t.Fatalf("result %+v", res)
	}
	if got := len(r.api.Names()); got != 1 {
		t.Fatalf("%d pods for one attempt", got)
	}
	if log := readLog(t, w, a.AttemptID); !strings.Contains(log, "adopted pod") {
		t.Errorf("the retried create did not adopt the pod:\n%s", log)
	}
}

// A worker that stops lets its pod attempts go: the pods run on, nothing is
// reported. The worker the attempt is handed to adopts the pod by name,
// follows it to its end and reports it; no second pod is made.
func TestClosedWorkerLetsGoAndAnotherAdopts(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	n := name(a)
	w1 := r.worker("w1")
	w1.Start(a)
	waitFor(t, "the pod created", func() bool { return r.api.Creates(n) == 1 })
	r.api.Run(n)
	r.api.Log(n, "before the hand-over")
	waitFor(t, "w1 following the running pod", func() bool {
		_, pods := w1.Running()
		return pods == 1 && strings.Contains(readLog(t, w1, a.AttemptID), "before the hand-over")
	})
	w1.Close()
	noResult(t, w1)
	if _, ok := r.api.Pod(n); !ok || r.api.Deletes(n) != 0 {
		t.Fatal("closing the worker deleted its pod")
	}

	w2 := r.worker("w2")
	handed := a
	handed.Handover = true
	w2.Start(handed)
	waitFor(t, "w2 following", func() bool { return strings.Contains(readLog(t, w2, a.AttemptID), "adopted pod") })
	r.api.Log(n, "after the hand-over")
	r.api.Finish(n, 3, "", "")
	res := result(t, w2)
	if res.Outcome != model.Failed || res.ExitCode != 3 || res.Error != "exit status 3" {
		t.Fatalf("result %+v", res)
	}
	if got := r.api.Creates(n); got != 1 {
		t.Fatalf("%d creates of the attempt's pod, want 1", got)
	}
	// The adopter reads the whole log of the pod, from its start.
	if log := readLog(t, w2, a.AttemptID); !strings.Contains(log, "before the hand-over\nafter the hand-over\n") {
		t.Errorf("w2's log:\n%s", log)
	}
}

func TestReleaseLeavesThePod(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	n := name(a)
	w := r.worker("w1")
	w.Start(a)
	waitFor(t, "the pod created", func() bool { return r.api.Creates(n) == 1 })
	w.Release(a.AttemptID)
	waitFor(t, "the attempt let go", func() bool { _, pods := w.Running(); return pods == 0 })
	noResult(t, w)
	if _, ok := r.api.Pod(n); !ok {
		t.Fatal("release deleted the pod")
	}
}

func TestCancelDeletesThePod(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{KillGrace: 100 * time.Millisecond})
	a := attempt("a", 1, busybox, time.Minute)
	n := name(a)
	w := r.worker("w1")
	w.Start(a)
	waitFor(t, "the pod created", func() bool { return r.api.Creates(n) == 1 })
	r.api.Run(n)
	w.Cancel(a.AttemptID)
	res := result(t, w)
	if res.Outcome != model.Cancelled {
		t.Fatalf("result %+v", res)
	}
	if _, ok := r.api.Pod(n); ok {
		t.Fatal("the cancelled attempt's pod is still there")
	}
}

// A stop (a cancelled DAG's attempt handed over) deletes the pod if it
// exists and never creates one.
func TestStopDeletesAndCreatesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{KillGrace: 100 * time.Millisecond})
	w := r.worker("w1")
	a := attempt("a", 1, busybox, time.Minute)
	a.Handover, a.Stop = true, true
	w.Start(a)
	if res := result(t, w); res.Outcome != model.Cancelled {
		t.Fatalf("result %+v", res)
	}
	if r.api.Creates(name(a)) != 0 {
		t.Fatal("a stop created the pod")
	}
	// With a pod there: deleted.
	b := attempt("b", 1, busybox, time.Minute)
	w.Start(b)
	waitFor(t, "b's pod created", func() bool { return r.api.Creates(name(b)) == 1 })
	r.api.Run(name(b))
	w.Release(b.AttemptID)
	waitFor(t, "b let go", func() bool { _, pods := w.Running(); return pods == 0 })
	b.Handover, b.Stop = true, true
	w.Start(b)
	if res := result(t, w); res.Outcome != model.Cancelled {
		t.Fatalf("result %+v", res)
	}
	if _, ok := r.api.Pod(name(b)); ok || r.api.Creates(name(b)) != 1 {
		t.Fatal("the stop left the pod, or made another")
	}
}

func TestFailuresUsersCanRead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		kubelet func(api *kubetest.API, n string)
		outcome model.Outcome
		exit    int
		want    string
		gone    bool // the pod is deleted by the worker
	}{
		{"OOMKilled", func(api *kubetest.API, n string) { api.Run(n); api.Finish(n, 137, "OOMKilled", "") },
			model.Failed, 137, "OOMKilled: exit status 137 (the container used more memory than its limit, 64Mi)", false},
		{"image never pulled", func(api *kubetest.API, n string) {
			api.Wait(n, "ErrImageNeverPull", `Container image "busybox" is not present with pull policy of Never`)
		}, model.Failed, -1, `ErrImageNeverPull: Container image "busybox" is not present`, true},
		{"image pull back-off", func(api *kubetest.API, n string) {
			api.Wait(n, "ErrImagePull", `failed to pull image "nope.local/x:1"`)
			api.Wait(n, "ImagePullBackOff", `Back-off pulling image "nope.local/x:1"`)
		}, model.Failed, -1, `ImagePullBackOff: Back-off pulling image "nope.local/x:1" (for `, true},
		{"missing secret", func(api *kubetest.API, n string) {
			api.Wait(n, "CreateContainerConfigError", `secret "api" not found`)
		}, model.Failed, -1, `CreateContainerConfigError: secret "api" not found (for `, true},
		{"evicted", func(api *kubetest.API, n string) {
			api.Run(n)
			api.Fail(n, "Evicted", "The node was low on resource: memory.")
		}, model.Failed, 137, "Evicted: The node was low on resource: memory.", false},
		{"deadline", func(api *kubetest.API, n string) {
			api.Run(n)
			api.Fail(n, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
		}, model.TimedOut, 137, "DeadlineExceeded: the pod ran past its deadline", false},
		{"unschedulable", func(api *kubetest.API, n string) {
			api.Unschedulable(n, "0/1 nodes are available: 1 Insufficient memory.")
		}, model.TimedOut, -1, "its pod was never scheduled: 0/1 nodes are available: 1 Insufficient memory.", true},
		{"deleted by hand", func(api *kubetest.API, n string) { api.Run(n); api.Remove(n) },
			model.Failed, -1, "was deleted before it ended", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, Config{StuckTimeout: 300 * time.Millisecond, DeadlineSlack: 300 * time.Millisecond, KillGrace: 100 * time.Millisecond})
			a := attempt("a", 1, busybox, 500*time.Millisecond)
			if c.name != "unschedulable" {
				a.Spec.Timeout = model.Duration(time.Minute)
			}
			r.api.OnCreate = func(n string) { go c.kubelet(r.api, n) }
			w := r.worker("w1")
			w.Start(a)
			res := result(t, w)
			if res.Outcome != c.outcome || res.ExitCode != c.exit || !strings.Contains(res.Error, c.want) {
				t.Fatalf("result %s exit %d %q; want %s exit %d and %q", res.Outcome, res.ExitCode, res.Error, c.outcome, c.exit, c.want)
			}
			if !strings.Contains(res.OutputTail, c.want) {
				t.Errorf("the task's log does not say it: %q", res.OutputTail)
			}
			if _, ok := r.api.Pod(name(a)); ok == c.gone {
				t.Errorf("pod there: %v, want %v", ok, !c.gone)
			}
		})
	}
}

// A pod of that name that is not the attempt's (made by hand, or of
// another incarnation: the annotations differ) is never adopted.
func TestForeignPodIsNotAdopted(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	other := a
	other.Incarnation = "OTHER"
	spec, _ := podspec.Decode(a.Spec.Pod)
	p := podspec.Build(other, spec, "jobs")
	p.Name = name(a)
	if _, err := r.api.Client().CreatePod(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	w := r.worker("w1")
	w.Start(a)
	if res := result(t, w); res.Outcome != model.Failed || !strings.Contains(res.Error, "not this attempt's") {
		t.Fatalf("result %+v", res)
	}
}

// A DAG deleted and submitted again under its id starts its attempt
// numbers over: its attempt 1, handed over, neither adopts the first
// submission's failed pod (kept for kubectl) nor reports its result, but
// runs a pod of its own.
func TestResubmittedDAGRunsItsOwnPod(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	old := attempt("a", 1, busybox, time.Minute)
	old.Submission = 3
	spec, _ := podspec.Decode(old.Spec.Pod)
	if _, err := r.api.Client().CreatePod(context.Background(), podspec.Build(old, spec, "jobs")); err != nil {
		t.Fatal(err)
	}
	r.api.Finish(name(old), 1, "Error", "")
	a := old
	a.Submission, a.Handover = 9, true
	r.api.OnCreate = func(n string) {
		go func() { r.api.Run(n); r.api.Finish(n, 0, "Completed", "") }()
	}
	w := r.worker("w1")
	w.Start(a)
	if res := result(t, w); res.Outcome != model.Succeeded {
		t.Fatalf("result %+v: want the new pod's success, not the old pod's failure", res)
	}
	if name(a) == name(old) || r.api.Creates(name(a)) != 1 {
		t.Fatalf("pod %s created %d times; the first submission's is %s", name(a), r.api.Creates(name(a)), name(old))
	}
	if _, ok := r.api.Pod(name(old)); !ok {
		t.Error("the first submission's pod was touched")
	}
}

func TestSweepDeletesOnlyLongFinishedPods(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{GCAfter: time.Hour})
	client := r.api.Client()
	spec, _ := podspec.Decode([]byte(busybox))
	mk := func(task string) string {
		p := podspec.Build(attempt(task, 1, busybox, time.Minute), spec, "jobs")
		if _, err := client.CreatePod(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		return p.Name
	}
	old, recent, running := mk("old"), mk("recent"), mk("running")
	r.api.Update(old, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(time.Now().Add(-2 * time.Hour))}}}}
	})
	r.api.Finish(recent, 1, "", "")
	r.api.Run(running)
	n, err := r.run.sweepOnce(context.Background(), time.Now())
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	if _, ok := r.api.Pod(old); ok {
		t.Error("the pod finished 2 h ago is still there")
	}
	for _, n := range []string{recent, running} {
		if _, ok := r.api.Pod(n); !ok {
			t.Errorf("%s swept", n)
		}
	}
}

// Outputs that cannot be published fail the attempt, as a shell task's.
func TestBadOutputsFailTheAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t, Config{})
	a := attempt("a", 1, busybox, time.Minute)
	r.api.OnCreate = func(n string) {
		go func() {
			r.api.Run(n)
			r.api.Finish(n, 0, "Completed", `{"rows": 42`)
		}()
	}
	w := r.worker("w1")
	w.Start(a)
	res := result(t, w)
	if res.Outcome != model.Failed || !strings.Contains(res.Error, "outputs file is not a JSON object") || res.Outputs != nil {
		t.Fatalf("result %+v", res)
	}
	// A message of the kubelet's bound may have been cut: not published.
	b := attempt("b", 1, busybox, time.Minute)
	r.api.OnCreate = func(n string) {
		go func() {
			r.api.Run(n)
			r.api.Finish(n, 0, "Completed", "rows="+strings.Repeat("9", 4091))
		}()
	}
	w.Start(b)
	res = result(t, w)
	if res.Outcome != model.Failed || !strings.Contains(res.Error, "cuts a container's termination message") || res.Outputs != nil {
		t.Fatalf("result %+v", res)
	}
}
