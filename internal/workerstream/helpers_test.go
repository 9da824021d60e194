package workerstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

const waitFor = 10 * time.Second // upper bound of every wait; conditions are polled

// testStaleAfter replaces the 500 ms default in tests that are not about
// staleness: on a loaded machine running the race detector a process can
// stall for that long, and a spurious reconnection is not what they test.
const testStaleAfter = 3 * time.Second

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newLocal(t *testing.T, id string) *executor.Local {
	t.Helper()
	l, err := executor.NewLocal(executor.LocalConfig{ID: id, Slots: 4, LogDir: t.TempDir(), KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newHub(t *testing.T, leader string, cfg HubConfig) *Hub {
	t.Helper()
	cfg.Leader = leader
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = testStaleAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t).Named(leader)
	}
	h := NewHub(cfg)
	h.SetLeading(true)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// dialFunc is an agent's Dial.
type dialFunc = func(ctx context.Context) (Conn, string, error)

// transport connects agents to a hub: in process or over a real websocket.
type transport struct {
	name string
	dial func(t *testing.T, h *Hub, leader string) dialFunc
}

var transports = []transport{
	{"pipe", func(t *testing.T, h *Hub, leader string) dialFunc {
		return func(ctx context.Context) (Conn, string, error) {
			worker, leaderEnd := Pipe()
			h.Accept(leaderEnd)
			return worker, leader, nil
		}
	}},
	{"websocket", func(t *testing.T, h *Hub, leader string) dialFunc {
		srv := serveHub(t, h)
		return func(ctx context.Context) (Conn, string, error) {
			c, err := DialWebsocket(ctx, wsURL(srv), "", nil)
			return c, leader, err
		}
	}},
}

// serveHub serves h's stream on 127.0.0.1 at Path.
func serveHub(t *testing.T, h *Hub) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, h.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func wsURL(srv *httptest.Server) string { return "ws" + strings.TrimPrefix(srv.URL, "http") + Path }

// switchDialer dials whatever target is set; with none set it fails.
type switchDialer struct {
	mu     sync.Mutex
	target dialFunc
	dials  atomic.Int64
	conns  []Conn
}

func (d *switchDialer) set(f dialFunc) {
	d.mu.Lock()
	d.target = f
	d.mu.Unlock()
}

func (d *switchDialer) dial(ctx context.Context) (Conn, string, error) {
	d.dials.Add(1)
	d.mu.Lock()
	f := d.target
	d.mu.Unlock()
	if f == nil {
		return nil, "", errors.New("test: no leader to dial")
	}
	c, name, err := f(ctx)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, name, err
}

func (d *switchDialer) last() Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[len(d.conns)-1]
}

// leaderLost records OnLeaderLost calls.
type leaderLost struct {
	mu    sync.Mutex
	calls []string
}

func (l *leaderLost) record(leader string) {
	l.mu.Lock()
	l.calls = append(l.calls, leader)
	l.mu.Unlock()
}

func (l *leaderLost) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func runAgent(t *testing.T, cfg AgentConfig) *Agent {
	t.Helper()
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = testStaleAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t).Named("agent")
	}
	a := NewAgent(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent.Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Errorf("agent.Run did not return")
		}
	})
	return a
}

func nextEvent(t *testing.T, h *Hub) Event {
	t.Helper()
	select {
	case ev := <-h.Events():
		return ev
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for a hub event")
		return Event{}
	}
}

func wantEvent(t *testing.T, h *Hub, kind EventKind, worker string) Event {
	t.Helper()
	ev := nextEvent(t, h)
	if ev.Kind != kind || ev.ID != worker {
		t.Fatalf("event = %v %s, want %v %s", ev.Kind, ev.ID, kind, worker)
	}
	if ev.Worker == nil || ev.Worker.ID() != worker {
		t.Fatalf("event %v carries worker %v", ev.Kind, ev.Worker)
	}
	return ev
}

// nextResult takes the hub's next result and acknowledges it, as the
// scheduler does once it has committed it (use pendingResult to leave it
// unacknowledged).
func nextResult(t *testing.T, h *Hub) model.Result {
	t.Helper()
	r := pendingResult(t, h)
	if w := h.Worker(r.Worker); w != nil {
		w.Ack(r.AttemptID)
	}
	return r
}

// pendingResult takes the hub's next result and does not acknowledge it: a
// leader that took it and has not committed it (yet).
func pendingResult(t *testing.T, h *Hub) model.Result {
	t.Helper()
	select {
	case r := <-h.Results():
		return r
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for a result")
		return model.Result{}
	}
}

func attempt(dagID, task string, n int, spec model.Task) model.Attempt {
	spec.ID = task
	return model.Attempt{AttemptID: model.AttemptID{DAG: dagID, Task: task, Attempt: n}, Spec: spec}
}

func noop() model.Task { return model.Task{Kind: model.KindNoop} }

func shell(cmd string) model.Task {
	return model.Task{Kind: model.KindShell, Command: cmd, Timeout: model.Duration(time.Minute)}
}

// gate is a file a gated shell task waits for.
type gate string

func newGate(t *testing.T) gate { return gate(filepath.Join(t.TempDir(), "go")) }

func (g gate) task(out string) model.Task {
	return shell(fmt.Sprintf("while [ ! -e %q ]; do sleep 0.01; done; echo %s", string(g), out))
}

func (g gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(string(g), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func hasID(ids []model.AttemptID, id model.AttemptID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// testLogger logs to t.Log until the test ends, then discards (goroutines
// may outlive a test by a little).
func testLogger(t *testing.T) *zap.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.DebugLevel))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
