package executor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

const bound = 10 * time.Second // upper bound for anything that should be quick

type harness struct {
	t    *testing.T
	l    *Local
	seen map[model.AttemptID]model.Result
	n    int
}

func newHarness(t *testing.T, slots int, tweak ...func(*LocalConfig)) *harness {
	t.Helper()
	cfg := LocalConfig{ID: "w1", Slots: slots, LogDir: t.TempDir(), Logger: zaptest.NewLogger(t)}
	for _, f := range tweak {
		f(&cfg)
	}
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &harness{t: t, l: l, seen: map[model.AttemptID]model.Result{}}
}

func (h *harness) start(spec model.Task) model.AttemptID {
	h.n++
	if spec.ID == "" {
		spec.ID = fmt.Sprintf("t%d", h.n)
	}
	id := model.AttemptID{DAG: "d", Task: spec.ID, Attempt: 1}
	h.l.Start(model.Attempt{AttemptID: id, Spec: spec})
	return id
}

// wait returns the result of id, keeping any other result it reads.
func (h *harness) wait(id model.AttemptID, d time.Duration) model.Result {
	h.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if r, ok := h.seen[id]; ok {
			return r
		}
		select {
		case r := <-h.l.Results():
			if _, dup := h.seen[r.AttemptID]; dup {
				h.t.Fatalf("second result for %s: %+v", r.AttemptID, r)
			}
			h.seen[r.AttemptID] = r
		case <-deadline.C:
			h.t.Fatalf("no result for %s within %s", id, d)
		}
	}
}

// run starts spec and waits for its result.
func (h *harness) run(spec model.Task) model.Result {
	h.t.Helper()
	return h.wait(h.start(spec), bound)
}

func (h *harness) logOf(id model.AttemptID) string {
	h.t.Helper()
	rc, err := h.l.OpenLog(id)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

func shell(cmd string) model.Task { return model.Task{Kind: model.KindShell, Command: cmd} }

// processGone: the pid does not exist, or is a zombie waiting for a reaper
// (PID 1 in a container may not reap orphans).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, bound, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	testkit.WaitFor(t, bound, fmt.Sprintf("process %d to be gone", pid), func() bool { return processGone(pid) })
}

func TestShellSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	before := time.Now()
	id := h.start(shell("echo hello; echo oops >&2"))
	r := h.wait(id, bound)
	if r.Outcome != model.Succeeded || r.ExitCode != 0 || r.Error != "" {
		t.Fatalf("result %+v", r)
	}
	if r.OutputTail != "hello\noops\n" {
		t.Errorf("tail %q", r.OutputTail)
	}
	if got := h.logOf(id); got != "hello\noops\n" {
		t.Errorf("log %q", got)
	}
	if r.Worker != "w1" || r.AttemptID != id {
		t.Errorf("identity %+v", r)
	}
	if r.StartedAt.Before(before) || r.FinishedAt.Before(r.StartedAt) {
		t.Errorf("times %v %v", r.StartedAt, r.FinishedAt)
	}
	if p := h.l.LogPath(id); p != filepath.Join(h.l.LogDir(), "d", id.Task, "1.log") {
		t.Errorf("log path %s", p)
	}
}

func TestShellEnv(t *testing.T) {
	// The server's environment passes to tasks, but not Orion's own
	// settings (ORION_*: the API token, etcd's password).
	t.Setenv("TEST_SERVER_VAR", "from-server")
	t.Setenv("ORION_AUTH_TOKEN", "never-in-a-task")
	h := newHarness(t, 1)
	spec := shell(`echo "$ORION_DAG_ID|$ORION_TASK_ID|$ORION_ATTEMPT|$ORION_LEADER_FENCE|$FOO|$TEST_SERVER_VAR$ORION_AUTH_TOKEN"`)
	spec.ID = "envtask"
	spec.Env = map[string]string{"FOO": "bar baz", "ORION_DAG_ID": "spoofed", "ORION_LEADER_FENCE": "spoofed"}
	h.l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "mydag", Task: "envtask", Attempt: 7}, Spec: spec, Fence: 42})
	r := h.wait(model.AttemptID{DAG: "mydag", Task: "envtask", Attempt: 7}, bound)
	if want := "mydag|envtask|7|42|bar baz|from-server\n"; r.OutputTail != want {
		t.Fatalf("got %q want %q (%+v)", r.OutputTail, want, r)
	}
}

func TestShellWorkdir(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	dir := t.TempDir()
	spec := shell("pwd -P")
	spec.Workdir = dir
	r := h.run(spec)
	want, _ := filepath.EvalSymlinks(dir)
	if r.Outcome != model.Succeeded || strings.TrimSpace(r.OutputTail) != want {
		t.Fatalf("got %+v want dir %s", r, want)
	}
}

// A workdir that is missing, or a file, fails the attempt with a message
// naming it, not the shell.
func TestShellWorkdirMissing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "absent"): "start: workdir " + filepath.Join(dir, "absent") + ": stat " + filepath.Join(dir, "absent") + ": no such file or directory",
		file:                         "start: workdir " + file + " is not a directory",
	} {
		spec := shell("true")
		spec.Workdir = path
		r := h.run(spec)
		if r.Outcome != model.Failed || r.Error != want || !strings.Contains(r.OutputTail, want) {
			t.Errorf("workdir %s: got %+v, want error %q", path, r, want)
		}
	}
}

func TestShellFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	r := h.run(shell("echo bad >&2; exit 3"))
	if r.Outcome != model.Failed || r.ExitCode != 3 || r.Error != "exit status 3" || r.OutputTail != "bad\n" {
		t.Fatalf("result %+v", r)
	}
}

func TestShellInterpreter(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip(err)
	}
	h := newHarness(t, 1)
	spec := model.Task{Kind: model.KindShell, Interpreter: "python3", Command: "import os,sys; print(os.environ['ORION_ATTEMPT']); sys.exit(4)"}
	r := h.run(spec)
	if strings.Contains(r.Error, "executable file not found") {
		t.Skip("no python3")
	}
	if r.Outcome != model.Failed || r.ExitCode != 4 || r.OutputTail != "1\n" {
		t.Fatalf("result %+v", r)
	}
}

func TestShellStartError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	spec := model.Task{Kind: model.KindShell, Interpreter: "/nonexistent/interp", Command: "true"}
	id := h.start(spec)
	r := h.wait(id, bound)
	if r.Outcome != model.Failed || r.ExitCode != -1 || !strings.Contains(r.Error, "start:") || !strings.Contains(r.OutputTail, "nonexistent") {
		t.Fatalf("result %+v", r)
	}
	if !strings.Contains(h.logOf(id), "nonexistent") {
		t.Error("start error not in log")
	}
}

func TestShellTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	// The timeout runs from attempt start, so on a loaded machine it could
	// fire before the shell has forked its child; then retry with a longer
	// one (bounded) so that the kill of a real grandchild is what is tested.
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		pidFile := filepath.Join(t.TempDir(), "pid")
		spec := shell(fmt.Sprintf("sleep 100 & echo $! > %s; echo started; wait", pidFile))
		spec.Timeout = model.Duration(timeout)
		start := time.Now()
		r := h.run(spec)
		if r.Outcome != model.TimedOut || r.ExitCode != -1 || r.Error != "timed out after "+timeout.String() {
			t.Fatalf("result %+v", r)
		}
		// Not before the timeout; the upper bound only tells a kill from the
		// 100 s sleep running out (no speed is asserted on a loaded machine).
		if el := time.Since(start); el < timeout || el > timeout+60*time.Second {
			t.Errorf("took %s", el)
		}
		b, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) || r.OutputTail != "started\n" {
			if timeout > 5*time.Second {
				t.Fatalf("the command never got going: %q %v", r.OutputTail, err)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		assertGone(t, pid)
		return
	}
}

// A background child holding stdout open must not keep the attempt running
// once the main process has exited; it is killed with the group.
func TestShellBackgroundChildDoesNotHang(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	r := h.run(shell(fmt.Sprintf("sleep 100 & echo $! > %s; echo done", pidFile)))
	if r.Outcome != model.Succeeded || r.OutputTail != "done\n" {
		t.Fatalf("result %+v", r)
	}
	if el := time.Since(start); el > 60*time.Second { // the child's 100 s sleep held it
		t.Errorf("took %s", el)
	}
	assertGone(t, readPID(t, pidFile))
}

func TestCancelBeforeStartNeverRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	marker := filepath.Join(t.TempDir(), "marker")
	blocker := h.start(model.Task{Kind: model.KindSleep, Duration: model.Duration(time.Hour)})
	// The caller breaks its promise: no free slot. The attempt is queued.
	queued := h.start(shell("touch " + marker))
	h.l.Cancel(queued)
	r := h.wait(queued, bound)
	if r.Outcome != model.Cancelled || r.Error != "cancelled before start" {
		t.Fatalf("queued result %+v", r)
	}
	h.l.Cancel(queued) // now unknown: no-op
	h.l.Cancel(blocker)
	if r := h.wait(blocker, bound); r.Outcome != model.Cancelled {
		t.Fatalf("blocker result %+v", r)
	}
	// The slot is free again and nothing else runs: a later noop's result is
	// the only thing that arrives.
	last := h.start(model.Task{Kind: model.KindNoop})
	h.wait(last, bound)
	if len(h.seen) != 3 {
		t.Fatalf("results %v", h.seen)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cancelled command ran: %v", err)
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.l.active != 0 || len(h.l.runs) != 0 {
		t.Fatalf("active %d runs %v", h.l.active, h.l.runs)
	}
}

func TestCancelRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := h.start(shell(fmt.Sprintf("sleep 100 & echo $! > %s; echo ready; wait", pidFile)))
	pid := readPID(t, pidFile)
	testkit.WaitFor(t, bound, "ready in log", func() bool {
		b, _ := os.ReadFile(h.l.LogPath(id))
		return strings.Contains(string(b), "ready")
	})
	h.l.Cancel(model.AttemptID{DAG: "d", Task: "nope", Attempt: 1}) // unknown: no-op
	h.l.Cancel(id)
	h.l.Cancel(id) // twice: no-op
	r := h.wait(id, bound)
	if r.Outcome != model.Cancelled || r.ExitCode != -1 || r.Error != "cancelled" || r.OutputTail != "ready\n" {
		t.Fatalf("result %+v", r)
	}
	assertGone(t, pid)
	h.l.Cancel(id) // finished: no-op
}

func TestCancelEscalatesToKill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, func(c *LocalConfig) { c.KillGrace = 200 * time.Millisecond })
	pidFile := filepath.Join(t.TempDir(), "pid")
	id := h.start(shell(fmt.Sprintf("trap '' TERM; sleep 100 & echo $! > %s; wait; wait; wait", pidFile)))
	pid := readPID(t, pidFile)
	start := time.Now()
	h.l.Cancel(id)
	r := h.wait(id, bound)
	// Not before the kill grace; the upper bound only tells the kill from
	// the 100 s sleep running out.
	if el := time.Since(start); el < 200*time.Millisecond || el > 60*time.Second {
		t.Errorf("cancel took %s", el)
	}
	if r.Outcome != model.Cancelled || r.ExitCode != -1 {
		t.Fatalf("result %+v", r)
	}
	assertGone(t, pid)
}

// Start and Cancel back to back: exactly one Cancelled result, whichever side
// of process start the cancel lands on.
func TestStartCancelRace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	var ids []model.AttemptID
	for range 30 {
		id := h.start(shell("sleep 100"))
		h.l.Cancel(id)
		ids = append(ids, id)
	}
	for _, id := range ids {
		if r := h.wait(id, bound); r.Outcome != model.Cancelled {
			t.Fatalf("result %+v", r)
		}
	}
}

func TestLargeOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	id := h.start(shell("seq 1 20000; seq 1 5 >&2"))
	r := h.wait(id, bound)
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	full := want.String()
	if r.Outcome != model.Succeeded {
		t.Fatalf("result %+v", r)
	}
	if r.OutputTail != full[len(full)-model.TailBytes:] {
		t.Errorf("tail is not the last %d bytes: %q...", model.TailBytes, r.OutputTail[:40])
	}
	if got := h.logOf(id); got != full {
		t.Errorf("log has %d bytes, want %d", len(got), len(full))
	}
}

func TestTailTrimsPartialRune(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	f := filepath.Join(t.TempDir(), "out")
	content := strings.Repeat("é", 3000) + "x" // 6001 bytes: byte len-4096 is mid-rune
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run(shell("cat " + f))
	if !utf8.ValidString(r.OutputTail) || r.OutputTail != content[len(content)-model.TailBytes+1:] {
		t.Fatalf("tail len %d valid %v", len(r.OutputTail), utf8.ValidString(r.OutputTail))
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var tb tailBuffer
		var all []byte
		for range rng.IntN(20) {
			p := make([]byte, rng.IntN(3*model.TailBytes))
			for i := range p {
				p[i] = 'a' + byte(rng.IntN(26))
			}
			tb.Write(p)
			all = append(all, p...)
		}
		want := all[max(0, len(all)-model.TailBytes):]
		if got := tb.String(); got != string(want) {
			t.Fatalf("tail mismatch: len %d want %d", len(got), len(want))
		}
	}
	var tb tailBuffer
	tb.Write([]byte("ok \xff\xfe end \xe2\x82")) // invalid bytes, cut rune at the end
	if s := tb.String(); !utf8.ValidString(s) || !strings.HasPrefix(s, "ok ") {
		t.Fatalf("got %q", s)
	}
	bin := bytes.Repeat([]byte{0xff, 'a'}, model.TailBytes)
	tb = tailBuffer{}
	tb.Write(bin)
	if s := tb.String(); !utf8.ValidString(s) || len(s) > model.TailBytes {
		t.Fatalf("binary tail len %d", len(s))
	}
	if s := validHead([]byte("abé"), 3); s != "ab" {
		t.Fatalf("head %q", s)
	}
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			fmt.Fprintf(w, "hello %s %s", r.Method, r.Header.Get("X-Orion-Attempt"))
		case "/bad":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "boom")
		case "/created":
			w.WriteHeader(http.StatusCreated)
		case "/big":
			io.WriteString(w, strings.Repeat("z", 3*model.TailBytes))
		case "/slow":
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, 4, func(c *LocalConfig) { c.HTTPClient = srv.Client() })

	id := h.start(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/ok"})
	r := h.wait(id, bound)
	if r.Outcome != model.Succeeded || r.ExitCode != -1 || r.OutputTail != "HTTP/1.1 200 OK\nhello GET d/t1#1" {
		t.Fatalf("ok: %+v", r)
	}
	if got := h.logOf(id); got != "HTTP/1.1 200 OK\nhello GET d/t1#1" {
		t.Errorf("log %q", got)
	}

	r = h.run(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/bad"})
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "500") || r.OutputTail != "HTTP/1.1 500 Internal Server Error\nboom" {
		t.Fatalf("bad: %+v", r)
	}

	r = h.run(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/created", Method: "POST", ExpectStatus: 201})
	if r.Outcome != model.Succeeded {
		t.Fatalf("created: %+v", r)
	}
	r = h.run(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/ok", ExpectStatus: 201})
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "want 201") {
		t.Fatalf("ok but want 201: %+v", r)
	}

	id = h.start(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/big"})
	r = h.wait(id, bound)
	if r.Outcome != model.Succeeded || len(r.OutputTail) != model.TailBytes || !strings.HasPrefix(r.OutputTail, "HTTP/1.1 200 OK\nzzz") {
		t.Fatalf("big: len %d %+v", len(r.OutputTail), r.Outcome)
	}
	if got := h.logOf(id); len(got) != len("HTTP/1.1 200 OK\n")+3*model.TailBytes {
		t.Errorf("big log %d bytes", len(got))
	}

	r = h.run(model.Task{Kind: model.KindHTTP, URL: srv.URL + "/slow", Timeout: model.Duration(100 * time.Millisecond)})
	if r.Outcome != model.TimedOut || !strings.Contains(r.Error, "timed out after 100ms") {
		t.Fatalf("slow: %+v", r)
	}

	r = h.run(model.Task{Kind: model.KindHTTP, URL: "http://127.0.0.1:1/refused"})
	if r.Outcome != model.Failed || r.Error == "" {
		t.Fatalf("refused: %+v", r)
	}
}

// A notification's attempt: a POST with its headers and JSON body, any 2xx
// answer a delivery, anything else a failure.
func TestHTTPNotification(t *testing.T) {
	t.Parallel()
	type seen struct{ method, ctype, key, team, body string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("Content-Type"), r.Header.Get("Idempotency-Key"), r.Header.Get("X-Team"), string(b)}
		switch r.URL.Path {
		case "/accepted":
			w.WriteHeader(http.StatusAccepted)
		case "/gone":
			w.WriteHeader(http.StatusGone)
		}
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, 2, func(c *LocalConfig) { c.HTTPClient = srv.Client() })
	spec := model.Task{Kind: model.KindHTTP, URL: srv.URL + "/accepted", Method: "POST", Body: `{"dag":"d"}`,
		Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": "d/1/0", "X-Team": "data"}}
	if r := h.run(spec); r.Outcome != model.Succeeded {
		t.Fatalf("202: %+v", r)
	}
	want := seen{"POST", "application/json", "d/1/0", "data", `{"dag":"d"}`}
	if s := <-got; s != want {
		t.Errorf("the receiver saw %+v, want %+v", s, want)
	}
	spec.URL = srv.URL + "/gone"
	if r := h.run(spec); r.Outcome != model.Failed || !strings.Contains(r.Error, "410 Gone (want 2xx)") {
		t.Fatalf("410: %+v", r)
	}
	<-got
}

// An endpoint chooses its status line: one of 2 MiB fails the attempt at
// the default client's header limit, one of 50 KB is quoted cut to 256
// bytes, and neither reaches a result whole. A URL of 8 KB (the spec's
// limit), quoted by every transport error, leaves an error of at most 1 KiB
// that keeps its end (why it failed).
func TestHTTPResultsAreBounded(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				reason := strings.Repeat("x", 50_000)
				if req.URL.Path == "/huge" {
					reason = strings.Repeat("x", 2<<20)
				}
				fmt.Fprintf(c, "HTTP/1.1 503 %s\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody", reason)
			}()
		}
	}()
	h := newHarness(t, 2)
	base := "http://" + ln.Addr().String()

	r := h.run(model.Task{Kind: model.KindHTTP, URL: base + "/huge"})
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "server response headers exceeded") ||
		len(r.Error) > model.MaxErrorBytes || len(r.OutputTail) > model.TailBytes {
		t.Fatalf("2 MiB status line: %s, error of %d bytes %.200q", r.Outcome, len(r.Error), r.Error)
	}
	r = h.run(model.Task{Kind: model.KindHTTP, URL: base + "/long", ExpectStatus: 200})
	if r.Outcome != model.Failed || len(r.Error) > 300 || !strings.HasPrefix(r.Error, "unexpected status 503 xxx") ||
		!strings.HasSuffix(r.Error, "bytes cut] (want 200)") {
		t.Fatalf("50 KB status line: %s, error %q", r.Outcome, r.Error)
	}
	if !strings.HasPrefix(r.OutputTail, "HTTP/1.1 503 xxx") || !strings.HasSuffix(r.OutputTail, "bytes cut]\nbody") {
		t.Fatalf("50 KB status line: tail %q", r.OutputTail)
	}

	url := "http://127.0.0.1:1/" + strings.Repeat("u", 8100)
	r = h.run(model.Task{Kind: model.KindHTTP, URL: url})
	if r.Outcome != model.Failed || len(r.Error) > model.MaxErrorBytes || !strings.Contains(r.Error, "bytes cut]") ||
		!strings.HasSuffix(r.Error, "connection refused") {
		t.Fatalf("8 KB URL refused: %s, error of %d bytes %.100q…%q", r.Outcome, len(r.Error), r.Error, r.Error[max(0, len(r.Error)-60):])
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	r := h.run(model.Task{Kind: model.KindSleep, Duration: model.Duration(20 * time.Millisecond), Fail: 1})
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "injected failure") {
		t.Fatalf("fail=1: %+v", r)
	}
	if el := r.FinishedAt.Sub(r.StartedAt); el < 20*time.Millisecond {
		t.Errorf("slept %s", el)
	}
	r = h.run(model.Task{Kind: model.KindSleep, Duration: model.Duration(time.Millisecond)})
	if r.Outcome != model.Succeeded {
		t.Fatalf("fail=0: %+v", r)
	}
	r = h.run(model.Task{Kind: model.KindSleep, Duration: model.Duration(time.Hour), Timeout: model.Duration(50 * time.Millisecond)})
	if r.Outcome != model.TimedOut {
		t.Fatalf("timeout: %+v", r)
	}
	id := h.start(model.Task{Kind: model.KindSleep, Duration: model.Duration(time.Hour)})
	h.l.Cancel(id)
	if r := h.wait(id, bound); r.Outcome != model.Cancelled {
		t.Fatalf("cancel: %+v", r)
	}
}

func TestUnknownKind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	r := h.run(model.Task{Kind: "teleport"})
	if r.Outcome != model.Failed || !strings.Contains(r.Error, "teleport") {
		t.Fatalf("%+v", r)
	}
}

func TestQueueBeyondSlots(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	var ids []model.AttemptID
	for range 5 {
		ids = append(ids, h.start(model.Task{Kind: model.KindSleep, Duration: model.Duration(5 * time.Millisecond)}))
	}
	for _, id := range ids {
		select {
		case r := <-h.l.Results():
			if r.AttemptID != id || r.Outcome != model.Succeeded {
				t.Fatalf("got %+v, want %s first", r, id)
			}
		case <-time.After(bound):
			t.Fatal("timeout")
		}
	}
}

func TestNoopThroughput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	const n = 10000
	// Nobody reads while starting: the channel fills and the rest overflows.
	for i := range n {
		h.l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: i + 1}, Spec: model.Task{Kind: model.KindNoop}})
	}
	for i := range n {
		select {
		case r := <-h.l.Results():
			// FIFO: results come in finishing order, which for noops is Start order.
			if r.Attempt != i+1 || r.Outcome != model.Succeeded || r.Worker != "w1" || r.StartedAt.IsZero() {
				t.Fatalf("result %d: %+v", i, r)
			}
		case <-time.After(bound):
			t.Fatalf("only %d results", i)
		}
	}
	// And with a concurrent consumer, as the scheduling loop does.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range n {
			select {
			case <-h.l.Results():
			case <-time.After(bound):
				t.Error("results stalled")
				return
			}
		}
	}()
	for i := range n {
		h.l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "u", Attempt: i + 1}, Spec: model.Task{Kind: model.KindNoop}})
	}
	wg.Wait()
	if _, err := h.l.OpenLog(model.AttemptID{DAG: "d", Task: "u", Attempt: 1}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("noop log: %v", err)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	dir := t.TempDir()
	var ids []model.AttemptID
	var pids []int
	for i := range 3 { // 3 > Slots: one is queued
		ids = append(ids, h.start(shell(fmt.Sprintf("sleep 100 & echo $! > %s/%d; wait", dir, i))))
	}
	pids = append(pids, readPID(t, filepath.Join(dir, "0")), readPID(t, filepath.Join(dir, "1")))
	done := make(chan struct{})
	go func() { h.l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatal("Close hangs")
	}
	for _, id := range ids {
		if r := h.wait(id, bound); r.Outcome != model.Cancelled {
			t.Fatalf("result %+v", r)
		}
	}
	for _, pid := range pids {
		assertGone(t, pid)
	}
	if _, err := os.Stat(filepath.Join(dir, "2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("queued attempt ran")
	}
	late := h.start(shell("true"))
	if r := h.wait(late, bound); r.Outcome != model.Cancelled {
		t.Fatalf("after close %+v", r)
	}
	h.l.Close() // idempotent
}

func TestOpenLogMissing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	_, err := h.l.OpenLog(model.AttemptID{DAG: "d", Task: "never", Attempt: 1})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err %v", err)
	}
}

// A shell attempt's log is created at its first output: one that prints
// nothing has no file, and OpenLog gives it an empty log (not a missing
// one); a log left at its path by an earlier run of the same attempt id is
// not taken for its own.
func TestShellLogCreatedAtFirstOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	silent := h.start(shell("sleep 0.2"))
	if r := h.wait(silent, bound); r.Outcome != model.Succeeded || r.OutputTail != "" {
		t.Fatalf("result %+v", r)
	}
	if _, err := os.Stat(h.l.LogPath(silent)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("log file of a silent attempt: %v", err)
	}
	if got := h.logOf(silent); got != "" {
		t.Fatalf("log of a silent attempt: %q, want empty", got)
	}
	if _, err := os.Stat(filepath.Dir(h.l.LogPath(silent))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir of a silent attempt's log: %v", err)
	}

	// Late output still lands in a log, in a dir created for it.
	late := h.start(shell("sleep 0.2; echo late"))
	if r := h.wait(late, bound); r.Outcome != model.Succeeded {
		t.Fatalf("result %+v", r)
	}
	if got := h.logOf(late); got != "late\n" {
		t.Errorf("log %q", got)
	}

	// The same attempt ids again: the earlier logs go, silent or not.
	stale := h.l.LogPath(silent)
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id        model.AttemptID
		cmd, want string
	}{{silent, "true", ""}, {late, "echo again", "again\n"}} {
		h.l.Start(model.Attempt{AttemptID: c.id, Spec: model.Task{ID: c.id.Task, Kind: model.KindShell, Command: c.cmd}})
		delete(h.seen, c.id)
		if r := h.wait(c.id, bound); r.Outcome != model.Succeeded {
			t.Fatalf("result %+v", r)
		}
		b, err := os.ReadFile(h.l.LogPath(c.id))
		if c.want == "" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: log %q, %v; want none", c.cmd, b, err)
		} else if c.want != "" && string(b) != c.want {
			t.Errorf("%s: log %q, %v; want %q", c.cmd, b, err, c.want)
		}
	}
}

func TestLogPathUnsafeNames(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	spec := shell("echo hi")
	spec.ID = "../../evil"
	id := model.AttemptID{DAG: "..", Task: spec.ID, Attempt: 2}
	h.l.Start(model.Attempt{AttemptID: id, Spec: spec})
	if r := h.wait(id, bound); r.Outcome != model.Succeeded {
		t.Fatalf("%+v", r)
	}
	p := h.l.LogPath(id)
	rel, err := filepath.Rel(h.l.LogDir(), p)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, string(filepath.Separator)) != 2 {
		t.Fatalf("log path %s escapes or nests: %s", p, rel)
	}
	if h.logOf(id) != "hi\n" {
		t.Fatal("log")
	}
}

func TestPathSegment(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"etl-daily_v1.2": "etl-daily_v1.2",
		"":               "%",
		".":              "%2E",
		"..":             "%2E%2E",
		"a/b":            "a%2Fb",
		"a%2Fb":          "a%252Fb",
		"héllo":          "h%C3%A9llo",
	}
	for in, want := range cases {
		if got := pathSegment(in); got != want {
			t.Errorf("pathSegment(%q) = %q, want %q", in, got, want)
		}
	}
	long1, long2 := strings.Repeat("/", 300), strings.Repeat("/", 301)
	s1, s2 := pathSegment(long1), pathSegment(long2)
	if len(s1) > maxSegment || s1 == s2 || strings.ContainsRune(s1, '/') {
		t.Errorf("long: %q %q", s1, s2)
	}
}

func BenchmarkNoop(b *testing.B) {
	l, err := NewLocal(LocalConfig{ID: "bench", Slots: 64, LogDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range b.N {
			<-l.Results()
		}
	}()
	b.ReportAllocs()
	spec := model.Task{ID: "t", Kind: model.KindNoop}
	b.ResetTimer()
	for i := range b.N {
		l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: i + 1}, Spec: spec})
	}
	<-done
}

// TestInFlightListsResultsNotYetDelivered: an attempt that finished while
// nobody read the results (they wait in the overflow, or in the pump's
// hands) is still listed by InFlight until its result is in the channel. A
// worker's hello reads InFlight and then drains the channel: every attempt
// not delivered before must be in one or the other, whatever the timing.
// A new leader may know nothing of an attempt the hello does not list.
func TestInFlightListsResultsNotYetDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	const n = 3000 // beyond the channel's 1024: the rest overflows
	for i := range n {
		h.l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: i + 1}, Spec: model.Task{Kind: model.KindNoop}})
	}
	delivered := make(map[int]bool, n)
	deadline := time.Now().Add(bound)
	for len(delivered) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d results delivered", len(delivered), n)
		}
		// A hello: InFlight, then the channel until it is empty.
		hello := map[int]bool{}
		for _, id := range h.l.InFlight() {
			hello[id.Attempt] = true
		}
		before := maps.Clone(delivered)
	drain:
		for {
			select {
			case r := <-h.l.Results():
				delivered[r.Attempt] = true
				hello[r.Attempt] = true
			default:
				break drain
			}
		}
		for i := 1; i <= n; i++ {
			if !before[i] && !hello[i] {
				t.Fatalf("attempt %d: neither listed in flight nor in the channel", i)
			}
		}
	}
}
