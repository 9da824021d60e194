package events

import (
	"errors"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/engine"
)

// Metrics is the body of a metrics event. The hub fills Totals, Throughput,
// ThroughputWindow, DroppedEvents and Subscribers itself; the rest comes
// from Config.Snapshot (FillFromStatus does most of it).
type Metrics struct {
	Node   string `json:"node"`
	Role   string `json:"role"` // leader, standby, or down (the engine is not running)
	Leader string `json:"leader"`
	// LeaderKnown says Leader was looked up (on a standby: Engine.Leader),
	// so that "" means there is no leader. Only then does a change of
	// Leader produce a leader event.
	LeaderKnown bool `json:"-"`

	Revision int64          `json:"revision"` // applied revision
	Lag      int64          `json:"lag"`
	Tasks    map[string]int `json:"tasks"` // tasks held, by status
	DAGs     int            `json:"dags"`

	QueueSize int `json:"queue_size"` // tasks ready, waiting for a slot
	Running   int `json:"running"`

	Totals           Totals  `json:"totals"`
	Throughput       float64 `json:"throughput"` // tasks succeeded or failed per second
	ThroughputWindow float64 `json:"throughput_window_s"`
	DroppedEvents    int64   `json:"dropped_events"`
	Subscribers      int     `json:"subscribers"`

	DispatchP50Ms *float64 `json:"dispatch_p50_ms,omitempty"`
	DispatchP99Ms *float64 `json:"dispatch_p99_ms,omitempty"`

	WorkerSlots int            `json:"worker_slots"`
	WorkersBusy int            `json:"workers_busy"`
	Workers     []WorkerLoad   `json:"workers"`
	Replicas    []ReplicaState `json:"replicas,omitempty"`
}

// Totals count what this replica applied since its hub started. Every
// replica applies the same entries, so they agree on everything applied
// while both were up.
type Totals struct {
	Started        int64 `json:"started"` // attempts dispatched
	Succeeded      int64 `json:"succeeded"`
	Failed         int64 `json:"failed"` // failed for good
	Retried        int64 `json:"retried"`
	UpstreamFailed int64 `json:"upstream_failed"`
	Cancelled      int64 `json:"cancelled"`
	Skipped        int64 `json:"skipped"`
	DAGsSubmitted  int64 `json:"dags_submitted"`
	DAGsFinished   int64 `json:"dags_finished"`
}

func (t *Totals) count(ev *Event) {
	switch ev.Type {
	case TypeTask:
		switch ev.Status {
		case "running":
			t.Started++
		case "succeeded":
			t.Succeeded++
		case "failed":
			t.Failed++
		case "retrying":
			t.Retried++
		case "upstream_failed":
			t.UpstreamFailed++
		case "cancelled":
			t.Cancelled++
		case "skipped":
			t.Skipped++
		}
	case TypeDAG:
		switch {
		case ev.Status == string(core.DAGRunning) && ev.Run == 1:
			t.DAGsSubmitted++
		case ev.Status != string(core.DAGRunning):
			t.DAGsFinished++
		}
	}
}

// WorkerLoad is one executor's slots.
type WorkerLoad struct {
	ID    string `json:"id"`
	Slots int    `json:"slots"`
	Busy  int    `json:"busy"`
}

// ReplicaState is one replica as the cluster endpoint sees it.
type ReplicaState struct {
	Name            string `json:"name"`
	Role            string `json:"role"`
	AppliedRevision int64  `json:"applied_revision"`
	Lag             int64  `json:"lag"`
	Reachable       bool   `json:"reachable"`
}

// FillFromStatus fills m from a replica's status: node, role, revision,
// lag, task counts, queue, running and the workers (the leader's view). A
// nil status or one not loaded gives role "down". On the leader it sets
// Leader; a standby must look its leader up (Engine.Leader) and set Leader
// and LeaderKnown itself.
func FillFromStatus(m *Metrics, st *engine.Status) {
	if st == nil {
		m.Role = "down"
		return
	}
	m.Node = st.Node
	switch {
	case !st.Loaded:
		m.Role = "down"
	case st.Leader:
		m.Role, m.Leader, m.LeaderKnown = "leader", st.Node, true
	default:
		m.Role = "standby"
	}
	m.Revision, m.Lag, m.DAGs = st.AppliedRev, st.Lag, st.DAGs
	m.Tasks = make(map[string]int, len(st.Counts))
	for s, n := range st.Counts {
		m.Tasks[s.String()] = n
	}
	m.QueueSize, m.Running = st.Counts[core.Ready], st.Counts[core.Running]
	m.Workers = make([]WorkerLoad, 0, len(st.Workers))
	m.WorkerSlots, m.WorkersBusy = 0, 0
	for _, w := range st.Workers {
		m.Workers = append(m.Workers, WorkerLoad{ID: w.ID, Slots: w.Slots, Busy: w.Busy})
		m.WorkerSlots += w.Slots
		m.WorkersBusy += w.Busy
	}
	sort.Slice(m.Workers, func(i, j int) bool { return m.Workers[i].ID < m.Workers[j].ID })
}

// Quantiles computes percentiles of a Prometheus histogram over a sliding
// window, from the difference between its buckets now and as they were
// a window ago, so they describe recent samples rather than the process's
// whole life. Safe for concurrent use.
type Quantiles struct {
	g      prometheus.Gatherer
	window time.Duration

	mu    sync.Mutex
	snaps []histSnap
}

// maxSnaps bounds the snapshots kept however often Sample is called.
const maxSnaps = 1024

var errNoHistogram = errors.New("events: the collector has no histogram")

type histSnap struct {
	at     time.Time
	bounds []float64 // upper bounds; the last is +Inf
	cum    []uint64  // cumulative counts per bound
}

// NewQuantiles watches the histogram h (for instance
// metrics.DispatchLatency) over the given window (default 10 s). It
// registers h in a private registry, which does not disturb h's other
// registrations.
func NewQuantiles(h prometheus.Collector, window time.Duration) (*Quantiles, error) {
	if window <= 0 {
		window = 10 * time.Second
	}
	r := prometheus.NewRegistry()
	if err := r.Register(h); err != nil {
		return nil, err
	}
	return &Quantiles{g: r, window: window}, nil
}

// Sample reads the histogram and returns the values at quantiles qs (each in
// [0,1], in the histogram's unit) over the last window; ok is false when the
// window holds no sample. Call it regularly (the hub's snapshot, every
// second, is a good place); the first call only takes a reference point.
func (q *Quantiles) Sample(now time.Time, qs ...float64) (vals []float64, ok bool) {
	cur, err := q.read(now)
	if err != nil {
		return nil, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.snaps = append(q.snaps, cur)
	// Keep the newest snapshot at least a window old as the reference.
	for len(q.snaps) > 2 && (now.Sub(q.snaps[1].at) >= q.window || len(q.snaps) > maxSnaps) {
		q.snaps = q.snaps[1:]
	}
	ref := q.snaps[0]
	if len(q.snaps) == 1 || len(ref.cum) != len(cur.cum) {
		return nil, false
	}
	delta := make([]uint64, len(cur.cum))
	for i := range cur.cum {
		if cur.cum[i] >= ref.cum[i] {
			delta[i] = cur.cum[i] - ref.cum[i]
		}
	}
	total := delta[len(delta)-1]
	if total == 0 {
		return nil, false
	}
	vals = make([]float64, len(qs))
	for k, p := range qs {
		vals[k] = bucketQuantile(p, cur.bounds, delta)
	}
	return vals, true
}

// bucketQuantile interpolates linearly within the bucket holding the rank,
// as Prometheus's histogram_quantile does.
func bucketQuantile(p float64, bounds []float64, cum []uint64) float64 {
	total := float64(cum[len(cum)-1])
	rank := p * total
	for i, c := range cum {
		if float64(c) < rank || c == 0 {
			continue
		}
		lo, loCount := 0.0, 0.0
		if i > 0 {
			lo, loCount = bounds[i-1], float64(cum[i-1])
		}
		hi := bounds[i]
		if i == len(bounds)-1 { // +Inf bucket: the last finite bound is all we know
			return lo
		}
		in := float64(c) - loCount
		if in <= 0 {
			return hi
		}
		return lo + (hi-lo)*(rank-loCount)/in
	}
	return bounds[len(bounds)-1]
}

func (q *Quantiles) read(now time.Time) (histSnap, error) {
	mfs, err := q.g.Gather()
	if err != nil {
		return histSnap{}, err
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			s := histSnap{at: now}
			for _, b := range h.GetBucket() {
				s.bounds = append(s.bounds, b.GetUpperBound())
				s.cum = append(s.cum, b.GetCumulativeCount())
			}
			if n := len(s.bounds); n == 0 || !math.IsInf(s.bounds[n-1], 1) {
				s.bounds = append(s.bounds, math.Inf(1))
				s.cum = append(s.cum, h.GetSampleCount())
			}
			return s, nil
		}
	}
	return histSnap{}, errNoHistogram
}
