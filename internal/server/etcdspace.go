package server

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/store"
)

// spaceEvery is how often a replica reads etcd's size, quota and alarms for
// its metrics (orion_etcd_db_size_bytes, orion_etcd_quota_bytes,
// orion_etcd_nospace: the alert rules watch them).
const spaceEvery = 10 * time.Second

// watchEtcdSpace keeps the etcd space metrics and logs the NOSPACE alarm
// when it is raised and when it is gone. With an external etcd (external
// true) the space may need reclaiming by hand, so the log line carries
// the etcdctl recipe; Orion's own members (embedded, `orion etcd`) recover
// by themselves (internal/etcdmember).
func watchEtcdSpace(ctx context.Context, etcd *store.Etcd, m *metrics.Metrics, log *zap.Logger, external bool) {
	raised := false
	tick := time.NewTicker(spaceEvery)
	defer tick.Stop()
	for {
		// A read that failed (a busy or lost member) is tried again within
		// a second rather than at the next tick.
		failed := false
		if size, quota, ok := etcd.Space(ctx, time.Second); ok {
			m.EtcdDBSizeBytes.Set(float64(size))
			if quota > 0 {
				m.EtcdQuotaBytes.Set(float64(quota))
			}
		} else {
			failed = true
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		alarms, err := etcd.Alarms(actx)
		cancel()
		if err == nil {
			now := false
			for _, a := range alarms {
				now = now || a.Type == "NOSPACE"
			}
			switch {
			case now && !raised && external:
				log.Error("etcd raised its NOSPACE alarm: its backend reached the quota and it refuses writes. " +
					"`orion etcd` members reclaim the space by themselves; any other etcd needs it done by hand:\n" +
					store.ExternalNoSpaceRecipe)
			case now && !raised:
				log.Warn("etcd raised its NOSPACE alarm: its backend reached the quota and it refuses writes; " +
					"Orion's etcd member compacts, defragments and disarms it once there is room")
			case !now && raised:
				log.Info("etcd's NOSPACE alarm is gone: it accepts writes again")
			}
			raised = now
			m.EtcdNoSpace.Set(b2f(now))
		} else {
			failed = true
		}
		var retry <-chan time.Time
		if failed {
			retry = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-retry:
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
