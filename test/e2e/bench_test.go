package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// orion bench --server --etcd-endpoints against a cluster of processes, on a
// small load: every phase runs and reports its figures, with the CPU budget
// read from each process's /metrics (the workers': from /proc, by the pid
// and host they report). The figures themselves are not
// asserted (the machine is shared): that they were measured is. The run
// deletes its DAGs at the end.
func TestClusterBench(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Bin, "bench", "--server", strings.Join(urls, ","), "--etcd-endpoints", c.Endpoints,
		"--tasks", "2000", "--dag-size", "500", "--chain", "20", "--shell-chain", "5", "--fanout", "300", "--etcd-for", "300ms", "--timeout", "2m",
		"--big-dag", "1000", "--live", "2000", "--live-kills", "1", "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("orion bench: %v\n%s\n%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res struct {
		Mode        string   `json:"mode"`
		Tasks       int      `json:"tasks"`
		TasksFailed int      `json:"tasks_failed"`
		TasksPerSec float64  `json:"tasks_per_sec"`
		Ratio4      float64  `json:"ratio_to_etcd_4_in_flight"`
		Chain       float64  `json:"chain_ms_per_step"`
		Shell       float64  `json:"shell_chain_ms_per_step"`
		FanOut      int      `json:"fanout"`
		FanOutDone  float64  `json:"fanout_done_ms"`
		WorkersCPU  *float64 `json:"workers_cpu_ms_per_shell_step"`
		BigDAG      *struct {
			AcceptMs        float64 `json:"accept_ms"`
			FirstDispatchMs float64 `json:"first_dispatch_ms"`
			Ratio           float64 `json:"ratio"`
		} `json:"big_dag"`
		Live *struct {
			BacklogTasks int `json:"backlog_tasks"`
			Replicas     []struct {
				Name      string `json:"name"`
				RSSBefore int64  `json:"rss_before_bytes"`
				RSSAfter  int64  `json:"rss_after_bytes"`
			} `json:"replicas"`
			TakeoverP50 *float64 `json:"takeover_p50_ms"`
			ColdLoadP50 *float64 `json:"cold_load_p50_ms"`
			Lost        int      `json:"lost"`
			Duplicates  int      `json:"duplicates"`
			Notes       []string `json:"notes"`
		} `json:"live"`
		CPUNotes []string `json:"cpu_notes"`
		CPU      struct {
			RawPut         *float64 `json:"raw_put_us"`
			Etcd           *float64 `json:"etcd_us"`
			Leader         *float64 `json:"leader_us"`
			Standbys       *float64 `json:"standbys_us"`
			Workers        *float64 `json:"workers_us"`
			Process        *float64 `json:"process_us"`
			RawPutsPerTask *float64 `json:"raw_puts_per_task"`
			Notes          []string `json:"notes"`
		} `json:"cpu_per_task"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not the JSON result: %v\n%s", err, out)
	}
	if res.Mode != "cluster" || res.Tasks != 2000 || res.TasksFailed != 0 || res.TasksPerSec <= 0 || res.Ratio4 <= 0 || res.Chain <= 0 || res.Shell <= 0 {
		t.Fatalf("implausible result: %+v\n%s", res, stderr.String())
	}
	if res.FanOut != 300 || res.FanOutDone <= 0 {
		t.Errorf("fan-out: %d mapped tasks done in %v ms: want 300, measured", res.FanOut, res.FanOutDone)
	}
	// --big-dag 1000: one DAG of 1000 against 100 DAGs of 10, measured.
	if b := res.BigDAG; b == nil || b.AcceptMs <= 0 || b.FirstDispatchMs <= 0 || b.Ratio <= 0 {
		t.Errorf("big DAG: %+v: want accepted, dispatched and compared", b)
	}
	// --live 2000: the backlog held (2000 less the drill DAG's 20), each
	// replica's memory read from /proc around it, a kill -9 of the leader
	// taken over, the killed replica loaded cold again, nothing lost.
	if lv := res.Live; lv == nil || lv.BacklogTasks != 1980 || len(lv.Replicas) != 3 || lv.TakeoverP50 == nil || lv.ColdLoadP50 == nil ||
		lv.Lost != 0 || lv.Duplicates != 0 {
		t.Errorf("live: %+v\n%s", lv, stderr.String())
	} else {
		for _, r := range lv.Replicas {
			if r.RSSBefore <= 0 || r.RSSAfter <= 0 {
				t.Errorf("live: replica %s's RSS not read: %+v", r.Name, r)
			}
		}
	}
	if res.WorkersCPU == nil || len(res.CPUNotes) != 0 {
		t.Errorf("shell chain: workers' CPU %v, notes %q: want measured, no notes", res.WorkersCPU, res.CPUNotes)
	}
	cpu := res.CPU
	for name, v := range map[string]*float64{"raw_put_us": cpu.RawPut, "etcd_us": cpu.Etcd, "leader_us": cpu.Leader,
		"standbys_us": cpu.Standbys, "workers_us": cpu.Workers, "raw_puts_per_task": cpu.RawPutsPerTask} {
		if v == nil {
			t.Errorf("cpu_per_task.%s not measured (notes: %v)", name, cpu.Notes)
		}
	}
	// 2000 tasks cost the etcd members and the leader tens of ms of CPU,
	// above the counters' 10 ms resolution, as do the baseline's puts; the
	// standbys' and workers' share may round to nothing.
	for name, v := range map[string]*float64{"raw_put_us": cpu.RawPut, "etcd_us": cpu.Etcd, "leader_us": cpu.Leader} {
		if v != nil && *v <= 0 {
			t.Errorf("cpu_per_task.%s = %v: want above zero", name, *v)
		}
	}
	if cpu.Process != nil {
		t.Errorf("cpu_per_task.process_us = %v on a cluster: it is the single node's figure", *cpu.Process)
	}
	if len(cpu.Notes) != 0 {
		t.Errorf("notes %q: want none (every process runs on this host)", cpu.Notes)
	}
	// The run deleted its DAGs once measured: the cluster is as it was.
	var list struct {
		DAGs []struct{ ID string } `json:"dags"`
	}
	if err := c.GetJSON(urls[0], "/api/v1/dags", &list); err != nil || len(list.DAGs) != 0 {
		t.Errorf("DAGs left after the bench: %v %v\n%s", list.DAGs, err, stderr.String())
	}
	// 4 throughput DAGs, the chain, the shell chain, the outputs chain and
	// its plain comparison, the fan-out; the big DAG and its 100; the 4
	// DAGs of the live backlog and the drill's.
	if !strings.Contains(stderr.String(), "deleted the run's 115 DAGs") {
		t.Errorf("the log does not say the DAGs were deleted:\n%s", stderr.String())
	}
}
