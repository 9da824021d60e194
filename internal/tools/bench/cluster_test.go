package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

func TestSplitURLs(t *testing.T) {
	got := SplitURLs(" 127.0.0.1:24081, http://127.0.0.1:24082/,,http://127.0.0.1:24081 ")
	want := []string{"http://127.0.0.1:24081", "http://127.0.0.1:24082"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SplitURLs = %q, want %q", got, want)
	}
	if got := SplitURLs(""); len(got) != 0 {
		t.Fatalf("SplitURLs(\"\") = %q", got)
	}
}

func TestWorkerSlots(t *testing.T) {
	cl := &client.Cluster{Workers: []client.Worker{
		{ID: "n1/1", Replica: "n1", Slots: 0, Connected: true}, // a replica that only schedules
		{ID: "w1/2", Slots: 4, Connected: true},
		{ID: "w2/3", Slots: 4, Connected: true},
		{ID: "w3/4", Slots: 64, Connected: false},
	}}
	if slots, workers := workerSlots(cl); slots != 8 || workers != 2 {
		t.Fatalf("workerSlots = %d, %d; want 8, 2", slots, workers)
	}
}

func TestPickURLAndLeaderFirst(t *testing.T) {
	urls := []string{"http://127.0.0.1:24081", "http://127.0.0.1:24082", "http://127.0.0.1:24083"}
	if got := pickURL(urls, "http://127.0.0.1:24082/"); got != urls[1] {
		t.Fatalf("pickURL = %q", got)
	}
	if got := pickURL(urls, "127.0.0.1:24083"); got != urls[2] {
		t.Fatalf("pickURL without scheme = %q", got)
	}
	for _, other := range []string{"", "http://10.0.0.1:24082", "https://127.0.0.1:24082"} {
		if got := pickURL(urls, other); got != "" {
			t.Fatalf("pickURL(%q) = %q, want none: only the given URLs are used", other, got)
		}
	}
	want := []string{urls[1], urls[0], urls[2]}
	if got := leaderFirst(urls, urls[1]); !reflect.DeepEqual(got, want) {
		t.Fatalf("leaderFirst = %q, want %q", got, want)
	}
}

func TestBodiesAreValidSubmissions(t *testing.T) {
	for _, d := range []*model.DAG{independent("bench-x-tp-0001", 1000), chain("bench-x-chain", 1000)} {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dag.Load(b, "application/json", dag.Limits{})
		if err != nil {
			t.Fatalf("%s: the server would refuse it: %v", d.ID, err)
		}
		if got.ID != d.ID || len(got.Tasks) != 1000 || got.Tasks[0].Kind != model.KindNoop || got.Tasks[999].MaxRetries != 3 {
			t.Fatalf("%s: round trip changed the DAG: %+v", d.ID, got.Tasks[999])
		}
		if len(b) > 1<<20 {
			t.Fatalf("%s: %d bytes, over the server's default body limit", d.ID, len(b))
		}
	}
}

func TestTallyAndFinishTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	list := []client.DAGSummary{
		{ID: "a", Status: "succeeded", TaskCount: 10, Counts: map[string]int{"succeeded": 10}, FinishedAt: at(5)},
		{ID: "b", Status: "failed", TaskCount: 10, Counts: map[string]int{"succeeded": 7, "failed": 3}, FinishedAt: at(7)},
		{ID: "c", Status: "running", TaskCount: 10, Counts: map[string]int{"succeeded": 2}},
		{ID: "other", Status: "succeeded", TaskCount: 10, Counts: map[string]int{"succeeded": 10}, FinishedAt: at(9)},
	}
	got := tallyDAGs(list, map[string]bool{"a": true, "b": true, "c": true, "missing": true})
	want := tally{Found: 3, Terminal: 2, Tasks: 20, Succeeded: 17, LastFinished: *at(7)}
	if got != want {
		t.Fatalf("tally = %+v, want %+v", got, want)
	}

	start, observed := t0, t0.Add(8*time.Second)
	for _, c := range []struct {
		last time.Time
		want time.Time
	}{
		{*at(7), *at(7)},        // the server's record, inside the window
		{time.Time{}, observed}, // none
		{*at(-1), observed},     // before the start: clocks disagree
		{*at(9), observed},      // after the poll that saw it: clocks disagree
	} {
		if got := finishTime(start, observed, c.last); !got.Equal(c.want) {
			t.Errorf("finishTime(last=%v) = %v, want %v", c.last, got, c.want)
		}
	}
}

const metrics0 = `# HELP orion_commit_batch_entries Log entries per commit.
# TYPE orion_commit_batch_entries histogram
orion_commit_batch_entries_bucket{le="1"} 47
orion_commit_batch_entries_bucket{le="2"} 55
orion_commit_batch_entries_bucket{le="4"} 59
orion_commit_batch_entries_bucket{le="+Inf"} 59
orion_commit_batch_entries_sum 74
orion_commit_batch_entries_count 59
orion_commit_latency_seconds_bucket{le="0.0016"} 3
orion_commit_latency_seconds_sum 0.2
orion_commit_latency_seconds_count 59
orion_other 3
`

const metrics1 = `orion_commit_batch_entries_bucket{le="1"} 57
orion_commit_batch_entries_bucket{le="2"} 70
orion_commit_batch_entries_bucket{le="4"} 89
orion_commit_batch_entries_bucket{le="+Inf"} 99
orion_commit_batch_entries_sum 874
orion_commit_batch_entries_count 99
orion_commit_latency_seconds_sum 0.6
orion_commit_latency_seconds_count 99
`

func TestCommitStatsFromMetrics(t *testing.T) {
	m0, err := parseMetrics(strings.NewReader(metrics0))
	if err != nil {
		t.Fatal(err)
	}
	m1, err := parseMetrics(strings.NewReader(metrics1))
	if err != nil {
		t.Fatal(err)
	}
	if m0.batchSum != 74 || m0.batchCount != 59 || len(m0.batchBuckets) != 4 || m0.latencyCnt != 59 {
		t.Fatalf("parsed %+v", m0)
	}
	var r ClusterResult
	r.commitStats(m0, m1, 2*time.Second)
	if r.CommitsPerSec != 20 || r.EntriesPerCommit != 20 || r.CommitLatencyMeanMs < 9.99 || r.CommitLatencyMeanMs > 10.01 {
		t.Fatalf("commit stats %+v", r)
	}
	want := []Bucket{{"1", 10}, {"2", 5}, {"4", 15}, {"+Inf", 10}}
	if !reflect.DeepEqual(r.CommitBatchEntries, want) {
		t.Fatalf("buckets %v, want %v", r.CommitBatchEntries, want)
	}
	if got := histogramLine(r.CommitBatchEntries); got != "≤1:10 ≤2:5 ≤4:15 ≤+Inf:10" {
		t.Fatalf("histogramLine = %q", got)
	}

	// The counters went down: another replica answered. No figures.
	var r2 ClusterResult
	r2.commitStats(m1, m0, time.Second)
	if r2.CommitsPerSec != 0 || r2.CommitBatchEntries != nil {
		t.Fatalf("stats across a counter reset: %+v", r2)
	}
	if _, err := parseMetrics(strings.NewReader("orion_other 1\n")); err == nil {
		t.Fatal("no error for metrics without the commit histogram")
	}
}

// fakeAPI is just enough of the API for submitAll and waitDAGs: submitted
// DAGs run for a number of listings, then succeed.
type fakeAPI struct {
	mu         sync.Mutex
	dags       []client.DAGSummary // newest first, as the server lists them
	left       map[string]int      // listings until a DAG finishes
	fullLists  int
	maxLimit   string
	submitSeen int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/dags":
		b, _ := io.ReadAll(r.Body)
		d, err := dag.Load(b, r.Header.Get("Content-Type"), dag.Limits{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.submitSeen++
		f.dags = append([]client.DAGSummary{{ID: d.ID, Status: "running", TaskCount: len(d.Tasks), Counts: map[string]int{"ready": len(d.Tasks)}}}, f.dags...)
		f.left[d.ID] = 3
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(client.SubmitResponse{ID: d.ID, Created: true, Status: "running"})
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/dags":
		status := r.URL.Query().Get("status")
		f.maxLimit = r.URL.Query().Get("limit")
		if status == "" {
			f.fullLists++
		}
		var out client.DAGList
		for i := range f.dags {
			d := &f.dags[i]
			if d.Status == "running" {
				if f.left[d.ID]--; f.left[d.ID] <= 0 {
					now := time.Now()
					d.Status, d.FinishedAt, d.Counts = "succeeded", &now, map[string]int{"succeeded": d.TaskCount}
				}
			}
			if status == "" || d.Status == status {
				out.DAGs = append(out.DAGs, *d)
			}
		}
		json.NewEncoder(w).Encode(out)
	default:
		http.NotFound(w, r)
	}
}

func TestSubmitAndWait(t *testing.T) {
	f := &fakeAPI{left: map[string]int{}, dags: []client.DAGSummary{
		{ID: "someone-else", Status: "running", TaskCount: 5, Counts: map[string]int{}},
	}}
	f.left["someone-else"] = 1 << 30
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New([]string{srv.URL}, "")

	ids := []string{"run-tp-0000", "run-tp-0001", "run-tp-0002"}
	var bodies [][]byte
	for _, id := range ids {
		b, _ := json.Marshal(independent(id, 20))
		bodies = append(bodies, b)
	}
	ctx := context.Background()
	start := time.Now()
	if err := submitAll(ctx, c, bodies, 2); err != nil {
		t.Fatal(err)
	}
	tl, end, err := waitDAGs(ctx, c, ids, start, 10*time.Second, time.Millisecond, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Terminal != 3 || tl.Tasks != 60 || tl.Succeeded != 60 || end.Before(start) || end.After(time.Now()) {
		t.Fatalf("tally %+v, end %v", tl, end)
	}
	if f.submitSeen != 3 || f.fullLists < 1 || f.maxLimit != "1000" {
		t.Fatalf("submits %d, full listings %d, limit %q", f.submitSeen, f.fullLists, f.maxLimit)
	}

	// A DAG that never finishes: the wait is bounded.
	_, _, err = waitDAGs(ctx, c, []string{"someone-else"}, time.Now(), 50*time.Millisecond, time.Millisecond, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Fatalf("err = %v, want a timeout", err)
	}

	// A refused body stops the submitters.
	if err := submitAll(ctx, c, [][]byte{[]byte(`{"tasks":`)}, 2); err == nil {
		t.Fatal("no error for a refused submission")
	}
}

func TestLeaderChecks(t *testing.T) {
	now := time.Now()
	cl := &client.Cluster{Leader: "n3", Replicas: []client.Replica{
		{Name: "n2", Role: "standby"},
		{Name: "n3", Role: "leader"},
	}}
	if hasLeader(cl) {
		t.Fatal("a leader that has not committed in its term counts")
	}
	cl.Replicas[1].FirstCommitAt = &now
	if !hasLeader(cl) {
		t.Fatal("a committed leader does not count")
	}
	if hasLeader(&client.Cluster{Replicas: cl.Replicas}) {
		t.Fatal("no leader named, yet one counts")
	}

	var r ClusterResult
	var log strings.Builder
	if !r.noteLeader(&log, "throughput", "n2", "n2") || len(r.LeaderChanges) != 0 || log.Len() != 0 {
		t.Fatal("a steady leader was noted as a change")
	}
	if r.noteLeader(&log, "raw etcd", "n2", "n3") || !reflect.DeepEqual(r.LeaderChanges, []string{"raw etcd: n2 → n3"}) ||
		!strings.Contains(log.String(), "WARNING") {
		t.Fatalf("change not noted: %q, %q", r.LeaderChanges, log.String())
	}
}

// TestEtcdCeilingsCleanUp runs both raw etcd phases briefly on an embedded
// member and checks that only the bench's keys are deleted, in chunks.
func TestEtcdCeilingsCleanUp(t *testing.T) {
	ctx := context.Background()
	_, cli := etcdtest.Start(t)
	for _, k := range []string{"/orion/v1/keep", "/orion-benchmark", "/orion-bench"} {
		if _, err := cli.Put(ctx, k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	probes := 0
	ce, err := etcdCeilings(ctx, cli, 200*time.Millisecond, func() cpuProbe {
		probes++
		return cpuProbe{self: time.Duration(probes)}
	})
	if err != nil || ce.seq <= 0 || ce.par <= 0 || ce.puts4 <= 0 {
		t.Fatalf("etcdCeilings = %+v, %v", ce, err)
	}
	if probes != 2 || ce.before.self != 1 || ce.after.self != 2 {
		t.Fatalf("probes around the 4-in-flight phase: %d, before %v, after %v; want 2, the first before", probes, ce.before.self, ce.after.self)
	}
	if n, err := cli.Get(ctx, "/orion-bench/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		t.Fatalf("bench keys left: %v, %v", n, err)
	}
	if n, err := cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 3 {
		t.Fatalf("other keys: %v, %v; want the 3 put before", n, err)
	}
	// More keys than one chunk, written directly.
	for i := 0; i < 3*deleteChunk+7; i += 128 {
		ops := []clientv3.Op{}
		for j := i; j < min(i+128, 3*deleteChunk+7); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/orion-bench/x/%d", j), "v"))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := deleteInChunks(ctx, cli, "/orion-bench/"); err != nil {
		t.Fatal(err)
	}
	if n, err := cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 3 {
		t.Fatalf("after deleteInChunks: %v, %v", n, err)
	}

	// deleteWritten alone, without the sweep: a writer's numbered keys,
	// more than a chunk and not a multiple of it, and another's fewer than a
	// chunk, all deleted; a key beside them that is not numbered stays.
	counts := map[string]int{writerPrefix(4, 0): 2*deleteChunk + 77, writerPrefix(4, 3): 5}
	for p, n := range counts {
		for i := 0; i < n; i += 128 {
			ops := []clientv3.Op{}
			for j := i; j < min(i+128, n); j++ {
				ops = append(ops, clientv3.OpPut(numbered(p, j), "v"))
			}
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cli.Put(ctx, writerPrefix(4, 0)+"other", "v"); err != nil {
		t.Fatal(err)
	}
	if err := deleteWritten(ctx, cli, 1, 4); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/orion-bench/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != writerPrefix(4, 0)+"other" {
		t.Fatalf("after deleteWritten: %v, %v; want only %sother", resp.Kvs, err, writerPrefix(4, 0))
	}
}

func TestDBPer1000(t *testing.T) {
	before := map[string]int64{"a": 1000, "b": 1100}
	v, note := dbPer1000(before, map[string]int64{"a": 3000, "b": 3500}, nil, 4000)
	if v == nil || *v != 600 || note != "" { // the largest member's growth, 2400 bytes, per 1000 of 4000 tasks
		t.Fatalf("grown: %v %q", v, note)
	}
	if v, note := dbPer1000(before, map[string]int64{"a": 3000, "b": 900}, nil, 4000); v != nil || !strings.Contains(note, "compaction") {
		t.Fatalf("fell: %v %q", v, note)
	}
	if v, note := dbPer1000(before, before, errors.New("member down"), 4000); v != nil || !strings.Contains(note, "member down") {
		t.Fatalf("error: %v %q", v, note)
	}
	if v, _ := dbPer1000(before, before, nil, 4000); v != nil {
		t.Fatalf("no growth: %v", *v)
	}
}

func TestScrapeCPU(t *testing.T) {
	var calls int
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total_x 99\nprocess_cpu_seconds_total %.2f\n", 1.5+float64(calls))
	}))
	defer ok.Close()
	none := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "go_goroutines 3") }))
	defer none.Close()
	urls := []string{ok.URL, none.URL}
	s0, errs := scrapeCPU(context.Background(), http.DefaultTransport, urls, "tok")
	if s0[ok.URL] != 2.5 || len(s0) != 1 || errs[none.URL] == nil {
		t.Fatalf("first sample %v, errors %v", s0, errs)
	}
	s1, _ := scrapeCPU(context.Background(), http.DefaultTransport, urls, "tok")
	if got, n := cpuDelta(s0, s1, urls); n != 1 || math.Abs(got-1000) > 1e-6 {
		t.Fatalf("cpuDelta = %v ms over %d, want 1000 over 1", got, n)
	}
	// A counter that went backwards (a restart) is left out.
	if _, n := cpuDelta(s1, s0, urls); n != 0 {
		t.Fatalf("counted a restarted process")
	}
}

func TestClusterJSONKeys(t *testing.T) {
	raw, err := json.Marshal(&ClusterResult{Mode: "cluster", ShellChain: 200})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shell_chain", "shell_chain_ms_per_step", "shell_floor_ms_per_step", "shell_overhead_ms_per_step",
		"shell_floor_cpu_ms_per_step", "orion_cpu_ms_per_shell_step", "standbys_cpu_ms_per_shell_step",
		"etcd_cpu_ms_per_shell_step", "cpu_scope", "etcd_db_bytes_per_1000_tasks"} {
		if !strings.Contains(string(raw), `"`+k+`":`) {
			t.Errorf("cluster --json has no %q: %s", k, raw)
		}
	}
	if !strings.Contains(string(raw), `"orion_cpu_ms_per_shell_step":null`) {
		t.Errorf("an unmeasured CPU figure is not null: %s", raw)
	}
}

func TestShellChainDAG(t *testing.T) {
	d := shellChainDAG("bench-x-shell", 200)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dag.Load(b, "application/json", dag.Limits{})
	if err != nil {
		t.Fatalf("the server would refuse it: %v", err)
	}
	last := got.Tasks[199]
	if last.Kind != model.KindShell || last.Command != "true" || len(last.DependsOn) != 1 || last.DependsOn[0] != "t198" {
		t.Fatalf("round trip: %+v", last)
	}
}

// A pid that is not an orion worker is refused: the bench reads the CPU
// only of the process the worker's hello named.
func TestReadProcCPURefusesOtherProcesses(t *testing.T) {
	// A pid that is not an orion worker (this test process) is refused.
	if _, err := readProcCPU(os.Getpid()); err == nil || !strings.Contains(err.Error(), "not an orion worker") {
		t.Fatalf("readProcCPU(self) = %v, want refused", err)
	}
}

// The bench's clean-up: a DAG already gone is no failure, a deletion that
// met no leader is tried again, and a refusal is reported.
func TestDeleteDAG(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/api/v1/dags/")
		mu.Lock()
		calls[r.Method+" "+id]++
		n := calls[r.Method+" "+id]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case id == "gone":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"not_found","message":"no DAG gone"}}`)
		case id == "failover" && n < 3:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"not_leader","message":"no leader"}}`)
		case id == "running":
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"code":"conflict","message":"DAG running is running: cancel it before deleting it"}}`)
		default:
			fmt.Fprintf(w, `{"id":%q,"status":"deleted"}`, id)
		}
	}))
	defer srv.Close()
	c := client.New([]string{srv.URL}, "")
	ctx := context.Background()
	for _, id := range []string{"ok", "gone", "failover"} {
		if err := deleteDAG(ctx, c, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if calls["DELETE failover"] != 3 {
		t.Errorf("the deletion that met no leader was sent %d times, want 3", calls["DELETE failover"])
	}
	if err := deleteDAG(ctx, c, "running"); err == nil || !strings.Contains(err.Error(), "cancel it") {
		t.Errorf("running: %v", err)
	}
}

// Each step of the outputs chain publishes an output its next step reads,
// and the DAG is valid as submitted.
func TestOutputsChainDAG(t *testing.T) {
	d := outputsChainDAG("bench-x-outputs", 3)
	if err := dag.Validate(d, dag.Limits{}); err != nil {
		t.Fatal(err)
	}
	if d.Tasks[0].Command != `echo v=1 > "$ORION_OUTPUTS"` || d.Tasks[2].Command != `echo "v={{ tasks.t1.outputs.v }}" > "$ORION_OUTPUTS"` {
		t.Fatalf("commands %q %q", d.Tasks[0].Command, d.Tasks[2].Command)
	}
}
