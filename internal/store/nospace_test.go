package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// At the backend quota etcd raises NOSPACE and refuses every transaction that
// puts anything, applying none of it: Commit says so with a *NoSpaceError
// that names the quota. Deletes still commit (that is how retention frees
// space while the alarm is raised), and the alarm is listed.
func TestCommitAtQuota(t *testing.T) {
	const quota = 8 << 20
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) {
		c.QuotaBackendBytes = quota
		c.MaintenanceInterval = -1 // etcd's own behaviour, without the member's self-repair
	})
	ctx := context.Background()
	st := NewEtcd(cli)
	fence := testFence(t, cli)
	if _, err := st.Begin(fence, []core.Entry{dagEntry("old", 2)}, DefaultLimits, nil).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	etcdtest.FillToQuota(t, cli, quota)

	_, err := st.Begin(fence, []core.Entry{dagEntry("new", 1)}, DefaultLimits, nil).Commit(ctx)
	var ns *NoSpaceError
	if !errors.Is(err, ErrNoSpace) || !errors.As(err, &ns) {
		t.Fatalf("commit at the quota: %v", err)
	}
	if ns.Quota != quota || ns.DBSize == 0 || !strings.Contains(ns.Error(), "8.0 MiB") {
		t.Fatalf("the refusal does not name the quota: %+v: %s", ns, ns)
	}
	if r, _ := cli.Get(ctx, DAGKey("new")); len(r.Kvs) != 0 {
		t.Fatal("a refused transaction wrote its record")
	}

	res, err := st.Begin(fence, []core.Entry{{DAG: "old", Delete: true}}, DefaultLimits, nil).Commit(ctx)
	if err != nil || len(res.Revs) != 1 {
		t.Fatalf("a delete under NOSPACE: %+v %v", res, err)
	}
	if r, _ := cli.Get(ctx, DAGKey("old")); len(r.Kvs) != 0 {
		t.Fatal("the delete did not land")
	}

	alarms, err := st.Alarms(ctx)
	if err != nil || len(alarms) != 1 || alarms[0].Type != "NOSPACE" || alarms[0].MemberID == 0 {
		t.Fatalf("alarms: %+v %v", alarms, err)
	}
}
