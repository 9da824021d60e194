package etcdmember_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// With etcd auth on and Orion's user limited to its prefix, the member's
// own housekeeping still works: NOSPACE recovery (compaction, defragmentation,
// disarming) and compaction are requests of the member's process to its own
// server, which carry no user, so they need no credentials at all. What
// Orion's replicas ask beyond their keys (Status for the database size, the
// alarm list, the member list) needs only an authenticated user.
func TestSelfRepairNeedsNoCredentials(t *testing.T) {
	const quota = 8 << 20
	m, admin := etcdtest.Start(t, func(c *etcdmember.Config) {
		c.QuotaBackendBytes = quota
		c.MaintenanceInterval, c.NoSpaceRetry = 50*time.Millisecond, 100*time.Millisecond
	})
	etcdtest.EnableAuth(t, admin, "rootpw", "orion", "orionpw", "/orion/")
	cli, err := clientv3.New(clientv3.Config{Endpoints: m.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: "orion", Password: "orionpw"})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	if _, err := cli.Put(ctx(), "/other/x", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a put outside /orion/: %v, want permission denied", err)
	}
	if _, err := cli.Status(ctx(), m.ClientURL()); err != nil {
		t.Fatalf("status as the orion user: %v", err)
	}
	if _, err := cli.MemberList(ctx()); err != nil {
		t.Fatalf("member list as the orion user: %v", err)
	}
	// Fill the quota with history of one key under the prefix.
	blob := strings.Repeat("x", 256<<10)
	full := false
	for i := 0; i < 4*quota/len(blob) && !full; i++ {
		_, err := cli.Put(ctx(), "/orion/v1/same", blob)
		switch {
		case errors.Is(err, rpctypes.ErrNoSpace) || (err != nil && strings.Contains(err.Error(), "no space")):
			full = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("etcd never refused a put at its quota")
	}
	testkit.WaitFor(t, 20*time.Second, "the NOSPACE alarm to be disarmed with auth on", func() bool {
		resp, err := cli.AlarmList(ctx())
		return err == nil && len(resp.Alarms) == 0
	})
	if _, err := cli.Put(ctx(), "/orion/v1/after", "ok"); err != nil {
		t.Fatalf("a write after the repair: %v", err)
	}
}
