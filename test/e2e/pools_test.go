package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Worker pools on a 3+3+2 cluster whose worker w1 is labelled pool=gpu and
// w2 has no labels:
//   - a pool: gpu task submitted while only w2 is connected waits in ready,
//     and the API and `orion get dag` say why;
//   - pool: gpu tasks run only on w1, before and after a kill -9 of the
//     leader;
//   - a DAG with max_active_tasks: 2 never has more than 2 tasks running:
//     its shell tasks append start and end lines with timestamps to a
//     file, and the recorded history is checked (the kill lands while it
//     runs).
func TestWorkerPoolsAndMaxActiveTasks(t *testing.T) {
	c := cluster.Define(t, cluster.Options{})
	gpu, plain := c.Workers[0], c.Workers[1]
	gpu.Args = append(gpu.Args, "--labels", "pool=gpu")
	c.StartEtcd()
	for _, s := range c.Servers {
		s.Start()
	}
	for _, s := range c.Servers {
		c.WaitReady(s)
	}
	plain.Start()
	c.WaitFor("a leader with w2 connected", cluster.StartBound, func() (bool, string) {
		v, err := c.View(c.Servers[0])
		if err != nil {
			return false, err.Error()
		}
		return v.Leader != "" && v.ConnectedWorkers()["w2"] >= 1, fmt.Sprintf("leader %q workers %v", v.Leader, v.ConnectedWorkers())
	})

	// No gpu worker yet: the task waits and says why, on the leader.
	c.SubmitAny(map[string]any{"id": "pools-wait", "tasks": []map[string]any{
		{"id": "g", "kind": "noop", "pool": "gpu"},
		{"id": "plain", "kind": "noop"},
	}})
	leader, _ := c.Leader()
	const reason = "no connected worker has labels pool=gpu"
	c.WaitFor("pools-wait/g waiting for a gpu worker", 30*time.Second, func() (bool, string) {
		d, err := c.DAG(leader, "pools-wait")
		if err != nil {
			return false, err.Error()
		}
		g := d.Task("g")
		return g.Status == "ready" && g.Waiting == reason && d.Task("plain").Status == "succeeded",
			fmt.Sprintf("g %s (%q), plain %s", g.Status, g.Waiting, d.Task("plain").Status)
	})
	out, err := exec.Command(cluster.Bin, "--server", leader.URL, "get", "dag", "pools-wait").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "waiting: "+reason) {
		t.Fatalf("orion get dag pools-wait: %v\n%s", err, out)
	}
	t.Logf("orion get dag pools-wait:\n%s", out)

	gpu.Start()
	v := c.WaitWorkers()
	for _, w := range v.Workers {
		if strings.HasPrefix(w.ID, "w1/") && w.Labels["pool"] != "gpu" {
			t.Fatalf("the cluster view shows w1 without its labels: %+v", w)
		}
	}

	history := filepath.Join(c.Work, "limit-history.log")
	limited := map[string]any{"id": "limit-a", "max_active_tasks": 2}
	var ltasks []map[string]any
	for i := 0; i < 10; i++ {
		ltasks = append(ltasks, map[string]any{"id": fmt.Sprintf("l%02d", i), "kind": "shell",
			"command": fmt.Sprintf(`echo "start $ORION_TASK_ID $(date +%%s%%N)" >> %s; sleep 0.3; echo "end $ORION_TASK_ID $(date +%%s%%N)" >> %s`, history, history)})
	}
	limited["tasks"] = ltasks
	c.SubmitAny(limited)
	c.SubmitAny(poolDAG("pools-a", 12))

	c.WaitFor("limit-a running", 30*time.Second, func() (bool, string) {
		n := c.RunningTasks([]string{"limit-a"})
		return n > 0, fmt.Sprintf("%d running", n)
	})
	old, rep := c.Leader()
	t0 := time.Now()
	old.Kill9()
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("killed leader %s (pid %d); %s leads, first commit %v after the kill", old.Name, rep.PID, nl.Name,
		me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
	c.SubmitAny(poolDAG("pools-b", 6))
	c.Restart(old)
	c.WaitWorkers()

	ids := []string{"pools-wait", "pools-a", "pools-b", "limit-a"}
	final := c.WaitDAGs(ids, 2*time.Minute)
	perWorker := map[string]int{}
	for _, id := range ids {
		d := final[id]
		if d.Status != "succeeded" {
			t.Fatalf("%s %s", id, cluster.StatusOf(d))
		}
		full, err := c.DAGAny(id) // with every task's history
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range full.Tasks {
			workers := []string{tk.Worker}
			for _, h := range tk.History {
				workers = append(workers, h.Worker)
			}
			for _, w := range workers {
				name, _, _ := strings.Cut(w, "/")
				perWorker[id+" "+name]++
				if strings.HasPrefix(tk.ID, "g") && name != "w1" {
					t.Errorf("%s/%s requires pool=gpu but ran on %s", id, tk.ID, w)
				}
			}
		}
	}
	t.Logf("attempts per DAG and worker: %v", perWorker)

	maxRunning, intervals := concurrency(t, history)
	t.Logf("limit-a: %d task runs recorded, at most %d running at once (max_active_tasks 2)", intervals, maxRunning)
	if intervals < 10 {
		t.Fatalf("limit-a recorded %d runs; want at least 10", intervals)
	}
	if maxRunning > 2 {
		t.Fatalf("limit-a had %d tasks running at once; max_active_tasks is 2", maxRunning)
	}
}

// poolDAG is n pool: gpu shell tasks (g00...) and n tasks without labels
// (p00...), each sleeping a little so that they overlap.
func poolDAG(id string, n int) map[string]any {
	var tasks []map[string]any
	for i := 0; i < n; i++ {
		tasks = append(tasks,
			map[string]any{"id": fmt.Sprintf("g%02d", i), "kind": "shell", "command": "sleep 0.1", "pool": "gpu"},
			map[string]any{"id": fmt.Sprintf("p%02d", i), "kind": "shell", "command": "sleep 0.1"})
	}
	return map[string]any{"id": id, "tasks": tasks}
}

// concurrency reads start/end lines ("start|end TASK NANOS") and returns
// the most runs open at once and the number of runs. At equal times an end
// counts first: a task's result commits before the dispatch it frees room
// for.
func concurrency(t *testing.T, path string) (maxOpen, runs int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type ev struct {
		at    int64
		delta int
	}
	var evs []ev
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			t.Fatalf("bad history line %q", sc.Text())
		}
		at, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			t.Fatalf("bad history line %q: %v", sc.Text(), err)
		}
		switch fields[0] {
		case "start":
			evs = append(evs, ev{at, +1})
			runs++
		case "end":
			evs = append(evs, ev{at, -1})
		default:
			t.Fatalf("bad history line %q", sc.Text())
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta
	})
	open := 0
	for _, e := range evs {
		open += e.delta
		maxOpen = max(maxOpen, open)
	}
	return maxOpen, runs
}
