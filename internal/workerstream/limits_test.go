package workerstream

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// counts records a hub's OnRefused and OnFlood calls.
type counts struct {
	mu      sync.Mutex
	refused map[string]int
	floods  int
}

func (c *counts) hook(cfg *HubConfig) {
	c.refused = map[string]int{}
	cfg.OnRefused = func(reason string) {
		c.mu.Lock()
		c.refused[reason]++
		c.mu.Unlock()
	}
	cfg.OnFlood = func() {
		c.mu.Lock()
		c.floods++
		c.mu.Unlock()
	}
}

func (c *counts) get() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.refused))
	for k, v := range c.refused {
		out[k] = v
	}
	return out, c.floods
}

// wsWorker is a worker speaking the protocol by hand over a real
// websocket: what a misconfigured or hostile client can send.
type wsWorker struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialWS(t *testing.T, url string) *wsWorker {
	t.Helper()
	return dialWSAs(t, url, "")
}

// dialWSAs dials with X-Test-As: as (serveAs's principal), when set.
func dialWSAs(t *testing.T, url, as string) *wsWorker {
	t.Helper()
	var hdr http.Header
	if as != "" {
		hdr = http.Header{"X-Test-As": {as}}
	}
	ws, _, err := websocket.DefaultDialer.Dial(url, hdr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return &wsWorker{t: t, ws: ws}
}

func (r *wsWorker) send(m Msg) error {
	_ = r.ws.SetWriteDeadline(time.Now().Add(waitFor))
	return r.ws.WriteJSON(m)
}

// until reads messages until one of type typ (returned) or the stream's
// end (nil), within waitFor.
func (r *wsWorker) until(typ string) *Msg {
	r.t.Helper()
	_ = r.ws.SetReadDeadline(time.Now().Add(waitFor))
	for {
		var m Msg
		if err := r.ws.ReadJSON(&m); err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				r.t.Fatalf("no %s and no end of the stream within %s", typ, waitFor)
			}
			return nil
		}
		if m.Type == typ {
			return &m
		}
	}
}

func goodHello(id string) *Hello {
	return &Hello{Worker: id, Slots: 2, Version: ProtocolVersion, Host: "host-1", PID: 42, Instance: "i1"}
}

// A hello whose id, slots, labels or descriptive fields are out of bounds
// is refused before the worker exists for the leader: the worker is told
// why (final: its own settings, which it would send again), the refusal is
// counted by reason, and no Joined event is seen. A valid hello is welcomed.
func TestHelloRefusedWithItsReason(t *testing.T) {
	var c counts
	cfg := HubConfig{MaxSlots: 64}
	c.hook(&cfg)
	h := newHub(t, "L", cfg)
	srv := serveHub(t, h)
	with := func(f func(*Hello)) *Hello { hl := goodHello("w1"); f(hl); return hl }
	cases := []struct {
		name   string
		hello  *Hello
		reason string
		final  bool
	}{
		{"empty id", with(func(h *Hello) { h.Worker = "" }), RefusedID, true},
		{"100 KB id", with(func(h *Hello) { h.Worker = strings.Repeat("w", 100<<10) }), RefusedID, true},
		{"2 MB id", with(func(h *Hello) { h.Worker = strings.Repeat("w", 2<<20) }), RefusedID, true},
		{"NUL in id", with(func(h *Hello) { h.Worker = "w\x001" }), RefusedID, true},
		{"ESC in id", with(func(h *Hello) { h.Worker = "w\x1b[2J" }), RefusedID, true},
		{"space in replica", with(func(h *Hello) { h.Replica = "my replica" }), RefusedID, true},
		{"2^63-1 slots", with(func(h *Hello) { h.Slots = math.MaxInt64 }), RefusedSlots, true},
		{"beyond max slots", with(func(h *Hello) { h.Slots = 65 }), RefusedSlots, true},
		{"no slots", with(func(h *Hello) { h.Slots = 0 }), RefusedSlots, true},
		{"negative slots", with(func(h *Hello) { h.Slots = -1 }), RefusedSlots, true},
		{"bad label", with(func(h *Hello) { h.Labels = model.Labels{"po ol": "gpu"} }), RefusedLabels, true},
		{"long host", with(func(h *Hello) { h.Host = strings.Repeat("h", 300) }), RefusedHello, true},
		{"ESC in host", with(func(h *Hello) { h.Host = "\x1b]0;pwned\x07" }), RefusedHello, true},
		{"long instance", with(func(h *Hello) { h.Instance = strings.Repeat("i", 100) }), RefusedHello, true},
		{"another version", with(func(h *Hello) { h.Version = 99 }), RefusedVersion, false},
	}
	want := map[string]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialWS(t, wsURL(srv))
			if err := r.send(Msg{Type: TypeHello, Hello: tc.hello}); err != nil {
				t.Fatal(err)
			}
			m := r.until(TypeRefused)
			if m == nil || m.Refusal == nil {
				t.Fatal("the stream ended without a refusal")
			}
			if m.Refusal.Reason != tc.reason || m.Refusal.Final != tc.final || len(m.Refusal.Message) > 300 {
				t.Fatalf("refusal %+v (%d bytes of message), want reason %s final %v, a short message",
					*m.Refusal, len(m.Refusal.Message), tc.reason, tc.final)
			}
			t.Logf("refused: %s", m.Refusal.Message)
		})
		want[tc.reason]++
	}
	// A first message that is no hello.
	r := dialWS(t, wsURL(srv))
	if err := r.send(Msg{Type: TypeHeartbeat}); err != nil {
		t.Fatal(err)
	}
	if m := r.until(TypeRefused); m == nil || m.Refusal.Reason != RefusedHello {
		t.Fatalf("a heartbeat first: %+v", m)
	}
	want[RefusedHello]++

	if got, _ := c.get(); !equalCounts(got, want) {
		t.Fatalf("refusals counted %v, want %v", got, want)
	}
	select {
	case ev := <-h.Events():
		t.Fatalf("a refused hello produced an event: %v %.40s", ev.Kind, ev.ID)
	default:
	}

	ok := dialWS(t, wsURL(srv))
	if err := ok.send(Msg{Type: TypeHello, Hello: goodHello("w1/1-abc")}); err != nil {
		t.Fatal(err)
	}
	if m := ok.until(TypeWelcome); m == nil {
		t.Fatal("a valid hello was not welcomed")
	}
	wantEvent(t, h, Joined, "w1/1-abc")
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An agent whose settings the leader refuses (here more slots than it
// allows) stops with the leader's reason instead of reconnecting for ever.
func TestRefusedAgentStops(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h := newHub(t, "L", HubConfig{MaxSlots: 2})
			d := &switchDialer{}
			d.set(tr.dial(t, h, "L"))
			a := NewAgent(AgentConfig{Exec: newLocal(t, "w1"), Dial: d.dial, StaleAfter: testStaleAfter, Logger: testLogger(t)})
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			err := a.Run(ctx)
			var re *RefusedError
			if !errors.As(err, &re) || re.Reason != RefusedSlots || !strings.Contains(err.Error(), "4 slots") {
				t.Fatalf("Run = %v, want a refusal for slots naming 4 slots", err)
			}
			if n := d.dials.Load(); n != 1 {
				t.Fatalf("the agent dialed %d times; a final refusal must stop it after one", n)
			}
			t.Logf("Run: %v", err)
		})
	}
}

// A stream that sends heartbeats in a tight loop is closed once it has
// spent its budget, and counted; so is one that floods pings (control
// frames the websocket answers itself). The worker is told why, and the
// hub sees it disconnect.
func TestFloodedStreamIsClosed(t *testing.T) {
	for _, kind := range []string{"heartbeats", "pings", "results it does not hold"} {
		t.Run(kind, func(t *testing.T) {
			var c counts
			cfg := HubConfig{MaxRate: 50}
			c.hook(&cfg)
			h := newHub(t, "L", cfg)
			r := dialWS(t, wsURL(serveHub(t, h)))
			if err := r.send(Msg{Type: TypeHello, Hello: goodHello("flood")}); err != nil {
				t.Fatal(err)
			}
			if r.until(TypeWelcome) == nil {
				t.Fatal("not welcomed")
			}
			wantEvent(t, h, Joined, "flood")
			// Bounded in count and time; the stream must end well before.
			deadline := time.Now().Add(waitFor)
			sent := 0
			var err error
			for ; err == nil && sent < 1_000_000 && time.Now().Before(deadline); sent++ {
				switch kind {
				case "heartbeats":
					err = r.send(Msg{Type: TypeHeartbeat})
				case "pings":
					err = r.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
				default:
					err = r.send(Msg{Type: TypeResult, Result: &model.Result{
						AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: sent + 1}, Outcome: model.Succeeded}})
				}
				if sent%64 == 0 {
					_, floods := c.get()
					if floods > 0 {
						break
					}
				}
			}
			eventually(t, "the flood to be counted", func() bool { _, f := c.get(); return f == 1 })
			ev := nextEvent(t, h)
			if ev.Kind != Disconnected {
				t.Fatalf("event %v, want the flooding worker disconnected", ev.Kind)
			}
			t.Logf("%s: closed after %d messages sent (budget: 50 a second, burst 50)", kind, sent)
		})
	}
}

// The results of attempts a worker was sent cost nothing against the
// budget: a worker returning hundreds of results a second on a stream
// allowed 20 messages a second beyond them keeps its stream.
func TestResultsOfHeldAttemptsAreFree(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			var c counts
			cfg := HubConfig{MaxRate: 20}
			c.hook(&cfg)
			h := newHub(t, "L", cfg)
			l, err := newLocalSlots(t, "w1", 64)
			if err != nil {
				t.Fatal(err)
			}
			runAgent(t, AgentConfig{Exec: l, Dial: tr.dial(t, h, "L")})
			w := wantEvent(t, h, Joined, "w1").Worker
			const n = 500
			for i := 1; i <= n; i++ {
				w.Start(attempt("d", "t", i, noop()))
			}
			for i := 0; i < n; i++ {
				nextResult(t, h)
			}
			if _, floods := c.get(); floods != 0 {
				t.Fatalf("%d floods counted for results of attempts the worker was sent", floods)
			}
			select {
			case ev := <-h.Events():
				t.Fatalf("event %v during the results", ev.Kind)
			default:
			}
		})
	}
}

// A binary frame is not part of the protocol: it ends the stream rather
// than being skipped (skipped frames would escape every limit).
func TestBinaryFrameEndsTheStream(t *testing.T) {
	h := newHub(t, "L", HubConfig{})
	r := dialWS(t, wsURL(serveHub(t, h)))
	if err := r.send(Msg{Type: TypeHello, Hello: goodHello("bin")}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Joined, "bin")
	if err := r.ws.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Disconnected, "bin")
}

func newLocalSlots(t *testing.T, id string, slots int) (*executor.Local, error) {
	t.Helper()
	l, err := executor.NewLocal(executor.LocalConfig{ID: id, Slots: slots, LogDir: t.TempDir()})
	if err == nil {
		t.Cleanup(func() { _ = l.Close() })
	}
	return l, err
}

// The hub holds at most MaxWorkers workers: one more is refused, not for
// good (one may leave), and joins once one has left.
func TestMaxWorkers(t *testing.T) {
	var c counts
	cfg := HubConfig{MaxWorkers: 2}
	c.hook(&cfg)
	h := newHub(t, "L", cfg)
	srv := serveHub(t, h)
	for _, id := range []string{"w1", "w2"} {
		r := dialWS(t, wsURL(srv))
		if err := r.send(Msg{Type: TypeHello, Hello: goodHello(id)}); err != nil {
			t.Fatal(err)
		}
		wantEvent(t, h, Joined, id)
	}
	third := dialWS(t, wsURL(srv))
	if err := third.send(Msg{Type: TypeHello, Hello: goodHello("w3")}); err != nil {
		t.Fatal(err)
	}
	m := third.until(TypeRefused)
	if m == nil || m.Refusal.Reason != RefusedWorkers || m.Refusal.Final {
		t.Fatalf("third worker: %+v, want a refusal for workers, not final", m)
	}
	if got, _ := c.get(); got[RefusedWorkers] != 1 {
		t.Fatalf("refusals %v", got)
	}
	// A known worker reconnecting is no new worker.
	again := dialWS(t, wsURL(srv))
	if err := again.send(Msg{Type: TypeHello, Hello: goodHello("w2")}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Joined, "w2")
	_ = h.Worker("w1").Close()
	wantEvent(t, h, Disconnected, "w1")
	wantEvent(t, h, Left, "w1")
	retry := dialWS(t, wsURL(srv))
	if err := retry.send(Msg{Type: TypeHello, Hello: goodHello("w3")}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Joined, "w3")
}

// A worker closed for flooding that dials again at once goes on from the
// budget its last stream spent, not from a fresh burst: refused at its
// hello, before it joins (the engine sees no join and leave), and counted.
// Once its budget has refilled it joins again; another worker from the
// same address is not held back.
func TestFloodBudgetOutlivesTheStream(t *testing.T) {
	var c counts
	cfg := HubConfig{MaxRate: 50}
	c.hook(&cfg)
	h := newHub(t, "L", cfg)
	url := wsURL(serveHub(t, h))
	r := dialWS(t, url)
	if err := r.send(Msg{Type: TypeHello, Hello: goodHello("flood")}); err != nil {
		t.Fatal(err)
	}
	if r.until(TypeWelcome) == nil {
		t.Fatal("not welcomed")
	}
	wantEvent(t, h, Joined, "flood")
	for sent := 0; sent < 10_000; sent++ {
		if r.send(Msg{Type: TypeHeartbeat}) != nil {
			break
		}
		if _, f := c.get(); f > 0 {
			break
		}
	}
	eventually(t, "the flood to be counted", func() bool { _, f := c.get(); return f == 1 })
	if ev := nextEvent(t, h); ev.Kind != Disconnected {
		t.Fatalf("event %v, want the flooding worker disconnected", ev.Kind)
	}

	again := dialWS(t, url)
	if err := again.send(Msg{Type: TypeHello, Hello: goodHello("flood")}); err != nil {
		t.Fatal(err)
	}
	m := again.until(TypeRefused)
	if m == nil || m.Refusal == nil || m.Refusal.Reason != RefusedFlood {
		t.Fatalf("dialing again at once: %+v, want a flood refusal at the hello", m)
	}
	if _, f := c.get(); f != 2 {
		t.Fatalf("floods counted %d, want 2 (the refused hello counts)", f)
	}

	other := dialWS(t, url)
	if err := other.send(Msg{Type: TypeHello, Hello: goodHello("calm")}); err != nil {
		t.Fatal(err)
	}
	if other.until(TypeWelcome) == nil {
		t.Fatal("another worker from the same address was not welcomed")
	}
	wantEvent(t, h, Joined, "calm")

	// 50 a second: the spent budget allows a message again within 20 ms;
	// a hello waits for it, bounded.
	deadline := time.Now().Add(waitFor)
	for {
		w := dialWS(t, url)
		if err := w.send(Msg{Type: TypeHello, Hello: goodHello("flood")}); err != nil {
			t.Fatal(err)
		}
		var m Msg
		_ = w.ws.SetReadDeadline(time.Now().Add(waitFor))
		if err := w.ws.ReadJSON(&m); err == nil && m.Type == TypeWelcome {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker was never welcomed again once its budget refilled")
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantEvent(t, h, Joined, "flood")
}
