package etcdmember

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// fillWithLiveData fills the member with live data under prefix until it
// refuses a put and its own process, having compacted, finds the live data
// too large to disarm (a repair counted still_full). etcd refuses by the
// file's size, free pages included: a refusal that comes early is repaired
// (the alarm disarmed), and the filling goes on.
func fillWithLiveData(t *testing.T, m *Member, cli *clientv3.Client, prefix string, quota int64) {
	t.Helper()
	stillFull := maintenanceMetrics().repairs.WithLabelValues(m.Name(), "still_full")
	blob := strings.Repeat("x", 256<<10)
	for i := 0; i < int(4*quota)/len(blob); i++ {
		_, err := cli.Put(ctxT(t), fmt.Sprintf("%s%04d", prefix, i), blob)
		if err != nil && err != rpctypes.ErrNoSpace {
			t.Fatal(err)
		}
		if err == nil {
			continue
		}
		base := testutil.ToFloat64(stillFull)
		testkit.WaitFor(t, 20*time.Second, "a repair after the refusal", func() bool {
			return testutil.ToFloat64(stillFull) > base || !noSpaceRaised(t, cli)
		})
		if testutil.ToFloat64(stillFull) > base {
			return
		}
		i-- // refused early and repaired: the refused put again
	}
	t.Fatal("etcd never refused a put at its quota with live data too large to disarm")
}

func noSpaceRaised(t *testing.T, cli *clientv3.Client) bool {
	resp, err := cli.AlarmList(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Alarms) > 0
}

// At the quota, the member's process gets etcd writing again by itself once
// there is room: here all of the space is history (the same key overwritten),
// so compaction and defragmentation alone free it and the alarm is disarmed
// with no step by hand.
func TestNoSpaceRecoversFromHistory(t *testing.T) {
	const quota = 8 << 20
	cfg := testConfig(t, "m1")
	cfg.QuotaBackendBytes = quota
	cfg.MaintenanceInterval, cfg.NoSpaceRetry = 50*time.Millisecond, 100*time.Millisecond
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	blob := strings.Repeat("x", 256<<10)
	full := false
	for i := 0; i < 4*quota/len(blob) && !full; i++ {
		_, err := cli.Put(ctxT(t), "/same", blob)
		switch {
		case err == rpctypes.ErrNoSpace:
			full = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("etcd never refused a put at its quota")
	}
	testkit.WaitFor(t, 20*time.Second, "the NOSPACE alarm to be disarmed", func() bool { return !noSpaceRaised(t, cli) })
	if _, err := cli.Put(ctxT(t), "/after", "ok"); err != nil {
		t.Fatalf("a write after the repair: %v", err)
	}
	if size := m.Server().Backend().Size(); float64(size) >= quota*NoSpaceDisarmRatio {
		t.Fatalf("disarmed at %d bytes, over %v of the quota", size, NoSpaceDisarmRatio)
	}
}

// While the live data fills the quota the alarm stays: disarming would only
// let the next write raise it again. Once keys are deleted (etcd accepts
// deletes under NOSPACE, as retention sends them), the next attempt frees
// the space and disarms.
func TestNoSpaceWaitsForDeletes(t *testing.T) {
	const quota = 8 << 20
	cfg := testConfig(t, "m1")
	cfg.QuotaBackendBytes = quota
	cfg.MaintenanceInterval, cfg.NoSpaceRetry = 50*time.Millisecond, 100*time.Millisecond
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	stillFull := maintenanceMetrics().repairs.WithLabelValues(m.Name(), "still_full")
	base := testutil.ToFloat64(stillFull) // the collectors are per process, shared by the tests
	fillWithLiveData(t, m, cli, "/live/", quota)
	// Several attempts pass (each compacts, sees the live data, keeps
	// the alarm).
	testkit.WaitFor(t, 20*time.Second, "two refused repairs", func() bool {
		return testutil.ToFloat64(stillFull) >= base+2
	})
	if !noSpaceRaised(t, cli) {
		t.Fatal("the alarm was disarmed while the live data fills the quota")
	}
	if _, err := cli.Delete(ctxT(t), "/live/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("a delete under NOSPACE: %v", err)
	}
	testkit.WaitFor(t, 20*time.Second, "the NOSPACE alarm to be disarmed", func() bool { return !noSpaceRaised(t, cli) })
	if _, err := cli.Put(ctxT(t), "/after", "ok"); err != nil {
		t.Fatalf("a write after the repair: %v", err)
	}
}

// The time-based compaction compacts what is older than HistoryRetention,
// whatever the revision-based policy says.
func TestCompactionByAge(t *testing.T) {
	cfg := testConfig(t, "m1")
	cfg.MaintenanceInterval, cfg.HistoryRetention = 50*time.Millisecond, 200*time.Millisecond
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	resp, err := cli.Put(ctxT(t), "/k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	first := resp.Header.Revision
	if _, err := cli.Put(ctxT(t), "/k", "v2"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the first revision to be compacted", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "/k", clientv3.WithRev(first))
		return err == rpctypes.ErrCompacted
	})
}

// fakeDisk stands in for the data volume's free space until the test ends.
func fakeDisk(t *testing.T) *atomic.Int64 {
	var free atomic.Int64
	free.Store(1 << 40)
	fn := func(string) (int64, error) { return free.Load(), nil }
	diskFreeHook.Store(&fn)
	t.Cleanup(func() { diskFreeHook.Store(nil) })
	return &free
}

// A volume too small for etcd's first WAL segment is refused with an error
// that says so, instead of etcd's panic and a half-made data directory.
func TestBootstrapRefusesASmallVolume(t *testing.T) {
	free := fakeDisk(t)
	free.Store(30 << 20)
	cfg := testConfig(t, "m1")
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "30 MiB free") || !strings.Contains(err.Error(), "larger volume") {
		t.Fatalf("start on a 30 MiB volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "member")); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a member directory: %v", err)
	}
	free.Store(1 << 40)
	startMember(t, cfg) // the same directory starts once there is room
}

// A data volume running out of space raises NOSPACE before etcd meets a full
// disk (a fatal exit in etcd): writes are refused, a state Orion handles.
// With room again, the alarm goes and writes resume.
func TestDiskGuard(t *testing.T) {
	free := fakeDisk(t)
	cfg := testConfig(t, "m1")
	cfg.MaintenanceInterval, cfg.NoSpaceRetry = 50*time.Millisecond, 100*time.Millisecond
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	free.Store(DefaultMinFreeDisk - 1)
	testkit.WaitFor(t, 20*time.Second, "the NOSPACE alarm", func() bool { return noSpaceRaised(t, cli) })
	if _, err := cli.Put(ctxT(t), "/k", "v"); err != rpctypes.ErrNoSpace {
		t.Fatalf("a put on a short volume: %v", err)
	}
	free.Store(1 << 40)
	testkit.WaitFor(t, 20*time.Second, "the alarm to be disarmed", func() bool { return !noSpaceRaised(t, cli) })
	if _, err := cli.Put(ctxT(t), "/k", "v"); err != nil {
		t.Fatalf("a put with room again: %v", err)
	}
}

// A first start interrupted before the member was ready (a crash, a kill)
// leaves a mark and whatever etcd had made, a torn WAL say: the next start
// of a single member moves that aside and bootstraps again, instead of
// failing on it forever.
func TestInterruptedBootstrapStartsAgain(t *testing.T) {
	cfg := testConfig(t, "m1")
	wal := filepath.Join(cfg.DataDir, "member", "wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, bootstrapMarker), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMember(t, cfg)
	if _, err := newClient(t, m.ClientURL()).Put(ctxT(t), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(cfg.DataDir, "member.incomplete-*"))
	if len(aside) != 1 {
		t.Fatalf("the interrupted bootstrap's data was not moved aside: %v", aside)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, bootstrapMarker)); !os.IsNotExist(err) {
		t.Fatalf("the mark outlived a ready member: %v", err)
	}
	// Once ready, a restart is a plain restart: the data stays.
	m.Close()
	m = startMember(t, cfg)
	if got := mustGet(t, newClient(t, m.ClientURL()), "/k"); got != "v" {
		t.Fatalf("after a restart /k = %q", got)
	}
}
