package bench

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// BenchmarkThroughput runs the throughput phase at b.N thousand noop tasks;
// profile it with -cpuprofile to see what bounds the scheduler.
func BenchmarkThroughput(b *testing.B) {
	res, err := Run(context.Background(), Options{Tasks: 1000 * max(b.N, 20), DAGSize: 1000, Chain: 10, Rate: 500,
		LatencyFor: 1e8, EtcdFor: 5e8, DataDir: b.TempDir(), ClientURL: testkit.FreeURL(b), PeerURL: testkit.FreeURL(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.TasksPerSec, "tasks/s")
	b.ReportMetric(res.EtcdPutsPerSec, "etcd-puts/s")
	b.ReportMetric(res.RatioToEtcd, "ratio")
}

// TestSmallRun checks the benchmark's plumbing end to end on a small load.
func TestSmallRun(t *testing.T) {
	res, err := Run(context.Background(), Options{Tasks: 2000, DAGSize: 500, Chain: 50, ShellChain: 20, FanOut: 500, BigDAG: 1000, Rate: 500,
		LatencyFor: 3e8, EtcdFor: 2e8, DataDir: t.TempDir(), ClientURL: testkit.FreeURL(t), PeerURL: testkit.FreeURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 2000 || res.TasksPerSec <= 0 || res.EtcdPutsPerSec <= 0 || res.ChainMsPerStep <= 0 || !(res.DispatchP99Ms >= res.DispatchP50Ms) {
		t.Fatalf("implausible result: %+v", res)
	}
	// The shell chain and its floor: positive, and the overhead is their
	// difference (its sign is a timing, not asserted).
	if res.ShellChain != 20 || res.ShellChainMsPerStep <= 0 || res.ShellFloorMsPerStep <= 0 || res.ShellFloorCPUMsPerStep < 0 ||
		math.Abs(res.ShellOverheadMsPerStep-(res.ShellChainMsPerStep-res.ShellFloorMsPerStep)) > 1e-9 {
		t.Fatalf("implausible shell figures: %+v", res.ClusterResult)
	}
	// The outputs chain: positive, and the round trip is its difference
	// from the plain chains (its sign is a timing, not asserted).
	if res.OutputsChainMsPerStep <= 0 || res.OutputRoundTripMs == 0 {
		t.Fatalf("implausible outputs figures: %+v", res.ClusterResult)
	}
	// The fan-out: the expansion, the last dispatch and the end, in that
	// order after the producer's success.
	if res.FanOut != 500 || res.FanOutExpandMs < 0 || res.FanOutDispatchMs < res.FanOutExpandMs || res.FanOutDoneMs <= 0 ||
		res.FanOutTasksPerSec <= 0 {
		t.Fatalf("implausible fan-out figures: %+v", res.ClusterResult)
	}
	// The big DAG: accepted, its first task dispatched after that, and a
	// throughput against the same tasks split in 100 DAGs.
	if b := res.BigDAG; b == nil || b.Tasks != 1000 || b.AcceptMs <= 0 || b.FirstDispatchMs <= 0 || b.TasksPerSec <= 0 ||
		b.SplitDAGs != 100 || b.SplitDAGSize != 10 || b.SplitTasksPerSec <= 0 || b.Ratio <= 0 || res.Live != nil {
		t.Fatalf("implausible big-DAG figures: %+v, live %+v", res.BigDAG, res.Live)
	}
	if res.OrionCPUMsPerShellStep == nil || *res.OrionCPUMsPerShellStep <= 0 || !strings.Contains(res.CPUScope, "RUSAGE_SELF") {
		t.Fatalf("single node: Orion's CPU per shell step not measured: %v %q", res.OrionCPUMsPerShellStep, res.CPUScope)
	}
	// The CPU budget: the whole process per raw put and per task, and
	// none of the cluster's per-process figures.
	if c := res.CPU; c.RawPut == nil || *c.RawPut <= 0 || c.Process == nil || *c.Process <= 0 || c.RawPutsPerTask == nil ||
		c.Etcd != nil || c.Leader != nil || c.Standbys != nil {
		t.Fatalf("single node CPU budget: %+v", c)
	}
	if res.EtcdDBBytesPer1000 == nil || *res.EtcdDBBytesPer1000 <= 0 {
		t.Fatalf("etcd db per 1000 tasks: %v (%s)", res.EtcdDBBytesPer1000, res.EtcdDBNote)
	}
	// 2070 retained tasks are too few for memory per task: no figure, a reason.
	if res.RetainedTasks != 2070 || res.HeapBytesPerTask != nil || res.RSSBytesPerTask != nil || len(res.MemoryNotes) == 0 {
		t.Fatalf("memory on a tiny run: %+v", res.Memory)
	}

	// --json carries every figure, under its name, null when not measured.
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shell_chain", "shell_chain_ms_per_step", "shell_floor_ms_per_step", "shell_overhead_ms_per_step",
		"shell_floor_cpu_ms_per_step", "orion_cpu_ms_per_shell_step", "cpu_scope", "etcd_db_bytes_per_1000_tasks",
		"retained_tasks", "heap_bytes_per_task", "rss_bytes_per_task", "heap_growth_bytes", "rss_growth_bytes", "memory_notes",
		"chain_ms_per_step", "tasks_per_sec", "outputs_chain_ms_per_step", "output_round_trip_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("--json has no %q: %s", k, raw)
		}
	}
	if m["heap_bytes_per_task"] != nil || m["rss_bytes_per_task"] != nil {
		t.Errorf("memory per task on a tiny run should be null: %s", raw)
	}
	var out strings.Builder
	res.Print(&out)
	if !regexp.MustCompile(`RSS per retained task +- `).MatchString(out.String()) {
		t.Errorf("memory per task on a tiny run is printed as a figure:\n%s", out.String())
	}
	for _, want := range []string{"shell floor", "Orion adds", "Orion's CPU per shell step", "too few", "output round trip", "big DAG first dispatch"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMemoryFigures(t *testing.T) {
	mb := int64(1 << 20)
	before := memSnapshot{heap: 100 * mb, rss: 300 * mb, rssAnon: 250 * mb, rssFile: 50 * mb}
	grown := memSnapshot{heap: 160 * mb, rss: 400 * mb, rssAnon: 330 * mb, rssFile: 70 * mb}
	m := memoryFigures(before, grown, 100000)
	if m.HeapBytesPerTask == nil || *m.HeapBytesPerTask != float64(60*mb)/100000 || m.RSSBytesPerTask == nil ||
		*m.RSSBytesPerTask != float64(100*mb)/100000 || m.RSSAnonGrowthBytes != 80*mb || m.RSSFileGrowthBytes != 20*mb || len(m.MemoryNotes) != 0 {
		t.Fatalf("grown: %+v", m)
	}
	// RSS fell (memory from before the phases given back): no figure, a reason.
	shrunk := grown
	shrunk.rss = 250 * mb
	m = memoryFigures(before, shrunk, 100000)
	if m.RSSBytesPerTask != nil || m.HeapBytesPerTask == nil || len(m.MemoryNotes) != 1 || !strings.Contains(m.MemoryNotes[0], "RSS fell by 50.0 MiB") {
		t.Fatalf("shrunk: %+v", m)
	}
	if m = memoryFigures(before, grown, MinRetainedForMemory-1); m.HeapBytesPerTask != nil || m.RSSBytesPerTask != nil || len(m.MemoryNotes) != 1 {
		t.Fatalf("too few tasks: %+v", m)
	}
	var out strings.Builder
	(&Memory{RetainedTasks: 5, MemoryNotes: []string{"why"}}).print(&out)
	if !strings.Contains(out.String(), "RSS per retained task\t-\t") || strings.Contains(out.String(), "bytes\t") {
		t.Fatalf("an absent figure prints as a number: %q", out.String())
	}
}
