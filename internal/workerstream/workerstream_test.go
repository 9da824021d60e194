package workerstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/orion-sched/orion/internal/model"
)

func TestPipe(t *testing.T) {
	a, b := Pipe()
	for i := 0; i < 3; i++ {
		if err := a.Send(Msg{Type: TypeHeartbeat}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // what was sent before the close arrives
		m, err := b.Recv()
		if err != nil || m.Type != TypeHeartbeat {
			t.Fatalf("recv %d: %v %v", i, m, err)
		}
	}
	if _, err := b.Recv(); err != io.EOF {
		t.Fatalf("recv after peer close: %v, want io.EOF", err)
	}
	if err := b.Send(Msg{Type: TypeHeartbeat}); err == nil {
		t.Fatal("send to a closed peer succeeded")
	}
	if _, err := a.Recv(); err == nil {
		t.Fatal("recv on a closed end succeeded")
	}
	// The values travel as they are: no serialization.
	c, d := Pipe()
	att := &model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: 1}}
	_ = c.Send(Msg{Type: TypeDispatch, Attempt: att})
	m, _ := d.Recv()
	if m.Attempt != att {
		t.Fatal("pipe copied the message")
	}
}

// TestDispatch runs attempts on a real local executor through each
// transport: hello/welcome, noop and shell results, cancel, log fetch.
func TestDispatch(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h := newHub(t, "L1", HubConfig{})
			local := newLocal(t, "w1/1-aa")
			a := runAgent(t, AgentConfig{Exec: local, Dial: tr.dial(t, h, "L1"), Replica: ""})

			ev := wantEvent(t, h, Joined, "w1/1-aa")
			w := ev.Worker
			if w.Slots() != 4 || len(ev.InFlight) != 0 {
				t.Fatalf("joined: slots %d in-flight %v", w.Slots(), ev.InFlight)
			}
			eventually(t, "welcome", func() bool { l, ok := a.Leader(); return ok && l == "L1" })
			if ws := h.Workers(); len(ws) != 1 || ws[0].ID != "w1/1-aa" || !ws[0].Connected || ws[0].Slots != 4 {
				t.Fatalf("workers = %+v", ws)
			}
			// The hello says where the worker runs: this host, this process.
			if host, _ := os.Hostname(); h.Workers()[0].Host != host || h.Workers()[0].PID != os.Getpid() {
				t.Fatalf("worker host %q pid %d, want %q %d", h.Workers()[0].Host, h.Workers()[0].PID, host, os.Getpid())
			}
			if w.Results() != h.Results() {
				t.Fatal("RemoteWorker.Results is not the hub's")
			}

			// noop
			n := attempt("d1", "noop", 1, noop())
			w.Start(n)
			r := nextResult(t, h)
			if r.AttemptID != n.AttemptID || r.Outcome != model.Succeeded || r.Worker != "w1/1-aa" {
				t.Fatalf("noop result %+v", r)
			}

			// shell echo, then its log over the stream
			e := attempt("d1", "echo", 1, shell("echo hello from the worker"))
			w.Start(e)
			r = nextResult(t, h)
			if r.AttemptID != e.AttemptID || r.Outcome != model.Succeeded || !strings.Contains(r.OutputTail, "hello from the worker") {
				t.Fatalf("shell result %+v", r)
			}
			rc, err := w.OpenLog(e.AttemptID)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(got) != "hello from the worker\n" {
				t.Fatalf("log = %q, %v", got, err)
			}

			// A log bigger than the credit window, read slowly in small pieces.
			big := attempt("d1", "big", 1, shell("i=0; while [ $i -lt 12000 ]; do echo line-$i-abcdefghijklmnopqrstuvwxyz; i=$((i+1)); done"))
			w.Start(big)
			if r = nextResult(t, h); r.AttemptID != big.AttemptID || r.Outcome != model.Succeeded {
				t.Fatalf("big result %+v", r)
			}
			want, err := os.ReadFile(local.LogPath(big.AttemptID))
			if err != nil || len(want) < 5*MaxChunk {
				t.Fatalf("local log: %d bytes, %v", len(want), err)
			}
			rc, err = w.OpenLog(big.AttemptID)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			p := make([]byte, 1000)
			for {
				n, err := rc.Read(p)
				buf.Write(p[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rc.Close()
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("remote log: %d bytes, want %d", buf.Len(), len(want))
			}
			// Closing a transfer early is fine, and the stream carries on.
			rc, err = w.OpenLog(big.AttemptID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rc.Read(p); err != nil {
				t.Fatal(err)
			}
			rc.Close()

			// No log for a noop: os.ErrNotExist, as from the local executor.
			if _, err := w.OpenLog(n.AttemptID); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("noop log: %v, want os.ErrNotExist", err)
			}

			// cancel
			s := attempt("d1", "sleep", 1, shell("sleep 30"))
			w.Start(s)
			eventually(t, "the sleep to run", func() bool { return hasID(local.InFlight(), s.AttemptID) })
			if !hasID(w.InFlight(), s.AttemptID) {
				t.Fatalf("remote in-flight %v lacks %v", w.InFlight(), s.AttemptID)
			}
			if ws := h.Workers(); ws[0].InFlight != 1 {
				t.Fatalf("workers = %+v", ws)
			}
			w.Cancel(s.AttemptID)
			if r = nextResult(t, h); r.AttemptID != s.AttemptID || r.Outcome != model.Cancelled {
				t.Fatalf("cancel result %+v", r)
			}
			if got := w.InFlight(); len(got) != 0 {
				t.Fatalf("in-flight after all results: %v", got)
			}
			if err := a.Drain(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLeaderChange: the first leader goes away while an attempt runs; the
// agent calls OnLeaderLost once, reaches the next leader, reports the
// attempt in its hello, and the result goes to the new leader.
func TestLeaderChange(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h1 := newHub(t, "L1", HubConfig{})
			h2 := newHub(t, "L2", HubConfig{})
			local := newLocal(t, "w1/1-aa")
			d := &switchDialer{}
			d.set(tr.dial(t, h1, "L1"))
			lost := &leaderLost{}
			runAgent(t, AgentConfig{Exec: local, Dial: d.dial, OnLeaderLost: lost.record})

			w1 := wantEvent(t, h1, Joined, "w1/1-aa").Worker
			g := newGate(t)
			run := attempt("d1", "long", 1, g.task("done"))
			w1.Start(run)
			eventually(t, "the attempt to run", func() bool { return hasID(local.InFlight(), run.AttemptID) })

			d.set(tr.dial(t, h2, "L2"))
			h1.SetLeading(false) // L1 "dies": its streams close
			wantEvent(t, h1, Disconnected, "w1/1-aa")
			wantEvent(t, h1, Left, "w1/1-aa")

			ev := wantEvent(t, h2, Joined, "w1/1-aa")
			if !hasID(ev.InFlight, run.AttemptID) {
				t.Fatalf("hello to the new leader reports %v, want %v", ev.InFlight, run.AttemptID)
			}
			if got := lost.get(); len(got) != 1 || got[0] != "L1" {
				t.Fatalf("OnLeaderLost calls %v, want [L1]", got)
			}
			if !hasID(ev.Worker.InFlight(), run.AttemptID) {
				t.Fatalf("new leader's InFlight %v", ev.Worker.InFlight())
			}
			g.open(t)
			r := nextResult(t, h2)
			if r.AttemptID != run.AttemptID || r.Outcome != model.Succeeded || !strings.Contains(r.OutputTail, "done") {
				t.Fatalf("result %+v", r)
			}
			select {
			case r := <-h1.Results():
				t.Fatalf("the old leader got a result: %+v", r)
			default:
			}
			if got := lost.get(); len(got) != 1 {
				t.Fatalf("OnLeaderLost calls %v", got)
			}
		})
	}
}

// TestResultsWhileDisconnected: results produced while no leader is
// reachable are delivered to the next one, each exactly once.
func TestResultsWhileDisconnected(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h1 := newHub(t, "L1", HubConfig{})
			h2 := newHub(t, "L2", HubConfig{})
			local := newLocal(t, "w1/1-aa")
			d := &switchDialer{}
			d.set(tr.dial(t, h1, "L1"))
			a := runAgent(t, AgentConfig{Exec: local, Dial: d.dial})

			w1 := wantEvent(t, h1, Joined, "w1/1-aa").Worker
			g := newGate(t)
			var ids []model.AttemptID
			for _, task := range []string{"a", "b", "c", "d"} {
				at := attempt("d1", task, 1, g.task(task))
				ids = append(ids, at.AttemptID)
				w1.Start(at)
			}
			eventually(t, "the attempts to run", func() bool { return len(local.InFlight()) == len(ids) })

			d.set(nil) // no leader reachable for now
			h1.SetLeading(false)
			wantEvent(t, h1, Disconnected, "w1/1-aa")
			g.open(t)
			eventually(t, "the attempts to finish", func() bool { return len(local.InFlight()) == 0 })
			before := d.dials.Load()
			eventually(t, "failed redials", func() bool { return d.dials.Load() > before+1 })

			d.set(tr.dial(t, h2, "L2"))
			ev := wantEvent(t, h2, Joined, "w1/1-aa")
			for _, id := range ids { // unacknowledged results count as in flight
				if !hasID(ev.InFlight, id) {
					t.Fatalf("hello reports %v, want all of %v", ev.InFlight, ids)
				}
			}
			got := map[model.AttemptID]int{}
			for range ids {
				r := nextResult(t, h2)
				if r.Outcome != model.Succeeded {
					t.Fatalf("result %+v", r)
				}
				got[r.AttemptID]++
			}
			for _, id := range ids {
				if got[id] != 1 {
					t.Fatalf("results %v, want each of %v once", got, ids)
				}
			}
			// Once everything is acknowledged, nothing more will come: a
			// result is queued before it can be acknowledged.
			if err := a.Drain(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(h2.Results()); n != 0 {
				t.Fatalf("%d extra results", n)
			}
			if n := len(h1.Results()); n != 0 {
				t.Fatalf("the old leader got %d results", n)
			}
		})
	}
}

// TestResultKeptUntilAcknowledged: a result stays with the worker until a
// leader acknowledges it (commits it), and goes again to whichever leader
// the worker connects to next, the same one included (a replica that
// resynchronised, or won the next term); once acknowledged it is never sent
// again.
func TestResultKeptUntilAcknowledged(t *testing.T) {
	h1 := newHub(t, "L1", HubConfig{})
	h2 := newHub(t, "L2", HubConfig{})
	local := newLocal(t, "w1/1-aa")
	d := &switchDialer{}
	d.set(transports[0].dial(t, h1, "L1"))
	a := runAgent(t, AgentConfig{Exec: local, Dial: d.dial})

	w := wantEvent(t, h1, Joined, "w1/1-aa").Worker
	first := attempt("d1", "first", 1, noop())
	w.Start(first)
	if r := pendingResult(t, h1); r.AttemptID != first.AttemptID {
		t.Fatalf("result %+v", r)
	}

	// Reconnecting to the same leader, unacknowledged: sent again, and
	// listed in the hello so the leader does not take it for an orphan.
	_ = d.last().Close()
	wantEvent(t, h1, Disconnected, "w1/1-aa")
	ev := wantEvent(t, h1, Joined, "w1/1-aa")
	if !hasID(ev.InFlight, first.AttemptID) {
		t.Fatalf("hello in-flight %v lacks the unacknowledged %v", ev.InFlight, first.AttemptID)
	}
	if r := pendingResult(t, h1); r.AttemptID != first.AttemptID {
		t.Fatalf("got %v, want %v sent again to the same leader", r.AttemptID, first.AttemptID)
	}

	// Acknowledged now; a probe proves nothing else was queued before it.
	ev.Worker.Ack(first.AttemptID)
	probe := attempt("d1", "probe", 1, noop())
	ev.Worker.Start(probe)
	if r := nextResult(t, h1); r.AttemptID != probe.AttemptID {
		t.Fatalf("got %v before the probe", r.AttemptID)
	}
	if err := a.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A different leader gets neither again.
	d.set(transports[0].dial(t, h2, "L2"))
	h1.SetLeading(false)
	ev = wantEvent(t, h2, Joined, "w1/1-aa")
	if len(ev.InFlight) != 0 {
		t.Fatalf("hello in-flight %v after everything was acknowledged", ev.InFlight)
	}
	probe2 := attempt("d1", "probe2", 1, noop())
	ev.Worker.Start(probe2)
	if r := nextResult(t, h2); r.AttemptID != probe2.AttemptID {
		t.Fatalf("got %v: an acknowledged result was sent again", r.AttemptID)
	}
}

// TestReconnectWithinGrace: a worker that comes back within the grace
// period is the same RemoteWorker, and what was dispatched meanwhile runs.
func TestReconnectWithinGrace(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h := newHub(t, "L1", HubConfig{ReconnectGrace: time.Minute})
			local := newLocal(t, "w1/1-aa")
			d := &switchDialer{}
			dialHub := tr.dial(t, h, "L1")
			d.set(dialHub)
			lost := &leaderLost{}
			runAgent(t, AgentConfig{Exec: local, Dial: d.dial, OnLeaderLost: lost.record})

			w := wantEvent(t, h, Joined, "w1/1-aa").Worker
			d.set(nil)
			_ = d.last().Close()
			wantEvent(t, h, Disconnected, "w1/1-aa")
			if w.Connected() || h.Workers()[0].Connected {
				t.Fatalf("still connected: %+v", h.Workers())
			}
			queued := attempt("d1", "queued", 1, shell("echo queued"))
			w.Start(queued) // never blocks; kept until the worker is back
			cancelled := attempt("d1", "cancelled", 1, shell("sleep 30"))
			w.Start(cancelled)
			w.Cancel(cancelled.AttemptID)
			if got := w.InFlight(); len(got) != 2 {
				t.Fatalf("in-flight while away: %v", got)
			}
			if _, err := w.OpenLog(queued.AttemptID); err == nil {
				t.Fatal("OpenLog on a disconnected worker succeeded")
			}

			d.set(dialHub)
			ev := wantEvent(t, h, Joined, "w1/1-aa")
			if ev.Worker != w {
				t.Fatal("a reconnection within the grace period made a new RemoteWorker")
			}
			results := map[model.AttemptID]model.Outcome{}
			for range 2 {
				r := nextResult(t, h)
				results[r.AttemptID] = r.Outcome
			}
			if results[queued.AttemptID] != model.Succeeded || results[cancelled.AttemptID] != model.Cancelled {
				t.Fatalf("results %v", results)
			}
			if got := lost.get(); len(got) != 1 || got[0] != "L1" {
				t.Fatalf("OnLeaderLost calls %v", got)
			}
		})
	}
}

// rawWorker is a hand-driven worker end for protocol tests.
type rawWorker struct {
	t *testing.T
	c Conn
}

func (rw rawWorker) send(m Msg) {
	rw.t.Helper()
	if err := rw.c.Send(m); err != nil {
		rw.t.Fatal(err)
	}
}

// next returns the next message other than a heartbeat.
func (rw rawWorker) next() Msg {
	rw.t.Helper()
	type res struct {
		m   Msg
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			m, err := rw.c.Recv()
			if err != nil || m.Type != TypeHeartbeat {
				ch <- res{m, err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			rw.t.Fatal(r.err)
		}
		return r.m
	case <-time.After(waitFor):
		rw.t.Fatal("timed out waiting for a message")
		return Msg{}
	}
}

func hello(worker string, inflight ...model.AttemptID) Msg {
	return Msg{Type: TypeHello, Hello: &Hello{Worker: worker, Slots: 2, InFlight: inflight, Version: ProtocolVersion}}
}

// TestLostDispatchIsResent: a dispatch sent on a stream that died before the
// worker ran it is sent again when the worker reconnects without reporting
// it; one it reports is not.
func TestLostDispatchIsResent(t *testing.T) {
	h := newHub(t, "L1", HubConfig{ReconnectGrace: time.Minute, StaleAfter: time.Minute})
	connect := func(inflight ...model.AttemptID) rawWorker {
		w, l := Pipe()
		h.Accept(l)
		rw := rawWorker{t, w}
		rw.send(hello("raw", inflight...))
		if m := rw.next(); m.Type != TypeWelcome || m.Welcome.Leader != "L1" || m.Welcome.HeartbeatMs != 100 {
			t.Fatalf("want welcome, got %+v", m)
		}
		return rw
	}
	rw := connect()
	w := wantEvent(t, h, Joined, "raw").Worker
	lost := attempt("d", "lost", 1, noop())
	kept := attempt("d", "kept", 1, noop())
	w.Start(lost)
	w.Start(kept)
	for _, want := range []model.AttemptID{lost.AttemptID, kept.AttemptID} {
		if m := rw.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != want {
			t.Fatalf("want dispatch of %v, got %+v", want, m)
		}
	}
	_ = rw.c.Close() // "lost" never ran; "kept" runs
	wantEvent(t, h, Disconnected, "raw")

	rw = connect(kept.AttemptID)
	if ev := wantEvent(t, h, Joined, "raw"); ev.Worker != w || !hasID(ev.InFlight, kept.AttemptID) {
		t.Fatalf("joined %+v", ev)
	}
	if m := rw.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != lost.AttemptID {
		t.Fatalf("want the lost dispatch again, got %+v", m)
	}
	probe := attempt("d", "probe", 1, noop())
	w.Start(probe)
	if m := rw.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != probe.AttemptID {
		t.Fatalf("want the probe (not the kept attempt again), got %+v", m)
	}
	// A result is delivered (a stale one too, never dispatched here, stamped
	// with the stream's worker id), and the worker hears the scheduler's
	// acknowledgement.
	stale := model.Result{AttemptID: model.AttemptID{DAG: "old", Task: "x", Attempt: 3}, Worker: "someone-else", Outcome: model.Succeeded}
	rw.send(Msg{Type: TypeResult, Result: &stale})
	if r := nextResult(t, h); r.AttemptID != stale.AttemptID || r.Worker != "raw" {
		t.Fatalf("stale result %+v", r)
	}
	if m := rw.next(); m.Type != TypeAck || *m.ID != stale.AttemptID {
		t.Fatalf("want ack, got %+v", m)
	}
	kr := model.Result{AttemptID: kept.AttemptID, Worker: "raw", Outcome: model.Succeeded}
	rw.send(Msg{Type: TypeResult, Result: &kr})
	nextResult(t, h)
	if got := w.InFlight(); len(got) != 2 || hasID(got, kept.AttemptID) {
		t.Fatalf("in-flight %v, want lost and probe", got)
	}

	// Close: Disconnected and Left at once; Start then reports Cancelled.
	_ = w.Close()
	wantEvent(t, h, Disconnected, "raw")
	wantEvent(t, h, Left, "raw")
	late := attempt("d", "late", 1, noop())
	w.Start(late)
	if r := nextResult(t, h); r.AttemptID != late.AttemptID || r.Outcome != model.Cancelled {
		t.Fatalf("start on a gone worker: %+v", r)
	}
}

// TestRestartedWorkerIsANewWorker: a hello from another process under the
// same id (Hello.Instance) is not a reconnection. The old worker leaves,
// whether its stream was still open or closed within the grace period, and
// nothing dispatched to it is sent to the new process: the old process's
// attempts are re-queued by the leader through the log. The same process
// coming back is still a reconnection and gets them again.
func TestRestartedWorkerIsANewWorker(t *testing.T) {
	h := newHub(t, "L1", HubConfig{ReconnectGrace: time.Minute, StaleAfter: time.Minute})
	connect := func(instance string) rawWorker {
		w, l := Pipe()
		h.Accept(l)
		rw := rawWorker{t, w}
		m := hello("raw")
		m.Hello.Instance = instance
		rw.send(m)
		if m := rw.next(); m.Type != TypeWelcome {
			t.Fatalf("want welcome, got %+v", m)
		}
		return rw
	}
	dispatch := func(w *RemoteWorker, rw rawWorker, task string) model.Attempt {
		a := attempt("d", task, 1, noop())
		w.Start(a)
		if m := rw.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != a.AttemptID {
			t.Fatalf("want dispatch of %s, got %+v", task, m)
		}
		return a
	}

	// The same process reconnecting gets what it did not report.
	rw := connect("p1")
	w1 := wantEvent(t, h, Joined, "raw").Worker
	lost := dispatch(w1, rw, "lost")
	_ = rw.c.Close()
	wantEvent(t, h, Disconnected, "raw")
	rw = connect("p1")
	if ev := wantEvent(t, h, Joined, "raw"); ev.Worker != w1 {
		t.Fatal("the same process reconnecting made a new RemoteWorker")
	}
	if m := rw.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != lost.AttemptID {
		t.Fatalf("want the lost dispatch again, got %+v", m)
	}

	// A restarted process while the old stream is closed (within the
	// grace period): the old worker leaves, the new one gets nothing old.
	_ = rw.c.Close()
	wantEvent(t, h, Disconnected, "raw")
	rw = connect("p2")
	wantEvent(t, h, Left, "raw")
	w2 := wantEvent(t, h, Joined, "raw").Worker
	if w2 == w1 {
		t.Fatal("a restarted process kept the old RemoteWorker")
	}
	dispatch(w2, rw, "probe-1") // the next message: nothing was resent before it
	late := attempt("d", "late", 1, noop())
	w1.Start(late)
	if r := pendingResult(t, h); r.AttemptID != late.AttemptID || r.Outcome != model.Cancelled {
		t.Fatalf("start on the old process's worker: %+v", r)
	}

	// A restarted process while the old stream still looks open (the old
	// process died without its socket closing yet): that stream is closed.
	dispatch(w2, rw, "queued")
	old := rw
	rw = connect("p3")
	wantEvent(t, h, Disconnected, "raw")
	wantEvent(t, h, Left, "raw")
	w3 := wantEvent(t, h, Joined, "raw").Worker
	if w3 == w2 {
		t.Fatal("a restarted process kept the old RemoteWorker")
	}
	dispatch(w3, rw, "probe-2")
	if _, err := old.c.Recv(); err == nil {
		t.Fatal("the old process's stream is still open")
	}

	// A worker of an earlier version sends no instance: that too is
	// another process than one that sent one, either way round.
	for _, next := range []string{"", "p5"} {
		prev := wantWorker(t, h, "raw")
		rw = connect(next)
		wantEvent(t, h, Disconnected, "raw")
		wantEvent(t, h, Left, "raw")
		if w := wantEvent(t, h, Joined, "raw").Worker; w == prev {
			t.Fatalf("instance %q after another: kept the old RemoteWorker", next)
		}
	}
}

func wantWorker(t *testing.T, h *Hub, id string) *RemoteWorker {
	t.Helper()
	w := h.Worker(id)
	if w == nil {
		t.Fatalf("no worker %s", id)
	}
	return w
}

// TestStaleWorker: a worker that says hello and then nothing is dropped
// after StaleAfter and reported Left after ReconnectGrace.
func TestStaleWorker(t *testing.T) {
	const stale, grace = 300 * time.Millisecond, 400 * time.Millisecond
	h := newHub(t, "L1", HubConfig{StaleAfter: stale, ReconnectGrace: grace})
	srv := serveHub(t, h)
	c, err := DialWebsocket(context.Background(), wsURL(srv), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(hello("silent")); err != nil {
		t.Fatal(err)
	}
	// The hub stamps each change (RemoteWorker.since) when it happens; the
	// test reads the stamps, not its own clock, since reading an event may
	// lag on a loaded machine.
	type stamp struct {
		at              time.Time
		connected, left bool
	}
	stampOf := func(w *RemoteWorker) stamp {
		h.mu.Lock()
		defer h.mu.Unlock()
		return stamp{w.since, w.conn != nil, w.left}
	}
	w := wantEvent(t, h, Joined, "silent").Worker
	joined := stampOf(w)
	wantEvent(t, h, Disconnected, "silent")
	disconnected := stampOf(w)
	// Staleness counts from the hello, read a moment before the join.
	if joined.connected && disconnected.at.Sub(joined.at) < stale-50*time.Millisecond {
		t.Fatalf("disconnected after %v, before StaleAfter %v", disconnected.at.Sub(joined.at), stale)
	}
	if ws := h.Workers(); len(ws) > 1 || (len(ws) == 1 && ws[0].Connected) {
		t.Fatalf("workers %+v", ws)
	}
	wantEvent(t, h, Left, "silent")
	left := stampOf(w)
	if !left.left {
		t.Fatal("a worker reported Left is not marked left")
	}
	if !disconnected.left && left.at.Sub(disconnected.at) < grace {
		t.Fatalf("left %v after disconnecting, before ReconnectGrace %v", left.at.Sub(disconnected.at), grace)
	}
	if ws := h.Workers(); len(ws) != 0 {
		t.Fatalf("workers %+v", ws)
	}
}

// TestSlowMessageIsNotSilence: a message that takes longer than StaleAfter
// to arrive (a slow link) keeps the stream alive while its bytes flow.
func TestSlowMessageIsNotSilence(t *testing.T) {
	const stale = 500 * time.Millisecond
	h := newHub(t, "L1", HubConfig{StaleAfter: stale})
	srv := serveHub(t, h)
	c, err := DialWebsocket(context.Background(), wsURL(srv), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(hello("slow")); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Joined, "slow")
	r := model.Result{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: 1}, Worker: "slow",
		Outcome: model.Succeeded, OutputTail: strings.Repeat("y", 64<<10)}
	b, _ := json.Marshal(Msg{Type: TypeResult, Result: &r})
	ws := c.(*wsConn).ws
	mw, err := ws.NextWriter(websocket.TextMessage)
	if err != nil {
		t.Fatal(err)
	}
	// 12 pieces 100 ms apart: the message takes 2.4 StaleAfters to arrive.
	piece := len(b)/12 + 1
	for len(b) > 0 {
		n := min(piece, len(b))
		if _, err := mw.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
		time.Sleep(100 * time.Millisecond) // the slow link
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	// Whole, and then cut to the record's bound (TestResultCutWhereItEnters).
	if got := nextResult(t, h); got.AttemptID != r.AttemptID || !strings.HasSuffix(got.OutputTail, strings.Repeat("y", model.TailBytes-64)) {
		t.Fatalf("result %v, tail of %d bytes", got.AttemptID, len(got.OutputTail))
	}
	select {
	case ev := <-h.Events():
		t.Fatalf("event %v during a slow message", ev.Kind)
	default:
	}
}

// TestStaleLeader: an agent whose leader goes silent (no heartbeat) drops
// the stream after StaleAfter, calls OnLeaderLost and redials.
func TestStaleLeader(t *testing.T) {
	local := newLocal(t, "w1/1-aa")
	leaders := make(chan Conn, 1)
	redialed := make(chan struct{})
	var dials atomic.Int32
	dial := func(ctx context.Context) (Conn, string, error) {
		if dials.Add(1) > 1 { // the second dial: note it and find nobody
			close(redialed)
			<-ctx.Done()
			return nil, "", ctx.Err()
		}
		w, l := Pipe()
		leaders <- l
		return w, "mute", nil
	}
	lost := &leaderLost{}
	runAgent(t, AgentConfig{Exec: local, Dial: dial, OnLeaderLost: lost.record, StaleAfter: 200 * time.Millisecond})
	l := <-leaders
	m, err := l.Recv()
	if err != nil || m.Type != TypeHello || m.Hello.Worker != "w1/1-aa" || m.Hello.Slots != 4 || m.Hello.Version != ProtocolVersion {
		t.Fatalf("hello %+v %v", m, err)
	}
	if err := l.Send(Msg{Type: TypeWelcome, Welcome: &Welcome{Leader: "mute", HeartbeatMs: 50}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The agent keeps sending heartbeats while we say nothing, then gives up.
	beats := 0
	for {
		m, err := l.Recv()
		if err != nil {
			break
		}
		if m.Type == TypeHeartbeat {
			beats++
		}
	}
	if d := time.Since(start); d < 150*time.Millisecond || beats == 0 {
		t.Fatalf("agent dropped the stream after %v with %d heartbeats", d, beats)
	}
	select {
	case <-redialed:
	case <-time.After(waitFor):
		t.Fatal("no redial")
	}
	if got := lost.get(); len(got) != 1 || got[0] != "mute" {
		t.Fatalf("OnLeaderLost calls %v, want [mute]", got)
	}
}

// TestNotLeader: a hub that does not lead answers not_leader with the
// redirect and closes; an agent with the HTTP dialer follows it.
func TestNotLeader(t *testing.T) {
	leader := newHub(t, "n2", HubConfig{})
	leaderSrv := serveHub(t, leader)

	standby := NewHub(HubConfig{Leader: "n1", Logger: testLogger(t), Redirect: func() (string, string) { return "n2", leaderSrv.URL }})
	t.Cleanup(func() { _ = standby.Close() })
	standbySrv := serveHub(t, standby)

	c, err := DialWebsocket(context.Background(), wsURL(standbySrv), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Send(hello("w"))
	m, err := c.Recv()
	if err != nil || m.Type != TypeNotLeader || m.Redirect == nil || m.Redirect.Leader != "n2" || m.Redirect.URL != leaderSrv.URL {
		t.Fatalf("got %+v, %v; want not_leader to n2", m, err)
	}
	if _, err := c.Recv(); err == nil {
		t.Fatal("the standby kept the stream open")
	}
	c.Close()

	// In process too.
	wEnd, lEnd := Pipe()
	standby.Accept(lEnd)
	if m, err := wEnd.Recv(); err != nil || m.Type != TypeNotLeader || m.Redirect.Leader != "n2" {
		t.Fatalf("pipe: got %+v, %v", m, err)
	}
	wEnd.Close()

	// The agent, pointed at the standby only (whose leader answer has no
	// leader_url), ends up on the leader without calling OnLeaderLost.
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, standby.Handler())
	mux.HandleFunc("GET /api/v1/leader", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"node":"n1","leader":"n2","leader_url":"","replicas":[{"name":"n1","api_url":""}],"revision":3}`))
	})
	onlyStandby := httptest.NewServer(mux)
	t.Cleanup(onlyStandby.Close)
	lost := &leaderLost{}
	local := newLocal(t, "w1/1-aa")
	runAgent(t, AgentConfig{Exec: local, Dial: NewHTTPDialer([]string{onlyStandby.URL}, "", nil).Dial, OnLeaderLost: lost.record})
	w := wantEvent(t, leader, Joined, "w1/1-aa").Worker
	at := attempt("d", "t", 1, noop())
	w.Start(at)
	if r := nextResult(t, leader); r.AttemptID != at.AttemptID {
		t.Fatalf("result %+v", r)
	}
	if got := lost.get(); len(got) != 0 {
		t.Fatalf("OnLeaderLost on a redirect: %v", got)
	}

	// SetLeading(false) on the leader: its workers are dropped and the
	// endpoint now redirects.
	leader.SetLeading(false)
	wantEvent(t, leader, Disconnected, "w1/1-aa")
	wantEvent(t, leader, Left, "w1/1-aa")
	eventually(t, "OnLeaderLost", func() bool { return len(lost.get()) == 1 && lost.get()[0] == "n2" })
}

// TestHTTPDialer: the dialer learns the leader's api_url from the leader
// answer, sends the token everywhere, and fails over to a learned replica
// when the given server dies.
func TestHTTPDialer(t *testing.T) {
	const token = "s3cret"
	authed := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	replica := func(name string, h *Hub, answer func() string) *httptest.Server {
		mux := http.NewServeMux()
		mux.Handle("GET "+Path, h.Handler())
		mux.HandleFunc("GET /api/v1/leader", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(answer())) })
		srv := httptest.NewServer(authed(mux))
		t.Cleanup(srv.Close)
		return srv
	}
	h1 := NewHub(HubConfig{Leader: "n1", Logger: testLogger(t)}) // standby at first
	t.Cleanup(func() { _ = h1.Close() })
	h2 := newHub(t, "n2", HubConfig{})
	var s1, s2 *httptest.Server
	leaderName := "n2"
	answer := func() string {
		return `{"node":"x","leader":"` + leaderName + `","replicas":[{"name":"n1","api_url":"` + s1.URL + `"},{"name":"n2","api_url":"` + s2.URL + `"}],"revision":5}`
	}
	s1 = replica("n1", h1, answer)
	s2 = replica("n2", h2, answer)

	if _, _, err := NewHTTPDialer([]string{s1.URL}, "wrong", nil).Dial(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}

	// Given only the standby's address (no scheme), it dials the leader at
	// the api_url the leader answer names.
	c, name, err := NewHTTPDialer([]string{strings.TrimPrefix(s1.URL, "http://")}, token, nil).Dial(context.Background())
	if err != nil || name != "n2" {
		t.Fatalf("dial: %v %q", err, name)
	}
	_ = c.Send(hello("w"))
	if m, err := c.Recv(); err != nil || m.Type != TypeWelcome || m.Welcome.Leader != "n2" {
		t.Fatalf("want welcome from n2 (dialed via api_url), got %+v %v", m, err)
	}
	c.Close()

	// Given only the leader's address, it learns n1's; when n2's server
	// dies and n1 leads, it finds n1.
	dial := NewHTTPDialer([]string{s2.URL}, token, nil).Dial
	if c, name, err = dial(context.Background()); err != nil || name != "n2" {
		t.Fatalf("dial: %v %q", err, name)
	}
	c.Close()
	s2.Close()
	h1.SetLeading(true)
	leaderName = "n1"
	c, name, err = dial(context.Background())
	if err != nil || name != "n1" {
		t.Fatalf("dial after failover: %v %q", err, name)
	}
	_ = c.Send(hello("w"))
	if m, err := c.Recv(); err != nil || m.Type != TypeWelcome || m.Welcome.Leader != "n1" {
		t.Fatalf("want welcome from n1, got %+v %v", m, err)
	}
	c.Close()

	for in, want := range map[string]string{
		"127.0.0.1:8080":          "ws://127.0.0.1:8080" + Path,
		"http://h:1/":             "ws://h:1" + Path,
		"https://h/prefix":        "wss://h/prefix" + Path,
		"ws://h:2/custom/stream":  "ws://h:2/custom/stream",
		"wss://h:2/custom/stream": "wss://h:2/custom/stream",
	} {
		if got, err := StreamURL(in); err != nil || got != want {
			t.Errorf("StreamURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestStartNeverBlocks: Start and Cancel only queue, even when the stream
// is stuck (a worker that never reads); the write deadline ends it.
func TestStartNeverBlocks(t *testing.T) {
	t.Run("pipe", func(t *testing.T) {
		h := newHub(t, "L1", HubConfig{StaleAfter: time.Minute})
		w, l := Pipe()
		h.Accept(l)
		if err := w.Send(hello("stuck")); err != nil {
			t.Fatal(err)
		}
		rw := wantEvent(t, h, Joined, "stuck").Worker
		const n = 5 * PipeBuffer
		start := time.Now()
		for i := range n {
			rw.Start(attempt("d", "t", i+1, noop()))
			rw.Cancel(model.AttemptID{DAG: "d", Task: "t", Attempt: i + 1})
		}
		// A hang detector, not a speed check: a Start that blocked on the
		// stuck stream would never return.
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("%d Start+Cancel took %v", n, d)
		}
		if got := len(rw.InFlight()); got != n {
			t.Fatalf("in-flight %d, want %d", got, n)
		}
		w.Close()
	})
	t.Run("websocket", func(t *testing.T) {
		h := newHub(t, "L1", HubConfig{StaleAfter: time.Minute, WriteTimeout: 300 * time.Millisecond})
		srv := serveHub(t, h)
		c, err := DialWebsocket(context.Background(), wsURL(srv), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Send(hello("stuck")); err != nil {
			t.Fatal(err)
		}
		rw := wantEvent(t, h, Joined, "stuck").Worker
		big := strings.Repeat("x", 64<<10)
		start := time.Now()
		for i := range 2000 { // ~128 MiB: far beyond the socket buffers
			rw.Start(attempt("d", "t", i+1, model.Task{Kind: model.KindShell, Command: big}))
		}
		if d := time.Since(start); d > 30*time.Second { // a hang detector (see above)
			t.Fatalf("Start on a stuck stream took %v", d)
		}
		// Nobody reads: the write deadline drops the stream.
		wantEvent(t, h, Disconnected, "stuck")
	})
}

// TestLogTimeoutAndDisconnect: OpenLog gives up on a silent worker after
// LogTimeout; a transfer in progress fails when the hub stops leading.
func TestLogTimeoutAndDisconnect(t *testing.T) {
	h := newHub(t, "L1", HubConfig{LogTimeout: 200 * time.Millisecond, StaleAfter: time.Minute})
	w, l := Pipe()
	h.Accept(l)
	rw := rawWorker{t, w}
	rw.send(hello("quiet"))
	rw.next() // welcome
	remote := wantEvent(t, h, Joined, "quiet").Worker
	id := model.AttemptID{DAG: "d", Task: "t", Attempt: 1}

	// The worker never answers the log request.
	start := time.Now()
	if _, err := remote.OpenLog(id); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("OpenLog: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("gave up after %v", d)
	}
	if m := rw.next(); m.Type != TypeLogRequest || m.LogReq.ID != id || m.LogReq.Credit != logWindow {
		t.Fatalf("log request %+v", m)
	}
	if m := rw.next(); m.Type != TypeLogRequest || !m.LogReq.Close {
		t.Fatalf("want the transfer closed, got %+v", m)
	}

	// A transfer in progress fails when the hub stops leading. (On a hub
	// with the default LogTimeout: the worker's first chunk must not race
	// a 200 ms bound on a loaded machine.)
	h = newHub(t, "L1", HubConfig{StaleAfter: time.Minute})
	w, l = Pipe()
	h.Accept(l)
	rw = rawWorker{t, w}
	rw.send(hello("quiet"))
	rw.next() // welcome
	remote = wantEvent(t, h, Joined, "quiet").Worker
	opened := make(chan io.ReadCloser, 1)
	go func() {
		rc, err := remote.OpenLog(id)
		if err != nil {
			t.Error(err)
		}
		opened <- rc
	}()
	m := rw.next()
	if m.Type != TypeLogRequest {
		t.Fatalf("got %+v", m)
	}
	rw.send(Msg{Type: TypeLogChunk, Log: &LogChunk{Req: m.LogReq.Req, Data: []byte("part")}})
	rc := <-opened
	p := make([]byte, 10)
	if n, err := rc.Read(p); err != nil || string(p[:n]) != "part" {
		t.Fatalf("read %q %v", p[:n], err)
	}
	h.SetLeading(false)
	wantEvent(t, h, Disconnected, "quiet")
	wantEvent(t, h, Left, "quiet")
	if _, err := rc.Read(p); err == nil {
		t.Fatal("read after the hub stopped leading succeeded")
	}
	rc.Close()
}

func TestOutletKeepsOrderBeyondItsBuffer(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	o := newOutlet[int](4, done)
	const n = 1000
	for i := range n { // nobody reads yet: never blocks
		o.push(i)
	}
	for i := range n {
		select {
		case v := <-o.ch:
			if v != i {
				t.Fatalf("got %d, want %d", v, i)
			}
		case <-time.After(waitFor):
			t.Fatalf("value %d never came", i)
		}
		if i == n/2 {
			o.push(n) // pushed while the backlog drains: still in order
		}
	}
	if v := <-o.ch; v != n {
		t.Fatalf("got %d, want %d", v, n)
	}
}

// wrappedWriter is a middleware's ResponseWriter: it hides Hijack but
// exposes Unwrap, as internal/http/api's does.
type wrappedWriter struct{ http.ResponseWriter }

func (w wrappedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestHandlerBehindMiddlewareAndSecondStream: the endpoint works behind a
// wrapping ResponseWriter; a second stream of a connected worker replaces
// the first without a Disconnected event.
func TestHandlerBehindMiddlewareAndSecondStream(t *testing.T) {
	h := newHub(t, "L1", HubConfig{})
	inner := h.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(wrappedWriter{w}, r)
	}))
	t.Cleanup(srv.Close)
	dial := func() rawWorker {
		c, err := DialWebsocket(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rw := rawWorker{t, c}
		m := hello("twice")
		m.Hello.Replica = "n1"
		rw.send(m)
		if m := rw.next(); m.Type != TypeWelcome {
			t.Fatalf("want welcome, got %+v", m)
		}
		return rw
	}
	first := dial()
	w := wantEvent(t, h, Joined, "twice").Worker
	if w.Replica() != "n1" || h.Worker("twice") != w {
		t.Fatalf("replica %q, lookup %v", w.Replica(), h.Worker("twice"))
	}
	second := dial()
	if ev := nextEvent(t, h); ev.Kind != Joined || ev.Worker != w {
		t.Fatalf("second stream: %v (same worker: %v)", ev.Kind, ev.Worker == w)
	}
	closed := make(chan struct{})
	go func() { // heartbeats sent before the replacement, then the end
		defer close(closed)
		for {
			if _, err := first.c.Recv(); err != nil {
				return
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("the replaced stream stayed open")
	}
	at := attempt("d", "t", 1, noop())
	w.Start(at)
	if m := second.next(); m.Type != TypeDispatch || m.Attempt.AttemptID != at.AttemptID {
		t.Fatalf("dispatch went elsewhere: %+v", m)
	}
	select {
	case ev := <-h.Events():
		t.Fatalf("unexpected event %v", ev.Kind)
	default:
	}
}

// TestPeersLeadAWorkerToTheNextLeader is the failure a worker given one
// address (a Service that maps to one replica) used to hit: the leader
// answer of its first dial named no other replica (they had not registered
// yet), so when that replica died the worker knew nowhere else to ask and
// never reached the new leader. The leader's peer list, sent after the
// welcome and on every change, fixes that.
func TestPeersLeadAWorkerToTheNextLeader(t *testing.T) {
	h1 := newHub(t, "n1", HubConfig{})
	h2 := NewHub(HubConfig{Leader: "n2", StaleAfter: testStaleAfter, Logger: testLogger(t).Named("n2")}) // standby
	t.Cleanup(func() { _ = h2.Close() })
	var mu sync.Mutex
	leaderName, s2URL := "n1", ""
	replica := func(h *Hub, node string) *httptest.Server {
		mux := http.NewServeMux()
		mux.Handle("GET "+Path, h.Handler())
		mux.HandleFunc("GET /api/v1/leader", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			// Only the answering replica is registered, as at start-up.
			fmt.Fprintf(w, `{"node":%q,"leader":%q,"leader_url":"","replicas":[{"name":%q,"api_url":""}],"revision":1}`, node, leaderName, node)
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	s1, s2 := replica(h1, "n1"), replica(h2, "n2")
	mu.Lock()
	s2URL = s2.URL
	mu.Unlock()

	dialer := NewHTTPDialer([]string{s1.URL}, "", nil)
	var pmu sync.Mutex
	var got [][]Peer
	local := newLocal(t, "w1/1-aa")
	runAgent(t, AgentConfig{Exec: local, Dial: dialer.Dial, StaleAfter: testStaleAfter,
		OnPeers: func(p []Peer) {
			dialer.SetPeers(p)
			pmu.Lock()
			got = append(got, p)
			pmu.Unlock()
		}})
	wantEvent(t, h1, Joined, "w1/1-aa")
	peers := func() [][]Peer {
		pmu.Lock()
		defer pmu.Unlock()
		return slices.Clone(got)
	}

	// The replicas register; the leader tells its workers. The same list
	// again is not sent: the next message is the next change.
	both := []Peer{{Name: "n2", URL: s2URL}, {Name: "n1", URL: s1.URL}}
	h1.SetPeers(both)
	h1.SetPeers([]Peer{{Name: "n1", URL: s1.URL}, {Name: "n2", URL: s2URL}})
	h1.SetPeers(both[:1])
	eventually(t, "two peer lists", func() bool { return len(peers()) == 2 })
	want := [][]Peer{{{Name: "n1", URL: s1.URL}, {Name: "n2", URL: s2URL}}, {{Name: "n2", URL: s2URL}}}
	if p := peers(); !reflect.DeepEqual(p, want) {
		t.Fatalf("peer lists %v, want %v (sorted by name; no repeat)", p, want)
	}
	h1.SetPeers(both)
	eventually(t, "the third list", func() bool { return len(peers()) == 3 })

	// n1 dies; n2 leads. The worker, given only n1's address, must find n2.
	mu.Lock()
	leaderName = "n2"
	mu.Unlock()
	h2.SetLeading(true)
	h1.SetLeading(false)
	s1.CloseClientConnections()
	s1.Close()
	w := wantEvent(t, h2, Joined, "w1/1-aa").Worker
	at := attempt("d", "t", 1, noop())
	w.Start(at)
	if r := nextResult(t, h2); r.AttemptID != at.AttemptID {
		t.Fatalf("result %+v", r)
	}

	// A worker that joins gets the list right after its welcome; a
	// replica's own slots do not (they find the leader through etcd).
	h2.SetPeers(both)
	srv2 := serveHub(t, h2)
	for _, replicaName := range []string{"", "n3"} {
		c, err := DialWebsocket(context.Background(), wsURL(srv2), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		id := "raw-" + replicaName
		_ = c.Send(Msg{Type: TypeHello, Hello: &Hello{Worker: id, Slots: 1, Replica: replicaName, Version: ProtocolVersion}})
		if m, err := c.Recv(); err != nil || m.Type != TypeWelcome {
			t.Fatalf("%s: want welcome, got %+v %v", id, m, err)
		}
		rw := wantEvent(t, h2, Joined, id).Worker
		rw.Start(attempt("d", id, 1, noop()))
		var types []string
		for {
			m, err := c.Recv()
			if err != nil {
				t.Fatalf("%s: %v after %v", id, err, types)
			}
			if m.Type == TypeHeartbeat {
				continue
			}
			types = append(types, m.Type)
			if m.Type == TypeDispatch {
				break
			}
			if m.Type == TypePeers && !reflect.DeepEqual(m.Peers, want[0]) {
				t.Fatalf("%s: peers %v, want %v", id, m.Peers, want[0])
			}
		}
		wantTypes := []string{TypePeers, TypeDispatch}
		if replicaName != "" {
			wantTypes = []string{TypeDispatch}
		}
		if !slices.Equal(types, wantTypes) {
			t.Fatalf("%s: after the welcome got %v, want %v", id, types, wantTypes)
		}
		c.Close()
		wantEvent(t, h2, Disconnected, id)
	}
}

// TestSilentWorkerKeepsItsAttemptsLonger: a worker whose stream went silent
// (paused, partitioned: it may be alive and running what it was given) is
// reported Left only after SilentGrace, and comes back as the same worker
// within it; one whose stream closed (a dead or restarted process) is Left
// after ReconnectGrace.
func TestSilentWorkerKeepsItsAttemptsLonger(t *testing.T) {
	const reconnect, silent = 100 * time.Millisecond, 2 * time.Second
	h := newHub(t, "L1", HubConfig{ReconnectGrace: reconnect, SilentGrace: silent, StaleAfter: 300 * time.Millisecond})
	connect := func(name string) (rawWorker, Conn) {
		w, l := Pipe()
		h.Accept(l)
		rw := rawWorker{t, w}
		rw.send(hello(name))
		if m := rw.next(); m.Type != TypeWelcome {
			t.Fatalf("want welcome, got %+v", m)
		}
		return rw, w
	}

	// Silent: says hello, runs an attempt, then sends nothing.
	_, _ = connect("quiet")
	w := wantEvent(t, h, Joined, "quiet").Worker
	running := attempt("d", "running", 1, noop())
	w.Start(running)
	wantEvent(t, h, Disconnected, "quiet")
	gone := time.Now()
	// Back well within SilentGrace (and after ReconnectGrace): the same
	// worker, its attempt still its own.
	time.Sleep(3 * reconnect) // the pause itself: longer than ReconnectGrace
	rw, _ := connect("quiet")
	ev := wantEvent(t, h, Joined, "quiet")
	if time.Since(gone) < silent && ev.Worker != w {
		t.Fatalf("a silent worker back within SilentGrace came back as a new worker (Left after %v)", time.Since(gone))
	}
	if !hasID(w.InFlight(), running.AttemptID) {
		t.Fatalf("in-flight %v lost %v", w.InFlight(), running.AttemptID)
	}
	_ = rw

	// Closed: its process died.
	_, conn := connect("dead")
	wantEvent(t, h, Joined, "dead")
	_ = conn.Close()
	wantEvent(t, h, Disconnected, "dead")
	closedAt := time.Now()
	wantEvent(t, h, Left, "dead")
	if d := time.Since(closedAt); d > silent {
		t.Fatalf("a closed stream's worker was Left after %v, want about ReconnectGrace (%v)", d, reconnect)
	}
}

// TestTermsRefuseADeposedLeader: a worker that joined a leader's term
// refuses the welcome of an older term in the same etcd cluster (a deposed
// leader that does not know it yet), runs nothing it sends, and confirms
// the terms it accepts (joined): the hub reports Confirmed once per
// stream. A term of another incarnation (a wiped etcd) is accepted
// whatever its fence: its revisions started over.
func TestTermsRefuseADeposedLeader(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			newer := newHub(t, "L2", HubConfig{})
			newer.SetTerm(Term{Incarnation: "c1", Fence: 20})
			older := newHub(t, "L1", HubConfig{})
			older.SetTerm(Term{Incarnation: "c1", Fence: 10})
			local := newLocal(t, "w1/1-aa")
			d := &switchDialer{}
			d.set(tr.dial(t, newer, "L2"))
			a := runAgent(t, AgentConfig{Exec: local, Dial: d.dial})

			wantEvent(t, newer, Joined, "w1/1-aa")
			wantEvent(t, newer, Confirmed, "w1/1-aa")
			if got, ok := a.Joined(); !ok || got != (Term{Incarnation: "c1", Fence: 20}) {
				t.Fatalf("joined %v %v", got, ok)
			}

			// L2 goes; the worker dials L1, deposed but unaware.
			d.set(tr.dial(t, older, "L1"))
			newer.SetLeading(false)
			stale := wantEvent(t, older, Joined, "w1/1-aa").Worker
			g := newGate(t)
			run := attempt("d1", "x", 1, g.task("ran"))
			stale.Start(run)
			wantEvent(t, older, Disconnected, "w1/1-aa")
			if hasID(local.InFlight(), run.AttemptID) {
				t.Fatalf("the worker runs %v from a deposed leader", run.AttemptID)
			}
			if got, _ := a.Joined(); got.Fence != 20 {
				t.Fatalf("joined fence %d after a refusal, want 20", got.Fence)
			}

			// A leader of another incarnation, with a lower fence: accepted.
			other := newHub(t, "L3", HubConfig{})
			other.SetTerm(Term{Incarnation: "c2", Fence: 3})
			d.set(tr.dial(t, other, "L3"))
			older.SetLeading(false)
			wantEvent(t, other, Joined, "w1/1-aa")
			wantEvent(t, other, Confirmed, "w1/1-aa")
			if hasID(local.InFlight(), run.AttemptID) {
				t.Fatalf("the worker runs %v from a deposed leader", run.AttemptID)
			}
		})
	}
}

// TestResultCutWhereItEnters: a worker's result is written into a task
// record, so whatever a worker sends (2 MiB of error and of output tail
// here, well within a frame) reaches the scheduler cut to the record's
// bounds, marked, and otherwise whole.
func TestResultCutWhereItEnters(t *testing.T) {
	h := newHub(t, "L1", HubConfig{})
	srv := serveHub(t, h)
	c, err := DialWebsocket(context.Background(), wsURL(srv), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(hello("big")); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h, Joined, "big")
	r := model.Result{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: 1}, Worker: "big", Outcome: model.Failed,
		ExitCode: 3, Error: "boom: " + strings.Repeat("e", 2<<20) + " at the end",
		OutputTail: strings.Repeat("é", 1<<20) + "last line\n"}
	if err := c.Send(Msg{Type: TypeResult, Result: &r}); err != nil {
		t.Fatal(err)
	}
	got := nextResult(t, h)
	switch {
	case got.AttemptID != r.AttemptID || got.Outcome != model.Failed || got.ExitCode != 3:
		t.Fatalf("result %+v", got.AttemptID)
	case len(got.Error) > model.MaxErrorBytes || !strings.HasPrefix(got.Error, "boom: ") || !strings.HasSuffix(got.Error, " at the end") ||
		!strings.Contains(got.Error, " bytes cut]"):
		t.Fatalf("error of %d bytes, not cut in the middle and marked: %.100q…", len(got.Error), got.Error)
	case len(got.OutputTail) > model.TailBytes || !strings.HasSuffix(got.OutputTail, "last line\n") ||
		!strings.HasPrefix(got.OutputTail, "[orion: ") || !utf8.ValidString(got.OutputTail):
		t.Fatalf("tail of %d bytes, not its end, marked and valid UTF-8: %.100q…", len(got.OutputTail), got.OutputTail)
	}
}
