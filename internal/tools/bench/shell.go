package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// ShellFloorCommand is what a shell chain step runs, and what the floor
// runs N times in a row from the bench process.
const ShellFloorCommand = "true"

// shellFloor runs `/bin/sh -c true` n times in a row from this process
// (os/exec, no pipes) and returns the wall time and this process's own CPU
// (children excluded) per run, in ms. It is the physical floor of a chain of
// shell tasks on this host: fork, exec and wait, with nothing scheduled.
func shellFloor(ctx context.Context, n int) (msPerStep, cpuMsPerStep float64, err error) {
	cpu0 := selfCPU()
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if err := exec.CommandContext(ctx, "/bin/sh", "-c", ShellFloorCommand).Run(); err != nil {
			return 0, 0, fmt.Errorf("/bin/sh -c %s: %w", ShellFloorCommand, err)
		}
	}
	el := time.Since(start)
	cpu := selfCPU() - cpu0
	return ms(el) / float64(n), ms(cpu) / float64(n), nil
}

// selfCPU is this process's user+system CPU time, its children's excluded
// (RUSAGE_SELF: the task processes a server runs are its children and are
// counted under RUSAGE_CHILDREN instead).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// processCPUMetric is the standard Prometheus process collector's counter:
// user+system CPU of the process itself (from /proc/self/stat utime+stime,
// children excluded), in seconds with the kernel's clock-tick resolution.
const processCPUMetric = "process_cpu_seconds_total"

// fetchMetrics GETs base/metrics (Prometheus text), at most 16 MiB of it.
func fetchMetrics(ctx context.Context, tr http.RoundTripper, base, token string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

// parseCounter reads one unlabelled sample named name from Prometheus text
// exposition.
func parseCounter(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name+" ")), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no " + name + " in /metrics")
}

// cpuSample is process_cpu_seconds_total of each process a cluster run can
// read it from, keyed by URL; processes that did not answer are missing.
type cpuSample map[string]float64

// scrapeCPU reads process_cpu_seconds_total from each base URL's /metrics.
// token goes only to the Orion replicas (etcd members want none).
func scrapeCPU(ctx context.Context, tr http.RoundTripper, bases []string, token string) (cpuSample, map[string]error) {
	s, errs := cpuSample{}, map[string]error{}
	for _, b := range bases {
		raw, err := fetchMetrics(ctx, tr, b, token)
		if err == nil {
			var v float64
			if v, err = parseCounter(strings.NewReader(string(raw)), processCPUMetric); err == nil {
				s[b] = v
				continue
			}
		}
		errs[b] = err
	}
	return s, errs
}

// cpuDelta sums after−before over the URLs of both samples (and says how
// many), in ms.
func cpuDelta(before, after cpuSample, urls []string) (msTotal float64, n int) {
	for _, u := range urls {
		b, ok0 := before[u]
		a, ok1 := after[u]
		if ok0 && ok1 && a >= b {
			msTotal += (a - b) * 1000
			n++
		}
	}
	return msTotal, n
}

// DefaultShellChain is the length of the shell chain phase.
const DefaultShellChain = 200

// shellChainDAG is a chain of n shell tasks, each running `true`.
func shellChainDAG(id string, n int) *model.DAG {
	d := chain(id, n)
	for i := range d.Tasks {
		d.Tasks[i].Kind, d.Tasks[i].Command = model.KindShell, ShellFloorCommand
	}
	d.Normalize()
	return d
}

// shellPhase runs the floor, a chain of shell tasks through the API, and
// the floor again (the mean of both is the figure: the machine's load drifts
// over a run), and reads Orion's CPU over the chain.
func (r *clusterRun) shellPhase(ctx context.Context) error {
	o, res, c := r.o, r.res, r.c
	n := o.ShellChain
	fmt.Fprintf(o.Log, "shell chain: the floor first, /bin/sh -c %s %d times in a row from this process...\n", ShellFloorCommand, n)
	f0, fc0, err := shellFloor(ctx, n)
	if err != nil {
		return fmt.Errorf("shell floor: %w", err)
	}
	fmt.Fprintf(o.Log, "shell chain: %d shell tasks running %s, each waiting on the previous...\n", n, ShellFloorCommand)
	id := o.RunID + "-shell"
	body, err := json.Marshal(shellChainDAG(id, n))
	if err != nil {
		return err
	}
	single := res.Mode == "single"
	leader := r.leaderURL()
	cpu0 := r.probeCPU(ctx)
	start := time.Now()
	r.submitted = append(r.submitted, id)
	if err := submitAll(ctx, c, [][]byte{body}, 1); err != nil {
		return fmt.Errorf("shell chain: %w", err)
	}
	t, end, err := waitDAGs(ctx, c, []string{id}, start, o.Timeout, o.Poll, o.Log)
	if err != nil {
		return fmt.Errorf("shell chain: %w", err)
	}
	cpu1 := r.probeCPU(ctx)
	if t.Succeeded != n {
		return fmt.Errorf("shell chain: %d of %d tasks succeeded (can the workers run /bin/sh -c %s?)", t.Succeeded, n, ShellFloorCommand)
	}
	if cl, err := c.Cluster(ctx); err == nil {
		res.noteLeader(o.Log, "shell chain", res.Leader, cl.Leader)
	}
	f1, fc1, err := shellFloor(ctx, n)
	if err != nil {
		return fmt.Errorf("shell floor: %w", err)
	}

	res.ShellChainMsPerStep = ms(end.Sub(start)) / float64(n)
	res.ShellFloorMsPerStep = (f0 + f1) / 2
	res.ShellOverheadMsPerStep = res.ShellChainMsPerStep - res.ShellFloorMsPerStep
	res.ShellFloorCPUMsPerStep = (fc0 + fc1) / 2
	spent := spentBetween(single, cpu0, cpu1, o.EtcdEndpoints, leader, c.BaseURLs()).per(n, 1) // ms per step
	if single {
		res.CPUScope = "single node: the bench process's own CPU (RUSAGE_SELF): the orion server, its embedded etcd member and the bench's HTTP client; the task processes (children) are excluded"
		res.OrionCPUMsPerShellStep = spent.Self
		return nil
	}
	res.CPUScope = "cluster: process_cpu_seconds_total from each process's /metrics (its own CPU, task processes excluded, 10 ms resolution), and /proc/PID/stat of the standalone workers on this host (the same, by the pid each reports); the leader also answers the bench's polling"
	res.OrionCPUMsPerShellStep, res.StandbysCPUMsPerShellStep = spent.Leader, spent.Standbys
	res.WorkersCPUMsPerShellStep, res.EtcdCPUMsPerShellStep = spent.Workers, spent.Etcd
	res.CPUNotes = append(res.CPUNotes, spent.Notes...)
	return nil
}

func ptr(v float64) *float64 { return &v }

func joinErrs(errs map[string]error) string {
	var parts []string
	for u, err := range errs {
		parts = append(parts, u+": "+err.Error())
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "counter went backwards: a process restarted"
	}
	return strings.Join(parts, "; ")
}

// dbInUse is each member's database size in use (dbSizeInUse), by
// endpoint; an error names the members that did not answer.
func (r *clusterRun) dbInUse(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	var errs []error
	for _, ep := range r.o.EtcdEndpoints {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := r.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		out[ep] = st.DbSizeInUse
	}
	return out, errors.Join(errs...)
}

// dbPer1000 is the largest growth of a member's database in use between
// two readings, per 1000 of the tasks written in between, or nil and why
// not. It counts every revision written (a task's dispatch and result are
// two), before compaction: a compaction in between frees pages, and the
// difference then measures nothing.
func dbPer1000(before, after map[string]int64, err error, tasks int) (*float64, string) {
	if err != nil {
		return nil, "etcd status unreadable: " + err.Error()
	}
	if tasks <= 0 {
		return nil, "no task written"
	}
	var growth int64
	n := 0
	for ep, b := range before {
		a, ok := after[ep]
		if !ok {
			continue
		}
		if a < b {
			return nil, fmt.Sprintf("the db in use fell on %s (%d → %d bytes): a compaction ran during the phases", ep, b, a)
		}
		growth = max(growth, a-b)
		n++
	}
	if n == 0 {
		return nil, "no member answered twice"
	}
	if growth == 0 {
		return nil, "the db in use did not grow"
	}
	return ptr(float64(growth) / float64(tasks) * 1000), ""
}
