package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/metrics"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// A full etcd shows: the cluster endpoint lists the NOSPACE alarm, and the
// metrics the alert rules watch say so, with the quota.
func TestNoSpaceShows(t *testing.T) {
	const quota = 8 << 20
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) {
		c.QuotaBackendBytes = quota
		c.MaintenanceInterval = -1 // keep the alarm: this test looks at it
	})
	ctx := context.Background()
	etcdtest.FillToQuota(t, cli, quota)
	info := &clusterInfo{etcd: store.NewEtcd(cli)}
	alarms, err := info.Alarms(ctx)
	if err != nil || len(alarms) != 1 || alarms[0].Alarm != "NOSPACE" || !strings.Contains(alarms[0].Message, "quota") {
		t.Fatalf("alarms: %+v %v", alarms, err)
	}

	m := metrics.New()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); watchEtcdSpace(wctx, store.NewEtcd(cli), m, zap.NewNop(), true) }()
	defer func() { cancel(); <-done }()
	testkit.WaitFor(t, 30*time.Second, "the space metrics", func() bool {
		return testutil.ToFloat64(m.EtcdNoSpace) == 1 && testutil.ToFloat64(m.EtcdQuotaBytes) == quota &&
			// Refused at the quota: the database holds at least the live
			// data that FillToQuota put (over the disarm mark; the file may
			// stay under the quota by less than the refused put).
			testutil.ToFloat64(m.EtcdDBSizeBytes) >= etcdmember.NoSpaceDisarmRatio*quota
	})
}
