package etcdmember

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"
)

// Housekeeping that etcd leaves to an operator, done by the member's own
// process for the members Orion runs (embedded and `orion etcd`):
//
//   - Time-based compaction beside etcd's own compactor. etcd runs one
//     auto-compaction mode per member, and Orion's default is "revision"
//     (it bounds a burst: 100,000 revisions whatever their rate). That alone
//     lets big, slow revisions (task records with output tails) fill the
//     quota long before 100,000 of them exist, so this loop also compacts
//     whatever is older than HistoryRetention (5 minutes by default: a
//     standby follows within milliseconds and re-reads etcd when it falls
//     behind a compaction, so longer history buys nothing). The effective
//     history is the shorter of the two.
//   - Recovery from the NOSPACE alarm. Once etcd raised it, every write that
//     puts anything is refused until someone disarms it, even after space
//     was freed. The loop compacts to the current revision, defragments
//     this member (which gives the freed pages back: compaction alone only
//     marks them free) and disarms this member's alarm once its database is
//     under NoSpaceDisarmRatio of the quota. While the live data itself
//     fills the quota nothing is disarmed: the loop tries again every
//     NoSpaceRetry, by when retention (deletes are accepted under NOSPACE)
//     or an operator has freed space.
//   - A guard for the data volume: below MinFreeDisk free the loop raises
//     NOSPACE itself (etcd dies on a full disk; under the alarm it refuses
//     writes instead), and disarms once the volume has room again.
//
// Each step is bounded by maintenanceStepTimeout, logged, and counted.

const (
	// DefaultMaintenanceInterval is how often the member checks its alarms
	// and its history.
	DefaultMaintenanceInterval = 5 * time.Second
	// DefaultHistoryRetention is the history the time-based compaction keeps.
	DefaultHistoryRetention = 5 * time.Minute
	// DefaultNoSpaceRetry spaces the NOSPACE recovery attempts while the
	// live data fills the quota. An attempt that cannot succeed costs one
	// compaction (no defragmentation), so it can be frequent: space freed
	// by retention or by hand is used within about this long.
	DefaultNoSpaceRetry = 10 * time.Second
	// NoSpaceDisarmRatio is the share of the quota under which the database
	// must be, after compaction and defragmentation, for the alarm to be
	// disarmed: a margin, so that the next burst does not raise it at once.
	NoSpaceDisarmRatio = 0.8
	// maintenanceStepTimeout bounds one compaction or alarm request.
	maintenanceStepTimeout = 30 * time.Second
	// DefragAboveRatio is the share of the quota past which a member whose
	// database holds free pages worth DefragFreeShare of the quota (history
	// compacted away, DAGs deleted) defragments itself
	// without waiting for the NOSPACE alarm: etcd compares the whole file,
	// free pages included, with the quota, and Orion's leader holds its
	// writes short of it (store.Reserve) rather than raise the alarm, so
	// without this the file would stay at its high-water mark once
	// retention and compaction had freed its pages.
	DefragAboveRatio = 0.6
	DefragFreeShare  = 0.25
)

// maintenanceMetrics are the loop's collectors, labelled by member: several
// members can run in one process (tests, drills), and the member's client
// URL serves the default registry (/metrics, beside etcd's own).
var maintenanceMetrics = sync.OnceValue(func() *memberMetrics {
	m := &memberMetrics{
		nospace: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_etcd_member_nospace",
			Help: "1 while this etcd member's NOSPACE alarm is raised (its backend reached the quota)."}, []string{"member"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_etcd_nospace_repairs_total",
			Help: "NOSPACE recoveries attempted by the member's process, by result (disarmed, still_full, error)."}, []string{"member", "result"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_etcd_compactions_total",
			Help: "Compactions requested by the member's process, by reason (age, nospace)."}, []string{"member", "reason"}),
		defrags: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_etcd_defrags_total",
			Help: "Defragmentations of the member run by its process."}, []string{"member"}),
		diskFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_etcd_member_disk_free_bytes",
			Help: "Free space on the volume of this etcd member's data directory."}, []string{"member"}),
	}
	for _, c := range []prometheus.Collector{m.nospace, m.repairs, m.compactions, m.defrags, m.diskFree} {
		if err := prometheus.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
		}
	}
	return m
})

type memberMetrics struct {
	nospace     *prometheus.GaugeVec
	repairs     *prometheus.CounterVec
	compactions *prometheus.CounterVec
	defrags     *prometheus.CounterVec
	diskFree    *prometheus.GaugeVec
}

// maintainer is one member's housekeeping loop.
type maintainer struct {
	m         *Member
	lg        *zap.Logger
	quota     int64
	interval  time.Duration
	retention time.Duration
	retry     time.Duration
	met       *memberMetrics
	dataDir   string
	minFree   int64 // MinFreeDisk; negative: no disk guard

	marks      []revMark // (time, revision) samples for the time-based compaction
	compacted  int64     // the last revision this loop compacted to
	nextRepair time.Time // no NOSPACE repair before this
	nextDefrag time.Time // no defragmentation ahead of the alarm before this
}

type revMark struct {
	at  time.Time
	rev int64
}

func (m *Member) maintain(ctx context.Context, c Config, lg *zap.Logger) {
	defer close(m.maintainDone)
	mt := &maintainer{m: m, lg: lg.Named("maintenance"), quota: c.QuotaBackendBytes, interval: c.MaintenanceInterval,
		retention: c.HistoryRetention, retry: c.NoSpaceRetry, met: maintenanceMetrics(), dataDir: c.DataDir, minFree: c.MinFreeDisk}
	defer mt.met.nospace.DeleteLabelValues(m.name)
	defer mt.met.diskFree.DeleteLabelValues(m.name)
	tick := time.NewTicker(mt.interval)
	defer tick.Stop()
	for {
		mt.step(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// step is one pass: the NOSPACE check first (it matters more), then the
// time-based compaction.
func (mt *maintainer) step(ctx context.Context, now time.Time) {
	s := mt.m.etcd.Server
	raised := false
	for _, a := range s.Alarms() {
		if a.Alarm == pb.AlarmType_NOSPACE && a.MemberID == uint64(s.MemberID()) {
			raised = true
		}
	}
	if !raised && mt.diskShort(ctx) {
		raised = true
		mt.nextRepair = now.Add(mt.retry) // nothing to reclaim yet: it was raised for the disk
	}
	mt.met.nospace.WithLabelValues(mt.m.name).Set(b2f(raised))
	if raised && !now.Before(mt.nextRepair) {
		mt.nextRepair = now.Add(mt.retry)
		mt.repair(ctx)
	}
	if !raised && !now.Before(mt.nextDefrag) && mt.sparse() {
		mt.nextDefrag = now.Add(mt.retry) // each pauses the member: spaced like the repairs
		mt.defragSparse()
	}
	if mt.retention > 0 {
		mt.compactByAge(ctx, now)
	}
}

// repair brings this member back from NOSPACE if the live data allows it.
func (mt *maintainer) repair(ctx context.Context) {
	s := mt.m.etcd.Server
	before := s.Backend().Size()
	mt.lg.Warn("NOSPACE alarm raised: etcd refuses writes; compacting, defragmenting and disarming",
		zap.Int64("db_size_bytes", before), zap.Int64("quota_bytes", mt.quota))
	// All history goes: it is what fills a quota first, and Orion's
	// replicas re-read etcd when their watch falls behind a compaction.
	if err := mt.compact(ctx, s.KV().Rev(), "nospace"); err != nil {
		mt.met.repairs.WithLabelValues(mt.m.name, "error").Inc()
		mt.lg.Error("NOSPACE repair: compaction failed; retrying later", zap.Error(err), zap.Duration("retry_in", mt.retry))
		return
	}
	// Defragmenting costs a pause of the member proportional to its size:
	// only worth it when it gets the database under the disarm limit.
	limit := int64(float64(mt.quota) * NoSpaceDisarmRatio)
	s.Backend().ForceCommit()
	if inUse := s.Backend().SizeInUse(); inUse >= limit {
		mt.met.repairs.WithLabelValues(mt.m.name, "still_full").Inc()
		mt.lg.Error("NOSPACE: the live data alone fills the quota; not disarming. Wait for retention to delete finished DAGs, "+
			"delete some, or raise the quota (quota-backend-bytes)", zap.Int64("db_size_in_use_bytes", inUse),
			zap.Int64("disarm_below_bytes", limit), zap.Duration("retry_in", mt.retry))
		return
	}
	if free, ok := mt.free(); ok && free < s.Backend().SizeInUse()+walSegmentBytes {
		// Defragmenting writes a copy of the database beside it.
		mt.met.repairs.WithLabelValues(mt.m.name, "still_full").Inc()
		mt.lg.Error("NOSPACE: the data volume has no room to defragment; free some space on it", zap.Int64("disk_free_bytes", free),
			zap.Int64("db_size_in_use_bytes", s.Backend().SizeInUse()), zap.Duration("retry_in", mt.retry))
		return
	}
	started := time.Now()
	if err := s.Defragment(); err != nil {
		mt.met.repairs.WithLabelValues(mt.m.name, "error").Inc()
		mt.lg.Error("NOSPACE repair: defragmentation failed; retrying later", zap.Error(err), zap.Duration("retry_in", mt.retry))
		return
	}
	mt.met.defrags.WithLabelValues(mt.m.name).Inc()
	after := s.Backend().Size()
	mt.lg.Info("defragmented", zap.Int64("db_size_before", before), zap.Int64("db_size_after", after),
		zap.Duration("took", time.Since(started)))
	if after >= limit {
		mt.met.repairs.WithLabelValues(mt.m.name, "still_full").Inc()
		mt.lg.Error("NOSPACE: still over the disarm limit after defragmenting; not disarming",
			zap.Int64("db_size_bytes", after), zap.Int64("disarm_below_bytes", limit), zap.Duration("retry_in", mt.retry))
		return
	}
	if free, ok := mt.free(); ok && mt.minFree >= 0 && free < mt.minFree+mt.minFree/4 {
		// A margin over the guard's limit, so the alarm does not flap.
		mt.met.repairs.WithLabelValues(mt.m.name, "still_full").Inc()
		mt.lg.Error("NOSPACE: the data volume is still short of space; not disarming", zap.Int64("disk_free_bytes", free),
			zap.Int64("min_free_bytes", mt.minFree), zap.Duration("retry_in", mt.retry))
		return
	}
	actx, cancel := context.WithTimeout(ctx, maintenanceStepTimeout)
	defer cancel()
	_, err := s.Alarm(actx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: uint64(s.MemberID()), Alarm: pb.AlarmType_NOSPACE})
	if err != nil {
		mt.met.repairs.WithLabelValues(mt.m.name, "error").Inc()
		mt.lg.Error("NOSPACE repair: disarming failed; retrying later", zap.Error(err), zap.Duration("retry_in", mt.retry))
		return
	}
	mt.met.repairs.WithLabelValues(mt.m.name, "disarmed").Inc()
	mt.met.nospace.WithLabelValues(mt.m.name).Set(0)
	mt.lg.Warn("NOSPACE alarm disarmed: etcd accepts writes again", zap.Int64("db_size_bytes", after), zap.Int64("quota_bytes", mt.quota))
}

// sparse reports a database past DefragAboveRatio of the quota with free
// pages worth DefragFreeShare of the quota.
func (mt *maintainer) sparse() bool {
	if mt.quota <= 0 {
		return false
	}
	be := mt.m.etcd.Server.Backend()
	size, inUse := be.Size(), be.SizeInUse()
	return float64(size) >= DefragAboveRatio*float64(mt.quota) && float64(size-inUse) >= DefragFreeShare*float64(mt.quota)
}

// defragSparse defragments the member ahead of the alarm (see sparse).
func (mt *maintainer) defragSparse() {
	s := mt.m.etcd.Server
	before, inUse := s.Backend().Size(), s.Backend().SizeInUse()
	if free, ok := mt.free(); ok && free < inUse+walSegmentBytes {
		return // a defragmentation writes a copy of the database beside it
	}
	mt.lg.Warn("the database is near its quota and much of it is free pages: defragmenting before etcd would refuse writes",
		zap.Int64("db_size_bytes", before), zap.Int64("db_size_in_use_bytes", inUse), zap.Int64("quota_bytes", mt.quota))
	started := time.Now()
	if err := s.Defragment(); err != nil {
		mt.lg.Error("defragmentation failed; retrying later", zap.Error(err), zap.Duration("retry_in", mt.retry))
		return
	}
	mt.met.defrags.WithLabelValues(mt.m.name).Inc()
	mt.lg.Info("defragmented", zap.Int64("db_size_before", before), zap.Int64("db_size_after", s.Backend().Size()),
		zap.Duration("took", time.Since(started)))
}

// compactByAge compacts to the newest revision seen at least retention ago.
// Only the raft leader does it: compaction is replicated, one request is
// enough for the cluster.
func (mt *maintainer) compactByAge(ctx context.Context, now time.Time) {
	s := mt.m.etcd.Server
	mt.marks = append(mt.marks, revMark{at: now, rev: s.KV().Rev()})
	target := int64(0)
	drop := 0
	for i, mk := range mt.marks {
		if now.Sub(mk.at) < mt.retention {
			break
		}
		target, drop = mk.rev, i
	}
	// Keep the mark just used: the next target is never behind it.
	mt.marks = mt.marks[drop:]
	if target <= mt.compacted || s.Leader() != s.MemberID() {
		return
	}
	if err := mt.compact(ctx, target, "age"); err != nil {
		mt.lg.Warn("time-based compaction failed", zap.Int64("revision", target), zap.Error(err))
	}
}

func (mt *maintainer) compact(ctx context.Context, rev int64, reason string) error {
	cctx, cancel := context.WithTimeout(ctx, maintenanceStepTimeout)
	defer cancel()
	_, err := mt.m.etcd.Server.Compact(cctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	if errors.Is(err, mvcc.ErrCompacted) {
		// Someone (etcd's own compactor, another member) got there first.
		mt.compacted = max(mt.compacted, rev)
		return nil
	}
	if err != nil {
		return err
	}
	mt.compacted = max(mt.compacted, rev)
	mt.met.compactions.WithLabelValues(mt.m.name, reason).Inc()
	mt.lg.Info("compacted", zap.Int64("revision", rev), zap.String("reason", reason))
	return nil
}

// free is the free space of the data volume, and whether it is known.
func (mt *maintainer) free() (int64, bool) {
	free, err := diskFree(mt.dataDir)
	if err != nil {
		return 0, false
	}
	mt.met.diskFree.WithLabelValues(mt.m.name).Set(float64(free))
	return free, true
}

// diskShort raises this member's NOSPACE alarm when its data volume is
// under MinFreeDisk, and reports whether it did. etcd meets a full disk in
// its WAL with a fatal exit; under the alarm it refuses writes instead, and
// the WAL grows only by what deletes, compactions and leases still write.
func (mt *maintainer) diskShort(ctx context.Context) bool {
	free, ok := mt.free()
	if !ok || mt.minFree < 0 || free >= mt.minFree {
		return false
	}
	s := mt.m.etcd.Server
	actx, cancel := context.WithTimeout(ctx, maintenanceStepTimeout)
	defer cancel()
	_, err := s.Alarm(actx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: uint64(s.MemberID()), Alarm: pb.AlarmType_NOSPACE})
	if err != nil {
		mt.lg.Error("the data volume is almost full and raising NOSPACE failed", zap.Int64("disk_free_bytes", free), zap.Error(err))
		return false
	}
	mt.lg.Error("the data volume is almost full: raised NOSPACE so that etcd refuses writes instead of dying on a full disk; "+
		"free space on the volume or make it larger", zap.Int64("disk_free_bytes", free), zap.Int64("min_free_bytes", mt.minFree),
		zap.String("data_dir", mt.dataDir))
	return true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
