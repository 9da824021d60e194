package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/internal/workerstream"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// Every record has a size it cannot exceed, whoever supplies its content.
// Measured before on the same build's parent: each of these put the leader
// into a resync loop for good (about 40 re-reads a second, every write a
// 503 not_leader), or grew a record and etcd quadratically. Here, with
// good DAGs running beside them:
//
//   - an http task whose endpoint answers a 2 MiB status line (its owner
//     needs no Orion credential), and one a 50 KB status line;
//   - an http task with an 8,100-character URL retried 15 times with short
//     backoffs, then retried as a DAG: its error quotes the URL each time;
//   - a worker that reports 2 MiB of output tail and of error.
//
// The leader leads throughout and never re-reads etcd; every DAG ends; each
// record in etcd stays small, its texts cut and marked; the API and
// `orion get task` still say how many attempts there were.
func TestOversizedResultsAreCutWhereTheyEnter(t *testing.T) {
	// The replica's own slots run every task but the liar's: a task with no
	// pool could go to the liar, which would answer for it.
	n := newNode(t, "--slots", "8", "--labels", "pool=main")
	n.start()

	endpoint := statusLineServer(t)
	closed := testkit.FreePort(t) // nothing listens: every attempt is refused at once
	longURL := fmt.Sprintf("http://127.0.0.1:%d/", closed) + strings.Repeat("u", 8100)

	// The worker that lies runs the tasks of pool "evil", and only those.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	t.Cleanup(func() { stopAgent(); <-agentDone })
	lying := newLyingExec("liar/1-e2e")
	agent := workerstream.NewAgent(workerstream.AgentConfig{Exec: lying, Labels: model.Labels{"pool": "evil"},
		Dial: workerstream.NewHTTPDialer([]string{n.url()}, "", nil).Dial})
	go func() { defer close(agentDone); _ = agent.Run(agentCtx) }()

	var goods []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	submitGood := func(i int) {
		defer wg.Done()
		id := fmt.Sprintf("good-%d", i)
		body := fmt.Sprintf("id: %s\nname: good\ntasks:\n- {id: a, pool: main, command: 'echo %d'}\n- {id: b, pool: main, kind: noop, depends_on: [a]}\n", id, i)
		if code, out := n.do("POST", "/api/v1/dags", "application/yaml", []byte(body)); code != 201 {
			t.Errorf("good DAG %s beside the oversized ones: %d %s", id, code, out)
			return
		}
		mu.Lock()
		goods = append(goods, id)
		mu.Unlock()
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go submitGood(i)
	}
	n.submit(fmt.Sprintf(`id: status
name: status
tasks:
- {id: huge, pool: main, kind: http, url: "%[1]s/huge", max_retries: 1}
- {id: long, pool: main, kind: http, url: "%[1]s/long", max_retries: 0}
`, endpoint))
	n.submit(fmt.Sprintf("id: longurl\nname: longurl\ntasks:\n- {id: a, pool: main, kind: http, url: %q, max_retries: 15}\n", longURL))
	n.submit("id: evil\nname: evil\ntasks:\n- {id: ok, kind: noop, pool: evil}\n- {id: bad, kind: noop, pool: evil, max_retries: 0}\n")
	for i := 10; i < 20; i++ {
		wg.Add(1)
		go submitGood(i)
	}
	wg.Wait()

	if d := n.waitDAG("status", 60*time.Second); d.Status != "failed" {
		t.Errorf("status DAG: %s", d.Status)
	}
	huge := n.task("status", "huge")
	if huge.Status != "failed" || huge.Attempts != 2 || len(huge.Error) > model.MaxErrorBytes ||
		!strings.Contains(huge.Error, "server response headers exceeded") || len(huge.OutputTail) > model.TailBytes {
		t.Errorf("task huge (2 MiB status line): %s after %d attempts, error of %d bytes %.200q, tail of %d bytes",
			huge.Status, huge.Attempts, len(huge.Error), huge.Error, len(huge.OutputTail))
	}
	long := n.task("status", "long")
	if long.Status != "succeeded" || len(long.OutputTail) > model.TailBytes || !strings.HasPrefix(long.OutputTail, "HTTP/1.1 200 ") ||
		!strings.Contains(long.OutputTail, " bytes cut]") {
		t.Errorf("task long (50 KB status line): %s, tail of %d bytes %.300q", long.Status, len(long.OutputTail), long.OutputTail)
	}

	if d := n.waitDAG("evil", 60*time.Second); d.Status != "failed" {
		t.Errorf("evil DAG: %s", d.Status)
	}
	ok, bad := n.task("evil", "ok"), n.task("evil", "bad")
	if ok.Status != "succeeded" || len(ok.OutputTail) > model.TailBytes || !strings.HasSuffix(ok.OutputTail, "the end\n") ||
		!strings.HasPrefix(ok.OutputTail, "[orion: ") {
		t.Errorf("a 2 MiB output tail: %s, tail of %d bytes, not its end marked as cut: %.100q", ok.Status, len(ok.OutputTail), ok.OutputTail)
	}
	if bad.Status != "failed" || len(bad.Error) > model.MaxErrorBytes || !strings.HasPrefix(bad.Error, "it went wrong: ") ||
		!strings.HasSuffix(bad.Error, " and that is why") {
		t.Errorf("a 2 MiB error: %s, error of %d bytes, not cut in the middle: %.100q", bad.Status, len(bad.Error), bad.Error)
	}

	// 16 attempts, each error quoting the URL: the record keeps the last 5
	// earlier attempts and counts 10; retried, 16 more.
	etcd := etcdClient(t, n.etcdURL())
	for run, attempts := range []int{16, 32} {
		if run == 1 {
			if out, err := n.orion("retry", "longurl"); err != nil {
				t.Fatalf("orion retry longurl: %v\n%s", err, out)
			}
		}
		deadline := time.Now().Add(90 * time.Second)
		for n.task("longurl", "a").Attempts < attempts || n.task("longurl", "a").Status != "failed" {
			if time.Now().After(deadline) {
				t.Fatalf("longurl run %d: %+v\n%s", run+1, n.task("longurl", "a"), n.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		a := n.task("longurl", "a")
		if len(a.History) != model.HistoryKept || a.HistoryOmitted != attempts-1-model.HistoryKept || len(a.Error) > model.MaxErrorBytes {
			t.Errorf("longurl after %d attempts: history of %d, %d omitted, error of %d bytes", a.Attempts, len(a.History), a.HistoryOmitted, len(a.Error))
		}
		size := recordSize(t, etcd, store.TaskKey("longurl", "a"))
		t.Logf("longurl/a after %d attempts: %d bytes in etcd", attempts, size)
		if size > 12<<10 {
			t.Errorf("longurl/a's record is %d bytes after %d attempts; 5 attempts of 1.5 KB each and the latest fit in 12 KiB", size, attempts)
		}
	}
	out, err := n.orion("get", "task", "longurl/a")
	if err != nil || !strings.Contains(out, "32 (retries used 15 of 15)") || !strings.Contains(out, "26 before them are counted") {
		t.Errorf("orion get task longurl/a: %v\n%s", err, out)
	}

	for _, id := range goods {
		if d := n.waitDAG(id, 60*time.Second); d.Status != "succeeded" {
			t.Errorf("good DAG %s: %s", id, d.Status)
		}
	}
	leaderStayed(t, n)
	if strings.Contains(n.metrics(), "orion_poison_entries_total{") {
		t.Errorf("a record was refused by etcd: bounded records should never be\n%s", n.logs())
	}
}

// etcd whose members take requests of at most 16 KiB, while the server
// was told etcd's default 1.5 MiB (an operator who lowered the members'
// --max-request-bytes and not etcd_max_request_bytes). A shell task prints
// 4 KiB of control bytes: its output tail, JSON-escaped six bytes each,
// makes its success record 24 KiB, which etcd refuses. Before, the leader
// re-read etcd and proposed the record again, for good. Now it is a poison
// entry that fails alone: the success is written without its output tail,
// marked so, and the task's dependent, the other DAGs and the leader go on.
func TestPoisonRecordFailsAlone(t *testing.T) {
	dir := t.TempDir()
	e := &etcdProc{name: "e1", clientURL: fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
		peerURL: fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)), logPath: filepath.Join(dir, "etcd.log")}
	logf, err := os.Create(e.logPath)
	if err != nil {
		t.Fatal(err)
	}
	e.cmd = exec.Command(cluster.Bin, "etcd", "--name", e.name, "--data-dir", filepath.Join(dir, "e1"),
		"--listen-client-url", e.clientURL, "--listen-peer-url", e.peerURL, "--initial-cluster", e.name+"="+e.peerURL,
		"--max-request-bytes", "16384", "--log-level", "warn")
	e.cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	e.done = make(chan struct{})
	go func() { e.err = e.cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(30 * time.Second):
			_ = e.cmd.Process.Signal(syscall.SIGKILL)
			<-e.done
		}
	})

	n := newNode(t, "--etcd-endpoints", e.clientURL, "--slots", "4")
	n.start()

	n.submit("id: control\nname: control\ntasks:\n" +
		"- {id: a, command: \"head -c 4096 /dev/zero | tr '\\\\0' '\\\\1'\"}\n" +
		"- {id: b, command: 'echo after a', depends_on: [a]}\n")
	var goods []string
	for i := 0; i < 10; i++ {
		goods = append(goods, n.submit(fmt.Sprintf("id: good-%d\nname: good\ntasks:\n- {id: a, command: 'echo %d'}\n", i, i)))
	}
	if d := n.waitDAG("control", 60*time.Second); d.Status != "succeeded" {
		t.Fatalf("control DAG: %s %+v\n%s", d.Status, d.Tasks, n.logs())
	}
	a := n.task("control", "a")
	t.Logf("control/a: %s, error %q, output tail of %d bytes", a.Status, a.Error, len(a.OutputTail))
	if a.OutputTail != "" || !strings.HasPrefix(a.Error, "orion: etcd refused this task's record") {
		t.Errorf("control/a: output tail of %d bytes, error %q: want the tail dropped and the record marked", len(a.OutputTail), a.Error)
	}
	for _, id := range goods {
		if d := n.waitDAG(id, 60*time.Second); d.Status != "succeeded" {
			t.Errorf("good DAG %s: %s", id, d.Status)
		}
	}
	leaderStayed(t, n)
	if !strings.Contains(n.metrics(), `orion_poison_entries_total{outcome="shrunk"} 1`) {
		t.Errorf("the poison entry is not counted as orion_poison_entries_total{outcome=\"shrunk\"} 1")
	}
}

// leaderStayed fails the test if the node was elected more than once or
// re-read etcd after a failed commit.
func leaderStayed(t *testing.T, n *node) {
	t.Helper()
	logs, _ := os.ReadFile(n.logPath)
	if c := strings.Count(string(logs), `"became leader"`); c != 1 || strings.Contains(string(logs), "resynchronising") {
		t.Errorf("the leader moved or resynchronised (%d elections)\n%s", c, n.logs())
	}
}

func (n *node) task(dagID, taskID string) client.Task {
	n.t.Helper()
	var tk client.Task
	if code, body := n.getJSON("/api/v1/dags/"+dagID+"/tasks/"+taskID, &tk); code != 200 {
		n.t.Fatalf("GET task %s/%s: %d %s", dagID, taskID, code, body)
	}
	return tk
}

func etcdClient(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recordSize(t *testing.T, c *clientv3.Client, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d values)", key, err, len(resp.Kvs))
	}
	var rec core.TaskRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return len(resp.Kvs[0].Value)
}

// statusLineServer answers every request on 127.0.0.1 with an oversized
// status line: 2 MiB of reason phrase on /huge, 50 KB on anything else,
// both with status code 200. It returns the base URL.
func statusLineServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				reason := strings.Repeat("x", 50_000)
				if req.URL.Path == "/huge" {
					reason = strings.Repeat("x", 2<<20)
				}
				fmt.Fprintf(c, "HTTP/1.1 200 %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", reason)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// lyingExec is a worker's executor that reports 2 MiB of output tail for
// task "ok" (a success) and 2 MiB of error for any other (a failure): what
// an earlier version, or a worker that lies, could send.
type lyingExec struct {
	id      string
	results chan model.Result
}

func newLyingExec(id string) *lyingExec {
	return &lyingExec{id: id, results: make(chan model.Result, 64)}
}

func (l *lyingExec) ID() string                   { return l.id }
func (l *lyingExec) Slots() int                   { return 2 }
func (l *lyingExec) Results() <-chan model.Result { return l.results }
func (l *lyingExec) InFlight() []model.AttemptID  { return nil }
func (l *lyingExec) Cancel(model.AttemptID)       {}
func (l *lyingExec) Close() error                 { return nil }
func (l *lyingExec) OpenLog(model.AttemptID) (io.ReadCloser, error) {
	return nil, errors.New("no log")
}

func (l *lyingExec) Start(a model.Attempt) {
	now := time.Now()
	r := model.Result{AttemptID: a.AttemptID, Worker: l.id, ExitCode: 0, StartedAt: now, FinishedAt: now}
	if a.Task == "ok" {
		r.Outcome, r.OutputTail = model.Succeeded, strings.Repeat("é", 1<<20)+"the end\n"
	} else {
		r.Outcome, r.ExitCode, r.Error = model.Failed, 1, "it went wrong: "+strings.Repeat("e", 2<<20)+" and that is why"
	}
	l.results <- r
}
