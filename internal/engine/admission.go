package engine

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// Storage admission: the leader admits new work (a submission, a retry)
// only while etcd's database in use stays under a share of its quota
// (Config.StorageAdmission, storage_admission_ratio), counting what the
// DAGs already running have yet to write. The rest of the quota is kept
// for them to finish, be cancelled and be deleted, and, below the store's
// guard (store.Reserve), for leases, election keys and term records: Orion
// never fills etcd itself, so its NOSPACE alarm, under which no new leader
// can be elected, is never raised by Orion's writes (store/space.go).
//
// Above the limit the leader relieves the pressure by itself: it deletes
// finished DAGs ahead of their retention, those that finished first first,
// about as many as the excess is worth, and compacts etcd's history (the
// deleted records free space only once the history that holds them is
// gone). Each pass waits for its deletes to commit and for a compaction
// and a measurement after them before the next one is planned, so that it
// deletes no more than it must. With nothing finished left to delete, new
// work waits for running DAGs to finish, or to be cancelled.

// Storage is what the leader knows of etcd's space (*store.SpaceGauge).
type Storage interface {
	// Usage is the latest measurement with what was written since.
	Usage() store.Usage
	// Compact drops etcd's history through rev, then measures again.
	Compact(ctx context.Context, rev int64) error
}

var _ Storage = (*store.SpaceGauge)(nil)

// perTaskReserve is what the admission counts for each task of the DAGs
// running, beyond what they have written: the record each still has to
// write (a cancelled task that never ran writes about 300 bytes, key and
// etcd's overhead included; a task's final record with an output tail
// more). An estimate: the store's guard is the bound.
const perTaskReserve = 512

// Timings of the pressure relief.
const (
	pressureCompactEvery = 2 * time.Second // at most one compaction this often
	compactTimeout       = 30 * time.Second
	maxPressureDeletes   = 1000 // per pass
)

// AdmissionError is new work refused because etcd's database is above the
// admission limit; nothing was written. errors.Is(err, ErrStorageFull).
type AdmissionError struct {
	What  string // "DAG d1", "the retry of DAG d1"
	Usage store.Usage
	Need  int64 // the database in use the admission counted, this work included
	Limit int64
	Ratio float64
}

func (e *AdmissionError) Error() string {
	return fmt.Sprintf("storage full: etcd's database holds %s in use of its %s quota (%s with what the DAGs running have yet to "+
		"write and this one); new work is admitted up to %s (storage_admission_ratio %g), keeping the rest for the DAGs already "+
		"admitted to finish or be cancelled. %s was not written. Finished DAGs are being deleted ahead of their retention, "+
		"oldest first: retry later (with the same DAG id), cancel or delete DAGs, or raise the quota",
		mib(e.Usage.EstInUse()), mib(e.Usage.Quota), mib(e.Need), mib(e.Limit), e.Ratio, e.What)
}

func (e *AdmissionError) Is(target error) bool { return target == ErrStorageFull }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// storageNeed is the database in use that the admission counts: as
// estimated now, plus what the DAGs running have yet to write (reserved:
// each task's record, and each DAG's record once more, written when it
// finishes or is cancelled), plus extra.
func storageNeed(u store.Usage, reserved, extra int64) int64 { return u.EstInUse() + reserved + extra }

// admissionLimit is the database in use above which new work is refused.
func admissionLimit(u store.Usage, ratio float64) int64 { return int64(float64(u.Quota) * ratio) }

// reserved is what the DAGs running have yet to write, as storageNeed
// counts it.
func (e *Engine) reserved() int64 {
	_, tasks := e.c.Live()
	return perTaskReserve*int64(tasks) + int64(e.c.LiveRecordBytes())
}

// workCost is what new work counts for in the admission: its record
// written now (cost), once more when it ends, and its tasks' records.
func workCost(cost int64, d *model.DAG) int64 {
	return cost + int64(core.RecordBytes(d)) + perTaskReserve*int64(len(d.Tasks))
}

// storageApplies reports whether the admission has something to judge by.
func (e *Engine) storageApplies(u store.Usage) bool {
	return e.cfg.Storage != nil && e.cfg.StorageAdmission > 0 && u.Known && u.Quota > 0
}

// admitStorage refuses new work when it would take the database above the
// admission limit; work is what it counts for (workCost).
func (e *Engine) admitStorage(what string, work int64) error {
	if e.cfg.Storage == nil {
		return nil
	}
	u := e.cfg.Storage.Usage()
	if !e.storageApplies(u) {
		return nil
	}
	limit, need := admissionLimit(u, e.cfg.StorageAdmission), storageNeed(u, e.reserved(), work)
	if need <= limit {
		return nil
	}
	e.m.StorageFullRefused.Inc()
	e.m.Refused.WithLabelValues("storage_admission_ratio").Inc()
	// The relief makes room for it: a DAG larger than what is left is
	// refused until finished DAGs are deleted, whether or not the
	// database is above the limit without it.
	p := &e.press
	if now := e.clock.Now(); work > p.demand || now.After(p.demandUntil) {
		p.demand = work
	}
	p.demandUntil = e.clock.Now().Add(demandFor)
	return &AdmissionError{What: what, Usage: u, Need: need, Limit: limit, Ratio: e.cfg.StorageAdmission}
}

// demandFor is how long a refusal keeps the relief making room for the
// work it refused: its client is expected to try again within it.
const demandFor = time.Minute

// pressure is the leader's pressure relief (above); loop-owned.
type pressure struct {
	limited     bool  // above the limit at the last look
	demand      int64 // the largest work refused lately (cost and tasks' reserve), until demandUntil
	demandUntil time.Time
	deleting    map[string]bool // this pass's deletes, until they apply
	deletedRev  int64           // the revision of the pass's last delete
	compacting  bool            // a compaction runs
	compacted   int64           // the revision the last compaction reached
	lastCompact time.Time
	starved     bool      // said once that nothing finished is left to delete
	saidAt      time.Time // when crossing the limit was last logged
}

// relieve looks at the space and, above the admission limit, deletes and
// compacts (above). It runs on the loop's housekeeping tick.
func (e *Engine) relieve(ctx context.Context, now time.Time) {
	if e.cfg.Storage == nil {
		return
	}
	u := e.cfg.Storage.Usage()
	p := &e.press
	if now.After(p.demandUntil) {
		p.demand = 0
	}
	ok := e.storageApplies(u)
	limit, need := admissionLimit(u, e.cfg.StorageAdmission), storageNeed(u, e.reserved(), p.demand)
	if ok {
		e.m.StorageInUse.Set(float64(u.EstInUse()))
		e.m.StorageLimit.Set(float64(limit))
	}
	limited := ok && need > limit
	e.m.StorageLimited.Set(b2f(limited))
	if limited != p.limited {
		p.limited, p.starved = limited, false
		// Said at most once a minute: at the limit, each DAG admitted or
		// finished can cross it.
		quiet := now.Sub(p.saidAt) < time.Minute
		if !quiet {
			p.saidAt = now
		}
		if limited && !quiet {
			e.log.Warn("etcd's database is above the storage admission limit: new DAGs and retries are refused with 507, "+
				"and finished DAGs are deleted ahead of their retention, oldest first, until it is under",
				zap.Int64("in_use_bytes", u.EstInUse()), zap.Int64("counted_bytes", need), zap.Int64("limit_bytes", limit),
				zap.Int64("quota_bytes", u.Quota))
		} else if ok && !quiet {
			e.log.Info("etcd's database is under the storage admission limit again: new work is admitted",
				zap.Int64("in_use_bytes", u.EstInUse()), zap.Int64("limit_bytes", limit))
		}
	}
	if !limited || !e.c.IsLeader() {
		return
	}
	rev := e.c.Rev()
	if !p.compacting && rev > p.compacted && now.Sub(p.lastCompact) >= pressureCompactEvery {
		p.compacting, p.lastCompact = true, now
		go func() {
			cctx, cancel := context.WithTimeout(ctx, compactTimeout)
			err := e.cfg.Storage.Compact(cctx, rev)
			cancel()
			_ = e.do(ctx, func() { e.compacted(rev, err) })
		}()
	}
	if len(p.deleting) > 0 || p.compacting || p.compacted < p.deletedRev {
		return // the last pass has not shown in a measurement yet
	}
	excess := need - limit + limit/20 // a margin, so that the next DAG does not cross it again at once
	n := int64(1)
	if dags := e.c.DAGCount(); dags > 0 && u.EstInUse() > 0 {
		per := max(u.EstInUse()/int64(dags), 1)
		n = (excess + per - 1) / per
	}
	ids := e.c.ExpireOldest(int(min(max(n, 1), maxPressureDeletes)))
	if len(ids) == 0 {
		if !p.starved {
			p.starved = true
			e.log.Warn("etcd's database is above the storage admission limit and no finished DAG is left to delete: "+
				"new work waits for the DAGs running to finish, or to be cancelled", zap.Int64("counted_bytes", need),
				zap.Int64("limit_bytes", limit))
		}
		return
	}
	p.starved = false
	if p.deleting == nil {
		p.deleting = make(map[string]bool)
	}
	for _, id := range ids {
		p.deleting[id] = true
	}
	e.log.Warn("etcd's database is above the storage admission limit: deleting finished DAGs ahead of their retention, oldest first",
		zap.Int("dags", len(ids)), zap.String("first", ids[0]), zap.String("last", ids[len(ids)-1]),
		zap.Int64("counted_bytes", need), zap.Int64("limit_bytes", limit))
}

// compacted takes a pressure compaction's end.
func (e *Engine) compacted(rev int64, err error) {
	p := &e.press
	p.compacting = false
	if err != nil {
		e.log.Warn("compacting etcd's history under storage pressure failed; trying again", zap.Int64("revision", rev), zap.Error(err))
		return
	}
	p.compacted = max(p.compacted, rev)
	e.m.PressureCompacts.Inc()
	e.log.Info("compacted etcd's history under storage pressure", zap.Int64("revision", rev))
}

// pressureDeleted notes that a pass's delete applied at rev; it reports
// whether the DAG was one.
func (e *Engine) pressureDeleted(dag string, rev int64) bool {
	p := &e.press
	if !p.deleting[dag] {
		return false
	}
	delete(p.deleting, dag)
	p.deletedRev = max(p.deletedRev, rev)
	e.m.PressureDeletes.Inc()
	return true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// storageView is StorageView for this replica: on the leader, counting
// the work it refused lately.
func (e *Engine) storageView() *apitypes.Storage {
	if e.cfg.Storage == nil {
		return nil
	}
	var demand int64
	if e.c.IsLeader() && e.clock.Now().Before(e.press.demandUntil) {
		demand = e.press.demand
	}
	return StorageView(e.cfg.Storage.Usage(), e.cfg.StorageAdmission, e.reserved(), demand)
}

// StorageView describes u as /readyz and the cluster view show it, with
// the admission limit at ratio, reserved bytes that the DAGs running have
// yet to write and demand bytes of work refused lately (nil before a first
// measurement).
func StorageView(u store.Usage, ratio float64, reserved, demand int64) *apitypes.Storage {
	if !u.Known {
		return nil
	}
	v := &apitypes.Storage{State: apitypes.StorageOK, DBSizeBytes: u.EstSize(), InUseBytes: u.EstInUse(), QuotaBytes: u.Quota,
		AdmissionRatio: ratio, NoSpaceAlarm: u.Alarm, MeasuredAt: u.At}
	if u.Quota <= 0 {
		v.Message = "etcd does not report its quota (older than 3.6): no admission limit applies"
		return v
	}
	v.AdmissionLimitBytes = admissionLimit(u, ratio)
	need := storageNeed(u, reserved, demand)
	switch {
	case u.Alarm:
		v.State = apitypes.StorageFull
		v.Message = "etcd raised its NOSPACE alarm: it refuses every write but deletes, and grants no lease " +
			"(Orion's own etcd members reclaim the space by themselves; otherwise: README, \"Storage full\")"
	case u.EstSize() >= u.Quota-store.Reserve(u.Quota):
		v.State = apitypes.StorageFull
		v.Message = fmt.Sprintf("etcd's database (%s) is within %s of its quota: the leader holds its writes there, short of "+
			"etcd's NOSPACE alarm; new DAGs get 507", mib(u.EstSize()), mib(store.Reserve(u.Quota)))
	case need > v.AdmissionLimitBytes:
		v.State = apitypes.StorageLimited
		v.Message = fmt.Sprintf("storage full for new work: %s in use, %s with what the DAGs running have yet to write and the "+
			"work refused lately, over the admission limit of %s (storage_admission_ratio %g): new DAGs and retries get 507 while "+
			"finished DAGs are deleted ahead of their retention; running DAGs go on", mib(u.EstInUse()), mib(need),
			mib(v.AdmissionLimitBytes), ratio)
	}
	return v
}
