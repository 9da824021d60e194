package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/orion-sched/orion/internal/testkit"
)

// This file is the harness of the HA tests (ha_test.go): a cluster of real
// processes on 127.0.0.1 as test/cluster.sh starts it, 3 `orion etcd`
// members, 3 `orion server` replicas with no slots of their own and 2
// `orion worker` processes, each with free ports, its own directory under
// one t.TempDir() and its own log file there. Every process is stopped by
// its pid in t.Cleanup (SIGTERM, then SIGKILL after a bound), and the tail of
// every log is printed when the test failed.

// haProc is one process of a cluster. Its arguments, directory and log
// survive restarts.
type haProc struct {
	t       *testing.T
	name    string
	args    []string
	dir     string // working and data directory
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	err  error         // cmd.Wait's result once done is closed
}

func (p *haProc) start() {
	p.t.Helper()
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s e2e start %s: %s\n", time.Now().Format("15:04:05.000"), p.name, strings.Join(p.args, " "))
	cmd := exec.Command(orionBin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = filterEnv(os.Environ(), "ORION_")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting %s: %v", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// state returns the current process (nil if never started) and its done
// channel.
func (p *haProc) state() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *haProc) running() bool {
	cmd, done := p.state()
	if cmd == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// pid is the pid of the running process, or 0.
func (p *haProc) pid() int {
	if !p.running() {
		return 0
	}
	cmd, _ := p.state()
	return cmd.Process.Pid
}

func (p *haProc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *haProc) signal(sig syscall.Signal) {
	p.t.Helper()
	cmd, _ := p.state()
	if !p.running() {
		p.t.Fatalf("signal %v: %s is not running", sig, p.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s (pid %d): %v", sig, p.name, cmd.Process.Pid, err)
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *haProc) wait(d time.Duration) bool {
	_, done := p.state()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill9 SIGKILLs the process and waits until it is reaped.
func (p *haProc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	if !p.wait(10 * time.Second) {
		p.t.Fatalf("%s still running 10s after SIGKILL", p.name)
	}
}

// stop sends SIGCONT (a stopped process cannot handle SIGTERM), SIGTERM,
// and SIGKILL when the process is still there after grace. It reports
// whether the process exited on SIGTERM alone.
func (p *haProc) stop(grace time.Duration) bool {
	cmd, _ := p.state()
	if !p.running() {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if p.wait(grace) {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
	return false
}

func (p *haProc) logTail(max int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// haServer is an `orion server` replica.
type haServer struct {
	*haProc
	url string
}

type haReplica struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	APIURL        string     `json:"api_url"`
	PID           int        `json:"pid"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	Reachable     bool       `json:"reachable"`
}

type haWorker struct {
	ID        string `json:"id"`
	Slots     int    `json:"slots"`
	Connected bool   `json:"connected"`
}

// haClusterView is GET /api/v1/cluster.
type haClusterView struct {
	Node      string      `json:"node"`
	Leader    string      `json:"leader"`
	LeaderURL string      `json:"leader_url"`
	Replicas  []haReplica `json:"replicas"`
	Workers   []haWorker  `json:"workers"`
}

func (v *haClusterView) replica(name string) (haReplica, bool) {
	for _, r := range v.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return haReplica{}, false
}

// connectedWorkers counts the connected workers per name (the part of the
// id before the slash).
func (v *haClusterView) connectedWorkers() map[string]int {
	out := map[string]int{}
	for _, w := range v.Workers {
		if w.Connected {
			name, _, _ := strings.Cut(w.ID, "/")
			out[name]++
		}
	}
	return out
}

// haSelf is GET /api/v1/cluster/self.
type haSelf struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	PID           int        `json:"pid"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	Workers       []haWorker `json:"workers"`
}

type haCluster struct {
	t         *testing.T
	dir       string
	work      string // where tasks write their files
	etcd      []*haProc
	servers   []*haServer
	workers   []*haProc
	endpoints string
	// clientURLs are the etcd members' client URLs (endpoints, split).
	clientURLs []string
	http       *http.Client
}

const (
	haStartBound = 60 * time.Second
	haStopGrace  = 15 * time.Second
)

// newHACluster starts 3 etcd members, 3 replicas and 2 workers and returns
// once a replica leads and both workers are connected to it.
func newHACluster(t *testing.T) *haCluster {
	t.Helper()
	c := defineHACluster(t)
	began := time.Now()
	c.startEtcd()
	for _, s := range c.servers {
		s.start()
	}
	for _, s := range c.servers {
		c.waitReady(s)
	}
	for _, w := range c.workers {
		w.start()
	}
	c.waitWorkers()
	t.Logf("cluster up in %v (dir %s)", time.Since(began).Round(time.Millisecond), c.dir)
	return c
}

// defineHACluster lays out the processes of newHACluster's cluster (with
// their ports, directories and arguments) and starts none of them.
func defineHACluster(t *testing.T) *haCluster {
	t.Helper()
	c := &haCluster{t: t, dir: t.TempDir(), http: &http.Client{Timeout: 3 * time.Second}}
	c.work = filepath.Join(c.dir, "work")
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the stop below
		if t.Failed() {
			c.dumpLogs()
		}
	})
	t.Cleanup(c.stopAll)

	var initial, clientURLs []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("e%d", i)
		client := fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t))
		peer := fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t))
		initial = append(initial, name+"="+peer)
		clientURLs = append(clientURLs, client)
		c.etcd = append(c.etcd, &haProc{t: t, name: name, dir: filepath.Join(c.dir, name),
			logPath: filepath.Join(c.dir, name+".log"),
			args:    []string{"etcd", "--name", name, "--data-dir", filepath.Join(c.dir, name, "data"), "--listen-client-url", client, "--listen-peer-url", peer}})
	}
	for _, e := range c.etcd {
		e.args = append(e.args, "--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", "e2e-"+filepath.Base(filepath.Dir(c.dir))+"-"+filepath.Base(c.dir), "--log-level", "warn")
	}
	c.clientURLs = clientURLs
	c.endpoints = strings.Join(clientURLs, ",")
	var apiURLs []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d", i)
		port := testkit.FreePort(t)
		s := &haServer{url: fmt.Sprintf("http://127.0.0.1:%d", port), haProc: &haProc{t: t, name: name,
			dir: filepath.Join(c.dir, name), logPath: filepath.Join(c.dir, name+".log"),
			args: []string{"server", "--name", name, "--etcd-endpoints", c.endpoints,
				"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", filepath.Join(c.dir, name),
				"--slots", "0", "--log-format", "json", "--retry-base", "50ms", "--retry-cap", "400ms",
				"--orphan-grace", "2s"}}}
		c.servers = append(c.servers, s)
		apiURLs = append(apiURLs, s.url)
	}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("w%d", i)
		c.workers = append(c.workers, &haProc{t: t, name: name, dir: filepath.Join(c.dir, name),
			logPath: filepath.Join(c.dir, name+".log"),
			args: []string{"worker", "--server", strings.Join(apiURLs, ","), "--slots", "4", "--name", name,
				"--log-dir", filepath.Join(c.dir, name, "logs")}})
	}

	return c
}

// startEtcd starts the etcd members and waits until each is healthy.
func (c *haCluster) startEtcd() {
	c.t.Helper()
	for _, e := range c.etcd { // all three at once: each waits for a quorum
		e.start()
	}
	for i, e := range c.etcd {
		c.waitFor(e.name+" healthy", haStartBound, func() (bool, string) {
			c.mustRun(e)
			code, body, err := c.get(c.clientURLs[i], "/health")
			return code == 200 && strings.Contains(string(body), `"health":"true"`), fmt.Sprintf("%d %s %v", code, body, err)
		})
	}
}

// mustRun fails the test when p has exited.
func (c *haCluster) mustRun(p *haProc) {
	c.t.Helper()
	if !p.running() {
		c.t.Fatalf("%s exited: %v", p.name, p.exitErr())
	}
}

// waitFor polls cond every 50 ms until it holds, failing after bound with
// cond's last explanation.
func (c *haCluster) waitFor(what string, bound time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(bound)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v: %s", what, bound, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *haCluster) do(method, base, path, contentType string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header, err
}

func (c *haCluster) get(base, path string) (int, []byte, error) {
	code, body, _, err := c.do("GET", base, path, "", nil)
	return code, body, err
}

// getJSON GETs path from base and decodes a 200 answer into v.
func (c *haCluster) getJSON(base, path string, v any) error {
	code, body, err := c.get(base, path)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("GET %s%s: %d %s", base, path, code, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s%s: %v: %s", base, path, err, body)
	}
	return nil
}

func (c *haCluster) self(s *haServer) (haSelf, error) {
	var v haSelf
	err := c.getJSON(s.url, "/api/v1/cluster/self", &v)
	return v, err
}

func (c *haCluster) view(s *haServer) (*haClusterView, error) {
	var v haClusterView
	if err := c.getJSON(s.url, "/api/v1/cluster", &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c *haCluster) server(name string) *haServer {
	for _, s := range c.servers {
		if s.name == name {
			return s
		}
	}
	return nil
}

// waitReady waits until s answers /readyz (it loaded the state).
func (c *haCluster) waitReady(s *haServer) {
	c.t.Helper()
	c.waitFor(s.name+" ready", haStartBound, func() (bool, string) {
		c.mustRun(s.haProc)
		code, body, err := c.get(s.url, "/readyz")
		return code == 200, fmt.Sprintf("/readyz: %d %s %v", code, bytes.TrimSpace(body), err)
	})
}

// waitWorkers waits until some replica's cluster view names a leader with
// both workers connected to it.
func (c *haCluster) waitWorkers() *haClusterView {
	c.t.Helper()
	var got *haClusterView
	c.waitFor("a leader with both workers connected", haStartBound, func() (bool, string) {
		for _, w := range c.workers {
			c.mustRun(w)
		}
		var why []string
		for _, s := range c.servers {
			if !s.running() {
				continue
			}
			v, err := c.view(s)
			if err != nil {
				why = append(why, err.Error())
				continue
			}
			ws := v.connectedWorkers()
			if v.Leader != "" && ws["w1"] >= 1 && ws["w2"] >= 1 {
				got = v
				return true, ""
			}
			why = append(why, fmt.Sprintf("%s: leader %q workers %v", s.name, v.Leader, ws))
		}
		return false, strings.Join(why, "; ")
	})
	return got
}

// leader finds the leader through the cluster endpoint and checks that its
// pid is the running process of that replica of this cluster, which
// confirms it leads (/cluster/self).
func (c *haCluster) leader() (*haServer, haReplica) {
	c.t.Helper()
	var s *haServer
	var r haReplica
	c.waitFor("a leader", 30*time.Second, func() (bool, string) {
		var why []string
		for _, via := range c.servers {
			if !via.running() {
				continue
			}
			v, err := c.view(via)
			if err != nil || v.Leader == "" {
				why = append(why, fmt.Sprintf("%s: %v no leader", via.name, err))
				continue
			}
			rep, ok := v.replica(v.Leader)
			cand := c.server(v.Leader)
			if !ok || cand == nil {
				c.t.Fatalf("%s names the leader %q, not a replica of this cluster: %+v", via.name, v.Leader, v)
			}
			if rep.PID == 0 || rep.PID != cand.pid() {
				why = append(why, fmt.Sprintf("%s: leader %s has pid %d, but ours is %d", via.name, v.Leader, rep.PID, cand.pid()))
				continue
			}
			if me, err := c.self(cand); err != nil || me.Role != "leader" || me.PID != rep.PID {
				why = append(why, fmt.Sprintf("%s does not confirm it leads: %+v %v", cand.name, me, err))
				continue
			}
			s, r = cand, rep
			return true, ""
		}
		return false, strings.Join(why, "; ")
	})
	return s, r
}

// awaitNewLeader polls every replica but old until one reports itself the
// leader since after t0 with a committed write.
func (c *haCluster) awaitNewLeader(old string, t0 time.Time, bound time.Duration) (*haServer, haSelf) {
	c.t.Helper()
	var s *haServer
	var me haSelf
	c.waitFor("a new leader other than "+old, bound, func() (bool, string) {
		var why []string
		for _, cand := range c.servers {
			if cand.name == old || !cand.running() {
				continue
			}
			v, err := c.self(cand)
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("%s: %v", cand.name, err))
			case v.Role == "leader" && v.FirstCommitAt != nil && v.LeaderSince != nil && v.LeaderSince.After(t0):
				s, me = cand, v
				return true, ""
			default:
				why = append(why, fmt.Sprintf("%s: role %s since %v first commit %v", cand.name, v.Role, v.LeaderSince, v.FirstCommitAt))
			}
		}
		return false, strings.Join(why, "; ")
	})
	return s, me
}

// restart starts s again with its original arguments and waits until it is
// ready.
func (c *haCluster) restart(s *haServer) {
	c.t.Helper()
	if s.running() {
		c.t.Fatalf("restart: %s is still running", s.name)
	}
	s.start()
	c.waitReady(s)
}

// submit posts a JSON DAG with an id through base, retrying while no
// replica can take writes (the id makes a retry idempotent). It returns the
// status code of the accepted submission.
func (c *haCluster) submit(base string, dag map[string]any) int {
	c.t.Helper()
	body, err := json.Marshal(dag)
	if err != nil {
		c.t.Fatal(err)
	}
	var code int
	c.waitFor(fmt.Sprintf("submitting %v", dag["id"]), 30*time.Second, func() (bool, string) {
		var out []byte
		code, out, _, err = c.do("POST", base, "/api/v1/dags", "application/json", body)
		if code == 200 || code == 201 {
			return true, ""
		}
		if code != 0 && code != 503 && code != 502 && code != 504 {
			c.t.Fatalf("submitting %v: %d %s", dag["id"], code, out)
		}
		return false, fmt.Sprintf("%d %s %v", code, out, err)
	})
	return code
}

// submitAny submits through the first running replica.
func (c *haCluster) submitAny(dag map[string]any) {
	c.t.Helper()
	for _, s := range c.servers {
		if s.running() {
			c.submit(s.url, dag)
			return
		}
	}
	c.t.Fatal("no replica running")
}

// dag reads a DAG from s.
func (c *haCluster) dag(s *haServer, id string) (*dagState, error) {
	var d dagState
	if err := c.getJSON(s.url, "/api/v1/dags/"+id, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// dagAny reads a DAG from the first replica that answers.
func (c *haCluster) dagAny(id string) (*dagState, error) {
	var last error
	for _, s := range c.servers {
		if !s.running() {
			continue
		}
		d, err := c.dag(s, id)
		if err == nil {
			return d, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no replica answered for %s: %v", id, last)
}

// waitDAGs waits until every DAG is terminal (on whichever replica answers)
// and returns their final states.
func (c *haCluster) waitDAGs(ids []string, bound time.Duration) map[string]*dagState {
	c.t.Helper()
	out := map[string]*dagState{}
	c.waitFor(fmt.Sprintf("%d DAGs finished", len(ids)), bound, func() (bool, string) {
		var pending []string
		for _, id := range ids {
			if d := out[id]; d != nil && d.Status != "running" {
				continue
			}
			d, err := c.dagAny(id)
			if err != nil || d.Status == "running" {
				pending = append(pending, fmt.Sprintf("%s (%v %v)", id, statusOf(d), err))
				continue
			}
			out[id] = d
		}
		return len(pending) == 0, "still running: " + strings.Join(pending, ", ")
	})
	return out
}

func statusOf(d *dagState) string {
	if d == nil {
		return "?"
	}
	return fmt.Sprintf("%s %v", d.Status, d.Counts)
}

// stopAll stops the workers, then the replicas, then the etcd members, each
// group at once, and then any orion process of this cluster that some other
// program (orion drill's restarts) started.
func (c *haCluster) stopAll() {
	var groups [][]*haProc
	groups = append(groups, c.workers)
	var srv []*haProc
	for _, s := range c.servers {
		srv = append(srv, s.haProc)
	}
	groups = append(groups, srv, c.etcd)
	for i, g := range groups {
		var wg sync.WaitGroup
		for _, p := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !p.stop(haStopGrace) {
					c.t.Logf("%s did not stop within %v of SIGTERM; killed", p.name, haStopGrace)
				}
			}()
		}
		if i == 1 { // replicas started by others go with the replicas, while etcd is up
			wg.Add(1)
			go func() { defer wg.Done(); c.reapStrays() }()
		}
		wg.Wait()
	}
	c.reapStrays()
}

// strays lists the orion processes of this user whose command line names
// this cluster's directory (they can only be this cluster's) and that are
// not tracked as running here.
func (c *haCluster) strays() map[int]string {
	tracked := map[int]bool{}
	for _, p := range c.all() {
		if pid := p.pid(); pid != 0 {
			tracked[pid] = true
		}
	}
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || tracked[pid] || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if len(argv) < 2 || argv[0] != orionBin || !strings.Contains(string(raw), c.dir+string(filepath.Separator)) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			s := string(st)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && s[i+2] == 'Z' {
				continue
			}
		}
		out[pid] = strings.Join(argv, " ")
	}
	return out
}

// reapStrays stops (SIGTERM, then SIGKILL) this cluster's processes that
// were not started by the harness, such as replicas orion drill restarted.
func (c *haCluster) reapStrays() {
	strays := c.strays()
	if len(strays) == 0 {
		return
	}
	for pid, cmdline := range strays {
		c.t.Logf("stopping pid %d, not started by the harness: %s", pid, cmdline)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(haStopGrace)
	for len(c.strays()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for pid := range c.strays() {
		if _, ok := strays[pid]; ok {
			c.t.Logf("pid %d still running %v after SIGTERM; SIGKILL", pid, haStopGrace)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(c.strays()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *haCluster) all() []*haProc {
	out := append([]*haProc{}, c.etcd...)
	for _, s := range c.servers {
		out = append(out, s.haProc)
	}
	return append(out, c.workers...)
}

func (c *haCluster) dumpLogs() {
	for _, p := range c.all() {
		c.t.Logf("--- last lines of %s (%s):\n%s", p.name, p.logPath, p.logTail(6000))
	}
}

// taskDAG is a DAG of 12 shell tasks in fan-outs and chains; each appends
// one line per execution to WORK/DAG.TASK.
func taskDAG(id, work string) (map[string]any, []string) {
	deps := []struct {
		id   string
		deps []string
	}{
		{"a", nil},
		{"b1", []string{"a"}}, {"b2", []string{"a"}}, {"b3", []string{"a"}}, {"b4", []string{"a"}},
		{"c", []string{"b1", "b2", "b3", "b4"}},
		{"d1", []string{"c"}}, {"d2", []string{"d1"}}, {"d3", []string{"d2"}},
		{"e1", []string{"d3"}}, {"e2", []string{"d3"}},
		{"f", []string{"e1", "e2"}},
	}
	cmd := fmt.Sprintf(`echo run >> %s/$ORION_DAG_ID.$ORION_TASK_ID; sleep 0.2`, work)
	var tasks []map[string]any
	var ids []string
	for _, d := range deps {
		t := map[string]any{"id": d.id, "kind": "shell", "command": cmd, "max_retries": 3}
		if d.deps != nil {
			t["depends_on"] = d.deps
		}
		tasks = append(tasks, t)
		ids = append(ids, d.id)
	}
	return map[string]any{"id": id, "name": id, "tasks": tasks}, ids
}

// checkRanOnce asserts that every task of every DAG wrote exactly one line
// (in c.work), and shows the attempt history of those that did not.
func (c *haCluster) checkRanOnce(dags map[string][]string) {
	t := c.t
	t.Helper()
	bad := 0
	for dag, tasks := range dags {
		for _, task := range tasks {
			if n := lines(t, filepath.Join(c.work, dag+"."+task)); n != 1 {
				bad++
				t.Errorf("%s/%s ran %d times, want exactly 1; its record: %s", dag, task, n, c.taskRecord(dag, task))
			}
		}
	}
	if bad == 0 {
		n := 0
		for _, tasks := range dags {
			n += len(tasks)
		}
		t.Logf("all %d tasks of %d DAGs ran exactly once", n, len(dags))
	}
}

// taskRecord is GET /api/v1/dags/DAG/tasks/TASK from the first replica
// that answers, for diagnostics.
func (c *haCluster) taskRecord(dag, task string) string {
	for _, s := range c.servers {
		if code, body, err := c.get(s.url, "/api/v1/dags/"+dag+"/tasks/"+task); err == nil && code == 200 {
			return string(bytes.TrimSpace(body))
		}
	}
	return "(no replica answered)"
}

// stampWriter prefixes every line written through it with the time.
type stampWriter struct {
	mu  sync.Mutex
	w   io.Writer
	mid bool // in the middle of a line
}

func (s *stampWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out bytes.Buffer
	for _, c := range b {
		if !s.mid {
			out.WriteString(time.Now().Format("15:04:05.000 "))
			s.mid = true
		}
		out.WriteByte(c)
		if c == '\n' {
			s.mid = false
		}
	}
	if _, err := s.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
