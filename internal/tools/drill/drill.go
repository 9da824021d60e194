// Package drill runs failover drills against a local Orion cluster.
//
// kill-leader, per drill: find the scheduler leader through the cluster
// endpoint, prove it is an `orion server` process on this host (its
// /proc/PID/cmdline, and it owns the socket its API listens on), submit a
// DAG of short shell tasks and wait until it is running, save the leader's
// command line, working directory and environment, SIGKILL it, and poll the
// surviving replicas every few milliseconds until one leads with a first
// committed write after the kill: takeover = first_commit_at − kill time
// (same host, same clock). The killed replica is then restarted and awaited
// as a standby, and the drill's DAG is awaited and accounted before the next
// drill starts, so each drill's numbers belong to its own kill.
//
// Accounting uses the tasks' own side effect: every attempt appends
// "DAG/TASK ATTEMPT PPID" to WORKDIR/runs.log as it starts (PPID: the
// replica or worker process that ran it). A task that did not succeed is
// lost. A task that ran more than once is a duplicate unless the earlier run
// was in a replica the drill killed while that DAG ran (its pid in the line,
// or the attempt's worker in the task's history is that replica's own
// slots): a rerun after a killed worker, which at-least-once allows. A kill
// after the drill saw the DAG finished excuses nothing. After the last drill
// every drill DAG is accounted again from the final runs.log; those numbers
// are the totals (a later takeover that re-runs an old DAG shows up there).
//
// The drill only ever signals a pid that the cluster endpoint reported as
// the leader and that passed those checks, through a pidfd opened before a
// last check of the process's start time, so a recycled pid is never hit.
// Every wait is bounded.
package drill

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/tools/procfs"
)

// Options configures a run.
type Options struct {
	Servers       []string // API URLs of (some of) the replicas
	Token         string
	TLS           *tls.Config   // verifies https:// replicas; nil: the default
	Fault         Fault         // default FaultKill
	StopFor       time.Duration // FaultStop: how long the leader stays stopped (default 2s)
	Member        string        // FaultEtcdMember: leader, follower or a member name (default leader)
	Count         int           // drills to run
	Tasks         int           // tasks per drill DAG
	Interval      time.Duration // pause between drills
	WorkDir       string        // runs.log and logs; default a new temp dir
	Restart       RestartMode
	ClusterScript string // test/cluster.sh, for RestartScript

	LeaderTimeout   time.Duration // finding a leader (default 30s)
	RunningTimeout  time.Duration // a DAG reaching running (default 60s)
	TakeoverTimeout time.Duration // a new leader's first commit (default 15s)
	RestartTimeout  time.Duration // the killed replica answering again (default 60s)
	SettleTimeout   time.Duration // a drill DAG finishing (default 2m)
	PollInterval    time.Duration // takeover polling (default 5ms)

	Out io.Writer // one line per drill, then the summary
	Log io.Writer // progress (stderr)
}

func (o *Options) defaults() error {
	if len(o.Servers) == 0 {
		return errors.New("no --server URL given")
	}
	if o.Count < 1 || o.Count > 10000 {
		return fmt.Errorf("--count %d: want 1..10000", o.Count)
	}
	if o.Tasks < 4 || o.Tasks > 1000 {
		return fmt.Errorf("--tasks %d: want 4..1000 (the DAG must still be running when the leader is killed)", o.Tasks)
	}
	if o.Interval < 0 {
		return fmt.Errorf("--interval %v: must not be negative", o.Interval)
	}
	if o.Restart == "" {
		o.Restart = RestartAuto
	}
	if o.Fault == "" {
		o.Fault = FaultKill
	}
	if _, err := ParseFault(string(o.Fault)); err != nil {
		return err
	}
	if o.StopFor == 0 {
		o.StopFor = 2 * time.Second
	}
	if o.Fault == FaultStop && o.StopFor < minStop {
		return fmt.Errorf("--stop-for %v: at least %v, longer than the leader's 1 s lease (a shorter freeze may go unnoticed)", o.StopFor, minStop)
	}
	if o.Member == "" {
		o.Member = "leader"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.LeaderTimeout, 30*time.Second)
	def(&o.RunningTimeout, 60*time.Second)
	def(&o.TakeoverTimeout, 15*time.Second)
	def(&o.RestartTimeout, 60*time.Second)
	def(&o.SettleTimeout, 2*time.Minute)
	def(&o.PollInterval, 5*time.Millisecond)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Result is one drill.
type Result struct {
	N          int      `json:"n"`
	Fault      string   `json:"fault"`
	DAG        string   `json:"dag"`
	Killed     string   `json:"killed"`
	KilledPID  int      `json:"killed_pid"`
	NewLeader  string   `json:"new_leader"`
	TakeoverMS *float64 `json:"takeover_ms"`           // first_commit_at − kill; null if none
	ObservedMS *float64 `json:"observed_ms,omitempty"` // when the drill saw it (≥ takeover)
	// DeathMS is the kill → the killed process's sockets closed, seen on a
	// connection to its API opened before the kill (null if that took
	// longer than the takeover timeout). The kernel closes them only once
	// it has freed the process's memory, and until then a standby can only
	// notice the silence (the streams' 500 ms staleness): the takeover's
	// floor, which grows with RSSMiB (its resident memory at the kill) and
	// with the CPU the machine has to spare.
	DeathMS *float64 `json:"death_ms,omitempty"`
	RSSMiB  float64  `json:"rss_mib,omitempty"`
	// ReadyMS is the killed replica's cold start: from starting it again
	// to its /readyz answering 200, which it does once it has loaded the
	// whole state from etcd (in pages) and opened its session. Null when
	// the drill did not restart it or it was not ready in time.
	ReadyMS      *float64 `json:"ready_ms,omitempty"`
	StallMS      *float64 `json:"stall_ms,omitempty"` // etcd-member: the longest gap between acknowledged submissions
	Lost         int      `json:"lost"`
	Duplicates   int      `json:"duplicates"`
	Reruns       int      `json:"reruns_after_killed_worker"`
	RestartedPID int      `json:"restarted_pid,omitempty"`
	Error        string   `json:"error,omitempty"`

	// stop: submissions sent to the standbys while the leader was stopped
	// (standbyWrites): how many, the slowest answer, and those that were
	// not answered, answered 503 (with Retry-After), answered otherwise,
	// answered 2xx without their DAG, or made more than one DAG.
	StandbyWrites     int      `json:"standby_writes,omitempty"`
	StandbyWriteMaxMS *float64 `json:"standby_write_max_ms,omitempty"`
	StandbyUnanswered int      `json:"standby_unanswered,omitempty"`
	Standby503        int      `json:"standby_503,omitempty"`
	StandbyUnexpected int      `json:"standby_unexpected,omitempty"`
	StandbyNotApplied int      `json:"standby_not_applied,omitempty"`
	StandbyDuplicates int      `json:"standby_duplicates,omitempty"`
}

func (r *Result) fail(err error) {
	if err == nil {
		return
	}
	if r.Error != "" {
		r.Error += "; "
	}
	r.Error += err.Error()
}

// Report is a whole run; it marshals to the --json object.
type Report struct {
	Drills        []Result `json:"drills"`
	TakeoverP50MS *float64 `json:"takeover_p50_ms"`
	TakeoverP99MS *float64 `json:"takeover_p99_ms"`
	TakeoverMaxMS *float64 `json:"takeover_max_ms"`
	// The kill → the process gone (Result.DeathMS), and the takeover's
	// remainder after it: what Orion's standbys took once they could know.
	DeathP50MS      *float64 `json:"death_p50_ms,omitempty"`
	DeathP99MS      *float64 `json:"death_p99_ms,omitempty"`
	AfterDeathP50MS *float64 `json:"after_death_p50_ms,omitempty"`
	AfterDeathP99MS *float64 `json:"after_death_p99_ms,omitempty"`
	// The restarted replicas' cold starts (Result.ReadyMS).
	ReadyP50MS *float64  `json:"ready_p50_ms,omitempty"`
	ReadyMaxMS *float64  `json:"ready_max_ms,omitempty"`
	StallP50MS *float64  `json:"stall_p50_ms,omitempty"`
	StallP99MS *float64  `json:"stall_p99_ms,omitempty"`
	StallMaxMS *float64  `json:"stall_max_ms,omitempty"`
	Lost       int       `json:"lost"`
	Duplicates int       `json:"duplicates"`
	Reruns     int       `json:"reruns_after_killed_worker"`
	Unlogged   int       `json:"succeeded_without_run"`
	Failures   int       `json:"failures"`
	Planned    int       `json:"planned"`
	Malformed  int       `json:"malformed_run_lines,omitempty"`
	LostTasks  []string  `json:"lost_tasks,omitempty"`
	Findings   []Finding `json:"findings,omitempty"` // duplicates and reruns, explained
	WorkDir    string    `json:"work_dir"`
	OK         bool      `json:"ok"`
	Verdict    string    `json:"verdict"`

	// stop: the writes sent to the standbys in all, and the slowest answer.
	StandbyWrites     int      `json:"standby_writes,omitempty"`
	StandbyWriteMaxMS *float64 `json:"standby_write_max_ms,omitempty"`
}

// maxListed bounds the lost tasks and findings a report lists.
const maxListed = 100

type driller struct {
	o   Options
	api *apiClient
	// leaderURL is the last known leader's API; reads and writes go there
	// first, because a standby's view may lag (or be wrong), and the drill
	// must judge by the scheduler of record.
	leaderURL string
	rc        *client.Client // for rcURL
	rcURL     string
	runID     string
	runsPath  string
	killed    []Killed
	dags      []string
	// windows[dag] is when the DAG could run: from just before its
	// submission until the drill first saw it finished (zero: not yet).
	windows map[string]*window
}

type window struct{ from, to time.Time }

// Run runs the drills. It returns the report of what ran (nil when nothing
// did) and an error when the run stopped early: a refusal (the leader is not
// a local orion server), no leader, a replica that did not come back.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	d := &driller{o: o, api: newAPIClient(o.Token, o.TLS), runID: newRunID(), windows: map[string]*window{}}
	defer d.api.close()
	if d.o.WorkDir == "" {
		d.o.WorkDir = filepath.Join(os.TempDir(), "orion-drill-"+d.runID)
	}
	wd, err := filepath.Abs(d.o.WorkDir)
	if err != nil {
		return nil, err
	}
	d.o.WorkDir = wd
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return nil, fmt.Errorf("--work-dir: %w", err)
	}
	d.runsPath = filepath.Join(wd, "runs.log")
	f, err := os.OpenFile(d.runsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--work-dir: %w", err)
	}
	f.Close()
	d.logf("work dir %s (tasks append to runs.log there; workers must run on this host)", wd)

	rep := &Report{WorkDir: wd, Planned: d.o.Count, Drills: []Result{}}
	var stopErr error
	for i := 1; i <= d.o.Count; i++ {
		if err := ctx.Err(); err != nil {
			stopErr = err
			break
		}
		res, err := d.drill(ctx, i)
		if res != nil {
			rep.Drills = append(rep.Drills, *res)
			d.printDrill(res)
		}
		if err != nil {
			stopErr = err
			break
		}
		if i < d.o.Count && d.o.Interval > 0 {
			if !sleepCtx(ctx, d.o.Interval) {
				stopErr = ctx.Err()
				break
			}
		}
	}
	if len(d.dags) == 0 {
		return nil, stopErr
	}
	d.final(context.WithoutCancel(ctx), rep, ctx.Err() == nil)
	return rep, stopErr
}

// client returns the typed client for the leader first, then every server.
func (d *driller) client() *client.Client {
	if d.rc == nil || d.rcURL != d.leaderURL {
		urls := d.o.Servers
		if d.leaderURL != "" {
			urls = append([]string{d.leaderURL}, urls...)
		}
		d.rc = client.New(urls, d.o.Token)
		if d.o.TLS != nil {
			d.rc.SetTLS(d.o.TLS)
		}
		d.rc.UserAgent = "orion-drill"
		d.rc.HTTPClient.Timeout = 10 * time.Second
		d.rcURL = d.leaderURL
	}
	return d.rc
}

func (d *driller) logf(format string, args ...any) {
	fmt.Fprintf(d.o.Log, "drill: "+format+"\n", args...)
}

func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
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

func ms(d time.Duration) *float64 {
	v := math.Round(float64(d)/float64(time.Microsecond)/100) / 10 // 0.1 ms
	return &v
}

// drill runs drill n. A nil result means nothing was killed.
func (d *driller) drill(ctx context.Context, n int) (*Result, error) {
	if d.o.Fault == FaultEtcdMember {
		return d.drillEtcd(ctx, n)
	}
	tag := fmt.Sprintf("drill %d/%d", n, d.o.Count)
	dagID := fmt.Sprintf("drill-%s-%d", d.runID, n)

	cl, leader, proc, err := d.localLeader(ctx)
	if err != nil {
		return nil, err
	}
	d.logf("%s: leader %s (pid %d, %s); submitting %s", tag, leader.Name, leader.PID, leader.APIURL, dagID)
	d.windows[dagID] = &window{from: time.Now()}
	if err := d.submit(ctx, dagID); err != nil {
		return nil, fmt.Errorf("%s: submitting %s: %w", tag, dagID, err)
	}
	d.dags = append(d.dags, dagID)
	if err := d.waitRunning(ctx, dagID); err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}

	// Leadership may have moved while the DAG started: check again, and
	// find the leader anew (up to twice) if it did.
	for try := 0; ; try++ {
		s, err := d.api.self(ctx, leader.APIURL, 2*time.Second)
		if err == nil && s.Role == "leader" && (s.PID == 0 || s.PID == leader.PID) {
			break
		}
		if try == 2 {
			return nil, fmt.Errorf("%s: the leader keeps changing; not killing anything", tag)
		}
		if cl, leader, proc, err = d.localLeader(ctx); err != nil {
			return nil, err
		}
	}
	standbys := standbys(cl, leader.Name)
	if len(standbys) == 0 {
		return nil, fmt.Errorf("%s: no reachable standby could take over from %s; not killing it", tag, leader.Name)
	}

	res := &Result{N: n, Fault: string(d.o.Fault), DAG: dagID, Killed: leader.Name, KilledPID: leader.PID}
	switch d.o.Fault {
	case FaultStop:
		return d.stopLeader(ctx, tag, res, leader, proc, standbys)
	case FaultNode:
		return d.nodeLoss(ctx, tag, res, cl, leader, proc, standbys)
	}
	if st, err := procfs.ReadStat(proc.PID); err == nil {
		res.RSSMiB = float64(st.RSSPages*uint64(os.Getpagesize())) / (1 << 20)
	}
	death := watchClose(leader.APIURL, d.o.TakeoverTimeout)
	t0, err := d.kill(proc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	d.killed = append(d.killed, Killed{Name: leader.Name, PID: leader.PID, At: t0})

	d.recordTakeover(ctx, res, standbys, t0)
	select {
	case at := <-death:
		if !at.IsZero() {
			res.DeathMS = ms(at.Sub(t0))
		}
	case <-ctx.Done():
	}

	// Bring the replica back even if the drill is being interrupted: a
	// cluster must not be left a replica short by an aborted drill.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.o.RestartTimeout+30*time.Second)
	pid, started, rerr := d.restart(rctx, leader, proc)
	if rerr == nil && !started.IsZero() {
		if at, err := d.waitReady(rctx, leader.APIURL); err != nil {
			d.logf("%s: %v", tag, err)
		} else {
			res.ReadyMS = ms(at.Sub(started))
		}
	}
	cancel()
	res.RestartedPID = pid
	if rerr != nil {
		res.fail(rerr)
		return res, fmt.Errorf("%s: %w", tag, rerr)
	}

	d.settle(ctx, tag, res)
	return res, nil
}

// settle waits for the drill's DAG (and more, a trickle's) and accounts
// them now, so their numbers belong to this fault.
func (d *driller) settle(ctx context.Context, tag string, res *Result, more ...string) {
	ids := append([]string{res.DAG}, more...)
	if err := d.waitDone(ctx, ids); err != nil {
		d.logf("%s: %v", tag, err)
	}
	runs, _, err := d.readRuns()
	if err != nil {
		res.fail(err)
		return
	}
	res.Lost, res.Duplicates, res.Reruns = 0, 0, 0
	for _, id := range ids {
		t, err := d.account(ctx, id, runs)
		if err != nil {
			res.fail(fmt.Errorf("accounting %s: %w", id, err))
			continue
		}
		res.Lost += t.Lost
		res.Duplicates += t.Duplicates
		res.Reruns += t.Reruns
	}
}

// stopLeader freezes the leader (SIGSTOP) for StopFor, measures the takeover
// from the signal to another replica's first committed write, resumes it
// (SIGCONT) and waits until it follows as a standby. Nothing of the frozen
// replica is excused: its attempts must be adopted, not run again.
func (d *driller) stopLeader(ctx context.Context, tag string, res *Result, leader client.Replica, proc *ProcInfo, standbys []client.Replica) (*Result, error) {
	writes := d.startStandbyWrites(ctx, res.DAG+"-sw", standbys)
	defer func() {
		if writes != nil {
			d.stopStandbyWrites(ctx, writes, res)
		}
	}()
	t0, err := signalProc(proc, syscall.SIGSTOP)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	cont := make(chan error, 1)
	timer := time.AfterFunc(d.o.StopFor, func() { _, err := signalProc(proc, syscall.SIGCONT); cont <- err })
	// resume waits for the SIGCONT at StopFor, or sends it now when the
	// drill is interrupted.
	resume := func(now bool) error {
		if now && timer.Stop() {
			_, err := signalProc(proc, syscall.SIGCONT)
			return err
		}
		return <-cont
	}
	d.recordTakeover(ctx, res, standbys, t0)
	if ctx.Err() != nil {
		// Interrupted: never leave a replica stopped.
		_ = resume(true)
		return res, ctx.Err()
	}
	// The full freeze, even when the takeover came early: the old leader
	// must come back to a cluster that has moved on.
	if err := resume(false); err != nil {
		res.fail(err)
		return res, fmt.Errorf("%s: %w", tag, err)
	}
	d.logf("%s: %s resumed after %v", tag, leader.Name, time.Since(t0).Round(time.Millisecond))
	if err := d.waitStandby(context.WithoutCancel(ctx), leader, proc.PID); err != nil {
		res.fail(err)
		return res, fmt.Errorf("%s: %w", tag, err)
	}
	d.stopStandbyWrites(ctx, writes, res)
	writes = nil
	d.settle(ctx, tag, res)
	return res, nil
}

// stopStandbyWrites ends the writes through the standbys, records them in
// res, and has their DAGs accounted with the drill's.
func (d *driller) stopStandbyWrites(ctx context.Context, w *standbyWrites, res *Result) {
	made := w.stop(context.WithoutCancel(ctx), res)
	for _, id := range made {
		d.windows[id] = &window{from: w.started}
		d.dags = append(d.dags, id)
	}
	d.logf("drill %d/%d: %d writes through the standbys: slowest answer %s, %d answered 503, %d unanswered",
		res.N, d.o.Count, res.StandbyWrites, fmtMS(res.StandbyWriteMaxMS), res.Standby503, res.StandbyUnanswered)
}

// localLeader finds the leader and proves it is an orion server here.
func (d *driller) localLeader(ctx context.Context) (*client.Cluster, client.Replica, *ProcInfo, error) {
	cl, leader, err := d.findLeader(ctx)
	if err != nil {
		return nil, leader, nil, err
	}
	d.leaderURL = leader.APIURL
	proc, err := checkLocal(leader)
	if err != nil {
		return nil, leader, nil, err
	}
	return cl, leader, proc, nil
}

// findLeader asks each server's cluster endpoint until one names a leader
// with an API URL and a pid.
func (d *driller) findLeader(ctx context.Context) (*client.Cluster, client.Replica, error) {
	deadline := time.Now().Add(d.o.LeaderTimeout)
	var last error
	for {
		for _, s := range d.o.Servers {
			cl, err := d.api.cluster(ctx, s)
			switch {
			case err != nil:
				last = err
			case cl.Leader == "":
				last = fmt.Errorf("%s reports no leader", s)
			default:
				r, ok := cl.Replica(cl.Leader)
				if !ok {
					last = fmt.Errorf("%s names the leader %s but does not list it among the replicas", s, cl.Leader)
					continue
				}
				if r.APIURL == "" {
					r.APIURL = cl.LeaderURL
				}
				if r.APIURL == "" || r.PID <= 0 {
					last = fmt.Errorf("%s reports no api_url or pid for the leader %s (the drill needs both; is the server current?)", s, r.Name)
					continue
				}
				return cl, r, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, client.Replica{}, fmt.Errorf("no leader found through %s within %v: %v",
				strings.Join(d.o.Servers, ", "), d.o.LeaderTimeout, last)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return nil, client.Replica{}, ctx.Err()
		}
	}
}

// checkLocal refuses a leader that is not an `orion server` process on this
// host serving its API here, and returns its saved state otherwise.
func checkLocal(r client.Replica) (*ProcInfo, error) {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("refusing to kill the leader %s (pid %d, %s): %s", r.Name, r.PID, r.APIURL, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(r.APIURL)
	if err != nil || u.Hostname() == "" {
		return nil, refuse("its API URL does not parse")
	}
	if !isLocalHost(u.Hostname()) {
		return nil, refuse("it is not on this host; the drill only kills local replicas")
	}
	port, err := apiPort(u)
	if err != nil {
		return nil, refuse("its API URL has no usable port")
	}
	p, err := ReadProc(r.PID)
	if err != nil {
		return nil, refuse("pid %d is not a process this user can inspect here: %v", r.PID, err)
	}
	if p.State == 'Z' || p.State == 'X' {
		return nil, refuse("pid %d is a dead process", r.PID)
	}
	if !IsOrionServer(p.Argv) {
		return nil, refuse("pid %d is %q, not an `orion server` process", r.PID, strings.Join(p.Argv, " "))
	}
	owns, err := OwnsListener(r.PID, port)
	if err != nil {
		return nil, refuse("cannot verify that pid %d serves port %d: %v", r.PID, port, err)
	}
	if !owns {
		return nil, refuse("pid %d does not listen on port %d: it is not the process behind %s", r.PID, port, r.APIURL)
	}
	return p, nil
}

// kill SIGKILLs the saved process and returns when it did (signalProc).
func (d *driller) kill(p *ProcInfo) (time.Time, error) { return signalProc(p, syscall.SIGKILL) }

// apiPort is the port of an API URL, its scheme's default if it names none.
func apiPort(u *url.URL) (int, error) {
	if u.Port() == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	return strconv.Atoi(u.Port())
}

// dialAPI opens a TCP connection to the host and port of an API URL.
func dialAPI(apiURL string) (net.Conn, error) {
	u, err := url.Parse(apiURL)
	if err != nil {
		return nil, err
	}
	port, err := apiPort(u)
	if err != nil {
		return nil, err
	}
	return net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), time.Second)
}

// watchClose opens a connection to the API at apiURL and reports when the
// other end closed it (EOF or reset): when the process behind it died, for
// a process that is being killed. It reports the zero time if it could not
// connect or nothing closed within limit.
func watchClose(apiURL string, limit time.Duration) <-chan time.Time {
	out := make(chan time.Time, 1)
	c, err := dialAPI(apiURL)
	if err != nil {
		out <- time.Time{}
		return out
	}
	go func() {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(limit))
		var b [1]byte
		_, err := c.Read(b[:]) // no request sent: the server says nothing until it goes
		if errors.Is(err, os.ErrDeadlineExceeded) {
			out <- time.Time{}
			return
		}
		out <- time.Now()
	}()
	return out
}

// recordTakeover waits for one of standbys to lead in a term begun after
// t0, the fault's moment, and records who and when in res (or the failure).
func (d *driller) recordTakeover(ctx context.Context, res *Result, standbys []client.Replica, t0 time.Time) {
	winner, first, seen, err := d.awaitTakeover(ctx, standbys, t0)
	if err != nil {
		res.fail(err)
		return
	}
	res.NewLeader = winner
	for _, s := range standbys {
		if s.Name == winner {
			d.leaderURL = s.APIURL
		}
	}
	res.TakeoverMS = ms(first.Sub(t0))
	res.ObservedMS = ms(seen.Sub(t0))
}

// awaitTakeover polls the standbys until one leads with leader_since after
// t0 and a first commit, and returns it, its first commit and when it was
// seen.
func (d *driller) awaitTakeover(ctx context.Context, standbys []client.Replica, t0 time.Time) (string, time.Time, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, d.o.TakeoverTimeout)
	type hit struct {
		name        string
		first, seen time.Time
	}
	hits := make(chan hit, len(standbys))
	var mu sync.Mutex
	last := map[string]string{}
	var wg sync.WaitGroup
	for _, r := range standbys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(d.o.PollInterval)
			defer tick.Stop()
			for {
				s, err := d.api.self(ctx, r.APIURL, 500*time.Millisecond)
				seen := time.Now()
				var state string
				switch {
				case err != nil:
					state = "unreachable"
				case s.Role == "leader" && s.FirstCommitAt != nil && s.LeaderSince != nil && s.LeaderSince.After(t0):
					name := s.Name
					if name == "" {
						name = r.Name
					}
					hits <- hit{name, *s.FirstCommitAt, seen}
					return
				case s.Role == "leader" && s.LeaderSince != nil && s.LeaderSince.After(t0):
					state = "leader without a first commit"
				default:
					state = s.Role
				}
				mu.Lock()
				last[r.Name] = state
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	// Stop the other pollers before waiting for them: defers run in
	// reverse, and waiting first would hold every drill for the timeout.
	defer func() { cancel(); wg.Wait() }()
	select {
	case h := <-hits:
		return h.name, h.first, h.seen, nil
	case <-ctx.Done():
	}
	select { // a hit that raced the deadline still counts
	case h := <-hits:
		return h.name, h.first, h.seen, nil
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	var states []string
	for _, r := range standbys {
		states = append(states, r.Name+": "+last[r.Name])
	}
	return "", time.Time{}, time.Time{}, fmt.Errorf("no new leader committed within %v (%s)", d.o.TakeoverTimeout, strings.Join(states, ", "))
}

// restart brings the killed replica back and waits until it answers as a
// standby. It returns the new pid when known.
func (d *driller) restart(ctx context.Context, r client.Replica, p *ProcInfo) (pid int, startedAt time.Time, err error) {
	if d.o.Restart == RestartNone {
		return 0, time.Time{}, nil
	}
	// The old process must be gone: its port is released only then.
	deadline := time.Now().Add(10 * time.Second)
	for !gone(p.PID, p.StartTime) {
		if time.Now().After(deadline) {
			return 0, time.Time{}, fmt.Errorf("pid %d still exists 10s after SIGKILL", p.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	clusterDir, _ := clusterDirOf(p.Cwd, r.Name)
	var child *started
	startedAt = time.Now()
	switch d.o.Restart {
	case RestartAuto:
		spec, err := BuildRestart(p, r.Name, d.o.WorkDir)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("restarting %s: %w", r.Name, err)
		}
		child, err = startDetached(spec, fmt.Sprintf("orion drill: restarting %s: %s", r.Name, strings.Join(spec.Argv, " ")))
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("restarting %s: %w", r.Name, err)
		}
		d.logf("restarted %s as pid %d (log %s)", r.Name, child.pid, spec.LogPath)
		if clusterDir != "" {
			if ok, err := updatePidFile(clusterDir, r.Name, p.PID, child.pid); err != nil {
				d.logf("updating test/cluster.sh's pid file of %s: %v", r.Name, err)
			} else if ok {
				d.logf("updated %s so test/cluster.sh manages the new %s", filepath.Join(clusterDir, "pids", r.Name+".pid"), r.Name)
			}
		}
	case RestartScript:
		script, err := findScript(d.o.ClusterScript, p, clusterDir)
		if err != nil {
			return 0, time.Time{}, err
		}
		startedAt = time.Now()
		d.logf("running %s restart %s", script, r.Name)
		sctx, cancel := context.WithTimeout(ctx, d.o.RestartTimeout+20*time.Second)
		err = runScript(sctx, script, r.Name, scriptEnv(os.Environ(), r.Name, clusterDir, r.APIURL),
			filepath.Join(d.o.WorkDir, "cluster-script.log"))
		cancel()
		if err != nil {
			// The script may have started the replica and failed only its
			// own check: if the replica answers, carry on, saying so.
			pid, berr := d.waitBackFor(ctx, r, p.PID, nil, 5*time.Second)
			if berr != nil {
				return 0, time.Time{}, err
			}
			d.logf("%v; but %s answers again (pid %d): carrying on", err, r.Name, pid)
			return pid, startedAt, nil
		}
	}
	pid, err = d.waitBack(ctx, r, p.PID, child)
	return pid, startedAt, err
}

// waitReady polls the restarted replica's /readyz until it answers 200:
// loaded and with its session open. It returns when it saw that.
func (d *driller) waitReady(ctx context.Context, apiURL string) (time.Time, error) {
	deadline := time.Now().Add(d.o.RestartTimeout)
	var last error
	for {
		var v struct {
			Status string `json:"status"`
		}
		err := d.api.get(ctx, apiURL, "/readyz", time.Second, &v)
		if err == nil && v.Status == "ready" {
			return time.Now(), nil
		}
		if err == nil {
			err = fmt.Errorf("/readyz says %q", v.Status)
		}
		last = err
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not ready within %v of its restart: %v", apiURL, d.o.RestartTimeout, last)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
}

// waitBack polls the replica's /cluster/self until a new process answers.
func (d *driller) waitBack(ctx context.Context, r client.Replica, oldPID int, child *started) (int, error) {
	return d.waitBackFor(ctx, r, oldPID, child, d.o.RestartTimeout)
}

func (d *driller) waitBackFor(ctx context.Context, r client.Replica, oldPID int, child *started, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	var last error
	for {
		s, err := d.api.self(ctx, r.APIURL, time.Second)
		switch {
		case err != nil:
			last = err
		case s.PID != 0 && s.PID == oldPID:
			last = errors.New("the killed process still answers")
		case s.Role == "leader":
			// A replica that won again right away is back too; say so.
			d.logf("%s came back as the leader (pid %d)", r.Name, s.PID)
			return s.PID, nil
		default:
			return s.PID, nil
		}
		if child != nil {
			select {
			case werr := <-child.done:
				return child.pid, fmt.Errorf("the restarted %s (pid %d) exited: %v", r.Name, child.pid, werr)
			default:
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s did not answer on %s within %v of its restart: %v", r.Name, r.APIURL, limit, last)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// submit posts the drill DAG; its fixed id makes a repeat harmless.
func (d *driller) submit(ctx context.Context, id string) error {
	body, err := DAGSpec(id, d.runsPath, d.o.Tasks)
	if err != nil {
		return err
	}
	_, err = d.client().Submit(ctx, body, "application/json")
	return err
}

// waitRunning waits until a task of the DAG has succeeded and another runs.
func (d *driller) waitRunning(ctx context.Context, id string) error {
	deadline := time.Now().Add(d.o.RunningTimeout)
	for {
		v, err := d.client().GetDAG(ctx, id)
		if err == nil {
			succeeded, running := 0, 0
			for _, t := range v.Tasks {
				switch t.Status {
				case client.StatusSucceeded:
					succeeded++
				case client.StatusRunning:
					running++
				}
			}
			if succeeded > 0 && running > 0 {
				return nil
			}
			if client.DAGTerminal(v.Status) {
				return fmt.Errorf("%s finished (%s) before the kill; give more --tasks", id, v.Status)
			}
		} else if !client.IsTemporary(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s had no task succeeded and none running within %v: are workers (or server --slots) connected, on this host?", id, d.o.RunningTimeout)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// waitDone waits, up to SettleTimeout, until every DAG has finished.
func (d *driller) waitDone(ctx context.Context, ids []string) error {
	deadline := time.Now().Add(d.o.SettleTimeout)
	pending := append([]string(nil), ids...)
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			v, err := d.client().GetDAG(ctx, id)
			if err != nil || !client.DAGTerminal(v.Status) {
				still = append(still, id)
			} else if w := d.windows[id]; w != nil && w.to.IsZero() {
				w.to = time.Now()
			}
		}
		pending = still
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running after %v: %s", d.o.SettleTimeout, strings.Join(pending, ", "))
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func (d *driller) readRuns() (Runs, int, error) {
	f, err := os.Open(d.runsPath)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return ParseRuns(f)
}

// account tallies one DAG from the API and runs.log. Tasks that ran more
// than once are read one by one for their full attempt history.
func (d *driller) account(ctx context.Context, id string, runs Runs) (Tally, error) {
	v, err := d.client().GetDAG(ctx, id)
	if err != nil {
		return Tally{}, err
	}
	tasks := make(map[string]*TaskState, len(v.Tasks))
	for i := range v.Tasks {
		t := &v.Tasks[i]
		if len(runs[TaskKey{id, t.ID}]) > 1 {
			if full, err := d.client().GetTask(ctx, id, t.ID); err == nil {
				t = full
			}
		}
		tasks[t.ID] = taskState(t)
	}
	killed := d.killed
	if w := d.windows[id]; w != nil {
		killed = Relevant(d.killed, w.from, w.to)
	}
	return Account(id, tasks, runs, killed), nil
}

func taskState(t *client.Task) *TaskState {
	st := &TaskState{Status: t.Status, Attempts: t.Attempts, Worker: t.Worker}
	for _, h := range t.History {
		st.History = append(st.History, AttemptState{Attempt: h.Attempt, Worker: h.Worker, Outcome: h.Outcome})
	}
	return st
}

// final waits for every drill DAG (unless interrupted), accounts them all from the final
// runs.log and fills the report's totals and verdict.
func (d *driller) final(ctx context.Context, rep *Report, wait bool) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if _, l, err := d.findLeader(lctx); err == nil {
		d.leaderURL = l.APIURL
	}
	cancel()
	if wait {
		if err := d.waitDone(ctx, d.dags); err != nil {
			d.logf("%v", err)
		}
	}
	var total Tally
	runs, malformed, err := d.readRuns()
	rep.Malformed = malformed
	byDAG := map[string]Tally{}
	if err != nil {
		d.logf("reading %s: %v", d.runsPath, err)
	}
	accountFailed := false
	for _, id := range d.dags {
		if err != nil {
			accountFailed = true
			break
		}
		t, aerr := d.account(ctx, id, runs)
		if aerr != nil {
			d.logf("accounting %s: %v", id, aerr)
			accountFailed = true
			continue
		}
		byDAG[id] = t
		total.add(t)
	}
	for i := range rep.Drills {
		r := &rep.Drills[i]
		t, ok := byDAG[r.DAG]
		if !ok {
			continue
		}
		if t.Lost != r.Lost || t.Duplicates != r.Duplicates || t.Reruns != r.Reruns {
			fmt.Fprintf(d.o.Out, "drill %d/%d: final recount: lost %d; duplicates %d; reruns after killed worker %d\n",
				r.N, d.o.Count, t.Lost, t.Duplicates, t.Reruns)
			r.Lost, r.Duplicates, r.Reruns = t.Lost, t.Duplicates, t.Reruns
		}
	}
	rep.Lost, rep.Duplicates, rep.Reruns, rep.Unlogged = total.Lost, total.Duplicates, total.Reruns, total.Unlogged
	rep.LostTasks = total.LostTasks[:min(len(total.LostTasks), maxListed)]
	rep.Findings = total.Findings[:min(len(total.Findings), maxListed)]

	var takeovers, stalls, deaths, afterDeath, readies []float64
	ok := 0
	for _, r := range rep.Drills {
		if r.TakeoverMS != nil {
			takeovers = append(takeovers, *r.TakeoverMS)
		}
		if r.DeathMS != nil {
			deaths = append(deaths, *r.DeathMS)
			if r.TakeoverMS != nil {
				afterDeath = append(afterDeath, *r.TakeoverMS-*r.DeathMS)
			}
		}
		if r.StallMS != nil {
			stalls = append(stalls, *r.StallMS)
		}
		if r.ReadyMS != nil {
			readies = append(readies, *r.ReadyMS)
		}
		rep.StandbyWrites += r.StandbyWrites
		if r.StandbyWriteMaxMS != nil && (rep.StandbyWriteMaxMS == nil || *r.StandbyWriteMaxMS > *rep.StandbyWriteMaxMS) {
			rep.StandbyWriteMaxMS = r.StandbyWriteMaxMS
		}
		if (r.TakeoverMS != nil || r.StallMS != nil) && r.Error == "" {
			ok++
		}
	}
	if len(takeovers) > 0 {
		p50, p99, mx := Percentile(takeovers, 50), Percentile(takeovers, 99), Percentile(takeovers, 100)
		rep.TakeoverP50MS, rep.TakeoverP99MS, rep.TakeoverMaxMS = &p50, &p99, &mx
	}
	if len(deaths) > 0 {
		p50, p99 := Percentile(deaths, 50), Percentile(deaths, 99)
		rep.DeathP50MS, rep.DeathP99MS = &p50, &p99
	}
	if len(afterDeath) > 0 {
		p50, p99 := Percentile(afterDeath, 50), Percentile(afterDeath, 99)
		rep.AfterDeathP50MS, rep.AfterDeathP99MS = &p50, &p99
	}
	if len(readies) > 0 {
		p50, mx := Percentile(readies, 50), Percentile(readies, 100)
		rep.ReadyP50MS, rep.ReadyMaxMS = &p50, &mx
	}
	if len(stalls) > 0 {
		p50, p99, mx := Percentile(stalls, 50), Percentile(stalls, 99), Percentile(stalls, 100)
		rep.StallP50MS, rep.StallP99MS, rep.StallMaxMS = &p50, &p99, &mx
	}
	rep.Failures = rep.Planned - ok
	if accountFailed {
		rep.Failures++
	}
	rep.OK = rep.Failures == 0 && rep.Lost == 0 && rep.Duplicates == 0 && rep.Unlogged == 0
	rep.Verdict = verdict(rep)
}

func verdict(r *Report) string {
	if r.OK {
		what := "every takeover committed"
		if r.StallMaxMS != nil && r.TakeoverMaxMS == nil {
			what = "writes resumed after every kill"
		}
		return fmt.Sprintf("PASS: %d drills, %s, no task lost, none run twice on a live worker", len(r.Drills), what)
	}
	var why []string
	if r.Failures > 0 {
		why = append(why, fmt.Sprintf("%d of %d drills failed", r.Failures, r.Planned))
	}
	if r.Lost > 0 {
		why = append(why, fmt.Sprintf("%d tasks lost", r.Lost))
	}
	if r.Duplicates > 0 {
		why = append(why, fmt.Sprintf("%d duplicate runs", r.Duplicates))
	}
	if r.Unlogged > 0 {
		why = append(why, fmt.Sprintf("%d tasks succeeded without running", r.Unlogged))
	}
	return "FAIL: " + strings.Join(why, ", ")
}

func fmtMS(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v < 10 {
		return fmt.Sprintf("%.1f ms", *v)
	}
	return fmt.Sprintf("%.0f ms", *v)
}

func (d *driller) printDrill(r *Result) {
	var b strings.Builder
	verb := map[string]string{string(FaultStop): "stopped " + d.o.StopFor.String()}[r.Fault]
	if verb == "" {
		verb = "killed"
	}
	fmt.Fprintf(&b, "drill %d/%d: %s %s (pid %d) → ", r.N, d.o.Count, verb, r.Killed, r.KilledPID)
	switch {
	case r.Fault == string(FaultEtcdMember) && r.StallMS != nil:
		fmt.Fprintf(&b, "write stall %s", fmtMS(r.StallMS))
	case r.Fault == string(FaultEtcdMember):
		b.WriteString("write stall not measured")
	case r.TakeoverMS != nil:
		fmt.Fprintf(&b, "%s leads; takeover %s", r.NewLeader, fmtMS(r.TakeoverMS))
		if r.DeathMS != nil {
			fmt.Fprintf(&b, " (process gone after %s, RSS %.0f MiB)", fmtMS(r.DeathMS), r.RSSMiB)
		}
		if r.StallMS != nil {
			fmt.Fprintf(&b, "; write stall %s", fmtMS(r.StallMS))
		}
	default:
		b.WriteString("no takeover")
	}
	if r.StandbyWrites > 0 {
		fmt.Fprintf(&b, "; %d writes through the standbys, slowest answered in %s (%d 503)", r.StandbyWrites, fmtMS(r.StandbyWriteMaxMS), r.Standby503)
	}
	fmt.Fprintf(&b, "; lost %d; duplicates %d", r.Lost, r.Duplicates)
	if r.Reruns > 0 {
		fmt.Fprintf(&b, "; reruns after killed worker %d", r.Reruns)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "; FAILED: %s", r.Error)
	}
	fmt.Fprintln(d.o.Out, b.String())
}

// Print writes the summary: takeover percentiles, totals, findings and the
// verdict line last.
func (r *Report) Print(w io.Writer) {
	if n := countTakeovers(r); n > 0 || r.StallMaxMS == nil {
		fmt.Fprintf(w, "takeover (first commit of another replica after the signal) over %d drills: p50 %s, p99 %s, max %s\n",
			n, fmtMS(r.TakeoverP50MS), fmtMS(r.TakeoverP99MS), fmtMS(r.TakeoverMaxMS))
	}
	if r.DeathP50MS != nil {
		fmt.Fprintf(w, "  of which the killed process's death (its sockets close only once the kernel has freed its memory): p50 %s, p99 %s; the takeover after it: p50 %s, p99 %s\n",
			fmtMS(r.DeathP50MS), fmtMS(r.DeathP99MS), fmtMS(r.AfterDeathP50MS), fmtMS(r.AfterDeathP99MS))
	}
	if r.ReadyP50MS != nil {
		fmt.Fprintf(w, "the killed replica restarted cold, until /readyz answered (its state loaded from etcd): p50 %s, max %s\n",
			fmtMS(r.ReadyP50MS), fmtMS(r.ReadyMaxMS))
	}
	if r.StallMaxMS != nil {
		fmt.Fprintf(w, "write stall (longest gap between acknowledged submissions, from the kill) over %d drills: p50 %s, p99 %s, max %s\n",
			countStalls(r), fmtMS(r.StallP50MS), fmtMS(r.StallP99MS), fmtMS(r.StallMaxMS))
	}
	if r.StandbyWrites > 0 {
		fmt.Fprintf(w, "writes sent to the standbys while the leader was stopped: %d, the slowest answered in %s\n",
			r.StandbyWrites, fmtMS(r.StandbyWriteMaxMS))
	}
	fmt.Fprintf(w, "totals: %d/%d drills, %d failures, %d lost, %d duplicates, %d reruns after a killed worker (allowed)\n",
		len(r.Drills), r.Planned, r.Failures, r.Lost, r.Duplicates, r.Reruns)
	if r.Unlogged > 0 {
		fmt.Fprintf(w, "%d tasks succeeded without a line in runs.log\n", r.Unlogged)
	}
	if r.Malformed > 0 {
		fmt.Fprintf(w, "%d malformed lines in runs.log\n", r.Malformed)
	}
	const show = 10
	for i, t := range r.LostTasks {
		if i == show {
			fmt.Fprintf(w, "  … and %d more lost (--json lists up to %d)\n", r.Lost-show, maxListed)
			break
		}
		fmt.Fprintf(w, "  lost: %s\n", t)
	}
	n := 0
	for _, f := range r.Findings {
		if !f.Duplicate {
			continue
		}
		if n++; n > show {
			fmt.Fprintf(w, "  … and %d more duplicates (--json lists them)\n", r.Duplicates-show)
			break
		}
		fmt.Fprintf(w, "  duplicate: %s: %s\n", f.Task, f.Reason)
	}
	fmt.Fprintf(w, "runs.log: %s\n", filepath.Join(r.WorkDir, "runs.log"))
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
}

func countStalls(r *Report) int {
	n := 0
	for _, d := range r.Drills {
		if d.StallMS != nil {
			n++
		}
	}
	return n
}

func countTakeovers(r *Report) int {
	n := 0
	for _, d := range r.Drills {
		if d.TakeoverMS != nil {
			n++
		}
	}
	return n
}

// DAGSpec is the drill DAG: n shell tasks in a few parallel chains, each
// appending "DAG/TASK ATTEMPT PPID" to runsPath and sleeping 0.2 s. PPID is
// the process that started the shell: the replica or worker running the
// attempt, which tells a run inside a killed replica from any other.
func DAGSpec(id, runsPath string, n int) ([]byte, error) {
	type task struct {
		ID         string   `json:"id"`
		Kind       string   `json:"kind"`
		Command    string   `json:"command"`
		DependsOn  []string `json:"depends_on,omitempty"`
		MaxRetries int      `json:"max_retries"`
		Timeout    string   `json:"timeout"`
	}
	chains := min(8, max(2, n/10), n)
	cmd := recordCommand(runsPath, "0.2")
	tasks := make([]task, n)
	for k := range n {
		c, step := k%chains, k/chains
		tasks[k] = task{ID: fmt.Sprintf("c%d-%03d", c, step), Kind: "shell", Command: cmd, MaxRetries: 3, Timeout: "30s"}
		if step > 0 {
			tasks[k].DependsOn = []string{fmt.Sprintf("c%d-%03d", c, step-1)}
		}
	}
	return json.Marshal(struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		Tasks []task `json:"tasks"`
	}{id, "drill-kill-leader", tasks})
}

// recordCommand is a task's command that records its run in runsPath (the
// line Runs reads), then sleeps sleep seconds ("" for none).
func recordCommand(runsPath, sleep string) string {
	cmd := `echo "$ORION_DAG_ID/$ORION_TASK_ID $ORION_ATTEMPT $PPID" >> ` + shellQuote(runsPath)
	if sleep != "" {
		cmd += "; sleep " + sleep
	}
	return cmd
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
