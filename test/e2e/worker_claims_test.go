package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/internal/workerstream"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// fakeWorker speaks the worker protocol by hand over a real websocket to
// the real binary: what a misbehaving or hostile client can send.
type fakeWorker struct {
	t *testing.T
	c workerstream.Conn
}

func dialFake(t *testing.T, n *node) *fakeWorker {
	t.Helper()
	url, err := workerstream.StreamURL(n.url())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := workerstream.DialWebsocket(ctx, url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &fakeWorker{t: t, c: c}
}

func (f *fakeWorker) send(m workerstream.Msg) {
	f.t.Helper()
	if err := f.c.Send(m); err != nil {
		f.t.Fatalf("send %s: %v", m.Type, err)
	}
}

// await reads until a message of type typ that match accepts (returned),
// failing at the stream's end or after 30 s.
func (f *fakeWorker) await(typ string, match func(workerstream.Msg) bool) workerstream.Msg {
	f.t.Helper()
	got := make(chan workerstream.Msg, 1)
	failed := make(chan error, 1)
	go func() {
		for {
			m, err := f.c.Recv()
			if err != nil {
				failed <- err
				return
			}
			if m.Type == typ && (match == nil || match(m)) {
				got <- m
				return
			}
		}
	}()
	select {
	case m := <-got:
		return m
	case err := <-failed:
		f.t.Fatalf("stream ended waiting for %s: %v", typ, err)
	case <-time.After(30 * time.Second):
		_ = f.c.Close()
		f.t.Fatalf("no %s within 30s", typ)
	}
	return workerstream.Msg{}
}

func hello(id string, slots int, inflight ...model.AttemptID) workerstream.Msg {
	return workerstream.Msg{Type: workerstream.TypeHello, Hello: &workerstream.Hello{Worker: id, Slots: slots,
		InFlight: inflight, Version: workerstream.ProtocolVersion, Host: "fake", PID: 1, Instance: "fake-1"}}
}

// metric reads one sample of the node's /metrics ("name" or
// `name{label="v"}`), 0 when absent.
func (n *node) metric(sample string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	m := re.FindStringSubmatch(n.metrics())
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// A worker holds only what the log gave it, against the real binary:
//   - a fake worker's hello claims a ready pool: gpu task (no gpu worker
//     exists) and a task the replica's own slots ran: both are cancelled
//     on it and counted; its forged success for the gpu task is refused
//     (acknowledged as moot, counted) and the task stays ready;
//   - hellos with a 100 KB id, a NUL or ESC in the id, 2^63-1 slots or
//     more than worker_max_slots are refused with their reason, counted;
//   - a real `orion worker` with more slots than worker_max_slots exits
//     non-zero at once with the leader's reason, instead of reconnecting;
//   - four streams sending heartbeats in a tight loop for 8 s are closed
//     one after another while the leader keeps its lease: every
//     submission meanwhile succeeds, and leadership never changes.
func TestWorkerClaimsRefusedAndFloodsClosed(t *testing.T) {
	n := newNode(t, "--worker-max-slots", "64")
	n.start()
	n.submit("id: claims\nname: claims\ntasks:\n  - {id: g, kind: noop, pool: gpu}\n  - {id: plain, kind: noop}\n")
	testkit.WaitFor(t, 30*time.Second, "plain to succeed and g to wait for a gpu worker", func() bool {
		d, code := n.dag("claims")
		return code == 200 && d.Task("plain").Status == "succeeded" && d.Task("g").Status == "ready"
	})

	// Forged claims and a forged result.
	g1 := model.AttemptID{DAG: "claims", Task: "g", Attempt: 1}
	plain1 := model.AttemptID{DAG: "claims", Task: "plain", Attempt: 1}
	f := dialFake(t, n)
	f.send(hello("forger/1-abcdef", 2, g1, plain1))
	f.await(workerstream.TypeWelcome, nil)
	for _, id := range []model.AttemptID{g1, plain1} {
		f.await(workerstream.TypeCancel, func(m workerstream.Msg) bool { return m.ID != nil && *m.ID == id })
	}
	f.send(workerstream.Msg{Type: workerstream.TypeResult, Result: &model.Result{AttemptID: g1, Worker: "forger/1-abcdef",
		Outcome: model.Succeeded, StartedAt: time.Now(), FinishedAt: time.Now()}})
	f.await(workerstream.TypeAck, func(m workerstream.Msg) bool { return m.ID != nil && *m.ID == g1 })
	if d, _ := n.dag("claims"); d.Task("g").Status != "ready" || d.Task("g").Attempts != 0 {
		t.Fatalf("after a forged claim and result, g is %+v; want ready, never run", d.Task("g"))
	}
	for sample, want := range map[string]float64{
		`orion_worker_claims_refused_total{reason="not_dispatched"}`: 1,
		`orion_worker_claims_refused_total{reason="other_worker"}`:   1,
		`orion_unheld_results_total`:                                 1,
	} {
		if got := n.metric(sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	_ = f.c.Close()

	// Hellos out of bounds.
	for _, tc := range []struct {
		hello  workerstream.Msg
		reason string
	}{
		{hello(strings.Repeat("w", 100<<10), 2), "id"},
		{hello("w\x00nul", 2), "id"},
		{hello("w\x1b[2J", 2), "id"},
		{hello("huge/1-a", math.MaxInt64), "slots"},
		{hello("big/1-a", 65), "slots"},
	} {
		b := dialFake(t, n)
		b.send(tc.hello)
		m := b.await(workerstream.TypeRefused, nil)
		if m.Refusal == nil || m.Refusal.Reason != tc.reason || !m.Refusal.Final {
			t.Errorf("refusal %+v, want a final one for %s", m.Refusal, tc.reason)
			continue
		}
		t.Logf("refused (%s): %s", tc.reason, m.Refusal.Message)
	}
	if id, slots := n.metric(`orion_worker_hellos_refused_total{reason="id"}`), n.metric(`orion_worker_hellos_refused_total{reason="slots"}`); id != 3 || slots != 2 {
		t.Errorf("hellos refused: id %v slots %v, want 3 and 2", id, slots)
	}

	// A real worker misconfigured the same way stops with the reason.
	logPath := filepath.Join(t.TempDir(), "worker.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	w := exec.Command(cluster.Bin, "worker", "--server", n.url(), "--slots", "5000", "--name", "toobig", "--log-dir", t.TempDir())
	w.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	w.Stdout, w.Stderr = logf, logf
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()
	select {
	case err := <-exited:
		_ = logf.Close()
		out, _ := os.ReadFile(logPath)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "5000 slots: want 1 to 64") {
			t.Fatalf("orion worker --slots 5000: %v, want a non-zero exit naming the limit:\n%s", err, out)
		}
		t.Logf("orion worker --slots 5000 exited %d:\n%s", ee.ExitCode(), lastLines(string(out), 3))
	case <-time.After(30 * time.Second):
		_ = w.Process.Kill()
		<-exited
		out, _ := os.ReadFile(logPath)
		t.Fatalf("orion worker --slots 5000 still running after 30s (reconnecting?):\n%s", lastLines(string(out), 10))
	}

	// Floods, while users submit.
	changes := n.metric("orion_leader_changes_total")
	var streams, sent atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(8 * time.Second)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url, _ := workerstream.StreamURL(n.url())
			for k := 0; k < 200 && time.Now().Before(stop); k++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, err := workerstream.DialWebsocket(ctx, url, "", nil)
				cancel()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				streams.Add(1)
				if c.Send(hello(fmt.Sprintf("flood-%d/%d-a", i, k), 2)) == nil {
					for j := 0; j < 5_000_000 && time.Now().Before(stop); j++ {
						if c.Send(workerstream.Msg{Type: workerstream.TypeHeartbeat}) != nil {
							break
						}
						sent.Add(1)
					}
				}
				_ = c.Close()
				time.Sleep(100 * time.Millisecond) // an agent's backoff before it dials again
			}
		}()
	}
	var submitted, failed atomic.Int64
	var failures sync.Map
	for i := 0; time.Now().Before(stop) && i < 400; i++ {
		code, body := n.do("POST", "/api/v1/dags", "application/yaml",
			[]byte(fmt.Sprintf("id: during-flood-%d\nname: f\ntasks: [{id: a, kind: noop}]\n", i)))
		submitted.Add(1)
		if code != 201 {
			failed.Add(1)
			failures.Store(i, fmt.Sprintf("%d %s", code, body))
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	flooded := n.metric("orion_worker_streams_flooded_total")
	t.Logf("flood: %d streams opened, %.0f closed for flooding, %d heartbeats sent; %d submissions, %d failed",
		streams.Load(), flooded, sent.Load(), submitted.Load(), failed.Load())
	failures.Range(func(k, v any) bool { t.Errorf("submission %v during the flood: %v", k, v); return true })
	if flooded < 4 {
		t.Errorf("orion_worker_streams_flooded_total = %v, want at least the 4 first streams", flooded)
	}
	if got := n.metric("orion_leader_changes_total"); got != changes || n.metric("orion_is_leader") != 1 {
		t.Errorf("leadership changed under the flood: orion_leader_changes_total %v (was %v), is_leader %v",
			got, changes, n.metric("orion_is_leader"))
	}
	for i := int64(0); i < submitted.Load(); i++ {
		if _, bad := failures.Load(int(i)); !bad {
			if d := n.waitDAG(fmt.Sprintf("during-flood-%d", i), 60*time.Second); d.Status != "succeeded" {
				t.Errorf("during-flood-%d %s", i, d.Status)
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
