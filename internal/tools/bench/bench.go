// Package bench measures Orion against a baseline taken in the same run on
// the same etcd member: raw batched puts. Figures, not assertions: the
// machines are noisy, so what matters is the ratio and the trend.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/server"
)

// Options sizes a single-node run.
type Options struct {
	DataDir    string // the server's data dir, embedded etcd inside (a temp dir by default)
	ClientURL  string // embedded etcd client URL (a free port by default)
	PeerURL    string
	Tasks      int           // noop tasks for the throughput phase
	DAGSize    int           // tasks per DAG in the throughput phase
	Chain      int           // length of the chain phase
	ShellChain int           // length of the shell chain phase
	FanOut     int           // mapped noop tasks of the fan-out phase (0: DefaultFanOut; <0: none)
	BigDAG     int           // tasks of the big-DAG phase (0: none; a multiple of BigDAGSplit)
	Submitters int           // concurrent POST /api/v1/dags of the throughput phase
	Rate       int           // offered load (tasks/s) for the latency phase
	LatencyFor time.Duration // how long the latency phase offers load
	Slots      int           // the server's own slots (noop tasks hold one only until their result)
	EtcdFor    time.Duration // how long each raw etcd phase runs
	Log        io.Writer     // progress lines; nil for none
	Logger     *zap.Logger   // the server's log
}

// Result is what `orion bench --json` prints. Keys are a contract: those of
// the cluster run, and the single node's own.
type Result struct {
	ClusterResult
	DispatchP50Ms float64 `json:"dispatch_p50_ms"`
	DispatchP99Ms float64 `json:"dispatch_p99_ms"`
	OfferedRate   int     `json:"offered_rate"`
	Slots         int     `json:"slots"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	Memory
}

// DefaultSlots is the single node's slots unless --slots says otherwise:
// enough that noop attempts in flight do not bound the throughput.
const DefaultSlots = 256

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
	if o.ShellChain <= 0 {
		o.ShellChain = DefaultShellChain
	}
	if o.Submitters <= 0 {
		o.Submitters = 4
	}
	if o.Rate <= 0 {
		o.Rate = 2000
	}
	if o.LatencyFor <= 0 {
		o.LatencyFor = 5 * time.Second
	}
	if o.Slots <= 0 {
		o.Slots = DefaultSlots
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

// Run starts `orion server` in this process, wired exactly as the command
// wires it (embedded etcd member, its slots behind the worker hub, the
// HTTP API on a free loopback port), and measures it through that API: the
// raw etcd baseline on its member, noop throughput, a chain, then ready →
// start latency under a fixed offered load.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	res := &Result{OfferedRate: o.Rate, Slots: o.Slots, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var load MachineLoad
	load.start()
	if o.DataDir == "" {
		dir, err := os.MkdirTemp("", "orion-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.DataDir = dir
	}
	cfg := config.Defaults()
	cfg.Name, cfg.Listen, cfg.DataDir, cfg.Slots = "bench", "127.0.0.1:0", o.DataDir, o.Slots
	cfg.EmbeddedClientURL, cfg.EmbeddedPeerURL = o.ClientURL, o.PeerURL
	// Free ports unless told: a bench must not collide with an `orion
	// server` already on the default ports.
	for _, u := range []*string{&cfg.EmbeddedClientURL, &cfg.EmbeddedPeerURL} {
		if *u == "" {
			free, err := freeLoopbackURL()
			if err != nil {
				return nil, err
			}
			*u = free
		}
	}
	var lat latencies
	srv, err := server.Start(ctx, cfg, o.Logger, server.WithDispatchObserver(lat.add))
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	base := "http://" + srv.HTTPAddr
	fmt.Fprintf(o.Log, "single node: orion server on %s, embedded etcd on %s, %d slots\n", base, srv.Member.ClientURL(), o.Slots)
	if err := waitUntil(ctx, 30*time.Second, func() bool { return srv.Engine().Status().Leader }); err != nil {
		return nil, fmt.Errorf("the server did not lead: %w", err)
	}
	// Its own slots join the hub just after it leads.
	if err := waitUntil(ctx, 30*time.Second, func() bool { return len(srv.Hub.Workers()) > 0 }); err != nil {
		return nil, fmt.Errorf("the server's own slots did not join: %w", err)
	}

	r, err := newClusterRun(ctx, ClusterOptions{Servers: []string{base}, EtcdEndpoints: srv.Member.Endpoints(),
		Tasks: o.Tasks, DAGSize: o.DAGSize, Chain: o.Chain, ShellChain: o.ShellChain, FanOut: o.FanOut, Submitters: o.Submitters, EtcdFor: o.EtcdFor,
		BigDAG: o.BigDAG, RunID: "bench", Poll: 20 * time.Millisecond, Log: o.Log})
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.res.Mode = "single"
	if err := r.etcdBaseline(ctx); err != nil {
		return nil, err
	}
	mem0 := readMemory()
	if err := r.orionPhases(ctx); err != nil {
		return nil, err
	}
	res.Memory = memoryFigures(mem0, readMemory(), r.res.Tasks+r.res.Chain+r.res.ShellChain)
	if err := r.outputsPhase(ctx); err != nil { // after the memory reading, which counts the phases before
		return nil, err
	}
	if err := r.fanOutPhase(ctx); err != nil {
		return nil, err
	}
	if err := r.bigDAGPhase(ctx); err != nil {
		return nil, err
	}
	res.ClusterResult = *r.res

	fmt.Fprintf(o.Log, "dispatch latency: %d tasks/s offered for %s...\n", o.Rate, o.LatencyFor)
	lat.reset()
	if err := offerLoad(ctx, r.c, o.Rate, o.LatencyFor, o.Log); err != nil {
		return nil, err
	}
	res.DispatchP50Ms, res.DispatchP99Ms = lat.quantile(0.50), lat.quantile(0.99)
	load.end()
	res.MachineLoad = load
	return res, nil
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

// offerLoad submits DAGs of 50 independent noop tasks over HTTP at a fixed
// rate for d, then waits until all have finished.
func offerLoad(ctx context.Context, c *client.Client, rate int, d time.Duration, log io.Writer) error {
	const per = 50
	interval := time.Duration(float64(time.Second) * per / float64(rate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var ids []string
	start := time.Now()
	end := start.Add(d)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(end) && i < 1_000_000; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		id := fmt.Sprintf("bench-lat-%05d", i)
		body, err := json.Marshal(independent(id, per))
		if err != nil {
			return err
		}
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Submit(ctx, body, "application/json"); err != nil {
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
		return fmt.Errorf("latency: %w", err)
	default:
	}
	_, _, err := waitDAGs(ctx, c, ids, start, time.Minute, 20*time.Millisecond, log)
	return err
}

// freeLoopbackURL is an http URL on a port of 127.0.0.1 that was free a
// moment ago.
func freeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "http://" + l.Addr().String(), nil
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

// Print writes the human table: the run through the API, then the single
// node's own figures.
func (r *Result) Print(w io.Writer) {
	r.ClusterResult.Print(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "dispatch latency p50\t%.3f ms\tready → started at %d tasks/s offered\n", r.DispatchP50Ms, r.OfferedRate)
	fmt.Fprintf(tw, "dispatch latency p99\t%.3f ms\t\n", r.DispatchP99Ms)
	r.Memory.print(tw)
	tw.Flush()
}
