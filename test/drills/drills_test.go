// Package drills injects one fault at a time into a real cluster (3 `orion
// etcd` members, 3 replicas, 2 workers: test/internal/cluster) under load,
// and checks the recorded history afterwards, in the manner of etcd's
// robustness tests. Every task's shell appends one line per execution to
// runs.log (dag, task, attempt, the dispatching leader's fence revision, its
// pid, its worker's pid, the time), so the check is against what ran, not
// what the scheduler says ran.
//
// After every drill: each accepted DAG is terminal and succeeded; no task is
// lost; a task ran exactly once unless the worker that ran it was killed
// (its re-run is allowed and counted); after a worker's kill -9 no process
// of its tasks is left. Time figures (takeover, write stall, re-queue
// delay) are reported in a table, never asserted: the machines are noisy.
//
// ORION_DRILLS=1 (make drills) runs every fault ORION_DRILL_COUNT times
// (default 3; or -drills.count); without it only a short subset runs once,
// so that make test stays short. ORION_DRILL_FAULTS (or -drills.faults) is a
// regular expression that picks faults by name.
package drills

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/test/internal/cluster"
)

var (
	countFlag  = flag.Int("drills.count", 0, "runs of each fault (default $ORION_DRILL_COUNT, else 3)")
	faultsFlag = flag.String("drills.faults", "", "regexp of the faults to run (default $ORION_DRILL_FAULTS, else all)")
)

func TestMain(m *testing.M) { cluster.Main(m) }

// fault is one kind of drill. inject runs the fault and the recovery from
// it (restarts included) and returns once the cluster is whole again.
type fault struct {
	name  string
	etcd  bool // a fault of etcd: a trickle of submissions measures the write stall
	short bool // also in the short subset (without ORION_DRILLS=1)
	netns bool // runs on a cluster whose replicas have network namespaces of their own
	// flood: runs on a namespace cluster of its own, whose replicas
	// rate-limit each client address to floodRateLimit requests/s.
	flood  bool
	inject func(d *drill)
}

func faults() []fault {
	return []fault{
		{name: "kill -9 leader replica", inject: killLeader},
		{name: "kill -9 standby replica", inject: killStandby},
		{name: "kill -9 worker mid-task", inject: killWorker},
		{name: "kill -9 etcd follower", etcd: true, inject: killEtcdFollower},
		{name: "kill -9 etcd raft leader", etcd: true, short: true, inject: killEtcdLeader},
		{name: "kill -9 leader + etcd raft leader", etcd: true, inject: killLeaderAndEtcdLeader},
		{name: "SIGSTOP leader 2s", inject: stopLeader},
		{name: "SIGSTOP standby 3s", short: true, inject: stopStandby},
		{name: "SIGSTOP worker 3s", inject: stopWorker},
		{name: "quorum loss 10s (2 of 3 etcd)", etcd: true, inject: quorumLoss},
		{name: "network isolation of leader 3s", netns: true, inject: isolateLeader},
		{name: "flood + 300 streams never read", netns: true, flood: true, inject: flood},
	}
}

// result is one drill's accounting. A negative duration: not measured.
type result struct {
	fault                         string
	tasks, lost, dups, reruns     int
	takeover, stall, requeueDelay time.Duration
	notes                         []string // figures beyond the table's columns
}

func TestDrills(t *testing.T) {
	full := os.Getenv("ORION_DRILLS") == "1"
	count := 3
	if s := os.Getenv("ORION_DRILL_COUNT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("ORION_DRILL_COUNT=%q: want a positive number", s)
		}
		count = n
	}
	if *countFlag > 0 {
		count = *countFlag
	}
	pick := os.Getenv("ORION_DRILL_FAULTS")
	if *faultsFlag != "" {
		pick = *faultsFlag
	}
	re, err := regexp.Compile(pick)
	if err != nil {
		t.Fatalf("faults regexp %q: %v", pick, err)
	}
	var plan []fault
	for _, f := range faults() {
		if re.MatchString(f.name) && (full || f.short) {
			plan = append(plan, f)
		}
	}
	if !full {
		count = 1
		t.Logf("ORION_DRILLS is not 1: the short subset, once each (make drills runs all %d faults)", len(faults()))
	}
	if len(plan) == 0 {
		t.Skipf("no fault matches %q", pick)
	}

	var results []result
	var skipped []string
	// Registered first, so it runs last: the table is printed even when a
	// drill stopped the test.
	t.Cleanup(func() { t.Log("\n" + table(plan, results, skipped)) })

	var onLoopback, inNamespaces, flooded []fault
	for _, f := range plan {
		switch {
		case f.flood:
			flooded = append(flooded, f)
		case f.netns:
			inNamespaces = append(inNamespaces, f)
		default:
			onLoopback = append(onLoopback, f)
		}
	}
	runAll := func(h *harness, faults []fault) {
		for _, f := range faults {
			for n := 1; n <= count; n++ {
				d := h.newDrill(f, n)
				d.run()
				results = append(results, d.res)
				t.Logf("%s #%d: %d tasks, lost %d, duplicated %d, re-run after a killed worker %d, takeover %s, write stall %s, re-queue delay %s",
					f.name, n, d.res.tasks, d.res.lost, d.res.dups, d.res.reruns, ms(d.res.takeover), ms(d.res.stall), ms(d.res.requeueDelay))
			}
		}
	}
	// The replicas' orphan grace is the default (5 s), above a worker's
	// reconnect bound: with less, a paused worker's task may run twice.
	if len(onLoopback) > 0 {
		c := cluster.New(t, cluster.Options{OrphanGrace: 5 * time.Second})
		runAll(newHarness(t, c, nil), onLoopback)
		c.StopAll() // one cluster at a time: two overload 2 cores
	}
	if len(inNamespaces)+len(flooded) == 0 {
		return
	}
	lab, err := newNetLab(t, 3)
	if err != nil {
		for _, f := range append(inNamespaces, flooded...) {
			skipped = append(skipped, fmt.Sprintf("%s: skipped: %v", f.name, err))
		}
		t.Logf("skipping %d drill(s): %v", len(inNamespaces)+len(flooded), err)
		return
	}
	if len(inNamespaces) > 0 {
		c := cluster.New(t, cluster.Options{OrphanGrace: 5 * time.Second, EtcdHost: lab.etcdHost(), Servers: lab.placements()})
		runAll(newHarness(t, c, lab), inNamespaces)
		c.StopAll()
	}
	if len(flooded) > 0 {
		c := cluster.New(t, cluster.Options{OrphanGrace: 5 * time.Second, EtcdHost: lab.etcdHost(), Servers: lab.placements(),
			RateLimit: floodRateLimit, Token: floodToken})
		runAll(newHarness(t, c, lab), flooded)
	}
}

func newHarness(t *testing.T, c *cluster.Cluster, lab *netLab) *harness {
	h := &harness{t: t, c: c, lab: lab, runs: filepath.Join(c.Work, "runs.log"), workerPIDs: map[int]string{}}
	h.noteWorkers()
	t.Cleanup(h.keepEvidence)
	return h
}

// keepEvidence copies the cluster's logs and runs.log out of t.TempDir()
// (which the test removes) when a drill failed: a finding must be
// explainable after the run.
func (h *harness) keepEvidence() {
	if !h.t.Failed() {
		return
	}
	dst, err := os.MkdirTemp("", "orion-drills-evidence-")
	if err != nil {
		h.t.Logf("keeping the evidence: %v", err)
		return
	}
	files, _ := filepath.Glob(filepath.Join(h.c.Dir, "*.log"))
	for _, f := range append(files, h.runs) {
		if b, err := os.ReadFile(f); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644)
		}
	}
	h.t.Logf("the logs of every process and runs.log are kept in %s", dst)
}

// harness is what the drills share: the cluster, runs.log, and every pid a
// worker ever had (a task's line names its worker by pid).
type harness struct {
	t          *testing.T
	c          *cluster.Cluster
	runs       string
	workerPIDs map[int]string // pid → worker name, over every incarnation
	lab        *netLab        // the namespaces of the isolation drill, or nil
	floodIPs   []string       // the flood's client addresses, once made
}

func (h *harness) noteWorkers() {
	for _, w := range h.c.Workers {
		if pid := w.PID(); pid != 0 {
			h.workerPIDs[pid] = w.Name
		}
	}
}

// drill is one run of one fault.
type drill struct {
	*harness
	f      fault
	n      int
	prefix string // of every DAG id of this drill
	load   []string
	res    result

	mu       sync.Mutex
	accepted []string // every DAG the cluster accepted: load and trickle

	killedWorkers map[int]time.Time // pid → when it was killed
	paused        map[string]bool   // replicas SIGSTOPped right now
	trickle       *trickle
}

func (h *harness) newDrill(f fault, n int) *drill {
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(f.name), "-"), "-")
	return &drill{harness: h, f: f, n: n, prefix: fmt.Sprintf("%s-%d", slug, n),
		res:           result{fault: f.name, takeover: -1, stall: -1, requeueDelay: -1},
		killedWorkers: map[int]time.Time{}, paused: map[string]bool{}}
}

func (d *drill) run() {
	d.t.Helper()
	// Load: DAGs of shell tasks that take a while, so that the fault
	// lands while tasks run.
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("%s-load%d", d.prefix, i)
		d.c.SubmitAny(d.loadDAG(id))
		d.load = append(d.load, id)
		d.addAccepted(id)
	}
	d.c.WaitFor(d.prefix+": a task running", 30*time.Second, func() (bool, string) {
		n := len(d.liveRuns(0))
		return n > 0, fmt.Sprintf("%d task processes of this drill alive", n)
	})
	if d.f.etcd {
		// The trickle runs steadily before the fault, so that the stall
		// it measures spans the fault.
		d.trickle = d.startTrickle()
		d.c.WaitFor(d.prefix+": the trickle's first submissions accepted", 30*time.Second, func() (bool, string) {
			n := d.trickle.accepted()
			return n >= 5, fmt.Sprintf("%d accepted", n)
		})
	}
	d.f.inject(d)
	if d.trickle != nil {
		d.trickle.finish(d)
		d.res.stall = d.trickle.stall()
	}
	d.c.WaitWorkers()
	d.noteWorkers()
	d.account()
}

// loadDAG has 12 tasks in fan-outs and chains; each records its run and
// sleeps 0.4 s.
func (d *drill) loadDAG(id string) map[string]any {
	deps := [][]string{
		{"a"}, {"b1", "a"}, {"b2", "a"}, {"b3", "a"}, {"b4", "a"},
		{"c", "b1", "b2", "b3", "b4"}, {"d1", "c"}, {"d2", "d1"}, {"d3", "d2"},
		{"e1", "d3"}, {"e2", "d3"}, {"f", "e1", "e2"},
	}
	var tasks []map[string]any
	for _, dd := range deps {
		tk := map[string]any{"id": dd[0], "kind": "shell", "command": recordCmd(d.runs, "0.4"), "max_retries": 3}
		if len(dd) > 1 {
			tk["depends_on"] = dd[1:]
		}
		tasks = append(tasks, tk)
	}
	return map[string]any{"id": id, "name": id, "tasks": tasks}
}

func (d *drill) addAccepted(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.accepted = append(d.accepted, id)
}

// myRuns is runs.log's lines of this drill's DAGs.
func (d *drill) myRuns() []runLine {
	d.t.Helper()
	all, err := readRuns(d.runs)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []runLine
	for _, r := range all {
		if strings.HasPrefix(r.DAG, d.prefix+"-") {
			out = append(out, r)
		}
	}
	return out
}

// liveRuns are this drill's runs whose process group is still alive, of
// the worker with pid ppid (0: any worker).
func (d *drill) liveRuns(ppid int) []runLine {
	groups := processGroups()
	var out []runLine
	for _, r := range d.myRuns() {
		if (ppid == 0 || r.PPID == ppid) && len(groups[r.PID]) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// --- faults ---------------------------------------------------------------

func killLeader(d *drill) {
	old, _ := d.c.Leader()
	t0 := time.Now()
	old.Kill9()
	_, me := d.c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	d.res.takeover = me.FirstCommitAt.Sub(t0)
	d.c.Restart(old)
}

func killStandby(d *drill) {
	leader, before := d.term()
	s := d.standby(leader)
	t0 := time.Now()
	s.Kill9()
	d.c.Restart(s)
	d.termAfter(before, t0)
}

func killWorker(d *drill) {
	w, live := d.workerWithTask()
	pid := w.PID()
	t0 := time.Now()
	w.Kill9()
	d.killedWorkers[pid] = t0
	// Its reaper kills the process group of every task it ran: none may
	// outlive it, or a re-queued attempt would run beside its first run.
	var mine []runLine
	for _, r := range d.myRuns() {
		if r.PPID == pid {
			mine = append(mine, r)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		groups := processGroups()
		var left []string
		for _, r := range mine {
			for _, p := range groups[r.PID] {
				left = append(left, fmt.Sprintf("pid %d (%s) of %s", p, cmdline(p), r))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			d.t.Errorf("%s: 10s after kill -9 of %s (pid %d, %d task processes alive before, e.g. %s), its task processes are still there:\n%s",
				d.prefix, w.Name, pid, len(live), live[0], strings.Join(left, "\n"))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The worker comes back only once its tasks have been re-run elsewhere:
	// a restarted worker's hello would tell the leader at once that it
	// runs nothing, and the re-queue delay would measure the restart.
	d.c.WaitFor(d.prefix+": the killed worker's tasks re-run", 60*time.Second, func() (bool, string) {
		runs := d.myRuns()
		var waiting []string
		for i, r := range runs {
			if r.PPID != pid {
				continue
			}
			rerun := slices.ContainsFunc(runs[i+1:], func(o runLine) bool { return o.DAG == r.DAG && o.Task == r.Task })
			if !rerun && d.unfinished(r) {
				waiting = append(waiting, r.String())
			}
		}
		return len(waiting) == 0, "not re-run yet: " + strings.Join(waiting, "; ")
	})
	w.Start()
	d.noteWorkers()
}

// unfinished reports whether r's task has not succeeded: a run whose task
// the API already reports succeeded (its result reached the leader before
// the kill) is not re-run.
func (d *drill) unfinished(r runLine) bool {
	st, err := d.c.DAGAny(r.DAG)
	if err != nil {
		return true
	}
	return st.Task(r.Task).Status != "succeeded"
}

func killEtcdFollower(d *drill) {
	leader := d.etcdLeader()
	var e *cluster.Proc
	for i, p := range d.c.Etcd {
		if i != leader {
			e = p
			break
		}
	}
	_, before := d.term()
	t0 := time.Now()
	e.Kill9()
	time.Sleep(3 * time.Second) // the fault: a member down for 3 s
	d.restartEtcd(e)
	d.termAfter(before, t0)
}

func killEtcdLeader(d *drill) {
	i := d.etcdLeader()
	e := d.c.Etcd[i]
	_, before := d.term()
	t0 := time.Now()
	e.Kill9()
	d.c.WaitFor("a new etcd raft leader", 30*time.Second, func() (bool, string) {
		j, err := d.findEtcdLeader()
		return err == nil && j != i, fmt.Sprintf("leader %d: %v", j, err)
	})
	time.Sleep(time.Until(t0.Add(3 * time.Second))) // the fault: the member down for 3 s
	d.restartEtcd(e)
	d.termAfter(before, t0)
}

// killLeaderAndEtcdLeader kills the leader replica and etcd's raft leader
// at the same moment: a node loss, where one machine ran both. The raft
// leader is looked up before every run (it is the first member only in the
// first run of a fresh cluster), so every run is the case where etcd has no
// leader while the standbys depose the dead replica.
func killLeaderAndEtcdLeader(d *drill) {
	old, _ := d.c.Leader()
	i := d.etcdLeader()
	e := d.c.Etcd[i]
	elected := d.watchEtcdElection(i)
	t0 := time.Now()
	old.Signal(syscall.SIGKILL)
	e.Signal(syscall.SIGKILL)
	if !old.Wait(10*time.Second) || !e.Wait(10*time.Second) {
		d.t.Fatalf("%s or %s still running 10s after SIGKILL", old.Name, e.Name)
	}
	_, me := d.c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	d.res.takeover = me.FirstCommitAt.Sub(t0)
	time.Sleep(time.Until(t0.Add(3 * time.Second))) // the fault: the member down for 3 s
	election := "not seen"
	if at := <-elected; !at.IsZero() {
		election = ms(at.Sub(t0))
	}
	d.res.notes = append(d.res.notes, fmt.Sprintf("%s: %s and etcd %s killed; etcd elected a new leader after %s; takeover %s; steps:\n    %s",
		d.prefix, old.Name, e.Name, election, ms(d.res.takeover), d.phases(t0)))
	d.restartEtcd(e)
	d.c.Restart(old)
}

func stopLeader(d *drill) {
	old, _ := d.c.Leader()
	t0 := time.Now()
	old.Signal(syscall.SIGSTOP) // Stop (cleanup) sends SIGCONT first, should the test end here
	d.paused[old.Name] = true
	time.Sleep(2 * time.Second) // the fault: frozen for twice its 1 s lease
	nl, me := d.c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	d.res.takeover = me.FirstCommitAt.Sub(t0)
	// The workers follow the new leader while the old one is still frozen,
	// which then wakes up behind the log.
	d.c.WaitFor("the workers on "+nl.Name, 30*time.Second, func() (bool, string) {
		v, err := d.c.View(nl)
		if err != nil {
			return false, err.Error()
		}
		ws := v.ConnectedWorkers()
		return v.Leader == nl.Name && ws["w1"] >= 1 && ws["w2"] >= 1, fmt.Sprintf("leader %q workers %v", v.Leader, ws)
	})
	old.Signal(syscall.SIGCONT)
	delete(d.paused, old.Name)
	d.c.WaitFor(old.Name+" a standby after SIGCONT", 30*time.Second, func() (bool, string) {
		d.c.MustRun(old.Proc)
		me, err := d.c.Self(old)
		return err == nil && me.Role == "standby", fmt.Sprintf("%+v %v", me, err)
	})
}

func stopStandby(d *drill) {
	leader, before := d.term()
	s := d.standby(leader)
	t0 := time.Now()
	s.Signal(syscall.SIGSTOP)
	d.paused[s.Name] = true
	time.Sleep(3 * time.Second) // the fault: a pause longer than every stale timeout
	s.Signal(syscall.SIGCONT)
	delete(d.paused, s.Name)
	d.c.WaitFor(s.Name+" a standby again", 30*time.Second, func() (bool, string) {
		me, err := d.c.Self(s)
		return err == nil && me.Role == "standby", fmt.Sprintf("%+v %v", me, err)
	})
	d.termAfter(before, t0)
}

func stopWorker(d *drill) {
	w, _ := d.workerWithTask()
	w.Signal(syscall.SIGSTOP)
	// The fault: a pause longer than the stream's stale timeout and shorter
	// than the orphan grace, so the leader must adopt its attempts.
	time.Sleep(3 * time.Second)
	w.Signal(syscall.SIGCONT)
}

// quorumLoss kills the etcd raft leader and a follower for 10 s. Meanwhile
// writes must be refused with 503 and Retry-After and reads must answer
// 200; afterwards scheduling resumes by itself and nothing is lost.
func quorumLoss(d *drill) {
	i := d.etcdLeader()
	down := []*cluster.Proc{d.c.Etcd[i], d.c.Etcd[(i+1)%3]}
	reads := d.startReads()
	d.trickle.outage.Store(true)
	for _, e := range down {
		e.Signal(syscall.SIGKILL)
	}
	for _, e := range down {
		if !e.Wait(10 * time.Second) {
			d.t.Fatalf("%s still running 10s after SIGKILL", e.Name)
		}
	}
	time.Sleep(10 * time.Second) // the fault: no quorum for 10 s
	t1 := time.Now()
	for _, e := range down {
		e.Start()
	}
	for _, e := range down {
		d.waitEtcdHealthy(e)
	}
	d.trickle.outage.Store(false)
	// Takeover is measured from the restart here: the outage itself is
	// the fault's fixed 10 s.
	_, me := d.awaitTerm(t1, 60*time.Second)
	d.res.takeover = me.FirstCommitAt.Sub(t1)
	bad, n := reads.stop()
	if len(bad) > 0 {
		d.t.Errorf("%s: %d of %d reads during the quorum loss did not answer 200: %s", d.prefix, len(bad), n, strings.Join(first(bad, 10), "; "))
	}
	tr := d.trickle
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.refused == 0 {
		d.t.Errorf("%s: no write was refused with 503 during 10 s without quorum (accepted %d, transport errors %d)", d.prefix, len(tr.okAt), tr.transport)
	}
	if tr.noRetryAfter > 0 {
		d.t.Errorf("%s: %d of %d 503 answers without Retry-After", d.prefix, tr.noRetryAfter, tr.refused)
	}
	d.t.Logf("%s: writes during the outage: %d refused with 503, %d transport errors; reads: %d, all 200: %v", d.prefix, tr.refusedOutage, tr.transportOutage, n, len(bad) == 0)
}

// --- helpers of the faults ------------------------------------------------

// term is the leader and its term's start, as it reports them.
func (d *drill) term() (*cluster.Server, cluster.Self) {
	d.t.Helper()
	s, _ := d.c.Leader()
	me, err := d.c.Self(s)
	if err != nil || me.LeaderSince == nil {
		d.t.Fatalf("leader %s: %+v %v", s.Name, me, err)
	}
	return s, me
}

// termAfter reports a takeover when a fault that should leave the leader
// alone cost a leadership change (it is reported, not a failure: a false
// alarm costs a change, never a double write).
func (d *drill) termAfter(before cluster.Self, t0 time.Time) {
	d.t.Helper()
	_, now := d.term()
	if now.Name != before.Name || !now.LeaderSince.Equal(*before.LeaderSince) {
		d.t.Logf("%s: the leadership changed: %s since %v, then %s since %v", d.prefix, before.Name, before.LeaderSince, now.Name, now.LeaderSince)
		if now.FirstCommitAt != nil {
			d.res.takeover = now.FirstCommitAt.Sub(t0)
		}
	}
}

// awaitTerm polls the replicas (but the paused ones) until one leads in a
// term begun after t0 with a committed write.
func (d *drill) awaitTerm(t0 time.Time, bound time.Duration) (*cluster.Server, cluster.Self) {
	d.t.Helper()
	var s *cluster.Server
	var me cluster.Self
	d.c.WaitFor("a leader whose term began after "+t0.Format("15:04:05.000"), bound, func() (bool, string) {
		var why []string
		for _, cand := range d.c.Servers {
			if !cand.Running() || d.paused[cand.Name] {
				continue
			}
			v, err := d.c.Self(cand)
			if err == nil && v.Role == "leader" && v.FirstCommitAt != nil && v.LeaderSince != nil && v.LeaderSince.After(t0) {
				s, me = cand, v
				return true, ""
			}
			why = append(why, fmt.Sprintf("%s: %+v %v", cand.Name, v, err))
		}
		return false, strings.Join(why, "; ")
	})
	return s, me
}

func (d *drill) standby(leader *cluster.Server) *cluster.Server {
	for _, s := range d.c.Servers {
		if s != leader {
			return s
		}
	}
	d.t.Fatal("no standby")
	return nil
}

// workerWithTask is a worker running a task of this drill now.
func (d *drill) workerWithTask() (*cluster.Proc, []runLine) {
	d.t.Helper()
	var w *cluster.Proc
	var live []runLine
	d.c.WaitFor(d.prefix+": a worker running a task", 30*time.Second, func() (bool, string) {
		for _, p := range d.c.Workers {
			if pid := p.PID(); pid != 0 {
				if live = d.liveRuns(pid); len(live) > 0 {
					w = p
					return true, ""
				}
			}
		}
		return false, "no live task process of this drill"
	})
	return w, live
}

// findEtcdLeader asks each running member for its status and returns the
// index of the raft leader.
func (d *drill) findEtcdLeader() (int, error) {
	var ids = map[uint64]int{}
	var leader uint64
	var last error
	for i, u := range d.c.ClientURLs {
		if !d.c.Etcd[i].Running() {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			last = err
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, u)
		cancel()
		cli.Close()
		if err != nil {
			last = err
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i, nil
	}
	return -1, fmt.Errorf("no member names a running leader (%x): %v", leader, last)
}

func (d *drill) etcdLeader() int {
	d.t.Helper()
	i := -1
	d.c.WaitFor("the etcd raft leader", 30*time.Second, func() (bool, string) {
		var err error
		i, err = d.findEtcdLeader()
		return err == nil, fmt.Sprint(err)
	})
	return i
}

// watchEtcdElection polls the members other than etcd[dead] every 5 ms,
// from now on, and delivers when one first names a leader other than
// etcd[dead] (the zero time if none did within 5 s): how long etcd's own
// election took, to tell it from Orion's part of a takeover.
func (d *drill) watchEtcdElection(dead int) <-chan time.Time {
	out := make(chan time.Time, 1)
	type member struct {
		cli *clientv3.Client
		url string
	}
	var ms []member
	var deadID uint64
	for i, u := range d.c.ClientURLs {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, u)
		cancel()
		if i == dead {
			if err == nil {
				deadID = st.Header.MemberId
			}
			cli.Close()
			continue
		}
		ms = append(ms, member{cli, u})
	}
	go func() {
		defer func() {
			for _, m := range ms {
				m.cli.Close()
			}
		}()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, m := range ms {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				st, err := m.cli.Status(ctx, m.url)
				cancel()
				if err == nil && st.Leader != 0 && st.Leader != deadID && deadID != 0 {
					out <- time.Now()
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		out <- time.Time{}
	}()
	return out
}

func (d *drill) restartEtcd(e *cluster.Proc) {
	d.t.Helper()
	e.Start()
	d.waitEtcdHealthy(e)
}

func (d *drill) waitEtcdHealthy(e *cluster.Proc) {
	d.t.Helper()
	i := slices.Index(d.c.Etcd, e)
	d.c.WaitFor(e.Name+" healthy", cluster.StartBound, func() (bool, string) {
		d.c.MustRun(e)
		code, body, err := d.c.Get(d.c.ClientURLs[i], "/health")
		return code == 200 && strings.Contains(string(body), `"health":"true"`), fmt.Sprintf("%d %s %v", code, body, err)
	})
}

// --- the trickle of submissions -------------------------------------------

// trickle submits a one-task DAG every 50 ms, and notes when each was
// accepted and how the others were answered.
type trickle struct {
	stopc, done chan struct{}
	stopOnce    sync.Once
	started     time.Time
	outage      atomic.Bool // set while quorum is lost: answers are counted apart

	mu                             sync.Mutex
	okAt                           []time.Time
	refused, noRetryAfter          int
	transport                      int
	refusedOutage, transportOutage int
	unexpected                     []string
}

func (d *drill) startTrickle() *trickle {
	tr := &trickle{stopc: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	d.t.Cleanup(tr.stop) // should a drill stop the test before finish
	servers := d.c.Servers
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		pref := 0
		for i := 1; ; i++ {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("%s-t%04d", d.prefix, i)
			body, _ := json.Marshal(map[string]any{"id": id, "name": id,
				"tasks": []map[string]any{{"id": "t", "kind": "shell", "command": recordCmd(d.runs, "")}}})
			// A stopped replica refuses connections: the next one is tried
			// at once, as a client with every replica's address would.
			for k := 0; k < len(servers); k++ {
				s := servers[(pref+k)%len(servers)]
				code, out, hdr, err := d.c.Do("POST", s.URL, "/api/v1/dags", "application/json", body)
				now := time.Now()
				outage := tr.outage.Load()
				tr.mu.Lock()
				switch {
				case code == 200 || code == 201:
					tr.okAt = append(tr.okAt, now)
					d.addAccepted(id)
				case code == 503:
					tr.refused++
					if outage {
						tr.refusedOutage++
					}
					if hdr.Get("Retry-After") == "" {
						tr.noRetryAfter++
					}
				case code == 0:
					tr.transport++
					if outage {
						tr.transportOutage++
					}
				default:
					tr.unexpected = append(tr.unexpected, fmt.Sprintf("%s via %s: %d %s", id, s.Name, code, strings.TrimSpace(string(out))))
				}
				tr.mu.Unlock()
				if code != 0 || !strings.Contains(fmt.Sprint(err), "refused") {
					pref = (pref + k) % len(servers)
					break
				}
			}
		}
	}()
	return tr
}

// finish lets the trickle run until 20 more submissions were accepted (the
// cluster takes writes again), then stops it and checks its answers.
func (tr *trickle) finish(d *drill) {
	d.t.Helper()
	tr.mu.Lock()
	base := len(tr.okAt)
	tr.mu.Unlock()
	d.c.WaitFor(d.prefix+": writes accepted again", 60*time.Second, func() (bool, string) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.okAt) >= base+20, fmt.Sprintf("%d accepted since, %d refused, %d transport errors", len(tr.okAt)-base, tr.refused, tr.transport)
	})
	tr.stop()
	if len(tr.unexpected) > 0 {
		d.t.Errorf("%s: submissions answered neither 2xx nor 503: %s", d.prefix, strings.Join(first(tr.unexpected, 10), "; "))
	}
}

func (tr *trickle) accepted() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.okAt)
}

func (tr *trickle) stop() {
	tr.stopOnce.Do(func() { close(tr.stopc) })
	<-tr.done
}

// stall is the longest gap between two accepted submissions (or the
// trickle's start and the first).
func (tr *trickle) stall() time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var m time.Duration
	prev := tr.started
	for _, at := range tr.okAt {
		m = max(m, at.Sub(prev))
		prev = at
	}
	return m
}

// reads polls GET /api/v1/dags/ID on every replica every 100 ms.
type reads struct {
	stopc, done chan struct{}
	stopOnce    sync.Once
	bad         []string
	n           int
}

func (d *drill) startReads() *reads {
	r := &reads{stopc: make(chan struct{}), done: make(chan struct{})}
	d.t.Cleanup(func() { r.stop() }) // should a drill stop the test before its end
	go func() {
		defer close(r.done)
		for {
			for _, s := range d.c.Servers {
				code, body, err := d.c.Get(s.URL, "/api/v1/dags/"+d.load[0])
				r.n++
				if code != 200 {
					r.bad = append(r.bad, fmt.Sprintf("%s %s: %d %s %v", time.Now().Format("15:04:05.000"), s.Name, code, strings.TrimSpace(string(body)), err))
				}
			}
			select {
			case <-r.stopc:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return r
}

func (r *reads) stop() ([]string, int) {
	r.stopOnce.Do(func() { close(r.stopc) })
	<-r.done
	return r.bad, r.n
}

// --- the check ------------------------------------------------------------

// account waits for every accepted DAG and checks the history of runs.log
// against it.
func (d *drill) account() {
	d.t.Helper()
	d.mu.Lock()
	ids := slices.Clone(d.accepted)
	d.mu.Unlock()
	states := d.waitTerminal(ids, 3*time.Minute)
	runs := map[string][]runLine{} // dag/task → its runs, in order
	for _, r := range d.myRuns() {
		k := r.DAG + "/" + r.Task
		runs[k] = append(runs[k], r)
		if _, ok := d.workerPIDs[r.PPID]; !ok {
			d.t.Errorf("%s: a task ran in pid %d (%s), not a worker of this cluster: %s", d.prefix, r.PPID, cmdline(r.PPID), r)
		}
		if r.Fence <= 0 {
			d.t.Errorf("%s: a task ran without its leader's fence: %s", d.prefix, r)
		}
	}
	for _, id := range ids {
		st := states[id]
		if st == nil {
			d.res.lost++ // counted per DAG: it never finished
			d.t.Errorf("%s: DAG %s never became terminal", d.prefix, id)
			continue
		}
		if st.Status != "succeeded" {
			d.t.Errorf("%s: DAG %s is %s: %+v", d.prefix, id, st.Status, st.Counts)
		}
		for _, tk := range st.Tasks {
			d.res.tasks++
			k := id + "/" + tk.ID
			rs := runs[k]
			if tk.Status != "succeeded" || len(rs) == 0 {
				d.res.lost++
				d.t.Errorf("%s: task %s lost: status %s, %d runs recorded; record %s", d.prefix, k, tk.Status, len(rs), d.c.TaskRecord(id, tk.ID))
				continue
			}
			for i := 0; i+1 < len(rs); i++ {
				if at, ok := d.killedWorkers[rs[i].PPID]; ok {
					d.res.reruns++
					d.res.requeueDelay = max(d.res.requeueDelay, rs[i+1].At.Sub(at))
					continue
				}
				d.res.dups++
				d.t.Errorf("%s: task %s ran again although its worker %s (pid %d) lived:\n  %s\n  then %s\n  record %s",
					d.prefix, k, d.workerPIDs[rs[i].PPID], rs[i].PPID, rs[i], rs[i+1], d.c.TaskRecord(id, tk.ID))
			}
		}
	}
}

// waitTerminal polls until every DAG is terminal or the bound passes, and
// returns the terminal ones.
func (d *drill) waitTerminal(ids []string, bound time.Duration) map[string]*cluster.DAGState {
	out := map[string]*cluster.DAGState{}
	deadline := time.Now().Add(bound)
	for {
		pending := 0
		for _, id := range ids {
			if out[id] != nil {
				continue
			}
			st, err := d.c.DAGAny(id)
			if err == nil && st.Status != "running" {
				out[id] = st
				continue
			}
			pending++
			if err != nil && strings.Contains(err.Error(), "429") {
				time.Sleep(time.Second) // the rate limit of the flood's cluster: as its Retry-After says
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// --- the report -----------------------------------------------------------

func table(plan []fault, results []result, skipped []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %4s %6s %5s %10s %11s %12s %12s %15s\n", "fault", "runs", "tasks", "lost", "duplicated", "re-run (ok)", "max takeover", "max w-stall", "max re-queue")
	for _, f := range plan {
		var n, tasks, lost, dups, reruns int
		takeover, stall, requeue := time.Duration(-1), time.Duration(-1), time.Duration(-1)
		for _, r := range results {
			if r.fault != f.name {
				continue
			}
			n++
			tasks += r.tasks
			lost += r.lost
			dups += r.dups
			reruns += r.reruns
			takeover, stall, requeue = max(takeover, r.takeover), max(stall, r.stall), max(requeue, r.requeueDelay)
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(&b, "%-34s %4d %6d %5d %10d %11d %12s %12s %15s\n", f.name, n, tasks, lost, dups, reruns, ms(takeover), ms(stall), ms(requeue))
	}
	for _, s := range skipped {
		b.WriteString(s + "\n")
	}
	for _, r := range results {
		for _, n := range r.notes {
			b.WriteString(n + "\n")
		}
	}
	b.WriteString("takeover: fault → first committed write of a new term (quorum loss: from the members' restart); " +
		"w-stall: longest gap between accepted submissions of a 50 ms trickle (etcd faults); " +
		"re-queue: worker kill → start of the re-run")
	return b.String()
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }
