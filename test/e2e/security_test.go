package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// errorCode reads the code of Orion's JSON error body ("" if it is not one).
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return ""
	}
	return e.Error.Code
}

var upgradeHeaders = []string{"Connection", "Upgrade", "Upgrade", "websocket",
	"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}

// A web page that rebinds its own name to 127.0.0.1 sends requests whose Host
// and Origin both name its site. Against the default server (loopback, no
// token) none of them may reach anything: not the API, not the console, the
// event stream, the seed API, metrics, probes, nor the worker stream (a page
// posing as a worker would be handed tasks). The same requests under a name
// the server serves work as before.
func TestDNSRebindingReachesNothing(t *testing.T) {
	n := newNode(t, "--allowed-hosts", "orion.test")
	n.start()
	marker := filepath.Join(t.TempDir(), "pwned")
	dagBody := []byte(fmt.Sprintf(`{"name":"x","tasks":[{"id":"a","command":"touch %s"}]}`, marker))
	seedBody := []byte(`[{"id":"a","payload":"x"}]`)
	rebound := fmt.Sprintf("rebind.example:%d", n.apiPort)
	origin := "http://" + rebound
	routes := []struct {
		method, path string
		body         []byte
		hdr          []string
	}{
		{"POST", "/api/v1/dags", dagBody, []string{"Content-Type", "text/plain"}},
		{"POST", "/api/v1/dags", dagBody, []string{"Content-Type", "application/json"}},
		{"GET", "/api/v1/dags", nil, nil},
		{"GET", "/api/v1/cluster", nil, nil},
		{"GET", "/api/v1/leader", nil, nil},
		{"POST", "/api/v1/dag", seedBody, []string{"Idempotency-Key", "k1", "Content-Type", "text/plain"}},
		{"GET", "/api/v1/events", nil, nil},
		{"GET", "/api/v1/events/ws", nil, upgradeHeaders},
		{"GET", "/internal/v1/worker", nil, upgradeHeaders},
		{"GET", "/", nil, nil},
		{"GET", "/metrics", nil, nil},
		{"GET", "/healthz", nil, nil},
	}
	refused := 0
	for _, host := range []string{rebound, "rebind.example", "127.0.0.1.nip.io:" + strconv.Itoa(n.apiPort), "orion.test.evil.example"} {
		for _, rt := range routes {
			refused++
			code, body := n.request(rt.method, rt.path, host, rt.body, append([]string{"Origin", origin}, rt.hdr...)...)
			if code != http.StatusMisdirectedRequest || errorCode(body) != "host_not_allowed" {
				t.Errorf("Host %s: %s %s answered %d %.200s; want a JSON 421", host, rt.method, rt.path, code, body)
			}
		}
	}
	var list struct {
		DAGs []json.RawMessage `json:"dags"`
	}
	if code, _ := n.getJSON("/api/v1/dags", &list); code != 200 || len(list.DAGs) != 0 {
		t.Fatalf("after the rebinding requests: %d, %d DAGs", code, len(list.DAGs))
	}

	// A loopback page of another origin still cannot write, nor pose as a
	// worker; the served names work.
	if code, body := n.request("POST", "/api/v1/dags", "", dagBody, "Origin", "http://evil.example", "Content-Type", "text/plain"); code != 403 {
		t.Errorf("foreign Origin write: %d %s", code, body)
	}
	if code, body := n.request("GET", "/internal/v1/worker", "", nil, append([]string{"Origin", n.url()}, upgradeHeaders...)...); code != 403 {
		t.Errorf("worker stream with a browser Origin: %d %s", code, body)
	}
	if code, body := n.request("GET", "/internal/v1/worker", "", nil, upgradeHeaders...); code != http.StatusSwitchingProtocols {
		t.Errorf("worker stream from a program: %d %s", code, body)
	}
	for _, host := range []string{"", "localhost:" + strconv.Itoa(n.apiPort), "orion.test:" + strconv.Itoa(n.apiPort), "ORION.TEST."} {
		if code, body := n.request("GET", "/api/v1/dags", host, nil); code != 200 {
			t.Errorf("Host %q: %d %s", host, code, body)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("a refused request ran its shell task")
	}
	// The console's own page (same origin, loopback) submits as before.
	code, body := n.request("POST", "/api/v1/dags", "", dagBody, "Origin", n.url(), "Content-Type", "application/json")
	if code != 201 {
		t.Fatalf("console-origin submit: %d %s", code, body)
	}
	if want := fmt.Sprintf("orion_http_host_refused_total %d\n", refused); !strings.Contains(n.metrics(), want) {
		t.Errorf("refused hosts not counted as %s", strings.TrimSpace(want))
	}
}

func (n *node) metrics() string {
	_, body := n.do("GET", "/metrics", "", nil)
	return string(body)
}

// peakRSS is a process's high-water resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// Oversized and amplified submissions sent together with good ones: each bad
// one gets its own JSON 4xx naming the limit, every good one is accepted and
// runs, the leader neither restarts nor moves, and the server's peak memory
// hardly moves. The body limit is 4 MiB, so that a DAG can pass the body and
// decoded-size limits and still be too large for one etcd request (it is
// then stored in chunks).
func TestHostileSubmissionsBesideGoodOnes(t *testing.T) {
	n := newNode(t, "--max-body-bytes", "4194304", "--slots", "8")
	n.start()
	n.submit("name: warm\ntasks:\n- {id: a, kind: noop}\n") // the server's steady memory
	rssBefore := peakRSS(t, n.cmd.Process.Pid)

	yamlAliases := func(tasks, size int) []byte {
		var b strings.Builder
		b.WriteString("name: bomb\ntasks:\n")
		fmt.Fprintf(&b, "  - {id: t0, command: &c \": %s\"}\n", strings.Repeat("x", size))
		for i := 1; i < tasks; i++ {
			fmt.Fprintf(&b, "  - {id: t%d, command: *c}\n", i)
		}
		return []byte(b.String())
	}
	jsonTasks := func(tasks int, command string) []byte {
		var b strings.Builder
		b.WriteString(`{"name":"big","tasks":[`)
		for i := 0; i < tasks; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":"t%d","command":%q}`, i, command)
		}
		b.WriteString("]}")
		return []byte(b.String())
	}
	type hostile struct {
		name, ctype string
		body        []byte
		status      int
		code, says  string
	}
	cases := []hostile{
		// 120 KB anchored, 1000 aliases: a 150 KB body naming 120 MB. The
		// budget is checked before any field is.
		{"alias of an over-long command", "application/yaml", yamlAliases(1000, 120<<10), 413, "dag_too_large", "the limit is 8388608"},
		{"one over-long command", "application/yaml", yamlAliases(1, 120<<10), 400, "invalid_dag", "the limit is 65536"},
		// 60 KB anchored, 1000 aliases: each field fits, the DAG is 60 MB.
		{"alias amplification", "application/yaml", yamlAliases(1000, 60<<10), 413, "dag_too_large", "the limit is 8388608"},
		// 40 x 55 KB: fits the body and the budget, not one etcd request:
		// once refused whole, now stored in chunks (issue 31).
		{"record larger than etcd takes", "application/json", jsonTasks(40, ": "+strings.Repeat("y", 55<<10)), 201, "", `"created":true`},
		{"command over the kernel's argument limit", "application/json", jsonTasks(1, ": "+strings.Repeat("z", 1<<20)), 400, "invalid_dag", "command is"},
	}
	// Eight shell tasks of 60 KB of '<' each: HTML escaping once made this
	// record six times its body and too large for etcd. It is a good DAG.
	good := func(i int) (string, []byte) {
		if i == 0 {
			return "lt", jsonTasks(8, ": '"+strings.Repeat("<", 60<<10)+"'")
		}
		return fmt.Sprintf("good-%d", i), []byte(fmt.Sprintf(`{"id":"good-%d","name":"g","tasks":[{"id":"a","command":"true"},{"id":"b","kind":"noop","depends_on":["a"]}]}`, i))
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var goodIDs []string
	for _, c := range cases {
		wg.Add(1)
		go func(c hostile) {
			defer wg.Done()
			start := time.Now()
			code, body := n.request("POST", "/api/v1/dags", "", c.body, "Content-Type", c.ctype)
			t.Logf("%s: %d bytes, %d in %s", c.name, len(c.body), code, time.Since(start).Round(time.Millisecond))
			if code != c.status || errorCode(body) != c.code || !strings.Contains(string(body), c.says) {
				t.Errorf("%s: %d %.300s; want %d %s saying %q", c.name, code, body, c.status, c.code, c.says)
			}
		}(c)
	}
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id, body := good(i)
			code, out := n.request("POST", "/api/v1/dags", "", body, "Content-Type", "application/json")
			if code != 201 {
				t.Errorf("good DAG %s beside the hostile ones: %d %s", id, code, out)
				return
			}
			var r struct{ ID string }
			_ = json.Unmarshal(out, &r)
			mu.Lock()
			goodIDs = append(goodIDs, r.ID)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	for _, id := range goodIDs {
		if d := n.waitDAG(id, 60*time.Second); d.Status != "succeeded" {
			t.Errorf("good DAG %s: %s", id, d.Status)
		}
	}
	grew := peakRSS(t, n.cmd.Process.Pid) - rssBefore
	t.Logf("peak RSS grew %d MB", grew>>20)
	if grew > 150<<20 {
		t.Errorf("peak RSS grew by %d MB; the bound is 150 MB", grew>>20)
	}
	logs, _ := os.ReadFile(n.logPath)
	if c := strings.Count(string(logs), `"became leader"`); c != 1 || strings.Contains(string(logs), "resynchronising") {
		t.Errorf("the leader moved or resynchronised (%d elections)\n%s", c, n.logs())
	}
	if !strings.Contains(n.metrics(), "orion_submissions_too_large_total 2") {
		t.Error("too-large submissions not counted as orion_submissions_too_large_total 2")
	}

	// An Idempotency-Key names a DAG that has neither id nor name.
	code, body := n.request("POST", "/api/v1/dags", "", []byte(`{"tasks":[{"id":"a","kind":"noop"}]}`),
		"Idempotency-Key", "nightly-2026-11-24", "Content-Type", "application/json")
	if code != 201 || !strings.Contains(string(body), `"id":"nightly-2026-11-24"`) {
		t.Fatalf("Idempotency-Key without a name: %d %s", code, body)
	}
}

// Hundreds of idle and slow (header-trickling) connections do not slow a
// normal client, and the server closes the slow ones once its header
// timeout passes rather than holding them for ever.
func TestSlowClientsDoNotStarveOthers(t *testing.T) {
	n := newNode(t)
	n.start()
	addr := fmt.Sprintf("127.0.0.1:%d", n.apiPort)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 500; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 { // a slowloris: a request line and half a header
			fmt.Fprintf(c, "POST /api/v1/dags HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
		}
	}
	start := time.Now()
	id := n.submit("name: normal\ntasks:\n- {id: a, command: 'true'}\n")
	d := n.waitDAG(id, 30*time.Second)
	t.Logf("a normal client beside 500 idle and slow connections: submitted and finished in %s", time.Since(start).Round(time.Millisecond))
	if d.Status != "succeeded" {
		t.Fatalf("DAG %s", d.Status)
	}
	// The header timeout (10 s) closes a slow connection: a read sees EOF or
	// a 408 well within a bounded wait.
	slow := conns[1]
	_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(slow).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a slow connection was still open 30 s later")
	}
	if err == nil && !strings.Contains(line, "408") && !strings.Contains(line, "400") {
		t.Fatalf("slow connection got %q", line)
	}
}

// On a network bind with a token, a worker authenticates like any client: a
// worker without the token is refused and never receives work; with it, it
// runs the DAG.
func TestWorkerNeedsTheTokenOnANetworkBind(t *testing.T) {
	const token = "s3cret-token-for-e2e"
	n := newNode(t, "--auth-token", token, "--slots", "0")
	n.listen = fmt.Sprintf("0.0.0.0:%d", n.apiPort)
	n.token = token
	n.start()

	startWorker := func(name string, args ...string) (*exec.Cmd, string) {
		logPath := filepath.Join(t.TempDir(), name+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(cluster.Bin, append([]string{"worker", "--name", name, "--slots", "2", "--server", n.url(),
			"--log-dir", t.TempDir(), "--log-format", "json"}, args...)...)
		cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd, logPath
	}
	workers := func() []string {
		var c struct {
			Workers []struct {
				ID        string `json:"id"`
				Connected bool   `json:"connected"`
			} `json:"workers"`
		}
		n.getJSON("/api/v1/cluster/self", &c)
		var ids []string
		for _, w := range c.Workers {
			if w.Connected {
				ids = append(ids, w.ID)
			}
		}
		return ids
	}
	_, badLog := startWorker("no-token")
	testkit.WaitFor(t, 30*time.Second, "the tokenless worker to be refused", func() bool {
		b, _ := os.ReadFile(badLog)
		return strings.Contains(string(b), "401") || strings.Contains(string(b), "unauthorized")
	})
	for _, w := range workers() {
		if strings.HasPrefix(w, "no-token") {
			t.Fatalf("a worker without the token is connected: %v", workers())
		}
	}
	startWorker("with-token", "--token", token)
	testkit.WaitFor(t, 30*time.Second, "the worker with the token to connect", func() bool {
		for _, w := range workers() {
			if strings.HasPrefix(w, "with-token") {
				return true
			}
		}
		return false
	})
	id := n.submit("name: remote\ntasks:\n- {id: a, command: 'echo hi'}\n")
	if d := n.waitDAG(id, 30*time.Second); d.Status != "succeeded" || !strings.HasPrefix(d.Tasks[0].Worker, "with-token") {
		t.Fatalf("DAG %s on worker %q", d.Status, d.Tasks[0].Worker)
	}
}
