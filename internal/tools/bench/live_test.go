package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/tools/procfs"
)

// The backlog's DAGs are submissions the server takes: a root in the held
// pool and every other task waiting on it.
func TestHeldDAG(t *testing.T) {
	d := heldDAG("bench-x-live-00001", 1000)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dag.Load(b, "application/json", dag.Limits{})
	if err != nil {
		t.Fatalf("the server would refuse it: %v", err)
	}
	if len(got.Tasks) != 1000 || got.Tasks[0].ID != "hold" || got.Tasks[0].Pool != LiveHeldPool ||
		!reflect.DeepEqual(got.Tasks[0].Requires(), map[string]string{model.PoolLabel: LiveHeldPool}) {
		t.Fatalf("root: %+v", got.Tasks[0])
	}
	for _, tk := range got.Tasks[1:] {
		if tk.Pool != "" || !reflect.DeepEqual(tk.DependsOn, []string{"hold"}) {
			t.Fatalf("task %s does not wait on the root: %+v", tk.ID, tk)
		}
	}
}

func TestBacklogSizes(t *testing.T) {
	for _, c := range []struct {
		tasks, size int
		want        []int
	}{
		{999996, 1000, append(repeat(1000, 999), 996)},
		{2000, 1000, []int{1000, 1000}},
		{5, 1000, []int{5}},
		{0, 1000, nil},
	} {
		if got := backlogSizes(c.tasks, c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("backlogSizes(%d, %d) = %d DAGs, want %d", c.tasks, c.size, len(got), len(c.want))
		}
	}
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestCheckBigOptions(t *testing.T) {
	for _, ok := range [][2]int{{0, 0}, {100, 0}, {100000, 0}, {0, 1000000}, {1000, liveDrillTasks + 1}} {
		if err := checkBigOptions(ok[0], ok[1]); err != nil {
			t.Errorf("checkBigOptions(%d, %d): %v", ok[0], ok[1], err)
		}
	}
	for _, bad := range [][2]int{{-1, 0}, {50, 0}, {1050, 0}, {0, -1}, {0, liveDrillTasks}} {
		if err := checkBigOptions(bad[0], bad[1]); err == nil {
			t.Errorf("checkBigOptions(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

// Per-task RSS: each replica's growth over the backlog, the leader's and
// the standby that grew most; a replica read once is named, not guessed.
func TestLiveMemoryFigures(t *testing.T) {
	mb := int64(1 << 20)
	procs := []replicaProc{{name: "n1", role: "leader"}, {name: "n2", role: "standby"}, {name: "n3", role: "standby"}, {name: "n4", role: "standby"}}
	before := map[string]procfs.Memory{"n1": {RSS: 100 * mb}, "n2": {RSS: 100 * mb}, "n3": {RSS: 100 * mb}, "n4": {RSS: 100 * mb}}
	after := map[string]procfs.Memory{"n1": {RSS: 1100 * mb}, "n2": {RSS: 900 * mb}, "n3": {RSS: 1000 * mb}}
	lv := &Live{BacklogTasks: 1 << 20}
	lv.memoryFigures(procs, before, after)
	if lv.LeaderRSSBytesPerTask == nil || *lv.LeaderRSSBytesPerTask != 1000 || lv.StandbyRSSBytesPerTask == nil ||
		*lv.StandbyRSSBytesPerTask != 900 || len(lv.Replicas) != 3 || len(lv.Notes) != 1 || !strings.Contains(lv.Notes[0], "n4") {
		t.Fatalf("%+v", lv)
	}
	var out strings.Builder
	lv.print(&out)
	for _, want := range []string{"leader RSS per live task\t1000 bytes", "standby RSS per live task\t900 bytes", "cold load", "takeover at"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	raw, err := json.Marshal(&ClusterResult{Live: lv})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"leader_rss_bytes_per_task", "standby_rss_bytes_per_task", "etcd_bytes_per_task", "takeover_p99_ms", "cold_load_p50_ms", `"big_dag":null`} {
		if !strings.Contains(string(raw), k) {
			t.Errorf("--json lacks %s: %s", k, raw)
		}
	}
}

// A backlog the cluster's max_live_tasks cannot take is refused before
// anything is submitted, naming the setting; one that fits goes ahead.
func TestCheckLiveRoom(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "orion_live_tasks 1000")
		fmt.Fprintln(w, `orion_admission_limit{limit="max_live_dags"} 10000`)
		fmt.Fprintln(w, `orion_admission_limit{limit="max_live_tasks"} 1e+06`)
	}))
	defer srv.Close()
	r := &clusterRun{tr: http.DefaultTransport.(*http.Transport).Clone(), c: client.New([]string{srv.URL}, "")}
	cl := &client.Cluster{Leader: "n1", LeaderURL: srv.URL}
	if err := r.checkLiveRoom(context.Background(), cl, 999000, 0); err != nil {
		t.Fatalf("999,000 beside 1000 live in 1,000,000: %v", err)
	}
	err := r.checkLiveRoom(context.Background(), cl, 1000000, 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "max_live_tasks") || !strings.Contains(err.Error(), "holds 1000 live tasks") {
		t.Fatalf("1,000,000 beside 1000 live: %v", err)
	}
}
