package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/store"
)

// MaxClusterDAGs bounds the DAGs of the cluster throughput phase: completion
// is read from one GET /api/v1/dags page, which holds at most this many.
const MaxClusterDAGs = 1000

// ClusterOptions sizes a run against a running cluster.
type ClusterOptions struct {
	Servers       []string    // API URLs of the replicas
	EtcdEndpoints []string    // client URLs of the etcd members the replicas use
	Token         string      // bearer token for the API, if it wants one
	TLS           *tls.Config // verifies https:// replicas (nil: the default)
	Tasks         int         // noop tasks for the throughput phase
	DAGSize       int         // tasks per DAG in the throughput phase
	Chain         int         // length of the chain phase
	ShellChain    int         // length of the shell chain phase (each step runs `true`)
	FanOut        int         // mapped noop tasks of the fan-out phase (0: DefaultFanOut; <0: none)
	Submitters    int         // concurrent POST /api/v1/dags
	EtcdFor       time.Duration
	Timeout       time.Duration // bound of each waiting phase
	Poll          time.Duration // how often completion is polled
	RunID         string        // prefix of the DAG ids (default: bench-<time>)
	Keep          bool          // leave the run's DAGs in the cluster (default: delete them once measured)
	// BigDAG: tasks of the big-DAG phase (0: none), one DAG of them
	// against as many in BigDAGSplit DAGs; a multiple of BigDAGSplit.
	BigDAG int
	// Live: tasks held live for the live-tasks phase (0: none), in DAGs
	// of DAGSize, and LiveKills kill -9 drills of the leader beside them.
	Live      int
	LiveKills int
	Log       io.Writer
}

// ClusterResult is what `orion bench --server ... --json` prints.
type ClusterResult struct {
	Mode            string  `json:"mode"`
	EtcdPutsPerSec  float64 `json:"etcd_puts_per_sec"`
	EtcdPutsPerSec4 float64 `json:"etcd_puts_per_sec_4_in_flight"`
	TasksPerSec     float64 `json:"tasks_per_sec"`
	RatioToEtcd     float64 `json:"ratio_to_etcd"`
	RatioToEtcd4    float64 `json:"ratio_to_etcd_4_in_flight"` // tasks/s over raw puts/s with 4 transactions in flight
	MachineLoad
	ChainMsPerStep      float64  `json:"chain_ms_per_step"`
	Tasks               int      `json:"tasks"`
	DAGSize             int      `json:"dag_size"`
	Chain               int      `json:"chain"`
	WorkerSlots         int      `json:"worker_slots"`
	Workers             int      `json:"workers"`
	Submitters          int      `json:"submitters"`
	Leader              string   `json:"leader,omitempty"`
	SubmitSeconds       float64  `json:"submit_seconds"`
	TasksFailed         int      `json:"tasks_failed"`
	CommitsPerSec       float64  `json:"commits_per_sec,omitempty"`
	EntriesPerCommit    float64  `json:"entries_per_commit,omitempty"`
	CommitBatchEntries  []Bucket `json:"commit_batch_entries,omitempty"`
	CommitLatencyMeanMs float64  `json:"commit_latency_mean_ms,omitempty"`
	RunID               string   `json:"run_id"`
	LeaderChanges       []string `json:"leader_changes,omitempty"`

	// CPU is what the throughput phase cost in CPU per task, against what a
	// raw put cost etcd in the 4-in-flight baseline: the budget that bounds
	// the ratio when the machine's cores are full.
	CPU CPUBudget `json:"cpu_per_task"`

	// The shell chain: ShellChain steps of `/bin/sh -c true`, against the
	// floor measured in the same run: the bench process running
	// `/bin/sh -c true` ShellChain times in a row.
	ShellChain             int     `json:"shell_chain"`
	ShellChainMsPerStep    float64 `json:"shell_chain_ms_per_step"`
	ShellFloorMsPerStep    float64 `json:"shell_floor_ms_per_step"`
	ShellOverheadMsPerStep float64 `json:"shell_overhead_ms_per_step"`
	// ShellFloorCPUMsPerStep is the bench process's own CPU per run of the
	// floor (fork, exec, wait; the shell's own CPU excluded).
	ShellFloorCPUMsPerStep float64 `json:"shell_floor_cpu_ms_per_step"`
	// OrionCPUMsPerShellStep is Orion's own CPU (user+system, task processes
	// excluded) over the shell chain phase divided by its steps: the whole
	// process in single-node mode (see CPUScope), the leader in cluster
	// mode. Null when it could not be read.
	OrionCPUMsPerShellStep    *float64 `json:"orion_cpu_ms_per_shell_step"`
	StandbysCPUMsPerShellStep *float64 `json:"standbys_cpu_ms_per_shell_step"` // cluster: the other replicas given, summed
	WorkersCPUMsPerShellStep  *float64 `json:"workers_cpu_ms_per_shell_step"`  // cluster: the standalone workers on this host, summed (task processes excluded)
	EtcdCPUMsPerShellStep     *float64 `json:"etcd_cpu_ms_per_shell_step"`     // cluster: the etcd members, summed
	// The outputs chain: ShellChain shell steps, each publishing an output
	// the next one reads; OutputRoundTripMs is what that adds per step to
	// a plain shell step (the mean of a shell chain before and after it).
	OutputsChainMsPerStep float64 `json:"outputs_chain_ms_per_step"`
	OutputRoundTripMs     float64 `json:"output_round_trip_ms"`
	// The fan-out: a task publishes FanOut items and a map group of noop
	// tasks runs one per item. From the producer's success: the expansion
	// committed, the last instance dispatched, the group's end (all
	// completed); and the instances per second that makes.
	FanOut            int      `json:"fanout"`
	FanOutExpandMs    float64  `json:"fanout_expand_ms"`
	FanOutDispatchMs  float64  `json:"fanout_last_dispatch_ms"`
	FanOutDoneMs      float64  `json:"fanout_done_ms"`
	FanOutTasksPerSec float64  `json:"fanout_tasks_per_sec"`
	CPUScope          string   `json:"cpu_scope"`           // what the CPU figures include
	CPUNotes          []string `json:"cpu_notes,omitempty"` // what could not be measured, and why

	// EtcdDBBytesPer1000 is the growth of the etcd database in use
	// (dbSizeInUse) over the Orion phases per 1000 tasks they submitted:
	// every revision they wrote, before compaction. Null when it fell (a
	// compaction ran) or could not be read; EtcdDBNote says why.
	EtcdDBBytesPer1000 *float64 `json:"etcd_db_bytes_per_1000_tasks"`
	EtcdDBNote         string   `json:"etcd_db_note,omitempty"`

	// BigDAG (--big-dag) and Live (--live, cluster mode): null unless
	// asked for.
	BigDAG *BigDAG `json:"big_dag"`
	Live   *Live   `json:"live"`
}

// CPUBudget is CPU time (user+system, µs) per noop task of the throughput
// phase and per put of the raw 4-in-flight phase. Cluster mode reads each
// process's process_cpu_seconds_total (10 ms resolution): etcd members
// summed, the leader, the other replicas given summed; and /proc/PID/stat
// of the workers that run on the bench's host (they serve no /metrics).
// Single-node mode reads the bench process itself, which holds
// the server, its etcd member and the HTTP client: the same scope in both
// phases. A figure that could not be read is null, and Notes say why.
type CPUBudget struct {
	// RawPut: etcd (cluster) or the whole process (single) per raw put.
	RawPut   *float64 `json:"raw_put_us"`
	Etcd     *float64 `json:"etcd_us"`     // cluster: the members, summed
	Leader   *float64 `json:"leader_us"`   // cluster
	Standbys *float64 `json:"standbys_us"` // cluster: the other replicas, summed
	// Workers: cluster, the standalone workers on the bench's host, summed
	// (/proc/PID/stat of the pid each reports), null unless all of them are.
	Workers *float64 `json:"workers_us"`
	Process *float64 `json:"process_us"` // single node: the whole process
	// RawPutsPerTask is what a task costs in raw puts' worth of CPU: etcd's
	// CPU per task over its CPU per raw put (cluster), or the process's
	// (single node). When the cores are full, tasks/s cannot exceed the
	// baseline's puts/s divided by it, and less when Orion's own processes
	// share etcd's cores.
	RawPutsPerTask *float64 `json:"raw_puts_per_task"`
	Notes          []string `json:"notes,omitempty"`
}

// Bucket is one bucket of a histogram taken over a phase: Count
// observations were at most LE (and above the previous bucket's LE).
type Bucket struct {
	LE    string `json:"le"`
	Count int64  `json:"count"`
}

func (o *ClusterOptions) defaults() {
	if o.Tasks <= 0 {
		o.Tasks = 100000
	}
	if o.DAGSize <= 0 {
		o.DAGSize = 1000
	}
	if o.DAGSize > o.Tasks {
		o.DAGSize = o.Tasks
	}
	if o.Chain <= 0 {
		o.Chain = 1000
	}
	if o.ShellChain <= 0 {
		o.ShellChain = DefaultShellChain
	}
	if o.Submitters <= 0 {
		o.Submitters = 4
	}
	if o.FanOut == 0 {
		o.FanOut = DefaultFanOut
	}
	if o.EtcdFor <= 0 {
		o.EtcdFor = 3 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Live > 0 && o.LiveKills <= 0 {
		o.LiveKills = DefaultLiveKills
	}
	if o.RunID == "" {
		o.RunID = "bench-" + time.Now().UTC().Format("20060102-150405.000")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// RunCluster measures a running cluster: the raw etcd ceiling on its
// members, then noop throughput, chains through its HTTP API and the cost
// of handing an output from task to task.
func RunCluster(ctx context.Context, o ClusterOptions) (*ClusterResult, error) {
	r, err := newClusterRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.res.MachineLoad.start()
	if err := r.etcdBaseline(ctx); err != nil {
		return nil, err
	}
	if err := r.orionPhases(ctx); err != nil {
		return nil, err
	}
	if err := r.outputsPhase(ctx); err != nil {
		return nil, err
	}
	if err := r.fanOutPhase(ctx); err != nil {
		return nil, err
	}
	if err := r.bigDAGPhase(ctx); err != nil {
		return nil, err
	}
	if err := r.livePhase(ctx); err != nil {
		return nil, err
	}
	r.res.MachineLoad.end()
	if o.Keep {
		fmt.Fprintf(o.Log, "kept the run's %d DAGs (ids %s-*)\n", len(r.submitted), o.RunID)
	} else {
		r.deleteDAGs(ctx)
	}
	return r.res, nil
}

// deleteDAGs deletes the DAGs the run submitted, once measured, so that a
// bench leaves a cluster's state as it found it, as the raw etcd phases
// leave its keys: a cluster benched again and again (or drilled under a
// bench loop) does not grow by every run's tasks until retention. A DAG
// that cannot be deleted is named and left; the figures stand.
func (r *clusterRun) deleteDAGs(ctx context.Context) {
	start := time.Now()
	next := make(chan string, len(r.submitted))
	for _, id := range r.submitted {
		next <- id
	}
	close(next)
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for p := 0; p < r.o.Submitters; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				if err := deleteDAG(ctx, r.c, id); err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s: %v", id, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(r.o.Log, "deleted the run's %d DAGs in %.2fs (--keep keeps them)\n",
		len(r.submitted)-len(failed), time.Since(start).Seconds())
	if len(failed) > 0 {
		slices.Sort(failed)
		fmt.Fprintf(r.o.Log, "could not delete %d DAGs, left in the cluster: %s\n", len(failed), strings.Join(failed, "; "))
	}
}

// clusterRun is one run against servers reached over HTTP: a cluster of
// processes, or the single node `orion bench` starts in process.
type clusterRun struct {
	o     ClusterOptions
	res   *ClusterResult
	count int // DAGs of the throughput phase
	// submitted are the ids of every DAG the run submitted, in order.
	submitted []string
	tr        *http.Transport
	c         *client.Client
	cli       *clientv3.Client
	cl        *client.Cluster
}

func newClusterRun(ctx context.Context, o ClusterOptions) (*clusterRun, error) {
	o.defaults()
	if len(o.Servers) == 0 {
		return nil, errors.New("no server URL")
	}
	if len(o.EtcdEndpoints) == 0 {
		return nil, errors.New("no etcd endpoint")
	}
	if err := checkBigOptions(o.BigDAG, o.Live); err != nil {
		return nil, err
	}
	count := o.Tasks / o.DAGSize
	if count > MaxClusterDAGs {
		return nil, fmt.Errorf("%d tasks in DAGs of %d is %d DAGs; at most %d: raise --dag-size",
			o.Tasks, o.DAGSize, count, MaxClusterDAGs)
	}
	if !dag.ValidID(o.RunID + "-chain") {
		return nil, fmt.Errorf("run id %q does not make valid DAG ids", o.RunID)
	}
	r := &clusterRun{o: o, count: count, res: &ClusterResult{Mode: "cluster", Tasks: count * o.DAGSize, DAGSize: o.DAGSize,
		Chain: o.Chain, ShellChain: o.ShellChain, Submitters: o.Submitters, RunID: o.RunID}}
	r.tr = http.DefaultTransport.(*http.Transport).Clone()
	r.tr.MaxIdleConnsPerHost = 4 * o.Submitters
	r.tr.TLSClientConfig = o.TLS
	r.tr.ResponseHeaderTimeout = time.Minute
	r.c = r.newClient(o.Servers)

	var err error
	if r.cl, err = r.c.Cluster(ctx); err != nil {
		return nil, fmt.Errorf("GET /api/v1/cluster: %w", err)
	}
	r.res.WorkerSlots, r.res.Workers = workerSlots(r.cl)
	fmt.Fprintf(o.Log, "cluster: leader %s, %d workers with %d slots in all (noop attempts in flight are bounded by these)\n",
		orDash(r.cl.Leader), r.res.Workers, r.res.WorkerSlots)
	r.cli, err = clientv3.New(clientv3.Config{Endpoints: o.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *clusterRun) newClient(servers []string) *client.Client {
	c := client.New(servers, r.o.Token)
	c.UserAgent = "orion-bench"
	c.HTTPClient = &http.Client{Transport: r.tr}
	return c
}

func (r *clusterRun) close() { _ = r.cli.Close() }

// etcdBaseline measures raw batched puts on the members, then waits for a
// leader that has committed (saturating etcd can starve the leader's
// session keepalives: the TTL is short) and aims the client at it.
func (r *clusterRun) etcdBaseline(ctx context.Context) error {
	o, res := r.o, r.res
	fmt.Fprintf(o.Log, "raw etcd: batched puts (%d per txn) on %s for %s, 1 then 4 in flight...\n",
		store.DefaultLimits.MaxOps, strings.Join(o.EtcdEndpoints, ","), o.EtcdFor)
	ce, err := etcdCeilings(ctx, r.cli, o.EtcdFor, func() cpuProbe { return r.probeCPU(ctx) })
	if err != nil {
		return fmt.Errorf("raw etcd: %w", err)
	}
	res.EtcdPutsPerSec, res.EtcdPutsPerSec4 = ce.seq, ce.par
	res.CPU.rawPutCPU(res.Mode == "single", ce.before, ce.after, o.EtcdEndpoints, ce.puts4)
	leader := r.cl.Leader
	if r.cl, err = waitLeader(ctx, r.c, time.Minute, o.Poll); err != nil {
		return fmt.Errorf("after the raw etcd phase: %w", err)
	}
	res.noteLeader(o.Log, "raw etcd", leader, r.cl.Leader)
	res.Leader = r.cl.Leader
	if leaderURL := pickURL(r.c.BaseURLs(), r.cl.LeaderURL); leaderURL != "" {
		// Submit and poll where the log is written: no forwarding hop, no
		// replication lag in what we read.
		r.c = r.newClient(leaderFirst(r.c.BaseURLs(), leaderURL))
	}
	return nil
}

// leaderURL is the given URL of the leader, or "" when it is none of them.
func (r *clusterRun) leaderURL() string { return pickURL(r.c.BaseURLs(), r.cl.LeaderURL) }

// orionPhases runs the noop throughput phase and the chain through the API.
func (r *clusterRun) orionPhases(ctx context.Context) error {
	o, res, c, count := r.o, r.res, r.c, r.count
	fmt.Fprintf(o.Log, "throughput: %d noop tasks in %d DAGs of %d, %d submitters over HTTP...\n",
		res.Tasks, count, o.DAGSize, o.Submitters)
	ids := make([]string, count)
	bodies := make([][]byte, count)
	var err error
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-tp-%04d", o.RunID, i)
		if bodies[i], err = json.Marshal(independent(ids[i], o.DAGSize)); err != nil {
			return err
		}
	}
	db0, dbErr0 := r.dbInUse(ctx)
	leaderURL := r.leaderURL()
	m0, _ := scrapeMetrics(ctx, r.tr, leaderURL, o.Token)
	cpu0 := r.probeCPU(ctx)
	start := time.Now()
	r.submitted = append(r.submitted, ids...)
	if err := submitAll(ctx, c, bodies, o.Submitters); err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	res.SubmitSeconds = time.Since(start).Seconds()
	fmt.Fprintf(o.Log, "throughput: all %d DAGs accepted after %.2fs; waiting for them to finish...\n", count, res.SubmitSeconds)
	t, end, err := waitDAGs(ctx, c, ids, start, o.Timeout, o.Poll, o.Log)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	cpu1 := r.probeCPU(ctx)
	el := end.Sub(start)
	res.CPU.taskCPU(res.Mode == "single", cpu0, cpu1, o.EtcdEndpoints, leaderURL, c.BaseURLs(), t.Tasks)
	res.TasksPerSec = float64(t.Succeeded) / el.Seconds()
	res.TasksFailed = t.Tasks - t.Succeeded
	if res.EtcdPutsPerSec > 0 {
		res.RatioToEtcd = res.TasksPerSec / res.EtcdPutsPerSec
	}
	if res.EtcdPutsPerSec4 > 0 {
		res.RatioToEtcd4 = res.TasksPerSec / res.EtcdPutsPerSec4
	}
	m1, merr := scrapeMetrics(ctx, r.tr, leaderURL, o.Token)
	if r.cl, err = waitLeader(ctx, c, time.Minute, o.Poll); err != nil {
		return fmt.Errorf("after the throughput phase: %w", err)
	}
	if res.noteLeader(o.Log, "throughput", res.Leader, r.cl.Leader) {
		if merr == nil && m0 != nil {
			res.commitStats(m0, m1, el) // only when one leader committed it all
		}
	} else {
		res.CPU.Notes = append(res.CPU.Notes, "the leader changed during the throughput phase: the leader's and the standbys' CPU each mix both roles")
	}

	fmt.Fprintf(o.Log, "chain: %d tasks, each waiting on the previous...\n", o.Chain)
	chainID := o.RunID + "-chain"
	body, err := json.Marshal(chain(chainID, o.Chain))
	if err != nil {
		return err
	}
	start = time.Now()
	r.submitted = append(r.submitted, chainID)
	if err := submitAll(ctx, c, [][]byte{body}, 1); err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	if _, end, err = waitDAGs(ctx, c, []string{chainID}, start, o.Timeout, o.Poll, o.Log); err != nil {
		return fmt.Errorf("chain: %w", err)
	}
	res.ChainMsPerStep = float64(end.Sub(start).Microseconds()) / 1000 / float64(o.Chain)
	if cl, err := c.Cluster(ctx); err == nil {
		res.noteLeader(o.Log, "chain", res.Leader, cl.Leader)
	}

	if err := r.shellPhase(ctx); err != nil {
		return err
	}
	db1, dbErr1 := r.dbInUse(ctx)
	res.EtcdDBBytesPer1000, res.EtcdDBNote = dbPer1000(db0, db1, errors.Join(dbErr0, dbErr1), res.Tasks+res.Chain+res.ShellChain)
	return nil
}

// noteLeader records a change of leader over a phase, and says whether
// there was none.
func (r *ClusterResult) noteLeader(log io.Writer, phase, before, after string) bool {
	if before == after {
		return true
	}
	note := fmt.Sprintf("%s: %s → %s", phase, orDash(before), orDash(after))
	r.LeaderChanges = append(r.LeaderChanges, note)
	fmt.Fprintf(log, "WARNING: the leader changed during the %s phase (%s → %s)\n", phase, orDash(before), orDash(after))
	return false
}

// waitLeader polls the cluster endpoint until it names a leader that has
// committed in its term.
func waitLeader(ctx context.Context, c *client.Client, timeout, poll time.Duration) (*client.Cluster, error) {
	deadline := time.Now().Add(timeout)
	for {
		cl, err := c.Cluster(ctx)
		if err == nil && hasLeader(cl) {
			return cl, nil
		}
		if err != nil && !client.IsTemporary(err) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// hasLeader reports whether cl names a leader that lists itself as such
// and has committed in its term.
func hasLeader(cl *client.Cluster) bool {
	if cl.Leader == "" {
		return false
	}
	for _, r := range cl.Replicas {
		if r.Name == cl.Leader {
			return r.Role == "leader" && r.FirstCommitAt != nil
		}
	}
	return len(cl.Replicas) == 0 // a lone process lists no replicas
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// workerSlots sums the slots of the connected executors the cluster lists
// (replicas that only schedule list 0) and counts those with any.
func workerSlots(cl *client.Cluster) (slots, workers int) {
	for _, w := range cl.Workers {
		if w.Connected && w.Slots > 0 {
			slots += w.Slots
			workers++
		}
	}
	return slots, workers
}

// pickURL returns the URL of urls that names the same server as want (the
// leader's advertised URL), or "" when none does: only the given URLs are
// ever contacted.
func pickURL(urls []string, want string) string {
	w, err := url.Parse(client.NormalizeURL(want))
	if want == "" || err != nil {
		return ""
	}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err == nil && p.Scheme == w.Scheme && p.Host == w.Host {
			return u
		}
	}
	return ""
}

// leaderFirst returns urls with leader moved to the front.
func leaderFirst(urls []string, leader string) []string {
	out := []string{leader}
	for _, u := range urls {
		if u != leader {
			out = append(out, u)
		}
	}
	return out
}

// ceilings is what the raw etcd phases measured.
type ceilings struct {
	seq, par      float64  // puts/s with 1 and with 4 transactions in flight
	puts4         int      // puts of the 4-in-flight phase
	before, after cpuProbe // read just before and just after it
}

// etcdCeilings measures sequential transactions of MaxOps puts, then the
// same with 4 transactions in flight (reading probe, if any, just before
// and just after it, for its CPU), and deletes the keys.
func etcdCeilings(ctx context.Context, cli *clientv3.Client, d time.Duration, probe func() cpuProbe) (c ceilings, err error) {
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		// The sweep catches what deleteWritten could not: keys of an
		// earlier, interrupted run, or all of them if it failed.
		derr := errors.Join(deleteWritten(dctx, cli, 1, 4), deleteInChunks(dctx, cli, "/orion-bench/"))
		if derr != nil && err == nil {
			err = fmt.Errorf("deleting /orion-bench/: %w", derr)
		}
	}()
	if c.seq, _, err = etcdPuts(ctx, cli, d, 1); err != nil {
		return c, err
	}
	if probe != nil {
		c.before = probe()
	}
	c.par, c.puts4, err = etcdPuts(ctx, cli, d, 4)
	if probe != nil {
		c.after = probe()
	}
	return c, err
}

// deleteDAG deletes one DAG. A DAG already gone is no failure (retention
// or another client got there first, or an earlier try did and its answer
// was lost); a deletion that met no leader (a failover under way) is tried
// again, a few times.
func deleteDAG(ctx context.Context, c *client.Client, id string) error {
	var err error
	for try := 0; try < 5; try++ {
		_, err = c.Delete(ctx, id)
		var ae *client.APIError
		switch {
		case err == nil, errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			return nil
		case errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable:
			return err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// deleteChunk is how many keys one delete removes. Deleting a few hundred
// thousand keys in one request holds etcd's apply loop for over a second,
// long enough to expire the leader's session lease (1s by default) and
// depose it; chunks keep every request as short as a batch of puts.
const deleteChunk = 1024

// writerPrefix is where writer w of the raw phase with inFlight writers
// puts its keys: writerPrefix + %09d, numbered from 0.
func writerPrefix(inFlight, w int) string { return fmt.Sprintf("/orion-bench/%d/%d/k", inFlight, w) }

// deleteWritten deletes the raw phases' keys by their numbers, deleteChunk
// keys a request, for each writer of phases with these numbers of writers,
// until a chunk deletes none. Unlike deleteInChunks it reads nothing: a
// range read with a limit still makes etcd count every key left in the
// range, so reading chunk by chunk costs the square of the keys.
func deleteWritten(ctx context.Context, cli *clientv3.Client, phases ...int) error {
	for _, inFlight := range phases {
		for w := 0; w < inFlight; w++ {
			p := writerPrefix(inFlight, w)
			for i := 0; ; i += deleteChunk {
				resp, err := cli.Delete(ctx, numbered(p, i), clientv3.WithRange(numbered(p, i+deleteChunk)))
				if err != nil {
					return err
				}
				if resp.Deleted == 0 {
					break
				}
			}
		}
	}
	return nil
}

func numbered(prefix string, i int) string { return fmt.Sprintf("%s%09d", prefix, i) }

// deleteInChunks deletes every key under prefix, deleteChunk keys a request.
func deleteInChunks(ctx context.Context, cli *clientv3.Client, prefix string) error {
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for i := 0; i < 100000; i++ { // 100M keys: far more than a run writes
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(deleteChunk))
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if _, err := cli.Delete(ctx, from, clientv3.WithRange(last+"\x00")); err != nil {
			return err
		}
		from = last + "\x00"
	}
	return errors.New("keys left after 100000 chunks")
}

// etcdPuts runs inFlight writers, each committing transactions of MaxOps
// puts of task-record-sized values one after the other for d, and returns
// the puts per second of them all, and how many. The keys stay under
// /orion-bench/.
func etcdPuts(ctx context.Context, cli *clientv3.Client, d time.Duration, inFlight int) (float64, int, error) {
	val := strings.Repeat("x", 180)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	start := time.Now()
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := writerPrefix(inFlight, w)
			ops := make([]clientv3.Op, store.DefaultLimits.MaxOps)
			n := 0
			var err error
			for time.Since(start) < d && ctx.Err() == nil {
				for i := range ops {
					ops[i] = clientv3.OpPut(numbered(prefix, n+i), val)
				}
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err = cli.Txn(tctx).Then(ops...).Commit()
				cancel()
				if err != nil {
					break
				}
				n += len(ops)
			}
			if err == nil {
				err = ctx.Err()
			}
			mu.Lock()
			total += n
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, 0, first
	}
	return float64(total) / time.Since(start).Seconds(), total, nil
}

// submitAll posts every body from `parallel` goroutines. Each body carries
// its DAG id, so the client retries a submission safely.
func submitAll(ctx context.Context, c *client.Client, bodies [][]byte, parallel int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan []byte, len(bodies))
	for _, b := range bodies {
		next <- b
	}
	close(next)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for p := 0; p < parallel; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				if _, err := c.Submit(ctx, b, "application/json"); err != nil {
					errs <- fmt.Errorf("submit: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// tally is what the listing says of the DAGs a phase waits for.
type tally struct {
	Found, Terminal  int // DAGs listed, and those finished
	Tasks, Succeeded int // tasks of the finished DAGs, and those that succeeded
	LastFinished     time.Time
}

func tallyDAGs(list []client.DAGSummary, want map[string]bool) tally {
	var t tally
	for _, d := range list {
		if !want[d.ID] {
			continue
		}
		t.Found++
		if !client.DAGTerminal(d.Status) {
			continue
		}
		t.Terminal++
		t.Tasks += d.TaskCount
		t.Succeeded += d.Counts[client.StatusSucceeded]
		if d.FinishedAt != nil && d.FinishedAt.After(t.LastFinished) {
			t.LastFinished = *d.FinishedAt
		}
	}
	return t
}

// finishTime is when a phase ended: the last finished_at the server
// recorded, when it falls between the start and the poll that saw the end
// (the server's clock agrees with ours), else the time of that poll.
func finishTime(start, observed, lastFinished time.Time) time.Time {
	if !lastFinished.IsZero() && lastFinished.After(start) && !lastFinished.After(observed) {
		return lastFinished
	}
	return observed
}

// waitDAGs polls until every DAG of ids has finished. The tight loop asks
// only for running DAGs; once none of ids is among them, one full page
// confirms that each is listed and finished.
func waitDAGs(ctx context.Context, c *client.Client, ids []string, start time.Time, timeout, poll time.Duration, log io.Writer) (tally, time.Time, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	running := len(ids)
	var lastErr error
	for {
		list, err := c.ListDAGs(ctx, client.DAGRunning, MaxClusterDAGs)
		switch {
		case err != nil && !client.IsTemporary(err):
			return tally{}, time.Time{}, err
		case err != nil:
			lastErr = err
		default:
			running = tallyDAGs(list.DAGs, want).Found
			if running == 0 && len(list.DAGs) < MaxClusterDAGs {
				observed := time.Now()
				all, err := c.ListDAGs(ctx, "", MaxClusterDAGs)
				if err != nil && !client.IsTemporary(err) {
					return tally{}, time.Time{}, err
				}
				if err == nil {
					if t := tallyDAGs(all.DAGs, want); t.Terminal == len(ids) {
						return t, finishTime(start, observed, t.LastFinished), nil
					}
				}
			}
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			fmt.Fprintf(log, "  %d of %d DAGs still running after %.0fs\n", running, len(ids), time.Since(start).Seconds())
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return tally{}, time.Time{}, fmt.Errorf("%d of %d DAGs not finished after %s (last error: %v)", running, len(ids), timeout, lastErr)
			}
			return tally{}, time.Time{}, fmt.Errorf("%d of %d DAGs not finished after %s", running, len(ids), timeout)
		}
		select {
		case <-ctx.Done():
			return tally{}, time.Time{}, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// metricSample is what bench reads from a replica's /metrics.
type metricSample struct {
	batchSum, batchCount   float64
	batchBuckets           []Bucket // cumulative, in exposition order
	latencySum, latencyCnt float64
}

// scrapeMetrics reads the leader's commit histograms; base "" means the
// leader is not one of the given URLs, and there is nothing to read.
func scrapeMetrics(ctx context.Context, tr http.RoundTripper, base, token string) (*metricSample, error) {
	if base == "" {
		return nil, errors.New("leader unknown")
	}
	raw, err := fetchMetrics(ctx, tr, base, token)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(raw))
}

// parseMetrics reads orion_commit_batch_entries and
// orion_commit_latency_seconds from Prometheus text exposition.
func parseMetrics(r io.Reader) (*metricSample, error) {
	const batch, lat = "orion_commit_batch_entries", "orion_commit_latency_seconds"
	m := &metricSample{}
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "orion_commit_") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case name == batch+"_sum":
			m.batchSum, found = v, true
		case name == batch+"_count":
			m.batchCount = v
		case name == lat+"_sum":
			m.latencySum = v
		case name == lat+"_count":
			m.latencyCnt = v
		case strings.HasPrefix(name, batch+`_bucket{le="`):
			le := strings.TrimSuffix(strings.TrimPrefix(name, batch+`_bucket{le="`), `"}`)
			m.batchBuckets = append(m.batchBuckets, Bucket{LE: le, Count: int64(v)})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("no " + batch + " in /metrics")
	}
	return m, nil
}

// commitStats fills the commit figures from two samples taken el apart. A
// counter that went down (another leader answered) leaves them empty.
func (r *ClusterResult) commitStats(m0, m1 *metricSample, el time.Duration) {
	commits := m1.batchCount - m0.batchCount
	if commits <= 0 || m1.batchSum < m0.batchSum || len(m0.batchBuckets) != len(m1.batchBuckets) {
		return
	}
	r.CommitsPerSec = commits / el.Seconds()
	r.EntriesPerCommit = (m1.batchSum - m0.batchSum) / commits
	if n := m1.latencyCnt - m0.latencyCnt; n > 0 {
		r.CommitLatencyMeanMs = (m1.latencySum - m0.latencySum) / n * 1000
	}
	r.CommitBatchEntries = nil
	var prev int64
	for i := range m1.batchBuckets {
		if m0.batchBuckets[i].LE != m1.batchBuckets[i].LE {
			r.CommitBatchEntries = nil
			return
		}
		cum := m1.batchBuckets[i].Count - m0.batchBuckets[i].Count
		r.CommitBatchEntries = append(r.CommitBatchEntries, Bucket{LE: m1.batchBuckets[i].LE, Count: cum - prev})
		prev = cum
	}
}

func (b *CPUBudget) print(w io.Writer, single bool) {
	us := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f µs", *v)
	}
	if single {
		fmt.Fprintf(w, "CPU per raw put\t%s\tthe bench process (server, its etcd member, the client), 4 in flight\n", us(b.RawPut))
		fmt.Fprintf(w, "CPU per noop task\t%s\tthe same process, throughput phase\n", us(b.Process))
	} else {
		fmt.Fprintf(w, "etcd CPU per raw put\t%s\tthe members summed, 4 in flight\n", us(b.RawPut))
		fmt.Fprintf(w, "CPU per noop task\t%s etcd\tthe members summed; leader %s, standbys %s (summed), workers %s (summed, this host's)\n",
			us(b.Etcd), us(b.Leader), us(b.Standbys), us(b.Workers))
	}
	if b.RawPutsPerTask != nil {
		fmt.Fprintf(w, "CPU of a task in raw puts\t%.2f\twith full cores, tasks/s stay under the 4-in-flight baseline ÷ this\n", *b.RawPutsPerTask)
	}
	for _, n := range b.Notes {
		fmt.Fprintf(w, "  cpu\t\t%s\n", n)
	}
}

// histogramLine renders the non-empty buckets: "≤1:40 ≤2:3 ≤128:12".
func histogramLine(bs []Bucket) string {
	var parts []string
	for _, b := range bs {
		if b.Count > 0 {
			parts = append(parts, fmt.Sprintf("≤%s:%d", b.LE, b.Count))
		}
	}
	return strings.Join(parts, " ")
}

// Print writes the human table.
func (r *ClusterResult) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "MEASURE\tVALUE\tNOTE\n")
	where := "the cluster's members"
	if r.Mode == "single" {
		where = "the server's embedded member"
	}
	fmt.Fprintf(tw, "raw etcd batched puts\t%.0f puts/s\tbaseline: %d puts per txn, 1 in flight, %s\n", r.EtcdPutsPerSec, store.DefaultLimits.MaxOps, where)
	fmt.Fprintf(tw, "raw etcd batched puts, 4 in flight\t%.0f puts/s\t%.2f× the sequential baseline\n", r.EtcdPutsPerSec4, safeDiv(r.EtcdPutsPerSec4, r.EtcdPutsPerSec))
	fmt.Fprintf(tw, "durable noop throughput\t%.0f tasks/s\t%d tasks in DAGs of %d over HTTP, %d submitters; %.2f× the etcd baseline, %.2f× the 4-in-flight one\n", r.TasksPerSec, r.Tasks, r.DAGSize, r.Submitters, r.RatioToEtcd, r.RatioToEtcd4)
	if r.TasksFailed > 0 {
		fmt.Fprintf(tw, "tasks not succeeded\t%d\tnot counted in the throughput\n", r.TasksFailed)
	}
	fmt.Fprintf(tw, "submission\t%.2f s\tuntil every DAG was accepted (%.0f tasks/s accepted)\n", r.SubmitSeconds, safeDiv(float64(r.Tasks), r.SubmitSeconds))
	if r.CommitsPerSec > 0 {
		fmt.Fprintf(tw, "commits\t%.0f/s\t%.1f entries per commit, %.2f ms mean commit (leader's /metrics)\n", r.CommitsPerSec, r.EntriesPerCommit, r.CommitLatencyMeanMs)
		fmt.Fprintf(tw, "entries per commit\t\t%s\n", histogramLine(r.CommitBatchEntries))
	}
	r.CPU.print(tw, r.Mode == "single")
	fmt.Fprintf(tw, "chain\t%.3f ms/step\t%d tasks in a line\n", r.ChainMsPerStep, r.Chain)
	r.printShell(tw)
	db := "-"
	if r.EtcdDBBytesPer1000 != nil {
		db = fmt.Sprintf("%.0f bytes", *r.EtcdDBBytesPer1000)
	}
	fmt.Fprintf(tw, "etcd db per 1000 tasks\t%s\tgrowth of the db in use (dbSizeInUse, the largest member's) over the Orion phases: every revision written, before compaction%s\n", db, prefixed("; ", r.EtcdDBNote))
	fmt.Fprintf(tw, "worker slots\t%d\tacross %d workers: they bound the noop attempts in flight\n", r.WorkerSlots, r.Workers)
	fmt.Fprintf(tw, "machine load\t\t1-minute load average %s\n", r.MachineLoad)
	if r.Mode != "single" {
		fmt.Fprintf(tw, "leader\t%s\tDAG ids %s-*\n", orDash(r.Leader), r.RunID)
	}
	for _, ch := range r.LeaderChanges {
		fmt.Fprintf(tw, "leader changed\t%s\tduring that phase\n", ch)
	}
	r.BigDAG.print(tw)
	r.Live.print(tw)
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// SplitURLs splits a comma-separated list, trimming blanks and normalizing
// each URL as the API client does.
func SplitURLs(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range strings.Split(s, ",") {
		if u = client.NormalizeURL(u); u != "" && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

// printShell writes the shell chain's rows.
func (r *ClusterResult) printShell(w io.Writer) {
	if r.ShellChain == 0 {
		return
	}
	fmt.Fprintf(w, "shell chain\t%.3f ms/step\t%d shell tasks running %s in a line\n", r.ShellChainMsPerStep, r.ShellChain, ShellFloorCommand)
	fmt.Fprintf(w, "shell floor\t%.3f ms/step\t/bin/sh -c %s %d times in a row from the bench process, before and after the chain (%.3f ms of its own CPU each)\n",
		r.ShellFloorMsPerStep, ShellFloorCommand, r.ShellChain, r.ShellFloorCPUMsPerStep)
	fmt.Fprintf(w, "shell overhead\t%.3f ms/step\tOrion adds %.3f ms per step over the floor\n", r.ShellOverheadMsPerStep, r.ShellOverheadMsPerStep)
	who := "Orion's CPU per shell step"
	if r.Mode != "single" {
		who = "leader's CPU per shell step"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\n", who, msOrDash(r.OrionCPUMsPerShellStep), r.CPUScope)
	if r.Mode != "single" {
		fmt.Fprintf(w, "standbys' CPU per shell step\t%s\tthe other replicas given, summed\n", msOrDash(r.StandbysCPUMsPerShellStep))
		fmt.Fprintf(w, "workers' CPU per shell step\t%s\tthe standalone workers on this host, summed; the shells they run excluded\n", msOrDash(r.WorkersCPUMsPerShellStep))
		fmt.Fprintf(w, "etcd members' CPU per shell step\t%s\tsummed\n", msOrDash(r.EtcdCPUMsPerShellStep))
	}
	for _, n := range r.CPUNotes {
		fmt.Fprintf(w, "  cpu\t\t%s\n", n)
	}
	if r.OutputsChainMsPerStep > 0 {
		fmt.Fprintf(w, "outputs chain\t%.3f ms/step\t%d shell tasks in a line, each publishing an output the next one's command reads\n", r.OutputsChainMsPerStep, r.ShellChain)
		fmt.Fprintf(w, "output round trip\t%.3f ms\twhat one output adds to a shell step (against shell chains before and after)\n", r.OutputRoundTripMs)
	}
	if r.FanOut > 0 {
		fmt.Fprintf(w, "fan-out expansion\t%.1f ms\tproducer's success → its %d items committed in the group's expansion record\n", r.FanOutExpandMs, r.FanOut)
		fmt.Fprintf(w, "fan-out last dispatch\t%.1f ms\tproducer's success → the last of %d mapped noop tasks dispatched\n", r.FanOutDispatchMs, r.FanOut)
		fmt.Fprintf(w, "fan-out done\t%.1f ms\tproducer's success → all %d completed (%.0f tasks/s; bounded as the throughput phase's tasks/s)\n", r.FanOutDoneMs, r.FanOut, r.FanOutTasksPerSec)
	}
}

func msOrDash(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f ms", *v)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
