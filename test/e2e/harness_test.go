// Package e2e starts the real orion binary as users do and checks what they
// see: processes started and killed with signals, a real embedded etcd, real
// shell tasks and real HTTP.
package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }

func fixture(name string) string { return filepath.Join(cluster.RepoRoot(), "test", "fixtures", name) }

// node is one `orion server` process with an embedded etcd member. Its ports
// and data dir survive restarts, as they would on a laptop.
type node struct {
	t        *testing.T
	name     string
	dataDir  string
	apiPort  int
	etcdPort int
	peerPort int
	extra    []string
	listen   string // default 127.0.0.1:apiPort
	token    string // sent as a bearer token by do, request and orion
	// clientTLS, when set, makes the node's URL https:// and is how the
	// harness's requests verify it; cliArgs go to every orion command.
	clientTLS *tls.Config
	cliArgs   []string
	env       []string // added to the server's environment
	// asUser, when set, runs the server as that user (a test run as root
	// showing what a process of another user cannot read).
	asUser  *syscall.Credential
	bin     string // the orion binary to run (default cluster.Bin)
	cmd     *exec.Cmd
	logPath string
	waitErr chan error
}

func newNode(t *testing.T, extra ...string) *node {
	t.Helper()
	n := &node{t: t, name: "e2e", dataDir: t.TempDir(), apiPort: testkit.FreePort(t), etcdPort: testkit.FreePort(t), peerPort: testkit.FreePort(t), extra: extra}
	n.logPath = filepath.Join(n.dataDir, "server.log")
	t.Cleanup(n.stop)
	return n
}

func (n *node) url() string {
	if n.clientTLS != nil {
		return fmt.Sprintf("https://127.0.0.1:%d", n.apiPort)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", n.apiPort)
}
func (n *node) etcdURL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.etcdPort) }

func (n *node) start() {
	n.t.Helper()
	listen := n.listen
	if listen == "" {
		listen = fmt.Sprintf("127.0.0.1:%d", n.apiPort)
	}
	args := append([]string{"server", "--name", n.name,
		"--listen", listen,
		"--data-dir", n.dataDir,
		"--embedded-etcd-client-url", n.etcdURL(),
		"--embedded-etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", n.peerPort),
		"--retry-base", "50ms", "--retry-cap", "400ms", "--orphan-grace", "300ms",
		"--log-format", "json", "--log-level", "info",
	}, n.extra...)
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	bin := cluster.Bin
	if n.bin != "" {
		bin = n.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = n.dataDir
	cmd.Env = append(cluster.FilterEnv(os.Environ(), "ORION_"), n.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: n.asUser}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	logf.Close()
	n.cmd = cmd
	n.waitErr = make(chan error, 1)
	go func() { n.waitErr <- cmd.Wait() }()
	n.waitReady()
}

// waitReady polls /readyz and then the cluster endpoint until this node leads.
func (n *node) waitReady() {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-n.waitErr:
			n.t.Fatalf("server exited: %v\n%s", err, n.logs())
		default:
		}
		var c struct {
			Leader string `json:"leader"`
			Node   string `json:"node"`
		}
		if code, _ := n.getJSON("/api/v1/cluster", &c); code == 200 && c.Leader == n.name {
			if code, _ := n.getJSON("/readyz", nil); code == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("server not ready after 60s\n%s", n.logs())
}

// kill9 kills the server process (and only it: tasks it started keep their
// own process groups, which its executor's reaper then kills, as it would).
func (n *node) kill9() {
	n.t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.waitErr
	n.cmd = nil
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.waitErr:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.waitErr
		n.t.Errorf("server did not stop within 30s of SIGTERM")
	}
	n.cmd = nil
}

func (n *node) logs() string {
	b, _ := os.ReadFile(n.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func (n *node) do(method, path, contentType string, body []byte) (int, []byte) {
	n.t.Helper()
	var hdr []string
	if contentType != "" {
		hdr = []string{"Content-Type", contentType}
	}
	return n.request(method, path, "", body, hdr...)
}

// request sends one request, with the node's token and, when host is not
// empty, that Host header (a browser that rebinds a name sends that name),
// and returns the status and body (or 0 and the transport error).
func (n *node) request(method, path, host string, body []byte, hdr ...string) (int, []byte) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.url()+path, bytes.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if n.token != "" {
		req.Header.Set("Authorization", "Bearer "+n.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	hc := &http.Client{Timeout: time.Minute}
	if n.clientTLS != nil {
		hc.Transport = &http.Transport{TLSClientConfig: n.clientTLS}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, out
}

func (n *node) getJSON(path string, v any) (int, []byte) {
	code, body := n.do("GET", path, "", nil)
	if v != nil && code == 200 {
		if err := json.Unmarshal(body, v); err != nil {
			n.t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return code, body
}

// orion runs the CLI against this node.
func (n *node) orion(args ...string) (string, error) {
	cmd := exec.Command(cluster.Bin, append(append(args, "--server", n.url()), n.cliArgs...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *node) dag(id string) (*cluster.DAGState, int) {
	var d cluster.DAGState
	code, _ := n.getJSON("/api/v1/dags/"+id, &d)
	return &d, code
}

// waitDAG polls until the DAG is terminal.
func (n *node) waitDAG(id string, within time.Duration) *cluster.DAGState {
	n.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if d, code := n.dag(id); code == 200 && d.Status != "running" {
			return d
		}
		time.Sleep(50 * time.Millisecond)
	}
	d, _ := n.dag(id)
	n.t.Fatalf("DAG %s not finished within %s: %+v\n%s", id, within, d, n.logs())
	return nil
}

func (n *node) submit(body string) string {
	n.t.Helper()
	code, out := n.do("POST", "/api/v1/dags", "application/yaml", []byte(body))
	if code != 201 && code != 200 {
		n.t.Fatalf("submit: %d %s", code, out)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.ID == "" {
		n.t.Fatalf("submit response %s: %v", out, err)
	}
	return r.ID
}
