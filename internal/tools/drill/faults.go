package drill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/tools/procfs"
)

// Fault is what a drill does to the running cluster.
type Fault string

const (
	// FaultKill SIGKILLs the scheduler leader (then restarts it).
	FaultKill Fault = "kill"
	// FaultStop SIGSTOPs the scheduler leader for StopFor, longer than its
	// lease, then SIGCONTs it: a frozen process, whose sockets stay open.
	FaultStop Fault = "stop"
	// FaultEtcdMember SIGKILLs one etcd member (then restarts it) under a
	// trickle of submissions, whose longest gap is the write stall.
	FaultEtcdMember Fault = "etcd-member"
	// FaultNode SIGKILLs the scheduler leader and etcd's raft leader at
	// once, as the loss of a node that ran both does, under a trickle of
	// submissions; it measures the takeover and the write stall, then
	// restarts both.
	FaultNode Fault = "node"
	// FaultPartition is refused: see ParseFault.
	FaultPartition Fault = "partition"
)

// ParseFault reads --fault. A partition is refused: cutting a process that
// already runs off the network needs it to be in a network namespace of its
// own, which a local cluster's processes are not (they share the host's
// loopback). The drill suite builds such a cluster itself.
func ParseFault(s string) (Fault, error) {
	switch f := Fault(strings.ToLower(strings.TrimSpace(s))); f {
	case FaultKill, FaultStop, FaultEtcdMember, FaultNode:
		return f, nil
	case FaultPartition:
		return "", errors.New("--fault partition: a real partition needs each replica in a network namespace of its own, " +
			"and the processes of a running local cluster share the host's loopback, where nothing can be cut without " +
			"cutting everything; `make drills` runs the partition drill on a cluster it starts in namespaces and veth pairs " +
			"it creates (root and iproute2). Here, --fault stop freezes the leader with its sockets open, " +
			"which is what a partition looks like to the others")
	}
	return "", fmt.Errorf("--fault %q: want kill, stop, etcd-member, node or partition", s)
}

// minStop is the shortest --stop-for: the leader's session lease is 1 s,
// and a freeze within it may end before anyone notices.
const minStop = 1500 * time.Millisecond

// signalProc sends sig to the saved process, through a handle opened
// before a last check of its start time, so a recycled pid is never hit.
func signalProc(p *ProcInfo, sig syscall.Signal) (time.Time, error) {
	h, err := os.FindProcess(p.PID)
	if err != nil {
		return time.Time{}, fmt.Errorf("opening pid %d: %w", p.PID, err)
	}
	defer h.Release()
	st, err := procfs.ReadStat(p.PID)
	if err != nil || st.StartTime != p.StartTime || st.State == 'Z' {
		return time.Time{}, fmt.Errorf("pid %d changed before %v (exited or reused); not signalling it", p.PID, sig)
	}
	t0 := time.Now()
	if err := h.Signal(sig); err != nil {
		return time.Time{}, fmt.Errorf("%v pid %d: %w", sig, p.PID, err)
	}
	return t0, nil
}

// waitStandby polls the replica until its process (the same pid) answers
// as a standby: a leader frozen past its lease must have stepped down.
func (d *driller) waitStandby(ctx context.Context, r client.Replica, pid int) error {
	deadline := time.Now().Add(d.o.RestartTimeout)
	var last string
	for {
		s, err := d.api.self(ctx, r.APIURL, time.Second)
		switch {
		case err != nil:
			last = err.Error()
		case s.PID != 0 && s.PID != pid:
			return fmt.Errorf("%s answers from pid %d, not the stopped pid %d: it restarted", r.Name, s.PID, pid)
		case s.Role == "standby":
			return nil
		default:
			last = "role " + s.Role
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not a standby within %v of SIGCONT: %s", r.Name, d.o.RestartTimeout, last)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// drillEtcd kills one etcd member under a trickle of one-task DAGs, measures
// the longest gap between their acknowledgements, restarts the member and
// waits until it is healthy.
func (d *driller) drillEtcd(ctx context.Context, n int) (*Result, error) {
	tag := fmt.Sprintf("drill %d/%d", n, d.o.Count)
	dagID := fmt.Sprintf("drill-%s-%d", d.runID, n)
	cl, _, err := d.findLeader(ctx)
	if err != nil {
		return nil, err
	}
	m, err := pickMember(cl, d.o.Member)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	proc, clientURL, err := localMember(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	role := "follower"
	if m.IsLeader {
		role = "raft leader"
	}
	d.logf("%s: etcd member %s (%s, pid %d, %s); submitting %s", tag, m.Name, role, proc.PID, clientURL, dagID)
	d.windows[dagID] = &window{from: time.Now()}
	if err := d.submit(ctx, dagID); err != nil {
		return nil, fmt.Errorf("%s: submitting %s: %w", tag, dagID, err)
	}
	d.dags = append(d.dags, dagID)
	if err := d.waitRunning(ctx, dagID); err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}

	tr := d.startTrickle(ctx, dagID)
	if err := tr.waitAcks(ctx, 5, 30*time.Second); err != nil {
		tr.stop()
		return nil, fmt.Errorf("%s: the trickle before the kill: %w", tag, err)
	}
	res := &Result{N: n, DAG: dagID, Fault: string(FaultEtcdMember), Killed: "etcd " + m.Name, KilledPID: proc.PID}
	t0, err := signalProc(proc, syscall.SIGKILL)
	if err != nil {
		tr.stop()
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	// Writes go on without the member: wait for 20 more acknowledgements.
	d.endTrickle(ctx, tr, res, t0, tag)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.o.RestartTimeout+30*time.Second)
	pid, rerr := d.restartMember(rctx, m.Name, proc, clientURL)
	cancel()
	res.RestartedPID = pid
	if rerr != nil {
		res.fail(rerr)
		return res, fmt.Errorf("%s: %w", tag, rerr)
	}
	d.settle(ctx, tag, res, tr.ids...)
	return res, nil
}

// pickMember chooses the etcd member: "leader" (etcd's raft leader),
// "follower" (the first other) or a member name.
func pickMember(cl *client.Cluster, which string) (client.EtcdMember, error) {
	members := cl.Etcd.Members
	if len(members) == 0 {
		return client.EtcdMember{}, errors.New("the cluster view lists no etcd member (is etcd embedded in the server? the etcd-member fault needs `orion etcd` members, as test/cluster.sh runs)")
	}
	if len(members) < 3 {
		return client.EtcdMember{}, fmt.Errorf("etcd has %d member(s): killing one would take its quorum; the etcd-member fault needs 3 or more", len(members))
	}
	for _, m := range members {
		switch {
		case which == "leader" && m.IsLeader, which == "follower" && !m.IsLeader, m.Name == which:
			return m, nil
		}
	}
	var names []string
	for _, m := range members {
		names = append(names, m.Name)
	}
	return client.EtcdMember{}, fmt.Errorf("--member %q: no such etcd member (want leader, follower or one of %s)", which, strings.Join(names, ", "))
}

// localMember finds the `orion etcd` process here that listens on the
// member's client port.
func localMember(m client.EtcdMember) (*ProcInfo, string, error) {
	if len(m.ClientURLs) == 0 {
		return nil, "", fmt.Errorf("etcd member %s publishes no client URL", m.Name)
	}
	raw := m.ClientURLs[0]
	u, err := url.Parse(raw)
	if err != nil || !isLocalHost(u.Hostname()) {
		return nil, "", fmt.Errorf("refusing to kill etcd member %s (%s): it is not on this host", m.Name, raw)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, "", fmt.Errorf("etcd member %s: client URL %s has no port", m.Name, raw)
	}
	ents, err := os.ReadDir(procfs.Root)
	if err != nil {
		return nil, "", err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := ReadProc(pid)
		if err != nil || !IsOrionEtcd(p.Argv) || p.State == 'Z' {
			continue
		}
		if owns, err := OwnsListener(pid, port); err == nil && owns {
			return p, raw, nil
		}
	}
	return nil, "", fmt.Errorf("refusing: no `orion etcd` process of this user here listens on %s (etcd member %s); the etcd-member fault only kills members it can prove are local orion etcd processes", raw, m.Name)
}

// IsOrionEtcd reports whether argv looks like `orion … etcd …`.
func IsOrionEtcd(argv []string) bool {
	for i, a := range argv {
		if strings.Contains(filepath.Base(a), "orion") {
			for _, b := range argv[i+1:] {
				if b == "etcd" {
					return true
				}
			}
			return false
		}
	}
	return false
}

// restartMember brings the killed member back (as --restart says) and waits
// until its /health answers true.
func (d *driller) restartMember(ctx context.Context, name string, p *ProcInfo, clientURL string) (int, error) {
	if d.o.Restart == RestartNone {
		return 0, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone(p.PID, p.StartTime) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pid %d still exists 10s after SIGKILL", p.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	clusterDir, _ := clusterDirOf(p.Cwd, name)
	pid := 0
	switch d.o.Restart {
	case RestartAuto:
		spec, err := BuildRestart(p, name, d.o.WorkDir)
		if err != nil {
			return 0, fmt.Errorf("restarting etcd member %s: %w", name, err)
		}
		child, err := startDetached(spec, fmt.Sprintf("orion drill: restarting %s: %s", name, strings.Join(spec.Argv, " ")))
		if err != nil {
			return 0, fmt.Errorf("restarting etcd member %s: %w", name, err)
		}
		pid = child.pid
		d.logf("restarted etcd member %s as pid %d (log %s)", name, pid, spec.LogPath)
		if clusterDir != "" {
			if ok, err := updatePidFile(clusterDir, name, p.PID, pid); err != nil {
				d.logf("updating test/cluster.sh's pid file of %s: %v", name, err)
			} else if ok {
				d.logf("updated %s so test/cluster.sh manages the new %s", filepath.Join(clusterDir, "pids", name+".pid"), name)
			}
		}
	case RestartScript:
		script, err := findScript(d.o.ClusterScript, p, clusterDir)
		if err != nil {
			return 0, err
		}
		d.logf("running %s restart %s", script, name)
		sctx, cancel := context.WithTimeout(ctx, d.o.RestartTimeout+20*time.Second)
		err = runScript(sctx, script, name, scriptEnv(os.Environ(), name, clusterDir, ""),
			filepath.Join(d.o.WorkDir, "cluster-script.log"))
		cancel()
		if err != nil {
			return 0, err
		}
	}
	limit := time.Now().Add(d.o.RestartTimeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(strings.TrimRight(clientURL, "/") + "/health")
		if err == nil {
			healthy := false
			var buf [256]byte
			k, _ := resp.Body.Read(buf[:])
			healthy = resp.StatusCode == 200 && strings.Contains(string(buf[:k]), `"health":"true"`)
			resp.Body.Close()
			if healthy {
				return pid, nil
			}
		}
		if time.Now().After(limit) {
			return pid, fmt.Errorf("etcd member %s not healthy on %s within %v of its restart", name, clientURL, d.o.RestartTimeout)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return pid, ctx.Err()
		}
	}
}

// trickle submits a one-task DAG every 20 ms, one at a time. A submission
// that fails is sent again, with the same id, 20 ms later to the next
// replica: never after a Retry-After (a 503 without a leader says 1 s),
// so that the stall it measures is the cluster's, not a client's backoff.
type trickle struct {
	d       *driller
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	ackAt  []time.Time
	ids    []string // acknowledged DAGs, to account
	failed int
}

func (d *driller) startTrickle(ctx context.Context, prefix string) *trickle {
	ctx, cancel := context.WithCancel(ctx)
	tr := &trickle{d: d, started: time.Now(), cancel: cancel, done: make(chan struct{})}
	// One client per replica, each sending once (the leader first).
	urls := d.o.Servers
	if d.leaderURL != "" {
		urls = append([]string{d.leaderURL}, urls...)
	}
	var clients []*client.Client
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			continue
		}
		seen[u] = true
		c := client.New([]string{u}, d.o.Token)
		if d.o.TLS != nil {
			c.SetTLS(d.o.TLS)
		}
		c.Retries = client.RetryPolicy{MaxAttempts: 1}
		c.UserAgent = "orion-drill"
		c.HTTPClient.Timeout = 10 * time.Second
		clients = append(clients, c)
	}
	go func() {
		defer close(tr.done)
		next := 0      // the replica to send to: the last that acknowledged
		unacked := ""  // sent, not acknowledged: it may have been committed
		defer func() { // account it, if the cluster has it (stop checks)
			if unacked != "" {
				tr.mu.Lock()
				tr.ids = append(tr.ids, unacked)
				tr.mu.Unlock()
			}
		}()
		for i := 1; ctx.Err() == nil; {
			id := fmt.Sprintf("%s-t%04d", prefix, i)
			body, err := DAGSpec(id, d.runsPath, 1)
			if err != nil {
				return
			}
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = clients[next].Submit(sctx, body, "application/json")
			scancel()
			now := time.Now()
			tr.mu.Lock()
			if err == nil {
				tr.ackAt = append(tr.ackAt, now)
				tr.ids = append(tr.ids, id)
				i, unacked = i+1, ""
			} else {
				unacked = id
				if ctx.Err() == nil {
					tr.failed++
					next = (next + 1) % len(clients)
				}
			}
			tr.mu.Unlock()
			if !sleepCtx(ctx, 20*time.Millisecond) {
				return
			}
		}
	}()
	return tr
}

// endTrickle waits for 20 more acknowledged writes after a kill at t0 (the
// cluster writes on without what was killed), stops the trickle, keeps its
// DAGs for clean-up and records its longest stall.
func (d *driller) endTrickle(ctx context.Context, tr *trickle, res *Result, t0 time.Time, tag string) {
	if err := tr.waitAcks(ctx, tr.acks()+20, d.o.TakeoverTimeout+30*time.Second); err != nil {
		res.fail(fmt.Errorf("writes after the kill: %w", err))
	}
	tr.stop()
	d.dags = append(d.dags, tr.ids...)
	if stall, ok := tr.stall(t0); ok {
		res.StallMS = ms(stall)
	}
	d.logf("%s: %d submissions acknowledged around the kill, %d refused or failed attempts", tag, len(tr.ackAt), tr.failed)
}

func (tr *trickle) acks() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.ackAt)
}

func (tr *trickle) waitAcks(ctx context.Context, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for tr.acks() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d submissions acknowledged within %v", tr.acks(), n, bound)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func (tr *trickle) stop() {
	tr.cancel()
	<-tr.done
	// Keep only the DAGs the cluster has: a submission cut off by stop
	// may never have reached it.
	tr.mu.Lock()
	defer tr.mu.Unlock()
	kept := tr.ids[:0]
	for i, id := range tr.ids {
		if i < len(tr.ackAt) {
			kept = append(kept, id)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := tr.d.client().GetDAG(ctx, id); err == nil {
			kept = append(kept, id)
		}
		cancel()
	}
	tr.ids = kept
}

// stall is the longest gap between two acknowledgements that spans or
// follows t0 (the acknowledgement just before t0 starts the first gap).
func (tr *trickle) stall(t0 time.Time) (time.Duration, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	prev := time.Time{}
	var longest time.Duration
	found := false
	for _, at := range tr.ackAt {
		if at.Before(t0) {
			prev = at
			continue
		}
		if prev.IsZero() {
			prev = t0
		}
		longest = max(longest, at.Sub(prev))
		prev, found = at, true
	}
	return longest, found
}
