package bench

import (
	"context"
	"testing"

	"github.com/orion-sched/orion/internal/testkit"
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
	res, err := Run(context.Background(), Options{Tasks: 2000, DAGSize: 500, Chain: 50, Rate: 500,
		LatencyFor: 3e8, EtcdFor: 2e8, DataDir: t.TempDir(), ClientURL: testkit.FreeURL(t), PeerURL: testkit.FreeURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 2000 || res.TasksPerSec <= 0 || res.EtcdPutsPerSec <= 0 || res.ChainMsPerStep <= 0 || !(res.DispatchP99Ms >= res.DispatchP50Ms) {
		t.Fatalf("implausible result: %+v", res)
	}
}
