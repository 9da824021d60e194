package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/tools/drill"
	"github.com/orion-sched/orion/internal/tools/procfs"
)

// The live-tasks phase (--live N, cluster mode) holds N tasks live in the
// cluster and measures what they cost and what they do to failover.
//
// What a backlog looks like: DAGs submitted faster than they can run. Most
// of such a DAG's tasks wait on upstream tasks (pending), behind a few
// that wait for capacity (ready, queued). Here each DAG of the backlog is a
// root task in a pool no worker serves (LiveHeldPool: ready, queued, never
// placed) and the rest of the DAG's tasks depend on it (pending). Nothing
// of it runs, so the figures are the state's own, not the cost of running
// tasks, and the backlog stays put for as long as the phase measures.
// Like any DAG not yet run, it is one record per DAG in etcd: a task gets
// a key of its own only once it is dispatched.

// LiveHeldPool is the pool of the backlog's root tasks: no worker is given
// its label, so they stay queued and their DAGs running.
const LiveHeldPool = "orion-bench-held"

// liveDrillTasks is the size of each drill DAG run beside the backlog: two
// chains of ten shell steps of 0.2 s, long enough to be seen running on a
// loaded machine before the kill. The drill's DAG counts among the N live tasks
// (the backlog is N minus it), so that --live 1000000 fits a cluster with
// the default max_live_tasks of 1,000,000.
const liveDrillTasks = 20

// Live is what the live-tasks phase measured. Null in JSON unless asked for.
type Live struct {
	Tasks        int `json:"tasks"`         // --live: the backlog and a drill DAG
	BacklogTasks int `json:"backlog_tasks"` // what the per-task figures divide by
	BacklogDAGs  int `json:"backlog_dags"`
	// SubmitSeconds: every DAG of the backlog accepted; AppliedSeconds:
	// from the first POST until every replica had applied them all.
	SubmitSeconds  float64 `json:"submit_seconds"`
	AppliedSeconds float64 `json:"applied_seconds"`
	// Replicas: each replica's resident set (/proc/PID/status) before the
	// backlog and once it had settled with it.
	Replicas []LiveReplica `json:"replicas"`
	// LeaderRSSBytesPerTask, StandbyRSSBytesPerTask: RSS growth per
	// backlog task of the leader, and of the standby that grew most.
	LeaderRSSBytesPerTask  *float64 `json:"leader_rss_bytes_per_task"`
	StandbyRSSBytesPerTask *float64 `json:"standby_rss_bytes_per_task"`
	// EtcdBytesPerTask: growth of etcd's db in use (dbSizeInUse, the
	// largest member's) per backlog task.
	EtcdBytesPerTask *float64 `json:"etcd_bytes_per_task"`
	EtcdNote         string   `json:"etcd_note,omitempty"`
	// The kill -9 drills at this size (internal/tools/drill): takeover from
	// SIGKILL to another replica's first commit, the killed process's
	// death, and the killed replica's cold start (restarted at once, until
	// its /readyz answers: the whole state loaded from etcd, in pages).
	Kills          int      `json:"kills"`
	TakeoverP50Ms  *float64 `json:"takeover_p50_ms"`
	TakeoverP99Ms  *float64 `json:"takeover_p99_ms"`
	TakeoverMaxMs  *float64 `json:"takeover_max_ms"`
	DeathP50Ms     *float64 `json:"death_p50_ms"`
	DeathP99Ms     *float64 `json:"death_p99_ms"`
	ColdLoadP50Ms  *float64 `json:"cold_load_p50_ms"`
	ColdLoadMaxMs  *float64 `json:"cold_load_max_ms"`
	Lost           int      `json:"lost"`
	Duplicates     int      `json:"duplicates"`
	DrillVerdict   string   `json:"drill_verdict"`
	DrillWorkDir   string   `json:"drill_work_dir,omitempty"`
	CleanupSeconds float64  `json:"cleanup_seconds"`
	Notes          []string `json:"notes,omitempty"`
}

// LiveReplica is one replica's memory around the backlog.
type LiveReplica struct {
	Name        string   `json:"name"`
	Role        string   `json:"role"`
	PID         int      `json:"pid"`
	RSSBefore   int64    `json:"rss_before_bytes"`
	RSSAfter    int64    `json:"rss_after_bytes"`
	AnonBefore  int64    `json:"rss_anon_before_bytes"`
	AnonAfter   int64    `json:"rss_anon_after_bytes"`
	BytesPerTsk *float64 `json:"rss_bytes_per_task"`
}

// heldDAG is one DAG of the backlog: a root in LiveHeldPool and n-1 noop
// tasks depending on it.
func heldDAG(id string, n int) *model.DAG {
	d := &model.DAG{ID: id, Name: id, Tasks: make([]model.Task, 0, n)}
	d.Tasks = append(d.Tasks, model.Task{ID: "hold", Kind: model.KindNoop, Pool: LiveHeldPool})
	for i := 1; i < n; i++ {
		d.Tasks = append(d.Tasks, model.Task{ID: "t" + strconv.Itoa(i), Kind: model.KindNoop, DependsOn: []string{"hold"}})
	}
	d.Normalize()
	return d
}

// backlogSizes splits tasks into DAGs of at most size tasks.
func backlogSizes(tasks, size int) []int {
	var out []int
	for tasks > 0 {
		n := min(size, tasks)
		out = append(out, n)
		tasks -= n
	}
	return out
}

// replicaProc is a replica's process on this host.
type replicaProc struct {
	name, role, apiURL string
	pid                int
	start              uint64
}

// localReplicas lists the replicas whose pid is an orion server on this
// host serving their API, and notes why others were left out.
func localReplicas(cl *client.Cluster) (out []replicaProc, notes []string) {
	for _, r := range cl.Replicas {
		if r.PID <= 0 || r.APIURL == "" {
			notes = append(notes, fmt.Sprintf("replica %s: no pid or API URL known", r.Name))
			continue
		}
		argv, err := procfs.Argv(r.PID)
		if err != nil || !drill.IsOrionServer(argv) {
			notes = append(notes, fmt.Sprintf("replica %s: pid %d is no orion server on this host", r.Name, r.PID))
			continue
		}
		u, err := url.Parse(r.APIURL)
		port, perr := strconv.Atoi(u.Port())
		if err != nil || perr != nil {
			notes = append(notes, fmt.Sprintf("replica %s: API URL %q has no port", r.Name, r.APIURL))
			continue
		}
		if ok, err := drill.OwnsListener(r.PID, port); err != nil || !ok {
			notes = append(notes, fmt.Sprintf("replica %s: pid %d does not serve %s here", r.Name, r.PID, r.APIURL))
			continue
		}
		st, err := procfs.ReadStat(r.PID)
		if err != nil {
			notes = append(notes, fmt.Sprintf("replica %s: %v", r.Name, err))
			continue
		}
		out = append(out, replicaProc{name: r.Name, role: r.Role, apiURL: r.APIURL, pid: r.PID, start: st.StartTime})
	}
	return out, notes
}

// readReplicaMemory reads the resident set of each replica that is still
// the same process.
func readReplicaMemory(ps []replicaProc) map[string]procfs.Memory {
	out := map[string]procfs.Memory{}
	for _, p := range ps {
		st, err := procfs.ReadStat(p.pid)
		if err != nil || st.StartTime != p.start {
			continue
		}
		if m, err := procfs.ReadMemory(p.pid); err == nil {
			out[p.name] = m
		}
	}
	return out
}

// settledMemory reads the replicas' memory every second until no RSS moved
// by more than 1% since the previous reading (the runtime done growing its
// heap for what was applied, and what it freed returned to its spans), or
// for at most max.
func settledMemory(ctx context.Context, ps []replicaProc, maxWait time.Duration) map[string]procfs.Memory {
	prev := readReplicaMemory(ps)
	deadline := time.Now().Add(maxWait)
	for time.Now().Before(deadline) {
		if !sleepCtx(ctx, time.Second) {
			break
		}
		cur := readReplicaMemory(ps)
		steady := len(cur) == len(prev)
		for name, m := range cur {
			p := prev[name]
			if d := m.RSS - p.RSS; d > p.RSS/100 || -d > p.RSS/100 {
				steady = false
			}
		}
		prev = cur
		if steady {
			break
		}
	}
	return prev
}

// livePhase holds o.Live tasks live in the cluster and measures them.
func (r *clusterRun) livePhase(ctx context.Context) error {
	o := r.o
	if o.Live <= 0 {
		return nil
	}
	lv := &Live{Tasks: o.Live, BacklogTasks: o.Live - liveDrillTasks, Kills: o.LiveKills}
	r.res.Live = lv
	sizes := backlogSizes(lv.BacklogTasks, o.DAGSize)
	lv.BacklogDAGs = len(sizes)

	cl, err := waitLeader(ctx, r.c, time.Minute, o.Poll)
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	if err := r.checkLiveRoom(ctx, cl, o.Live, 30*time.Second); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	procs, notes := localReplicas(cl)
	lv.Notes = append(lv.Notes, notes...)
	mem0 := readReplicaMemory(procs)
	db0, dbErr0 := r.dbInUse(ctx)

	fmt.Fprintf(o.Log, "live: %d tasks held live in %d DAGs (a root in pool %s, which no worker serves, and its dependents)...\n",
		lv.BacklogTasks, lv.BacklogDAGs, LiveHeldPool)
	ids := make([]string, len(sizes))
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-live-%05d", o.RunID, i)
	}
	start := time.Now()
	if !o.Keep {
		defer r.cancelLive(context.WithoutCancel(ctx), ids, lv)
	}
	r.submitted = append(r.submitted, ids...)
	if err := submitEach(ctx, r.c, len(ids), o.Submitters, func(i int) ([]byte, error) {
		return json.Marshal(heldDAG(ids[i], sizes[i]))
	}); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	lv.SubmitSeconds = time.Since(start).Seconds()
	fmt.Fprintf(o.Log, "live: accepted after %.1fs (%.0f tasks/s); waiting for every replica to apply them...\n",
		lv.SubmitSeconds, float64(lv.BacklogTasks)/lv.SubmitSeconds)
	if err := r.waitApplied(ctx, o.Timeout); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	lv.AppliedSeconds = time.Since(start).Seconds()
	mem1 := settledMemory(ctx, procs, 30*time.Second)
	db1, dbErr1 := r.dbInUse(ctx)
	if per1000, note := dbPer1000(db0, db1, errors.Join(dbErr0, dbErr1), lv.BacklogTasks); per1000 != nil {
		lv.EtcdBytesPerTask = ptr(*per1000 / 1000)
	} else {
		lv.EtcdNote = note
	}
	lv.memoryFigures(procs, mem0, mem1)

	fmt.Fprintf(o.Log, "live: %d kill -9 drills of the leader at %d live tasks...\n", o.LiveKills, o.Live)
	rep, derr := drill.Run(ctx, drill.Options{
		Servers: o.Servers, Token: o.Token, TLS: o.TLS, Count: o.LiveKills, Tasks: liveDrillTasks,
		Interval: time.Second, Restart: drill.RestartAuto,
		RestartTimeout: o.Timeout, SettleTimeout: o.Timeout, TakeoverTimeout: time.Minute,
		Out: o.Log, Log: o.Log,
	})
	if rep != nil {
		for _, d := range rep.Drills {
			r.submitted = append(r.submitted, d.DAG) // deleted with the run's others
		}
		lv.TakeoverP50Ms, lv.TakeoverP99Ms, lv.TakeoverMaxMs = rep.TakeoverP50MS, rep.TakeoverP99MS, rep.TakeoverMaxMS
		lv.DeathP50Ms, lv.DeathP99Ms = rep.DeathP50MS, rep.DeathP99MS
		lv.ColdLoadP50Ms, lv.ColdLoadMaxMs = rep.ReadyP50MS, rep.ReadyMaxMS
		lv.Lost, lv.Duplicates, lv.DrillVerdict, lv.DrillWorkDir = rep.Lost, rep.Duplicates, rep.Verdict, rep.WorkDir
	}
	if derr != nil {
		lv.Notes = append(lv.Notes, "drill: "+derr.Error())
		fmt.Fprintf(o.Log, "live: the drills stopped: %v\n", derr)
	}
	// The drills moved the leadership: aim the client at the new leader.
	if r.cl, err = waitLeader(ctx, r.c, time.Minute, o.Poll); err == nil {
		if u := pickURL(r.c.BaseURLs(), r.cl.LeaderURL); u != "" {
			r.c = r.newClient(leaderFirst(r.c.BaseURLs(), u))
		}
	}
	return nil
}

// checkLiveRoom refuses up front a backlog the cluster's max_live_tasks
// would refuse halfway, from the leader's orion_live_tasks and
// orion_admission_limit gauges. The gauge follows the leader's state as it
// publishes it, a moment behind: a DAG that just finished may still count,
// so the room is read again for up to wait before refusing.
func (r *clusterRun) checkLiveRoom(ctx context.Context, cl *client.Cluster, n int, wait time.Duration) error {
	leader := pickURL(r.c.BaseURLs(), cl.LeaderURL)
	if leader == "" {
		return nil // the submissions will say so, if it comes to that
	}
	deadline := time.Now().Add(wait)
	for {
		raw, err := fetchMetrics(ctx, r.tr, leader, r.o.Token)
		if err != nil {
			return nil
		}
		live, err1 := parseCounter(bytes.NewReader(raw), "orion_live_tasks")
		limit, err2 := parseCounter(bytes.NewReader(raw), `orion_admission_limit{limit="max_live_tasks"}`)
		if err1 != nil || err2 != nil || float64(n)+live <= limit {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("--live %d: the cluster holds %.0f live tasks and admits %.0f (max_live_tasks): lower --live, or raise max_live_tasks", n, live, limit)
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// waitApplied waits until every replica reports having applied etcd's
// revision as of now.
func (r *clusterRun) waitApplied(ctx context.Context, timeout time.Duration) error {
	resp, err := r.cli.Get(ctx, "/orion-bench/revision")
	if err != nil {
		return err
	}
	rev := resp.Header.Revision
	deadline := time.Now().Add(timeout)
	for {
		cl, err := r.c.Cluster(ctx)
		if err == nil && len(cl.Replicas) > 0 {
			behind := 0
			for _, rp := range cl.Replicas {
				if rp.AppliedRevision < rev {
					behind++
				}
			}
			if behind == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replicas had not all applied revision %d after %s", rev, timeout)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// memoryFigures fills the per-task figures from the two readings.
func (lv *Live) memoryFigures(procs []replicaProc, before, after map[string]procfs.Memory) {
	for _, p := range procs {
		b, okb := before[p.name]
		a, oka := after[p.name]
		if !okb || !oka {
			lv.Notes = append(lv.Notes, fmt.Sprintf("replica %s: its memory could not be read twice (restarted?)", p.name))
			continue
		}
		rp := LiveReplica{Name: p.name, Role: p.role, PID: p.pid, RSSBefore: b.RSS, RSSAfter: a.RSS, AnonBefore: b.Anon, AnonAfter: a.Anon}
		if g := a.RSS - b.RSS; g > 0 && lv.BacklogTasks > 0 {
			rp.BytesPerTsk = ptr(float64(g) / float64(lv.BacklogTasks))
		}
		lv.Replicas = append(lv.Replicas, rp)
		switch {
		case rp.BytesPerTsk == nil:
		case p.role == "leader":
			lv.LeaderRSSBytesPerTask = rp.BytesPerTsk
		case lv.StandbyRSSBytesPerTask == nil || *rp.BytesPerTsk > *lv.StandbyRSSBytesPerTask:
			lv.StandbyRSSBytesPerTask = rp.BytesPerTsk
		}
	}
}

// cancelLive cancels the backlog's DAGs (deleteDAGs then deletes them with
// the run's others).
func (r *clusterRun) cancelLive(ctx context.Context, ids []string, lv *Live) {
	start := time.Now()
	var mu sync.Mutex
	var failed []string
	_ = forEach(ctx, len(ids), r.o.Submitters, func(i int) error {
		if err := cancelDAG(ctx, r.c, ids[i]); err != nil {
			mu.Lock()
			failed = append(failed, ids[i]+": "+err.Error())
			mu.Unlock()
		}
		return nil
	})
	lv.CleanupSeconds = time.Since(start).Seconds()
	fmt.Fprintf(r.o.Log, "live: cancelled the backlog's %d DAGs in %.1fs\n", len(ids)-len(failed), lv.CleanupSeconds)
	if len(failed) > 0 {
		slices.Sort(failed)
		lv.Notes = append(lv.Notes, fmt.Sprintf("%d backlog DAGs could not be cancelled: %s", len(failed), failed[0]))
	}
}

// cancelDAG cancels one DAG, trying again for up to a minute while the
// answer is temporary (no leader, a failover, a commit that timed out).
func cancelDAG(ctx context.Context, c *client.Client, id string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Cancel(ctx, id)
		if err == nil || !client.IsTemporary(err) || time.Now().After(deadline) {
			return err
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return err
		}
	}
}

// submitEach posts body(i) for i in [0, n) from parallel goroutines,
// building each body just before it is sent (a backlog of a million tasks
// is too many bytes to hold at once).
func submitEach(ctx context.Context, c *client.Client, n, parallel int, body func(i int) ([]byte, error)) error {
	return forEach(ctx, n, parallel, func(i int) error {
		b, err := body(i)
		if err != nil {
			return err
		}
		if _, err := c.Submit(ctx, b, "application/json"); err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		return nil
	})
}

// forEach runs fn(i) for i in [0, n) from parallel goroutines and stops at
// the first error, which it returns.
func forEach(ctx context.Context, n, parallel int, fn func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var (
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	for range max(1, parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (lv *Live) print(w io.Writer) {
	if lv == nil {
		return
	}
	b := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f bytes", *v)
	}
	fmt.Fprintf(w, "live tasks\t%d\t%d in %d held DAGs (a root in pool %s, which no worker serves, and its dependents), and a drill DAG's %d\n",
		lv.Tasks, lv.BacklogTasks, lv.BacklogDAGs, LiveHeldPool, liveDrillTasks)
	fmt.Fprintf(w, "live backlog accepted\t%.1f s\tall replicas had applied it after %.1f s\n", lv.SubmitSeconds, lv.AppliedSeconds)
	fmt.Fprintf(w, "leader RSS per live task\t%s\tRSS growth (/proc/PID/status) over the backlog, once settled\n", b(lv.LeaderRSSBytesPerTask))
	fmt.Fprintf(w, "standby RSS per live task\t%s\tthe standby that grew most\n", b(lv.StandbyRSSBytesPerTask))
	for _, rp := range lv.Replicas {
		fmt.Fprintf(w, "  %s (%s, pid %d)\t%s\tRSS %s → %s (anon %s → %s)\n", rp.Name, rp.Role, rp.PID, b(rp.BytesPerTsk),
			mibAbs(rp.RSSBefore), mibAbs(rp.RSSAfter), mibAbs(rp.AnonBefore), mibAbs(rp.AnonAfter))
	}
	fmt.Fprintf(w, "etcd per live task\t%s\tgrowth of the db in use (the largest member's) over the backlog%s\n", b(lv.EtcdBytesPerTask), prefixed("; ", lv.EtcdNote))
	fmt.Fprintf(w, "takeover at %d live tasks\tp50 %s, p99 %s\tkill -9 of the leader → another replica's first commit, %d drills (max %s; the killed process's death p50 %s, p99 %s)\n",
		lv.Tasks, msOrDash0(lv.TakeoverP50Ms), msOrDash0(lv.TakeoverP99Ms), lv.Kills, msOrDash0(lv.TakeoverMaxMs), msOrDash0(lv.DeathP50Ms), msOrDash0(lv.DeathP99Ms))
	fmt.Fprintf(w, "cold load at %d live tasks\tp50 %s, max %s\tthe killed replica restarted: start → /readyz 200 (its state loaded from etcd)\n",
		lv.Tasks, msOrDash0(lv.ColdLoadP50Ms), msOrDash0(lv.ColdLoadMaxMs))
	fmt.Fprintf(w, "drills\t%d lost, %d duplicates\t%s\n", lv.Lost, lv.Duplicates, lv.DrillVerdict)
	for _, n := range lv.Notes {
		fmt.Fprintf(w, "  live\t\t%s\n", n)
	}
}

func msOrDash0(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", *v)
}

func mibAbs(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
