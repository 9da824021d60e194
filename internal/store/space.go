package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Orion never fills etcd by its own hand. etcd refuses a request that puts
// anything once its database would reach the quota (size + the request's
// cost ≥ quota-backend-bytes) and then raises its NOSPACE alarm, under which
// it refuses every put, every transaction with one, and every lease grant,
// for everybody: a leader whose 1 s lease lapses then cannot be replaced,
// since a successor needs a lease, an election key and a term record. So:
//
//   - the SpaceGauge measures etcd's database (every member, every second)
//     and counts what Orion wrote since, an estimate that errs high;
//   - the leader admits new work only while the database in use stays
//     under a share of the quota (scheduler: storage_admission_ratio),
//     keeping the rest for what it admitted to finish, be cancelled and be
//     deleted;
//   - and the Writer (and the fenced schedule writes) refuse themselves,
//     as etcd would but without raising its alarm, any transaction that
//     would take the database within Reserve of the quota: the leader then
//     holds its writes as in storage full (scheduler/storagefull.go), and
//     the reserve stays for leases, election keys and term records.

// Usage is etcd's database as the gauge last measured it.
type Usage struct {
	Known bool      // a measurement answered
	At    time.Time // when that measurement began
	// Quota is the smallest quota among the members that answered (0:
	// unknown, an etcd older than 3.6), Size the largest database (what
	// etcd compares with the quota: its high-water mark, free pages
	// included, until a defragmentation), InUse the largest part of it in
	// use (what compaction and deletes bring down).
	Quota, Size, InUse int64
	// Written is the cost (as etcd counts it) of the puts this process
	// committed since the measurement began: an upper bound of what the
	// database grew by since.
	Written int64
	// Alarm says that a member reported its NOSPACE alarm.
	Alarm bool
}

// EstSize and EstInUse are the database and its part in use now, as
// estimated: measured, plus what was written since.
func (s Usage) EstSize() int64  { return s.Size + s.Written }
func (s Usage) EstInUse() int64 { return s.InUse + s.Written }

// Reserve is the room below the quota that Orion's log writes never take
// (see above): a 32nd of the quota, at least 256 KiB and at most 64 MiB.
func Reserve(quota int64) int64 { return min(max(quota/32, 256<<10), 64<<20) }

// kvOverhead is what etcd charges each put against its quota beyond the key
// and the value (etcd's storage.kvOverhead).
const kvOverhead = 256

// PutCost is what a put of key and value costs against etcd's quota.
func PutCost(key string, valueLen int) int64 { return int64(kvOverhead + len(key) + valueLen) }

// opsCost is what a transaction carrying ops costs against the quota: its
// puts (deletes cost nothing, which is why they are accepted under NOSPACE).
func opsCost(ops []clientv3.Op) int64 {
	var n int64
	for _, op := range ops {
		if op.IsPut() {
			n += int64(kvOverhead + len(op.KeyBytes()) + len(op.ValueBytes()))
		}
	}
	return n
}

// SpaceGauge measures etcd's database and guards Orion's writes against
// reaching its quota (see above). The zero value is not usable: NewSpaceGauge.
type SpaceGauge struct {
	cli   *clientv3.Client
	every time.Duration

	mu      sync.Mutex
	usage   Usage
	written atomic.Int64 // cost of the puts committed, ever
	base    int64        // written before what the current measurement may not show
	recent  [64]wrote    // the last commits' costs, a ring (mu)
	next    int          // recent's next slot
	polling sync.Mutex   // one measurement at a time
}

// wrote is one commit's cost: written was before it, at when it was counted.
type wrote struct {
	at     time.Time
	before int64
}

// backendLag is how long a committed write may be missing from the size a
// member reports: etcd commits its backend every 100 ms (its
// --backend-batch-interval), and the size it reports, and checks its quota
// against, is the backend's. Writes committed in the lag before a
// measurement began are counted on top of it, or the guard would
// undercount what a fast writer put in the last batch.
const backendLag = 250 * time.Millisecond

// DefaultSpaceEvery is how often the gauge measures.
const DefaultSpaceEvery = time.Second

// NewSpaceGauge returns a gauge of the etcd that cli reaches, measuring
// every every (0: DefaultSpaceEvery) once Run runs.
func NewSpaceGauge(cli *clientv3.Client, every time.Duration) *SpaceGauge {
	if every <= 0 {
		every = DefaultSpaceEvery
	}
	return &SpaceGauge{cli: cli, every: every}
}

// Run measures until ctx ends.
func (g *SpaceGauge) Run(ctx context.Context) {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		g.Measure(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// spaceTimeout bounds one measurement: a member that does not answer in
// time is left out of it.
const spaceTimeout = time.Second

// Measure asks every member for its status at once and keeps the largest
// database, the smallest quota, and whether one has its NOSPACE alarm.
// A measurement no member answered leaves the last one (and what was
// written since) in place.
func (g *SpaceGauge) Measure(ctx context.Context) {
	g.polling.Lock()
	defer g.polling.Unlock()
	eps := g.cli.Endpoints()
	if len(eps) == 0 {
		return
	}
	began := time.Now()
	base := g.writtenBefore(began.Add(-backendLag))
	sctx, cancel := context.WithTimeout(ctx, spaceTimeout)
	defer cancel()
	answers := make(chan *clientv3.StatusResponse, len(eps))
	for _, ep := range eps {
		go func() {
			st, err := g.cli.Status(sctx, ep)
			if err != nil {
				st = nil
			}
			answers <- st
		}()
	}
	m := Usage{Known: true, At: began}
	got := false
	for range eps {
		st := <-answers
		if st == nil {
			continue
		}
		got = true
		m.Size, m.InUse = max(m.Size, st.DbSize), max(m.InUse, st.DbSizeInUse)
		if q := st.DbSizeQuota; q > 0 && (m.Quota == 0 || q < m.Quota) {
			m.Quota = q
		}
		for _, e := range st.Errors {
			m.Alarm = m.Alarm || strings.Contains(e, "NOSPACE")
		}
	}
	if !got {
		return
	}
	g.mu.Lock()
	g.usage, g.base = m, base
	g.mu.Unlock()
}

// Usage returns the latest measurement with what was written since it
// began.
func (g *SpaceGauge) Usage() Usage {
	g.mu.Lock()
	s, base := g.usage, g.base
	g.mu.Unlock()
	s.Written = g.written.Load() - base
	return s
}

// Wrote counts the cost of committed puts.
func (g *SpaceGauge) Wrote(cost int64) {
	now := g.written.Add(cost)
	g.mu.Lock()
	g.recent[g.next] = wrote{at: time.Now(), before: now - cost}
	g.next = (g.next + 1) % len(g.recent)
	g.mu.Unlock()
}

// writtenBefore is what was written by cutoff, or less: the count before
// the first commit after it; when the ring no longer reaches back that far,
// the current measurement's base (older still).
func (g *SpaceGauge) writtenBefore(cutoff time.Time) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	base := g.written.Load()
	for i := 1; i <= len(g.recent); i++ {
		w := g.recent[(g.next-i+len(g.recent))%len(g.recent)]
		if w.at.IsZero() || !w.at.After(cutoff) {
			return base // every commit after cutoff is counted
		}
		base = w.before
	}
	return min(base, g.base)
}

// Check refuses, with a *NoSpaceError that says it was Orion's own limit,
// a write of cost that would take the database within Reserve of the quota.
// Until a first measurement answers, nothing is refused.
func (g *SpaceGauge) Check(cost int64) error {
	if cost <= 0 {
		return nil
	}
	s := g.Usage()
	if !s.Known || s.Quota <= 0 {
		return nil
	}
	if s.EstSize()+cost > s.Quota-Reserve(s.Quota) {
		return &NoSpaceError{Quota: s.Quota, DBSize: s.EstSize(), InUse: s.EstInUse(), Guard: true}
	}
	return nil
}

// Compact drops etcd's history through rev (the leader asks when the
// database is above the admission limit, so that what retention deletes
// frees space) and measures again once the compaction is done. A revision
// compacted already is no error.
func (g *SpaceGauge) Compact(ctx context.Context, rev int64) error {
	_, err := g.cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return err
	}
	g.Measure(ctx)
	return nil
}
