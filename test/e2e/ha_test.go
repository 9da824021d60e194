package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// The HA tests run one cluster each (test/internal/cluster): 3 etcd
// members, 3 zero-slot replicas and 2 workers with 4 slots. They run one
// after the other: two such clusters at once overload a 2-core machine and
// turn 1 s leases into spurious failovers. None of them asserts a duration;
// takeover times are logged.

// kill -9 the leader five times while DAGs run, restarting it each time.
// Every DAG succeeds, the leader changes at each kill, and since no worker
// died no task runs twice.
func TestKillLeaderRepeatedly(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	var load cluster.TaskLoad
	c.SubmitTaskDAGs(&load, "kl", 4)

	const kills = 5
	var takeovers []time.Duration
	for k := 1; k <= kills; k++ {
		// The kill must land mid-run: top the work up when little is left,
		// then wait until some task is running.
		if c.UnfinishedTasks(load.Order) < 24 {
			c.SubmitTaskDAGs(&load, "kl", 2)
		}
		c.WaitFor(fmt.Sprintf("kill %d: a task running", k), 30*time.Second, func() (bool, string) {
			n := c.RunningTasks(load.Order)
			return n > 0, fmt.Sprintf("%d tasks running", n)
		})

		old, rep := c.Leader()
		t0 := time.Now()
		old.Kill9()
		nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
		if nl.Name == old.Name {
			t.Fatalf("kill %d: the leader did not change (%s)", k, nl.Name)
		}
		takeover := me.FirstCommitAt.Sub(t0)
		takeovers = append(takeovers, takeover)
		t.Logf("kill %d: killed leader %s (pid %d); %s leads, first commit %v after the kill (won %v after), seen %v after",
			k, old.Name, rep.PID, nl.Name, takeover.Round(time.Millisecond), me.LeaderSince.Sub(t0).Round(time.Millisecond),
			time.Since(t0).Round(time.Millisecond))

		c.Restart(old)
		c.WaitWorkers()
	}
	t.Logf("takeovers (first commit − kill): %v", takeovers)

	c.CheckTaskLoad(&load, 2*time.Minute)
}

// SIGSTOP the leader while DAGs run: a standby takes over; after SIGCONT the
// old leader finds its lease gone or its write fenced, steps down and
// reports itself a standby. Every DAG succeeds and no task runs twice.
func TestSigstopLeader(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	var load cluster.TaskLoad
	c.SubmitTaskDAGs(&load, "ss", 4)
	c.WaitFor("a task running", 30*time.Second, func() (bool, string) {
		n := c.RunningTasks(load.Order)
		return n > 0, fmt.Sprintf("%d tasks running", n)
	})

	old, rep := c.Leader()
	logBefore, _ := os.ReadFile(old.LogPath)
	t0 := time.Now()
	old.Signal(syscall.SIGSTOP) // stop() sends SIGCONT first, should the test end here
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("stopped leader %s (pid %d); %s leads, first commit %v after SIGSTOP",
		old.Name, rep.PID, nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
	// The old leader stays frozen until both workers have found the new
	// one: a frozen (not dead) leader must not keep them from following
	// the new leader, and it then wakes up behind the log.
	c.WaitFor("the new leader's workers", 30*time.Second, func() (bool, string) {
		v, err := c.View(nl)
		if err != nil {
			return false, err.Error()
		}
		ws := v.ConnectedWorkers()
		return v.Leader == nl.Name && ws["w1"] >= 1 && ws["w2"] >= 1, fmt.Sprintf("leader %q workers %v", v.Leader, ws)
	})

	old.Signal(syscall.SIGCONT)
	t1 := time.Now()
	c.WaitFor(old.Name+" reports itself standby after SIGCONT", 30*time.Second, func() (bool, string) {
		c.MustRun(old.Proc)
		me, err := c.Self(old)
		return err == nil && me.Role == "standby", fmt.Sprintf("%+v %v", me, err)
	})
	t.Logf("%s reports standby %v after SIGCONT", old.Name, time.Since(t1).Round(time.Millisecond))
	c.WaitFor(old.Name+" logs that it stepped down", 10*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(old.LogPath)
		for _, l := range strings.Split(string(b[min(len(logBefore), len(b)):]), "\n") {
			if strings.Contains(l, "stepping down") {
				t.Logf("%s: %s", old.Name, l)
				return true, ""
			}
		}
		return false, "no \"stepping down\" in " + old.LogPath + " since SIGSTOP"
	})
	if v, err := c.View(old); err != nil || v.Leader != nl.Name {
		t.Errorf("after SIGCONT %s names the leader %q (%v), want %s", old.Name, leaderOf(v), err, nl.Name)
	}

	c.CheckTaskLoad(&load, 2*time.Minute)
}

// A worker given one replica's address (as a Kubernetes Service that maps to
// one pod gives it) follows the leader to a replica that registered after
// the worker connected, when the given replica is SIGTERMed. This is how
// the chart's fidelity test once stalled: the workers' first cluster answer
// named no other replica, so with the given one gone they knew nowhere to
// ask, and the new leader had no workers. The leader's peer list (the
// replica registry, sent on every change) is what they follow now.
func TestWorkerGivenOneReplicaFindsTheNextLeader(t *testing.T) {
	c := cluster.Define(t, cluster.Options{})
	n1 := c.Servers[0]
	for _, w := range c.Workers {
		for i, a := range w.Args {
			if a == "--server" {
				w.Args[i+1] = n1.URL
			}
		}
	}
	c.StartEtcd()
	n1.Start()
	c.WaitReady(n1)
	for _, w := range c.Workers {
		w.Start()
	}
	c.WaitFor("both workers on n1", cluster.StartBound, func() (bool, string) {
		v, err := c.View(n1)
		if err != nil {
			return false, err.Error()
		}
		ws := v.ConnectedWorkers()
		return v.Leader == "n1" && ws["w1"] == 1 && ws["w2"] == 1, fmt.Sprintf("leader %q workers %v", v.Leader, ws)
	})
	for _, s := range c.Servers[1:] { // they register after the workers joined
		s.Start()
		c.WaitReady(s)
	}
	d1, tasks1 := cluster.TaskDAG("before", c.Work)
	c.Submit(n1.URL, d1)
	c.WaitDAGs([]string{"before"}, time.Minute)

	t0 := time.Now()
	n1.Signal(syscall.SIGTERM)
	if !n1.Wait(cluster.StopGrace) {
		t.Fatalf("n1 did not exit within %v of SIGTERM", cluster.StopGrace)
	}
	v := c.WaitWorkers()
	t.Logf("n1 stopped; %s leads with both workers connected %v after SIGTERM", v.Leader,
		time.Since(t0).Round(time.Millisecond))
	d2, tasks2 := cluster.TaskDAG("after", c.Work)
	c.SubmitAny(d2)
	states := c.WaitDAGs([]string{"before", "after"}, time.Minute)
	for id, d := range states {
		if d.Status != "succeeded" {
			t.Errorf("DAG %s %s: %+v", id, d.Status, d.Tasks)
		}
	}
	c.CheckRanOnce(map[string][]string{"before": tasks1, "after": tasks2})
}

func leaderOf(v *cluster.View) string {
	if v == nil {
		return ""
	}
	return v.Leader
}

// Any replica answers: a write sent to a standby is forwarded to the
// leader, reads are served by every replica from its own state, the CLI and
// etcdctl agree on the leader, and the DAG history outlives every replica.
func TestAnyReplicaAnswers(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	leader, _ := c.Leader()
	var standby *cluster.Server
	for _, s := range c.Servers {
		if s != leader {
			standby = s
			break
		}
	}

	// A submission to a standby is forwarded: 201 from the leader.
	d, _ := cluster.TaskDAG("any-1", c.Work)
	body, _ := json.Marshal(d)
	code, out, hdr, err := c.Do("POST", standby.URL, "/api/v1/dags", "application/json", body)
	if code != 201 {
		t.Fatalf("POST to standby %s: %d %s %v", standby.Name, code, out, err)
	}
	t.Logf("POST to standby %s: %d, X-Orion-Leader %q, X-Orion-Revision %q", standby.Name, code,
		hdr.Get("X-Orion-Leader"), hdr.Get("X-Orion-Revision"))
	// Read-your-writes: the standby answered once it had applied the
	// write, so a read from it right after shows the DAG.
	rev, _ := strconv.ParseInt(hdr.Get("X-Orion-Revision"), 10, 64)
	if rev <= 0 {
		t.Errorf("the forwarded submission's answer has no X-Orion-Revision: %v", hdr)
	}
	if got, err := c.DAG(standby, "any-1"); err != nil || got.Revision < rev {
		t.Fatalf("GET any-1 from standby %s right after submitting through it: %+v %v (want revision >= %d)", standby.Name, got, err, rev)
	}
	c.WaitEverywhere("any-1", "succeeded", 60*time.Second)

	// Cancel and retry through a standby. The first run of slow creates a
	// marker and sleeps; the retry finds the marker and succeeds.
	marker := filepath.Join(c.Work, "slow.marker")
	c.Submit(standby.URL, map[string]any{"id": "any-2", "tasks": []map[string]any{
		{"id": "slow", "command": fmt.Sprintf(`if [ -e %[1]s ]; then echo again; else touch %[1]s; sleep 60; fi`, marker)},
		{"id": "after", "kind": "noop", "depends_on": []string{"slow"}},
	}})
	c.WaitFor("any-2/slow running", 30*time.Second, func() (bool, string) {
		d, err := c.DAG(leader, "any-2")
		if err != nil {
			return false, err.Error()
		}
		_, statErr := os.Stat(marker)
		return d.Task("slow").Status == "running" && statErr == nil, cluster.StatusOf(d)
	})
	for _, op := range []struct{ verb, want string }{{"cancel", "cancelled"}, {"retry", "succeeded"}} {
		code, out, _, err := c.Do("POST", standby.URL, "/api/v1/dags/any-2/"+op.verb, "", nil)
		// A cancelled DAG whose task is still being stopped on its worker
		// (the kill and its result take a moment) refuses a retry with 409
		// "try again", as a client is told to: do so, bounded.
		for deadline := time.Now().Add(30 * time.Second); op.verb == "retry" && code == 409 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			code, out, _, err = c.Do("POST", standby.URL, "/api/v1/dags/any-2/"+op.verb, "", nil)
		}
		if code != 200 {
			t.Fatalf("%s any-2 through standby %s: %d %s %v", op.verb, standby.Name, code, out, err)
		}
		// The standby shows its client's write at once.
		if d, err := c.DAG(standby, "any-2"); err != nil || (op.verb == "cancel" && d.Status != "cancelled") || (op.verb == "retry" && d.Run != 2) {
			t.Errorf("any-2 on standby %s right after %s through it: %+v %v", standby.Name, op.verb, d, err)
		}
		c.WaitEverywhere("any-2", op.want, 60*time.Second)
	}
	if d, _ := c.DAG(standby, "any-2"); d == nil || d.Run != 2 || d.Task("slow").Attempts < 2 {
		t.Errorf("any-2 after retry: %+v", d)
	}

	// A finished DAG deleted through a standby: forwarded to the leader,
	// gone at once on that standby and soon on every replica (the restart
	// below checks that it stays gone).
	c.Submit(standby.URL, map[string]any{"id": "gone-1", "tasks": []map[string]any{{"id": "a", "kind": "noop"}}})
	c.WaitEverywhere("gone-1", "succeeded", 30*time.Second)
	if code, out, _, err := c.Do("DELETE", standby.URL, "/api/v1/dags/gone-1", "", nil); code != 200 {
		t.Fatalf("DELETE gone-1 through standby %s: %d %s %v", standby.Name, code, out, err)
	}
	if code, body, _ := c.Get(standby.URL, "/api/v1/dags/gone-1"); code != 404 {
		t.Errorf("standby %s right after the delete through it: %d %s", standby.Name, code, body)
	}
	c.WaitFor("gone-1 gone on every replica", 30*time.Second, func() (bool, string) {
		var why []string
		for _, s := range c.Servers {
			if code, _, err := c.Get(s.URL, "/api/v1/dags/gone-1"); code != 404 {
				why = append(why, fmt.Sprintf("%s: %d %v", s.Name, code, err))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})

	// orion cluster through a standby.
	outCLI, err := exec.Command(cluster.Bin, "cluster", "--server", standby.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("orion cluster --server %s: %v\n%s", standby.URL, err, outCLI)
	}
	checkClusterOutput(t, string(outCLI), leader.Name)

	// etcdctl agrees on the leader.
	if _, err := exec.LookPath("etcdctl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Errorf("etcdctl not found (apt-get install etcd-client): %v", err)
		} else {
			t.Logf("etcdctl not found: skipping the election check")
		}
	} else {
		got := etcdctlLeader(t, c.Endpoints)
		t.Logf("etcdctl elect -l /orion/v1/election: %s", got)
		if got != leader.Name {
			t.Errorf("etcdctl elect -l names %q, the cluster endpoint %q", got, leader.Name)
		}
	}

	// Every replica stopped gracefully: nothing answers.
	for _, s := range c.Servers {
		s.Signal(syscall.SIGTERM)
	}
	for _, s := range c.Servers {
		if !s.Wait(20 * time.Second) {
			t.Fatalf("%s still running 20s after SIGTERM", s.Name)
		}
		if err := s.ExitErr(); err != nil {
			t.Errorf("%s exited with %v after SIGTERM", s.Name, err)
		}
	}
	for _, s := range c.Servers {
		if code, _, err := c.Get(s.URL, "/api/v1/cluster"); err == nil {
			t.Errorf("%s still answers (%d) after it stopped", s.Name, code)
		}
	}

	// One replica alone leads, and the history is still there.
	lone := c.Servers[2]
	c.Restart(lone)
	c.WaitFor(lone.Name+" leads alone", 30*time.Second, func() (bool, string) {
		me, err := c.Self(lone)
		return err == nil && me.Role == "leader" && me.FirstCommitAt != nil, fmt.Sprintf("%+v %v", me, err)
	})
	var list struct {
		DAGs []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"dags"`
	}
	if err := c.GetJSON(lone.URL, "/api/v1/dags", &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range list.DAGs {
		got[d.ID] = d.Status
	}
	if len(got) != 2 || got["any-1"] != "succeeded" || got["any-2"] != "succeeded" {
		t.Errorf("after a restart of %s alone the DAGs are %v, want any-1 and any-2 succeeded", lone.Name, got)
	}
	if d, err := c.DAG(lone, "any-1"); err != nil || d.Status != "succeeded" || len(d.Tasks) != 12 {
		t.Errorf("any-1 on %s after the restart: %+v %v", lone.Name, d, err)
	}
}

// checkClusterOutput checks `orion cluster`'s table: the leader named, three
// replicas (one leading, two standbys), two standalone workers.
func checkClusterOutput(t *testing.T, out, leader string) {
	t.Helper()
	section := ""
	replicas := map[string]string{}
	workers := map[string]bool{}
	leaderLine := ""
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 0:
			section = ""
		case strings.HasPrefix(l, "Leader:"):
			leaderLine = l
		case l == "Replicas:" || l == "Workers:":
			section = l
		case section == "Replicas:" && f[0] != "NAME" && len(f) > 1:
			replicas[f[0]] = f[1]
		case section == "Workers:" && f[0] != "ID" && len(f) == 7 && f[4] == "-":
			// ID SLOTS BUSY CONNECTED REPLICA HOST LABELS: a replica's own
			// stream is listed too, with the replica named in its column;
			// standalone workers have "-", and run on this host.
			workers[f[0]] = true
			if host, _ := os.Hostname(); f[5] != host {
				t.Errorf("orion cluster: worker %s on host %q, want %q\n%s", f[0], f[5], host, out)
			}
		}
	}
	if f := strings.Fields(leaderLine); len(f) < 2 || f[1] != leader {
		t.Errorf("orion cluster: leader line %q, want %s\n%s", leaderLine, leader, out)
	}
	if len(replicas) != 3 || replicas[leader] != "leader" {
		t.Errorf("orion cluster: replicas %v, want 3 with %s leading\n%s", replicas, leader, out)
	}
	for name, role := range replicas {
		if name != leader && role != "standby" {
			t.Errorf("orion cluster: replica %s is %s, want standby\n%s", name, role, out)
		}
	}
	names := map[string]int{}
	for id := range workers {
		n, _, _ := strings.Cut(id, "/")
		names[n]++
	}
	if len(workers) != 2 || names["w1"] != 1 || names["w2"] != 1 {
		t.Errorf("orion cluster: workers %v, want w1 and w2\n%s", workers, out)
	}
}

// etcdctlLeader runs `etcdctl elect -l` (which keeps listening) until it
// prints the leader's value, within a bound.
func etcdctlLeader(t *testing.T, endpoints string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "etcdctl", "--endpoints", endpoints, "elect", "-l", "/orion/v1/election")
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.WaitDelay = 2 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdctl: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// It prints the leader's key, then its value.
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		seen = append(seen, l)
		if strings.HasPrefix(l, "/orion/v1/election/") {
			if sc.Scan() {
				return strings.TrimSpace(sc.Text())
			}
		}
	}
	t.Errorf("etcdctl elect -l printed no leader: %q (stderr %s)", seen, stderr.String())
	return ""
}

// orion drill kill-leader against the cluster: three drills, nothing lost
// or run twice, every takeover measured.
func TestDrillCommand(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.URL)
	}
	work := filepath.Join(c.Dir, "drill")
	stderrPath := filepath.Join(c.Dir, "drill.stderr")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Bin, "drill", "kill-leader", "--server", strings.Join(urls, ","),
		"--count", "3", "--json", "--work-dir", work, "--restart", "auto")
	cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	cmd.Stderr = cluster.NewStampWriter(stderr)
	// On timeout the drill is interrupted (it then restarts the replica it
	// killed and reports); SIGKILL only if that does not end it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	began := time.Now()
	out, runErr := cmd.Output()
	took := time.Since(began)
	// The drill's progress (per-drill Lines, time-stamped) is worth
	// seeing whether it passes or not.
	if b, err := os.ReadFile(stderrPath); err == nil {
		t.Logf("drill stderr:\n%s", b)
	}
	if runErr != nil || ctx.Err() != nil {
		t.Fatalf("orion drill kill-leader (%v): %v (context: %v)\n%s", took.Round(time.Millisecond), runErr, ctx.Err(), out)
	}

	// The drill restarted each killed replica itself (detached, with the
	// same command line): those processes run in this cluster's directory.
	strays := c.Strays()
	for pid, cmdline := range strays {
		same := false
		for _, s := range c.Servers {
			same = same || cmdline == strings.Join(append([]string{cluster.Bin}, s.Args...), " ")
		}
		if !same {
			t.Errorf("pid %d in this cluster's directory is not a replica restarted with its own command line: %s", pid, cmdline)
		}
		t.Logf("replica restarted by the drill: pid %d: %s", pid, cmdline)
	}

	outLines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var rep struct {
		Drills []struct {
			N            int      `json:"n"`
			Killed       string   `json:"killed"`
			KilledPID    int      `json:"killed_pid"`
			NewLeader    string   `json:"new_leader"`
			TakeoverMS   *float64 `json:"takeover_ms"`
			ObservedMS   *float64 `json:"observed_ms"`
			Lost         int      `json:"lost"`
			Duplicates   int      `json:"duplicates"`
			RestartedPID int      `json:"restarted_pid"`
			ReadyMS      *float64 `json:"ready_ms"`
			Error        string   `json:"error"`
		} `json:"drills"`
		TakeoverP50MS *float64 `json:"takeover_p50_ms"`
		TakeoverMaxMS *float64 `json:"takeover_max_ms"`
		Lost          int      `json:"lost"`
		Duplicates    int      `json:"duplicates"`
		Reruns        int      `json:"reruns_after_killed_worker"`
		Failures      int      `json:"failures"`
		OK            bool     `json:"ok"`
		Verdict       string   `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(outLines[len(outLines)-1]), &rep); err != nil {
		t.Fatalf("drill output is not one JSON object: %v\n%s", err, out)
	}
	t.Logf("drill: %v, verdict %q, takeover p50 %s max %s ms", took.Round(time.Millisecond), rep.Verdict, fmtMS(rep.TakeoverP50MS), fmtMS(rep.TakeoverMaxMS))
	for _, d := range rep.Drills {
		t.Logf("drill %d: killed %s (pid %d), %s leads, takeover %s ms (observed %s ms), restarted as pid %d, lost %d, duplicates %d %s",
			d.N, d.Killed, d.KilledPID, d.NewLeader, fmtMS(d.TakeoverMS), fmtMS(d.ObservedMS), d.RestartedPID, d.Lost, d.Duplicates, d.Error)
		if d.NewLeader == "" || d.NewLeader == d.Killed {
			t.Errorf("drill %d: new leader %q after killing %s", d.N, d.NewLeader, d.Killed)
		}
		if d.KilledPID <= 0 || c.Server(d.Killed) == nil {
			t.Errorf("drill %d killed %s pid %d: not a replica of this cluster", d.N, d.Killed, d.KilledPID)
		}
		// The restarted replica's cold start, to its /readyz.
		if d.ReadyMS == nil || *d.ReadyMS <= 0 {
			t.Errorf("drill %d: the restarted %s's cold start not measured: %v", d.N, d.Killed, d.ReadyMS)
		}
	}
	if len(rep.Drills) != 3 || rep.Lost != 0 || rep.Duplicates != 0 || rep.Failures != 0 || !rep.OK {
		t.Errorf("drill: %d drills, lost %d, duplicates %d, failures %d, ok %v: %s\n%s",
			len(rep.Drills), rep.Lost, rep.Duplicates, rep.Failures, rep.OK, rep.Verdict, out)
	}

	// The cluster is whole again: three replicas answer, one leads.
	c.WaitFor("three replicas after the drill", 30*time.Second, func() (bool, string) {
		v, err := c.View(c.Servers[0])
		if err != nil {
			for _, s := range c.Servers[1:] {
				if v, err = c.View(s); err == nil {
					break
				}
			}
		}
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, r := range v.Replicas {
			if r.Reachable && (r.Role == "leader" || r.Role == "standby") {
				n++
			}
		}
		return n == 3 && v.Leader != "", fmt.Sprintf("leader %q replicas %+v", v.Leader, v.Replicas)
	})
}

func fmtMS(v *float64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}

// A standby paused (SIGSTOP) for longer than the stream's stale timeout finds,
// once resumed, its stream to the leader gone (the leader's hub dropped it
// as stale) and suspects the leader. It asks the leader, which answers, and
// deposes nobody: three pauses of 3 s leave the leader's term unchanged, and
// the DAGs running meanwhile finish with every task run once.
func TestStandbyPausesDeposeNobody(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	leader, _ := c.Leader()
	term, err := c.Self(leader)
	if err != nil || term.LeaderSince == nil {
		t.Fatalf("leader %s: %+v %v", leader.Name, term, err)
	}
	var standby *cluster.Server
	for _, s := range c.Servers {
		if s != leader {
			standby = s
			break
		}
	}
	var load cluster.TaskLoad
	c.SubmitTaskDAGs(&load, "pause", 3)
	logBefore, _ := os.ReadFile(standby.LogPath)
	for i := 1; i <= 3; i++ {
		standby.Signal(syscall.SIGSTOP) // stop() sends SIGCONT first, should the test end here
		time.Sleep(3 * time.Second)     // the fault itself: a pause longer than every stale timeout
		standby.Signal(syscall.SIGCONT)
		c.WaitFor(fmt.Sprintf("%s back as a standby after pause %d", standby.Name, i), 30*time.Second, func() (bool, string) {
			me, err := c.Self(standby)
			v, verr := c.View(standby)
			ok := err == nil && verr == nil && me.Role == "standby" && v.Leader == leader.Name
			return ok, fmt.Sprintf("%+v %v; view %+v %v", me, err, v, verr)
		})
		now, err := c.Self(leader)
		if err != nil || now.Role != "leader" || now.LeaderSince == nil || !now.LeaderSince.Equal(*term.LeaderSince) {
			t.Fatalf("after pause %d of %s: leader %s reports %+v (%v); want its term since %v unchanged",
				i, standby.Name, leader.Name, now, err, term.LeaderSince)
		}
	}
	// The pauses did make the standby suspect the leader: the check this
	// test is about ran, and found the leader answering.
	b, _ := os.ReadFile(standby.LogPath)
	if !strings.Contains(string(b[min(len(logBefore), len(b)):]), "the leader answers; not deposing it") {
		t.Errorf("%s never suspected the leader across 3 pauses (no \"the leader answers\" in %s): the test proves nothing", standby.Name, standby.LogPath)
	}
	c.CheckTaskLoad(&load, 2*time.Minute)
}

// SIGTERM to a leader hands leadership over before its API drains: with an
// event stream open on it, its HTTP server waits up to 5 s for that stream
// while shutting down, and all that time the cluster must take writes.
// Before the leader resigned first, writes through the other replicas were
// refused until the old process had drained and exited.
func TestGracefulLeaderHandsOverBeforeDraining(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	old, _ := c.Leader()

	// An event stream on the leader: its server's Shutdown waits for it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", old.URL+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("event stream: %d", resp.StatusCode)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("event stream: %v", err)
	}

	t0 := time.Now()
	old.Signal(syscall.SIGTERM)
	var other *cluster.Server
	for _, s := range c.Servers {
		if s != old {
			other = s
			break
		}
	}
	c.Submit(other.URL, map[string]any{"id": "handover", "tasks": []map[string]any{{"id": "a", "type": "noop"}}})
	accepted := time.Since(t0)
	if !old.Running() {
		t.Fatalf("a write was accepted only %v after SIGTERM, once the old leader %s had exited: it did not hand leadership over before draining", accepted, old.Name)
	}
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("SIGTERM to leader %s: %s leads (first commit %v after the signal); a write through %s accepted %v after it, while %s drained",
		old.Name, nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond), other.Name, accepted.Round(time.Millisecond), old.Name)
	c.WaitDAGs([]string{"handover"}, 30*time.Second)
	cancel()
	if !old.Wait(30 * time.Second) {
		t.Fatalf("%s still running 30 s after SIGTERM", old.Name)
	}
}
