// Package etcdtest starts a real embedded etcd member for a test: tests of
// the log, the scheduler and the APIs run against etcd itself, not a mock.
package etcdtest

import (
	"context"
	"testing"
	"time"

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
