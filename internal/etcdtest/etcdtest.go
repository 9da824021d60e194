// Package etcdtest starts a real embedded etcd member for a test: tests of
// the log, the scheduler and the APIs run against etcd itself, not a mock.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/etcdserver"
	"github.com/orion-sched/orion/internal/testkit"
)

// Start starts a single-member etcd on free loopback ports in a temporary
// directory, and a client of it; both are closed when the test ends. mods
// change the member's configuration (a smaller request limit, say).
func Start(t testing.TB, mods ...func(*etcdserver.Config)) (*etcdserver.Member, *clientv3.Client) {
	t.Helper()
	cfg := etcdserver.Config{DataDir: t.TempDir(), ClientURL: testkit.FreeURL(t), PeerURL: testkit.FreeURL(t), Logger: zap.NewNop()}
	for _, mod := range mods {
		mod(&cfg)
	}
	m, err := etcdserver.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: m.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return m, cli
}

// FillToQuota puts live data under /fill/ until the member refuses a put at
// its backend quota (its NOSPACE alarm is then raised), and fails the test
// if it never does within four times quota bytes.
func FillToQuota(t testing.TB, cli *clientv3.Client, quota int) {
	t.Helper()
	blob := strings.Repeat("x", 256<<10)
	for i := 0; i < 4*quota/len(blob); i++ {
		_, err := cli.Put(context.Background(), fmt.Sprintf("/fill/%04d", i), blob)
		if errors.Is(err, rpctypes.ErrGRPCNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) ||
			(err != nil && strings.Contains(err.Error(), rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace))) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("etcd never refused a put at its quota")
}
