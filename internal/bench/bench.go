// Package bench measures Orion against a baseline taken in the same run on
// the same etcd member: raw batched puts. Figures, not assertions: the
// machines are noisy, so what matters is the ratio and the trend.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/etcdserver"
	"github.com/orion-sched/orion/internal/executor"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/scheduler"
	"github.com/orion-sched/orion/internal/store"
)

// Options sizes a run.
type Options struct {
	DataDir    string // embedded etcd lives here (a temp dir by default)
	ClientURL  string // embedded etcd client URL (a free port by default)
	PeerURL    string
	Tasks      int           // noop tasks for the throughput phase
	DAGSize    int           // tasks per DAG in the throughput phase
	Chain      int           // length of the chain phase
	Rate       int           // offered load (tasks/s) for the latency phase
	LatencyFor time.Duration // how long the latency phase offers load
	Slots      int           // executor slots (noop tasks hold one only until their result)
	EtcdFor    time.Duration // how long the raw etcd phase runs
	Log        io.Writer     // progress lines; nil for none
	Logger     *zap.Logger
}

// Result is what `orion bench --json` prints. Keys are a contract.
type Result struct {
	EtcdPutsPerSec     float64 `json:"etcd_puts_per_sec"`
	TasksPerSec        float64 `json:"tasks_per_sec"`
	RatioToEtcd        float64 `json:"ratio_to_etcd"`
	ChainMsPerStep     float64 `json:"chain_ms_per_step"`
	DispatchP50Ms      float64 `json:"dispatch_p50_ms"`
	DispatchP99Ms      float64 `json:"dispatch_p99_ms"`
	RSSBytesPerTask    float64 `json:"rss_bytes_per_task"`
	HeapBytesPerTask   float64 `json:"heap_bytes_per_task"`
	EtcdDBBytesPer1000 float64 `json:"etcd_db_bytes_per_1000_tasks"`
	Tasks              int     `json:"tasks"`
	DAGSize            int     `json:"dag_size"`
	Chain              int     `json:"chain"`
	OfferedRate        int     `json:"offered_rate"`
	Slots              int     `json:"slots"`
	CommitsPerSec      float64 `json:"commits_per_sec"`
	EntriesPerCommit   float64 `json:"entries_per_commit"`
	GOMAXPROCS         int     `json:"gomaxprocs"`
}

func (o *Options) defaults() {
	if o.Tasks <= 0 {
		o.Tasks = 100000
	}
	if o.DAGSize <= 0 {
		o.DAGSize = 1000
	}
	if o.Chain <= 0 {
		o.Chain = 1000
	}
	if o.Rate <= 0 {
		o.Rate = 2000
	}
	if o.LatencyFor <= 0 {
		o.LatencyFor = 5 * time.Second
	}
	if o.Slots <= 0 {
		o.Slots = 4096
	}
	if o.EtcdFor <= 0 {
		o.EtcdFor = 3 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

// Run starts an embedded etcd member and an engine in this process and
// measures every phase in turn.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	res := &Result{Tasks: o.Tasks, DAGSize: o.DAGSize, Chain: o.Chain, OfferedRate: o.Rate, Slots: o.Slots, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if o.DataDir == "" {
		dir, err := os.MkdirTemp("", "orion-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.DataDir = dir
	}
	member, err := etcdserver.Start(ctx, etcdserver.Config{Name: "bench", DataDir: o.DataDir + "/etcd",
		ClientURL: o.ClientURL, PeerURL: o.PeerURL, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	defer member.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: member.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	fmt.Fprintf(o.Log, "raw etcd: batched puts (%d per txn) for %s...\n", store.DefaultLimits.MaxOps, o.EtcdFor)
	res.EtcdPutsPerSec, err = etcdCeiling(ctx, cli, o.EtcdFor)
	if err != nil {
		return nil, err
	}

	rssBase, heapBase := memory()
	var lat latencies
	exec, err := executor.NewLocal(executor.LocalConfig{ID: "bench", Slots: o.Slots, LogDir: o.DataDir + "/logs", Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer exec.Close()
	eng := scheduler.New(scheduler.Config{Node: "bench", Logger: o.Logger, DispatchObserver: lat.add}, store.NewEtcd(cli), exec)
	ectx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-eng.Done() }()
	go eng.Run(ectx)
	if err := waitUntil(ctx, 10*time.Second, func() bool { return eng.Status().Leader }); err != nil {
		return nil, fmt.Errorf("engine did not become leader: %w", err)
	}

	fmt.Fprintf(o.Log, "throughput: %d noop tasks in DAGs of %d...\n", o.Tasks, o.DAGSize)
	commits0, entries0 := eng.CommitStats()
	start := time.Now()
	done, err := runDAGs(ctx, eng, "tp", o.Tasks/o.DAGSize, func(i int) *model.DAG { return independent(fmt.Sprintf("tp-%05d", i), o.DAGSize) }, 4)
	if err != nil {
		return nil, err
	}
	el := time.Since(start)
	res.TasksPerSec = float64(done) / el.Seconds()
	res.RatioToEtcd = res.TasksPerSec / res.EtcdPutsPerSec
	if c, n := eng.CommitStats(); c > commits0 {
		res.CommitsPerSec = float64(c-commits0) / el.Seconds()
		res.EntriesPerCommit = float64(n-entries0) / float64(c-commits0)
	}

	rss, heap := memory()
	res.RSSBytesPerTask = float64(rss-rssBase) / float64(done)
	res.HeapBytesPerTask = float64(heap-heapBase) / float64(done)
	if st, err := cli.Status(ctx, member.Endpoints()[0]); err == nil {
		res.EtcdDBBytesPer1000 = float64(st.DbSizeInUse) / float64(done) * 1000
	}

	fmt.Fprintf(o.Log, "chain: %d tasks, each waiting on the previous...\n", o.Chain)
	start = time.Now()
	if _, err := runDAGs(ctx, eng, "chain", 1, func(int) *model.DAG { return chain("chain", o.Chain) }, 1); err != nil {
		return nil, err
	}
	res.ChainMsPerStep = float64(time.Since(start).Microseconds()) / 1000 / float64(o.Chain)

	fmt.Fprintf(o.Log, "dispatch latency: %d tasks/s offered for %s...\n", o.Rate, o.LatencyFor)
	lat.reset()
	if err := offerLoad(ctx, eng, o.Rate, o.LatencyFor); err != nil {
		return nil, err
	}
	res.DispatchP50Ms, res.DispatchP99Ms = lat.quantile(0.50), lat.quantile(0.99)
	return res, nil
}

// etcdCeiling measures sequential transactions of MaxOps puts of values the
// size of a task record: what Orion's group commit could reach at best.
func etcdCeiling(ctx context.Context, cli *clientv3.Client, d time.Duration) (float64, error) {
	rate, err := etcdPuts(ctx, cli, d, 1)
	if err != nil {
		return 0, err
	}
	_, err = cli.Delete(ctx, "/orion-bench/", clientv3.WithPrefix())
	return rate, err
}

func independent(id string, n int) *model.DAG {
	d := &model.DAG{ID: id, Name: id}
	for i := 0; i < n; i++ {
		d.Tasks = append(d.Tasks, model.Task{ID: "t" + strconv.Itoa(i), Kind: model.KindNoop, MaxRetries: 3})
	}
	d.Normalize()
	return d
}

func chain(id string, n int) *model.DAG {
	d := &model.DAG{ID: id, Name: id}
	for i := 0; i < n; i++ {
		t := model.Task{ID: "t" + strconv.Itoa(i), Kind: model.KindNoop, MaxRetries: 3}
		if i > 0 {
			t.DependsOn = []string{"t" + strconv.Itoa(i-1)}
		}
		d.Tasks = append(d.Tasks, t)
	}
	d.Normalize()
	return d
}

// runDAGs submits count DAGs from `parallel` goroutines and waits until all
// have finished; it returns the number of tasks that succeeded.
func runDAGs(ctx context.Context, eng *scheduler.Engine, name string, count int, mk func(int) *model.DAG, parallel int) (int, error) {
	var wg sync.WaitGroup
	errs := make(chan error, count)
	next := make(chan int, count)
	ids := make([]string, count)
	for i := 0; i < count; i++ {
		next <- i
		ids[i] = mk(i).ID
	}
	close(next)
	for p := 0; p < parallel; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := eng.Submit(ctx, mk(i)); err != nil {
					errs <- fmt.Errorf("%s: submit: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	succeeded := 0
	err := waitUntil(ctx, 10*time.Minute, func() bool {
		finished, ok := 0, 0
		_ = eng.Query(ctx, func(c *core.Core) {
			for _, id := range ids {
				if v, found := c.Summary(id); found && v.Status.Terminal() && v.Status != core.DAGCancelled {
					finished++
					ok += v.Counts["succeeded"]
				}
			}
		})
		succeeded = ok
		return finished == len(ids)
	})
	return succeeded, err
}

// offerLoad submits small DAGs of independent tasks at a fixed rate.
func offerLoad(ctx context.Context, eng *scheduler.Engine, rate int, d time.Duration) error {
	const per = 50
	interval := time.Duration(float64(time.Second) * per / float64(rate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var ids []string
	end := time.Now().Add(d)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		id := fmt.Sprintf("lat-%05d", i)
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := eng.Submit(ctx, independent(id, per)); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return waitUntil(ctx, time.Minute, func() bool {
		n := 0
		_ = eng.Query(ctx, func(c *core.Core) {
			for _, id := range ids {
				if v, ok := c.Summary(id); ok && v.Status.Terminal() {
					n++
				}
			}
		})
		return n == len(ids)
	})
}

func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

type latencies struct {
	mu sync.Mutex
	s  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	if len(l.s) < 1<<22 {
		l.s = append(l.s, d)
	}
	l.mu.Unlock()
}

func (l *latencies) reset() { l.mu.Lock(); l.s = l.s[:0]; l.mu.Unlock() }

func (l *latencies) quantile(q float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.s) == 0 {
		return math.NaN()
	}
	s := append([]time.Duration(nil), l.s...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}

// memory returns the process RSS and live heap after a GC.
func memory() (rss, heap uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = ms.HeapAlloc
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, heap
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				rss = kb * 1024
			}
		}
	}
	return rss, heap
}

// Print writes the human table.
func (r *Result) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "MEASURE\tVALUE\tNOTE\n")
	fmt.Fprintf(tw, "raw etcd batched puts\t%.0f puts/s\tbaseline: %d puts per txn, same member\n", r.EtcdPutsPerSec, store.DefaultLimits.MaxOps)
	fmt.Fprintf(tw, "durable noop throughput\t%.0f tasks/s\t%d tasks in DAGs of %d; %.2f× the etcd baseline\n", r.TasksPerSec, r.Tasks, r.DAGSize, r.RatioToEtcd)
	fmt.Fprintf(tw, "commits\t%.0f/s\t%.1f entries per commit\n", r.CommitsPerSec, r.EntriesPerCommit)
	fmt.Fprintf(tw, "chain\t%.3f ms/step\t%d tasks in a line\n", r.ChainMsPerStep, r.Chain)
	fmt.Fprintf(tw, "dispatch latency p50\t%.3f ms\tready → started at %d tasks/s offered\n", r.DispatchP50Ms, r.OfferedRate)
	fmt.Fprintf(tw, "dispatch latency p99\t%.3f ms\t\n", r.DispatchP99Ms)
	fmt.Fprintf(tw, "RSS per retained task\t%.0f bytes\tincludes the in-process etcd member; Go heap: %.0f bytes/task\n", r.RSSBytesPerTask, r.HeapBytesPerTask)
	fmt.Fprintf(tw, "etcd db per 1000 tasks\t%.0f bytes\tin use, before compaction\n", r.EtcdDBBytesPer1000)
	tw.Flush()
}
