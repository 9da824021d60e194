package workerstream

import (
	"errors"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// podExec is an executor as a worker with pod tasks has one: it can let an
// attempt go (Release) and is told which of its results the log recorded.
type podExec struct {
	id      string
	results chan model.Result

	mu       sync.Mutex
	started  []model.AttemptID
	running  []model.AttemptID
	released []model.AttemptID
	recorded []model.AttemptID
}

var (
	_ executor.Releaser = (*podExec)(nil)
	_ executor.Recorder = (*podExec)(nil)
)

func newPodExec(id string) *podExec { return &podExec{id: id, results: make(chan model.Result, 16)} }

func (x *podExec) ID() string                   { return x.id }
func (x *podExec) Slots() int                   { return 4 }
func (x *podExec) Results() <-chan model.Result { return x.results }
func (x *podExec) Close() error                 { return nil }
func (x *podExec) OpenLog(model.AttemptID) (io.ReadCloser, error) {
	return nil, errors.New("no logs")
}
func (x *podExec) Start(a model.Attempt) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.started = append(x.started, a.AttemptID)
	x.running = append(x.running, a.AttemptID)
}
func (x *podExec) Cancel(id model.AttemptID) { x.Release(id) }
func (x *podExec) Release(id model.AttemptID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.released = append(x.released, id)
	x.running = slices.DeleteFunc(x.running, func(r model.AttemptID) bool { return r == id })
}
func (x *podExec) Recorded(id model.AttemptID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recorded = append(x.recorded, id)
}
func (x *podExec) InFlight() []model.AttemptID {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.running)
}
func (x *podExec) get(f func(x *podExec) []model.AttemptID) []model.AttemptID {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(f(x))
}

// A released attempt is let go on the worker (Release, not Cancel) and is
// no longer the worker's on the hub: a reconnection does not send it again.
// A result acked as recorded is passed on to the executor; one acked as
// moot is not.
func TestReleaseAndRecordedAcks(t *testing.T) {
	h := newHub(t, "L1", HubConfig{})
	x := newPodExec("w1/1-aa")
	d := &switchDialer{}
	d.set(transports[0].dial(t, h, "L1"))
	runAgent(t, AgentConfig{Exec: x, Dial: d.dial})
	w := wantEvent(t, h, Joined, "w1/1-aa").Worker

	held, other := attempt("d1", "p", 1, noop()), attempt("d1", "q", 1, noop())
	w.Start(held)
	w.Start(other)
	eventually(t, "both started", func() bool { return len(x.get(func(x *podExec) []model.AttemptID { return x.started })) == 2 })
	w.Release(other.AttemptID)
	eventually(t, "q released", func() bool {
		return slices.Contains(x.get(func(x *podExec) []model.AttemptID { return x.released }), other.AttemptID)
	})
	if got := w.InFlight(); !slices.Equal(got, []model.AttemptID{held.AttemptID}) {
		t.Fatalf("the hub still counts %v as the worker's", got)
	}
	// The stream drops and comes back: p, unreported, is listed by the
	// worker; q is not sent again.
	x.mu.Lock()
	x.running = nil // as if the worker had lost p too: the hub must resend p only
	x.mu.Unlock()
	_ = d.last().Close()
	wantEvent(t, h, Disconnected, "w1/1-aa")
	wantEvent(t, h, Joined, "w1/1-aa")
	eventually(t, "p sent again", func() bool { return len(x.get(func(x *podExec) []model.AttemptID { return x.started })) == 3 })
	if s := x.get(func(x *podExec) []model.AttemptID { return x.started }); s[2] != held.AttemptID {
		t.Fatalf("sent again after the reconnection: %v, want only p", s[2:])
	}

	moot, rec := model.Result{AttemptID: other.AttemptID, Worker: x.id, Outcome: model.Succeeded},
		model.Result{AttemptID: held.AttemptID, Worker: x.id, Outcome: model.Succeeded}
	x.results <- moot
	x.results <- rec
	for range 2 {
		r := pendingResult(t, h)
		w.Ack(r.AttemptID, r.AttemptID == held.AttemptID)
	}
	eventually(t, "p's recorded ack to reach the executor", func() bool {
		return len(x.get(func(x *podExec) []model.AttemptID { return x.recorded })) > 0
	})
	if got := x.get(func(x *podExec) []model.AttemptID { return x.recorded }); !slices.Equal(got, []model.AttemptID{held.AttemptID}) {
		t.Fatalf("recorded %v, want only p (q's ack was moot)", got)
	}
}

// A worker that drains is given nothing new: its slots read 0 on the hub
// from its draining message on, and on every stream after it (its hello
// says so).
func TestDrainingWorker(t *testing.T) {
	h := newHub(t, "L1", HubConfig{})
	d := &switchDialer{}
	d.set(transports[0].dial(t, h, "L1"))
	a := runAgent(t, AgentConfig{Exec: newPodExec("w1/1-aa"), Dial: d.dial})
	w := wantEvent(t, h, Joined, "w1/1-aa").Worker
	if w.Slots() != 4 {
		t.Fatalf("slots %d", w.Slots())
	}
	a.StopTaking()
	wantEvent(t, h, Draining, "w1/1-aa")
	if w.Slots() != 0 {
		t.Fatalf("a draining worker has %d slots on the hub", w.Slots())
	}
	_ = d.last().Close()
	wantEvent(t, h, Disconnected, "w1/1-aa")
	if ev := wantEvent(t, h, Joined, "w1/1-aa"); ev.Worker.Slots() != 0 {
		t.Fatalf("after a reconnection the draining worker has %d slots", ev.Worker.Slots())
	}
}
