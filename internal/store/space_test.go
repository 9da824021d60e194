package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// The guard keeps the leader's writes short of etcd's quota: filled
// through a guarded Writer, etcd refuses nothing itself and raises no
// alarm; the Writer refuses, with a *NoSpaceError marked Guard and nothing
// sent, the transaction that would take the database within Reserve of the
// quota; and a lease is still granted there (what a new leader needs).
// Deletes, which cost nothing against the quota, still go.
func TestGuardStopsShortOfTheQuota(t *testing.T) {
	const quota = 8 << 20
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) { c.QuotaBackendBytes = quota })
	ctx := context.Background()
	g := NewSpaceGauge(cli, time.Hour) // measured by hand below
	g.Measure(ctx)
	if u := g.Usage(); !u.Known || u.Quota != quota {
		t.Fatalf("first measurement: %+v", u)
	}
	w := electedWriter(t, cli, cli.KV)
	w.guard = g
	big := strings.Repeat("x", 200<<10)
	var refused *NoSpaceError
	written := 0
	for i := 0; i < 200; i++ {
		en := core.Entry{DAG: fmt.Sprintf("d%03d", i), D: &core.DAGRecord{Status: core.DAGRunning, Run: 1,
			DAG: model.DAG{ID: fmt.Sprintf("d%03d", i), Name: big, Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}}}
		_, err := w.Commit(ctx, []core.Entry{en}, DefaultLimits)
		if errors.As(err, &refused) {
			break
		}
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		written++
		if i%5 == 4 {
			g.Measure(ctx) // the gauge's own loop measures every second
		}
	}
	if refused == nil || !refused.Guard {
		t.Fatalf("never refused by the guard after %d records of 200 KiB: %v", written, refused)
	}
	t.Logf("%d records written, then: %v", written, refused)
	if !errors.Is(refused, ErrNoSpace) {
		t.Error("a guard's refusal is not ErrNoSpace")
	}
	alarms, err := Alarms(ctx, cli)
	if err != nil || len(alarms) != 0 {
		t.Fatalf("etcd's alarms: %v %v", alarms, err)
	}
	if _, err := cli.Grant(ctx, 1); err != nil {
		t.Fatalf("a lease at the guard: %v", err)
	}
	del := core.Entry{DAG: "d000", Delete: true}
	if _, err := w.Commit(ctx, []core.Entry{del}, DefaultLimits); err != nil {
		t.Fatalf("a delete at the guard: %v", err)
	}
	if u := g.Usage(); u.EstSize()+PutCost("/x", 200<<10) <= u.Quota-Reserve(u.Quota) {
		t.Errorf("refused with room left: %+v", u)
	}
}
