// Package cluster is the process harness of the tests that run a whole
// Orion cluster as users do (test/e2e, test/drills): 3 `orion etcd`
// members, 3 `orion server` replicas with no slots of their own and 2
// `orion worker` processes, each a real process of the binary Bin.
package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// A cluster runs on 127.0.0.1 as test/cluster.sh starts it, each process
// with free ports, its own directory under one t.TempDir() and its own log
// file there. Every process is stopped by
// its pid in t.Cleanup (SIGTERM, then SIGKILL after a bound), and the tail of
// every log is printed when the test failed.

// Proc is one process of a cluster. Its arguments, directory and log
// survive restarts.
type Proc struct {
	t       *testing.T
	Name    string
	Args    []string
	Dir     string // working and data directory
	LogPath string
	Wrap    []string // a command prefix that execs the binary (ip netns exec NS)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returns
	err  error         // cmd.Wait's result once done is closed
}

func (p *Proc) Start() {
	p.t.Helper()
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		p.t.Fatal(err)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s harness start %s: %s\n", time.Now().Format("15:04:05.000"), p.Name, strings.Join(p.Args, " "))
	cmd := exec.Command(Bin, p.Args...)
	if len(p.Wrap) > 0 { // the wrapper execs the binary: the pid stays the same
		cmd = exec.Command(p.Wrap[0], append(append(p.Wrap[1:len(p.Wrap):len(p.Wrap)], Bin), p.Args...)...)
	}
	cmd.Dir = p.Dir
	cmd.Env = FilterEnv(os.Environ(), "ORION_")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting %s: %v", p.Name, err)
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
func (p *Proc) state() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *Proc) Running() bool {
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
func (p *Proc) PID() int {
	if !p.Running() {
		return 0
	}
	cmd, _ := p.state()
	return cmd.Process.Pid
}

func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Proc) Signal(sig syscall.Signal) {
	p.t.Helper()
	cmd, _ := p.state()
	if !p.Running() {
		p.t.Fatalf("signal %v: %s is not running", sig, p.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s (pid %d): %v", sig, p.Name, cmd.Process.Pid, err)
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
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
func (p *Proc) Kill9() {
	p.t.Helper()
	p.Signal(syscall.SIGKILL)
	if !p.Wait(10 * time.Second) {
		p.t.Fatalf("%s still running 10s after SIGKILL", p.Name)
	}
}

// stop sends SIGCONT (a stopped process cannot handle SIGTERM), SIGTERM,
// and SIGKILL when the process is still there after grace. It reports
// whether the process exited on SIGTERM alone.
func (p *Proc) Stop(grace time.Duration) bool {
	cmd, _ := p.state()
	if !p.Running() {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if p.Wait(grace) {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
	return false
}

func (p *Proc) LogTail(max int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// Server is an `orion server` replica.
type Server struct {
	*Proc
	URL string
}

type Replica struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	APIURL        string     `json:"api_url"`
	PID           int        `json:"pid"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	Reachable     bool       `json:"reachable"`
}

type Worker struct {
	ID        string            `json:"id"`
	Slots     int               `json:"slots"`
	Labels    map[string]string `json:"labels"`
	Connected bool              `json:"connected"`
}

// View is GET /api/v1/cluster.
type View struct {
	Node      string    `json:"node"`
	Leader    string    `json:"leader"`
	LeaderURL string    `json:"leader_url"`
	Replicas  []Replica `json:"replicas"`
	Workers   []Worker  `json:"workers"`
}

func (v *View) Replica(name string) (Replica, bool) {
	for _, r := range v.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return Replica{}, false
}

// connectedWorkers counts the connected workers per name (the part of the
// id before the slash).
func (v *View) ConnectedWorkers() map[string]int {
	out := map[string]int{}
	for _, w := range v.Workers {
		if w.Connected {
			name, _, _ := strings.Cut(w.ID, "/")
			out[name]++
		}
	}
	return out
}

// Self is GET /api/v1/cluster/self.
type Self struct {
	Name          string     `json:"name"`
	Role          string     `json:"role"`
	PID           int        `json:"pid"`
	LeaderSince   *time.Time `json:"leader_since"`
	FirstCommitAt *time.Time `json:"first_commit_at"`
	Workers       []Worker   `json:"workers"`
}

type Cluster struct {
	t         *testing.T
	Dir       string
	Work      string // where tasks write their files
	Etcd      []*Proc
	Servers   []*Server
	Workers   []*Proc
	Endpoints string
	// ClientURLs are the etcd members' client URLs (Endpoints, split).
	ClientURLs []string
	HTTP       *http.Client
	// Extra are processes a test added with NewProc: stopped with the
	// replicas, logged with the others.
	Extra  []*Proc
	secure *Secure
}

const (
	StartBound = 60 * time.Second
	StopGrace  = 15 * time.Second
)

// Options adjusts a cluster.
type Options struct {
	// OrphanGrace is the replicas' --orphan-grace. Zero: 2s, which keeps
	// the end-to-end tests short; a drill that pauses a worker wants the
	// default (5s), above a worker's reconnect bound.
	OrphanGrace time.Duration
	// EtcdHost is the address the etcd members listen on (default
	// 127.0.0.1).
	EtcdHost string
	// Servers, when set, places replica i on Servers[i]: its own address
	// and a command prefix that runs it elsewhere (ip netns exec NS). A
	// replica off loopback listens with --insecure-no-auth: the addresses
	// are the test's own namespaces.
	Servers []Placement
	// Token is the API token of every replica (--auth-token), sent by the
	// workers and by the harness's requests. Replicas off loopback without
	// it run with --insecure-no-auth. With it, a write a standby forwards
	// is not limited again by the leader, as in a real deployment.
	Token string
	// RateLimit is the --rate-limit of replicas off loopback (loopback
	// callers are never limited). Zero: 100000, above what the test, the
	// workers and the other replicas ask from the one address they share.
	RateLimit float64
	// Secure, when set, runs etcd with TLS on every URL, client
	// certificates required, and the replicas with its CA, client
	// certificate and etcd user.
	Secure *Secure
	// Nodes, when set, says which node etcd member i and replica i run on
	// (--node-name): one machine made to look like several, for the
	// leader's keeping etcd's raft leader off its node. Unset, every
	// process says the host name: one node.
	Nodes []string
}

// Secure is a cluster's etcd TLS and the replicas' etcd credentials.
type Secure struct {
	Certs Certs
	// Username and Password are the replicas' etcd user (none when empty),
	// given in a config file of each replica, with the TLS files.
	Username, Password string
}

// Placement is where a replica runs.
type Placement struct {
	Host string   // listen address
	Wrap []string // command prefix, e.g. ip netns exec NS
}

// New starts 3 etcd members, 3 replicas and 2 workers and returns
// once a replica leads and both workers are connected to it.
func New(t *testing.T, o Options) *Cluster {
	t.Helper()
	c := Define(t, o)
	began := time.Now()
	c.StartEtcd()
	c.StartOrion()
	t.Logf("cluster up in %v (dir %s)", time.Since(began).Round(time.Millisecond), c.Dir)
	return c
}

// StartOrion starts the replicas, waits for each to be ready, then starts
// the workers and waits until they are connected to the leader (New, after
// its etcd; a test that sets up etcd its own way calls it after that).
func (c *Cluster) StartOrion() {
	for _, s := range c.Servers {
		s.Start()
	}
	for _, s := range c.Servers {
		c.WaitReady(s)
	}
	for _, w := range c.Workers {
		w.Start()
	}
	c.WaitWorkers()
}

// Define lays out the processes of New's cluster (with
// their ports, directories and arguments) and starts none of them.
func Define(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.OrphanGrace == 0 {
		o.OrphanGrace = 2 * time.Second
	}
	if o.EtcdHost == "" {
		o.EtcdHost = "127.0.0.1"
	}
	c := &Cluster{t: t, Dir: t.TempDir(), HTTP: &http.Client{Timeout: 3 * time.Second}, secure: o.Secure}
	scheme := "http"
	var rt http.RoundTripper = http.DefaultTransport
	if o.Secure != nil {
		scheme = "https"
		// The etcd members ask for a client certificate; the API is http.
		rt = &http.Transport{TLSClientConfig: o.Secure.Certs.ClientTLS(t)}
	}
	if o.Token != "" {
		rt = &bearer{base: rt, token: o.Token}
	}
	c.HTTP.Transport = rt
	c.Work = filepath.Join(c.Dir, "work")
	if err := os.MkdirAll(c.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the stop below
		if t.Failed() {
			c.DumpLogs()
		}
	})
	t.Cleanup(c.StopAll)

	var initial, clientURLs []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("e%d", i)
		client := fmt.Sprintf("%s://%s:%d", scheme, o.EtcdHost, testkit.FreePort(t))
		peer := fmt.Sprintf("%s://%s:%d", scheme, o.EtcdHost, testkit.FreePort(t))
		initial = append(initial, name+"="+peer)
		clientURLs = append(clientURLs, client)
		c.Etcd = append(c.Etcd, &Proc{t: t, Name: name, Dir: filepath.Join(c.Dir, name),
			LogPath: filepath.Join(c.Dir, name+".log"),
			Args:    []string{"etcd", "--name", name, "--data-dir", filepath.Join(c.Dir, name, "data"), "--listen-client-url", client, "--listen-peer-url", peer}})
	}
	for _, e := range c.Etcd {
		e.Args = append(e.Args, "--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", "e2e-"+filepath.Base(filepath.Dir(c.Dir))+"-"+filepath.Base(c.Dir), "--log-level", "warn")
		if o.EtcdHost != "127.0.0.1" { // an address of the test's own namespaces
			e.Args = append(e.Args, "--allow-remote-clients")
		}
		if i := slices.Index(c.Etcd, e); i < len(o.Nodes) {
			e.Args = append(e.Args, "--node-name", o.Nodes[i])
		}
		if s := o.Secure; s != nil {
			e.Args = append(e.Args, "--cert-file", s.Certs.Cert, "--key-file", s.Certs.Key, "--trusted-ca-file", s.Certs.CA, "--client-cert-auth",
				"--peer-cert-file", s.Certs.Cert, "--peer-key-file", s.Certs.Key, "--peer-trusted-ca-file", s.Certs.CA, "--peer-client-cert-auth")
		}
	}
	c.ClientURLs = clientURLs
	c.Endpoints = strings.Join(clientURLs, ",")
	var apiURLs []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("n%d", i)
		port := testkit.FreePort(t)
		host := "127.0.0.1"
		var wrap []string
		if len(o.Servers) >= i {
			host, wrap = o.Servers[i-1].Host, o.Servers[i-1].Wrap
		}
		s := &Server{URL: fmt.Sprintf("http://%s:%d", host, port), Proc: &Proc{t: t, Name: name,
			Dir: filepath.Join(c.Dir, name), LogPath: filepath.Join(c.Dir, name+".log"), Wrap: wrap,
			Args: []string{"server", "--name", name, "--etcd-endpoints", c.Endpoints,
				"--listen", fmt.Sprintf("%s:%d", host, port), "--data-dir", filepath.Join(c.Dir, name),
				"--slots", "0", "--log-format", "json", "--retry-base", "50ms", "--retry-cap", "400ms",
				"--orphan-grace", o.OrphanGrace.String()}}}
		if host != "127.0.0.1" {
			// The test, the workers and the other replicas are its
			// callers there, polling far above a remote client's 5 rps.
			rl := o.RateLimit
			if rl == 0 {
				rl = 100000
			}
			s.Args = append(s.Args, "--rate-limit", strconv.FormatFloat(rl, 'f', -1, 64))
			if o.Token == "" {
				s.Args = append(s.Args, "--insecure-no-auth")
			}
		}
		if o.Token != "" {
			s.Args = append(s.Args, "--auth-token", o.Token)
		}
		if i <= len(o.Nodes) {
			s.Args = append(s.Args, "--node-name", o.Nodes[i-1])
		}
		if o.Secure != nil {
			s.Args = append(s.Args, "--config", c.WriteEtcdConfig(name, o.Secure.Certs.CA, o.Secure.Username, o.Secure.Password))
		}
		c.Servers = append(c.Servers, s)
		apiURLs = append(apiURLs, s.URL)
	}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("w%d", i)
		c.Workers = append(c.Workers, &Proc{t: t, Name: name, Dir: filepath.Join(c.Dir, name),
			LogPath: filepath.Join(c.Dir, name+".log"),
			Args: []string{"worker", "--server", strings.Join(apiURLs, ","), "--slots", "4", "--name", name,
				"--log-dir", filepath.Join(c.Dir, name, "logs"), "--drain-timeout", "3s"}})
		if o.Token != "" {
			c.Workers[i-1].Args = append(c.Workers[i-1].Args, "--token", o.Token)
		}
	}

	return c
}

// startEtcd starts the etcd members and waits until each is healthy.
func (c *Cluster) StartEtcd() {
	c.t.Helper()
	for _, e := range c.Etcd { // all three at once: each waits for a quorum
		e.Start()
	}
	for i, e := range c.Etcd {
		c.WaitFor(e.Name+" healthy", StartBound, func() (bool, string) {
			c.MustRun(e)
			code, body, err := c.Get(c.ClientURLs[i], "/health")
			return code == 200 && strings.Contains(string(body), `"health":"true"`), fmt.Sprintf("%d %s %v", code, body, err)
		})
	}
}

// mustRun fails the test when p has exited.
func (c *Cluster) MustRun(p *Proc) {
	c.t.Helper()
	if !p.Running() {
		c.t.Fatalf("%s exited: %v", p.Name, p.ExitErr())
	}
}

// waitFor polls cond every 50 ms until it holds, failing after bound with
// cond's last explanation.
func (c *Cluster) WaitFor(what string, bound time.Duration, cond func() (bool, string)) {
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

func (c *Cluster) Do(method, base, path, contentType string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header, err
}

func (c *Cluster) Get(base, path string) (int, []byte, error) {
	code, body, _, err := c.Do("GET", base, path, "", nil)
	return code, body, err
}

// getJSON GETs path from base and decodes a 200 answer into v.
func (c *Cluster) GetJSON(base, path string, v any) error {
	code, body, err := c.Get(base, path)
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

func (c *Cluster) Self(s *Server) (Self, error) {
	var v Self
	err := c.GetJSON(s.URL, "/api/v1/cluster/self", &v)
	return v, err
}

func (c *Cluster) View(s *Server) (*View, error) {
	var v View
	if err := c.GetJSON(s.URL, "/api/v1/cluster", &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c *Cluster) Server(name string) *Server {
	for _, s := range c.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// waitReady waits until s answers /readyz (it loaded the state).
func (c *Cluster) WaitReady(s *Server) {
	c.t.Helper()
	c.WaitFor(s.Name+" ready", StartBound, func() (bool, string) {
		c.MustRun(s.Proc)
		code, body, err := c.Get(s.URL, "/readyz")
		return code == 200, fmt.Sprintf("/readyz: %d %s %v", code, bytes.TrimSpace(body), err)
	})
}

// waitWorkers waits until some replica's cluster view names a leader with
// both workers connected to it.
func (c *Cluster) WaitWorkers() *View {
	c.t.Helper()
	var got *View
	c.WaitFor("a leader with both workers connected", StartBound, func() (bool, string) {
		for _, w := range c.Workers {
			c.MustRun(w)
		}
		var why []string
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			v, err := c.View(s)
			if err != nil {
				why = append(why, err.Error())
				continue
			}
			ws := v.ConnectedWorkers()
			if v.Leader != "" && ws["w1"] >= 1 && ws["w2"] >= 1 {
				got = v
				return true, ""
			}
			why = append(why, fmt.Sprintf("%s: leader %q workers %v", s.Name, v.Leader, ws))
		}
		return false, strings.Join(why, "; ")
	})
	return got
}

// leader finds the leader through the cluster endpoint and checks that its
// pid is the running process of that replica of this cluster, which
// confirms it leads (/cluster/self).
func (c *Cluster) Leader() (*Server, Replica) {
	c.t.Helper()
	var s *Server
	var r Replica
	c.WaitFor("a leader", 30*time.Second, func() (bool, string) {
		var why []string
		for _, via := range c.Servers {
			if !via.Running() {
				continue
			}
			v, err := c.View(via)
			if err != nil || v.Leader == "" {
				why = append(why, fmt.Sprintf("%s: %v no leader", via.Name, err))
				continue
			}
			rep, ok := v.Replica(v.Leader)
			cand := c.Server(v.Leader)
			if !ok || cand == nil {
				c.t.Fatalf("%s names the leader %q, not a replica of this cluster: %+v", via.Name, v.Leader, v)
			}
			if rep.PID == 0 || rep.PID != cand.PID() {
				why = append(why, fmt.Sprintf("%s: leader %s has pid %d, but ours is %d", via.Name, v.Leader, rep.PID, cand.PID()))
				continue
			}
			if me, err := c.Self(cand); err != nil || me.Role != "leader" || me.PID != rep.PID {
				why = append(why, fmt.Sprintf("%s does not confirm it leads: %+v %v", cand.Name, me, err))
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
func (c *Cluster) AwaitNewLeader(old string, t0 time.Time, bound time.Duration) (*Server, Self) {
	c.t.Helper()
	var s *Server
	var me Self
	c.WaitFor("a new leader other than "+old, bound, func() (bool, string) {
		var why []string
		for _, cand := range c.Servers {
			if cand.Name == old || !cand.Running() {
				continue
			}
			v, err := c.Self(cand)
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("%s: %v", cand.Name, err))
			case v.Role == "leader" && v.FirstCommitAt != nil && v.LeaderSince != nil && v.LeaderSince.After(t0):
				s, me = cand, v
				return true, ""
			default:
				why = append(why, fmt.Sprintf("%s: role %s since %v first commit %v", cand.Name, v.Role, v.LeaderSince, v.FirstCommitAt))
			}
		}
		return false, strings.Join(why, "; ")
	})
	return s, me
}

// restart starts s again with its original arguments and waits until it is
// ready.
func (c *Cluster) Restart(s *Server) {
	c.t.Helper()
	if s.Running() {
		c.t.Fatalf("restart: %s is still running", s.Name)
	}
	s.Start()
	c.WaitReady(s)
}

// submit posts a JSON DAG with an id through base, retrying while no
// replica can take writes (the id makes a retry idempotent). It returns the
// status code of the accepted submission.
func (c *Cluster) Submit(base string, dag map[string]any) int {
	c.t.Helper()
	body, err := json.Marshal(dag)
	if err != nil {
		c.t.Fatal(err)
	}
	var code int
	c.WaitFor(fmt.Sprintf("submitting %v", dag["id"]), 30*time.Second, func() (bool, string) {
		var out []byte
		code, out, _, err = c.Do("POST", base, "/api/v1/dags", "application/json", body)
		if code == 200 || code == 201 {
			return true, ""
		}
		if code != 0 && code != 503 && code != 502 && code != 504 && code != 429 { // 429: a rate-limited cluster's, for a moment
			c.t.Fatalf("submitting %v: %d %s", dag["id"], code, out)
		}
		return false, fmt.Sprintf("%d %s %v", code, out, err)
	})
	return code
}

// submitAny submits through the first running replica.
func (c *Cluster) SubmitAny(dag map[string]any) {
	c.t.Helper()
	for _, s := range c.Servers {
		if s.Running() {
			c.Submit(s.URL, dag)
			return
		}
	}
	c.t.Fatal("no replica running")
}

// dag reads a DAG from s.
func (c *Cluster) DAG(s *Server, id string) (*DAGState, error) {
	var d DAGState
	if err := c.GetJSON(s.URL, "/api/v1/dags/"+id, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// dagAny reads a DAG from the first replica that answers.
func (c *Cluster) DAGAny(id string) (*DAGState, error) {
	var last error
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		d, err := c.DAG(s, id)
		if err == nil {
			return d, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no replica answered for %s: %v", id, last)
}

// waitDAGs waits until every DAG is terminal (on whichever replica answers)
// and returns their final states.
func (c *Cluster) WaitDAGs(ids []string, bound time.Duration) map[string]*DAGState {
	c.t.Helper()
	out := map[string]*DAGState{}
	c.WaitFor(fmt.Sprintf("%d DAGs finished", len(ids)), bound, func() (bool, string) {
		var pending []string
		for _, id := range ids {
			if d := out[id]; d != nil && d.Status != "running" {
				continue
			}
			d, err := c.DAGAny(id)
			if err != nil || d.Status == "running" {
				pending = append(pending, fmt.Sprintf("%s (%v %v)", id, StatusOf(d), err))
				continue
			}
			out[id] = d
		}
		return len(pending) == 0, "still running: " + strings.Join(pending, ", ")
	})
	return out
}

func StatusOf(d *DAGState) string {
	if d == nil {
		return "?"
	}
	return fmt.Sprintf("%s %v", d.Status, d.Counts)
}

// stopAll stops the workers, then the replicas, then the etcd members, each
// group at once, and then any orion process of this cluster that some other
// program (orion drill's restarts) started.
func (c *Cluster) StopAll() {
	var groups [][]*Proc
	groups = append(groups, c.Workers)
	var srv []*Proc
	for _, s := range c.Servers {
		srv = append(srv, s.Proc)
	}
	groups = append(groups, append(srv, c.Extra...), c.Etcd)
	for i, g := range groups {
		var wg sync.WaitGroup
		for _, p := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !p.Stop(StopGrace) {
					c.t.Logf("%s did not stop within %v of SIGTERM; killed", p.Name, StopGrace)
				}
			}()
		}
		if i == 1 { // replicas started by others go with the replicas, while etcd is up
			wg.Add(1)
			go func() { defer wg.Done(); c.ReapStrays() }()
		}
		wg.Wait()
	}
	c.ReapStrays()
}

// strays lists the orion processes of this user whose command line names
// this cluster's directory (they can only be this cluster's) and that are
// not tracked as running here.
func (c *Cluster) Strays() map[int]string {
	tracked := map[int]bool{}
	for _, p := range c.All() {
		if pid := p.PID(); pid != 0 {
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
		if len(argv) < 2 || argv[0] != Bin || !strings.Contains(string(raw), c.Dir+string(filepath.Separator)) {
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
func (c *Cluster) ReapStrays() {
	strays := c.Strays()
	if len(strays) == 0 {
		return
	}
	for pid, cmdline := range strays {
		c.t.Logf("stopping pid %d, not started by the harness: %s", pid, cmdline)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(StopGrace)
	for len(c.Strays()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for pid := range c.Strays() {
		if _, ok := strays[pid]; ok {
			c.t.Logf("pid %d still running %v after SIGTERM; SIGKILL", pid, StopGrace)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(c.Strays()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) All() []*Proc {
	out := append([]*Proc{}, c.Etcd...)
	for _, s := range c.Servers {
		out = append(out, s.Proc)
	}
	out = append(out, c.Extra...)
	return append(out, c.Workers...)
}

// bearer adds the API token to every request.
type bearer struct {
	base  http.RoundTripper
	token string
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// NewProc lays out one more process of the cluster (its directory and log
// under the cluster's), to be started by the test and stopped with the
// replicas.
func (c *Cluster) NewProc(name string, args ...string) *Proc {
	p := &Proc{t: c.t, Name: name, Dir: filepath.Join(c.Dir, name), LogPath: filepath.Join(c.Dir, name+".log"), Args: args}
	c.Extra = append(c.Extra, p)
	return p
}

// WriteEtcdConfig writes a replica's config file naming its etcd CA (none
// when ca is empty), the client certificate of the cluster's Secure and
// the etcd user, and returns its path. Credentials go in a file (mode
// 0600), not on a command line that ps shows.
func (c *Cluster) WriteEtcdConfig(name, ca, user, password string) string {
	c.t.Helper()
	s := c.secure
	path := filepath.Join(c.Dir, name+"-etcd.yaml")
	body := fmt.Sprintf("etcd_ca: %q\netcd_cert: %q\netcd_key: %q\netcd_username: %q\netcd_password: %q\n",
		ca, s.Certs.ClientCert, s.Certs.ClientKey, user, password)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

func (c *Cluster) DumpLogs() {
	for _, p := range c.All() {
		c.t.Logf("--- last Lines of %s (%s):\n%s", p.Name, p.LogPath, p.LogTail(6000))
	}
}

// TaskDAG is a DAG of 12 shell tasks in fan-outs and chains; each appends
// one line per execution to WORK/DAG.TASK.
func TaskDAG(id, work string) (map[string]any, []string) {
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

// TaskLoad is TaskDAGs submitted to a cluster: their task ids by DAG, and
// the DAG ids in the order of submission.
type TaskLoad struct {
	Tasks map[string][]string
	Order []string
}

// SubmitTaskDAGs submits n more TaskDAGs, named prefix-N numbered on from
// those already in l, through any replica.
func (c *Cluster) SubmitTaskDAGs(l *TaskLoad, prefix string, n int) {
	c.t.Helper()
	if l.Tasks == nil {
		l.Tasks = map[string][]string{}
	}
	for range n {
		id := fmt.Sprintf("%s-%d", prefix, len(l.Order)+1)
		d, tasks := TaskDAG(id, c.Work)
		c.SubmitAny(d)
		l.Tasks[id], l.Order = tasks, append(l.Order, id)
	}
}

// CheckTaskLoad waits (up to bound) for every DAG of l to end, and fails
// the test unless each succeeded with every task run exactly once.
func (c *Cluster) CheckTaskLoad(l *TaskLoad, bound time.Duration) {
	c.t.Helper()
	states := c.WaitDAGs(l.Order, bound)
	for _, id := range l.Order {
		if d := states[id]; d.Status != "succeeded" {
			c.t.Errorf("DAG %s %s: %+v", id, d.Status, d.Tasks)
		}
	}
	c.CheckRanOnce(l.Tasks)
}

// checkRanOnce asserts that every task of every DAG wrote exactly one line
// (in c.Work), and shows the attempt history of those that did not.
func (c *Cluster) CheckRanOnce(dags map[string][]string) {
	t := c.t
	t.Helper()
	bad := 0
	for dag, tasks := range dags {
		for _, task := range tasks {
			if n := Lines(t, filepath.Join(c.Work, dag+"."+task)); n != 1 {
				bad++
				t.Errorf("%s/%s ran %d times, want exactly 1; its record: %s", dag, task, n, c.TaskRecord(dag, task))
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
func (c *Cluster) TaskRecord(dag, task string) string {
	for _, s := range c.Servers {
		if code, body, err := c.Get(s.URL, "/api/v1/dags/"+dag+"/tasks/"+task); err == nil && code == 200 {
			return string(bytes.TrimSpace(body))
		}
	}
	return "(no replica answered)"
}

// NewStampWriter returns a writer that prefixes every line written
// through it with the time, and writes it to w.
func NewStampWriter(w io.Writer) *StampWriter { return &StampWriter{w: w} }

// StampWriter prefixes every line written through it with the time.
type StampWriter struct {
	mu  sync.Mutex
	w   io.Writer
	mid bool // in the middle of a line
}

func (s *StampWriter) Write(b []byte) (int, error) {
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

// UnfinishedTasks counts the tasks of ids not finished yet.
func (c *Cluster) UnfinishedTasks(ids []string) int {
	n := 0
	for _, id := range ids {
		d, err := c.DAGAny(id)
		if err != nil {
			c.t.Fatalf("reading %s: %v", id, err)
		}
		for _, tk := range d.Tasks {
			switch tk.Status {
			case "succeeded", "failed", "upstream_failed", "cancelled", "skipped":
			default:
				n++
			}
		}
	}
	return n
}

// RunningTasks counts the running tasks of ids.
func (c *Cluster) RunningTasks(ids []string) int {
	n := 0
	for _, id := range ids {
		if d, err := c.DAGAny(id); err == nil {
			for _, tk := range d.Tasks {
				if tk.Status == "running" {
					n++
				}
			}
		}
	}
	return n
}

// WaitEverywhere waits until every running replica reports the DAG with the
// status.
func (c *Cluster) WaitEverywhere(id, status string, bound time.Duration) {
	c.t.Helper()
	c.WaitFor(fmt.Sprintf("%s %s on every replica", id, status), bound, func() (bool, string) {
		var why []string
		for _, s := range c.Servers {
			d, err := c.DAG(s, id)
			if err != nil || d.Status != status {
				why = append(why, fmt.Sprintf("%s: %s %v", s.Name, StatusOf(d), err))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})
}
