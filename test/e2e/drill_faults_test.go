package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// orion drill --fault stop, --fault etcd-member and --fault node, once
// each, against one cluster: the stopped leader hands over and follows
// again, the killed etcd member is restarted and healthy, a node loss (the
// leader and etcd's raft leader killed together) is taken over and both
// come back, no task is lost or run twice, and each drill reports its
// figure (not asserted: the machine is shared). A partition is refused
// with a pointer to make drills.
func TestDrillFaults(t *testing.T) {
	out, err := exec.Command(cluster.Bin, "drill", "--fault", "partition", "--server", "http://127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "make drills") {
		t.Fatalf("--fault partition: %v, want refused with a pointer to make drills:\n%s", err, out)
	}

	c := cluster.New(t, cluster.Options{})
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.URL)
	}
	type report struct {
		Drills []struct {
			Fault        string   `json:"fault"`
			Killed       string   `json:"killed"`
			NewLeader    string   `json:"new_leader"`
			TakeoverMS   *float64 `json:"takeover_ms"`
			StallMS      *float64 `json:"stall_ms"`
			RestartedPID int      `json:"restarted_pid"`
			Error        string   `json:"error"`
		} `json:"drills"`
		Lost       int    `json:"lost"`
		Duplicates int    `json:"duplicates"`
		OK         bool   `json:"ok"`
		Verdict    string `json:"verdict"`
	}
	run := func(name string, args ...string) report {
		t.Helper()
		stderrPath := filepath.Join(c.Dir, "drill-"+name+".stderr")
		stderr, err := os.Create(stderrPath)
		if err != nil {
			t.Fatal(err)
		}
		defer stderr.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cluster.Bin, append([]string{"drill", "--server", strings.Join(urls, ","), "--count", "1",
			"--tasks", "16", "--json", "--work-dir", filepath.Join(c.Dir, "drill-"+name)}, args...)...)
		cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
		cmd.Stderr = cluster.NewStampWriter(stderr)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 30 * time.Second
		out, runErr := cmd.Output()
		if b, err := os.ReadFile(stderrPath); err == nil {
			t.Logf("drill %s stderr:\n%s", name, b)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var rep report
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("drill %s: %v; output is not one JSON object: %v\n%s", name, runErr, err, out)
		}
		if runErr != nil || !rep.OK || rep.Lost != 0 || rep.Duplicates != 0 || len(rep.Drills) != 1 || rep.Drills[0].Error != "" {
			t.Fatalf("drill %s: %v: %+v", name, runErr, rep)
		}
		return rep
	}

	stop := run("stop", "--fault", "stop", "--stop-for", "2s")
	d := stop.Drills[0]
	if d.Fault != "stop" || d.TakeoverMS == nil || d.NewLeader == "" || d.NewLeader == d.Killed {
		t.Errorf("stop: %+v", d)
	}
	t.Logf("stop: %s stopped 2s, %s took over in %.0f ms", d.Killed, d.NewLeader, *d.TakeoverMS)
	// The stopped replica is the same process, a standby now.
	old := c.Server(d.Killed)
	if me, err := c.Self(old); err != nil || me.Role != "standby" || me.PID != old.PID() {
		t.Errorf("%s after the stop drill: %+v %v, want the same process as a standby", d.Killed, me, err)
	}

	em := run("etcd-member", "--fault", "etcd-member", "--member", "follower")
	d = em.Drills[0]
	if d.Fault != "etcd-member" || d.StallMS == nil || d.RestartedPID <= 0 || !strings.HasPrefix(d.Killed, "etcd e") {
		t.Errorf("etcd-member: %+v", d)
	}
	t.Logf("etcd-member: %s killed, write stall %.0f ms, restarted as pid %d", d.Killed, *d.StallMS, d.RestartedPID)
	// The restarted member is this cluster's: same command line, healthy.
	for pid, cmdline := range c.Strays() {
		if !strings.Contains(cmdline, " etcd ") {
			t.Errorf("pid %d in this cluster's directory is not the restarted etcd member: %s", pid, cmdline)
		}
	}

	node := run("node", "--fault", "node")
	d = node.Drills[0]
	if d.Fault != "node" || d.TakeoverMS == nil || d.StallMS == nil || d.NewLeader == "" || d.RestartedPID <= 0 ||
		!strings.Contains(d.Killed, " + etcd e") || strings.HasPrefix(d.Killed, d.NewLeader+" ") {
		t.Errorf("node: %+v", d)
	}
	t.Logf("node: %s killed, %s took over in %.0f ms, write stall %.0f ms", d.Killed, d.NewLeader, *d.TakeoverMS, *d.StallMS)
	// The replica and the member came back: every replica answers, every
	// member is healthy.
	for _, s := range c.Servers {
		if _, err := c.Self(s); err != nil {
			t.Errorf("%s after the node drill: %v", s.Name, err)
		}
	}
	for i := range c.Etcd {
		if code, body, err := c.Get(c.ClientURLs[i], "/health"); code != 200 || !strings.Contains(string(body), `"health":"true"`) {
			t.Errorf("etcd member %d after the node drill: %d %s %v", i+1, code, body, err)
		}
	}
}
