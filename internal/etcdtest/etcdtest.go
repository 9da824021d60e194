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

// EnableAuth turns etcd's authentication on through cli (a client with no
// credentials, before auth is on) as an operator does with etcdctl: a root
// user with rootPass and the root role, then a role named user whose only
// permission is readwrite on prefix, and the user itself with pass and that
// role, then auth enable. From then on every client needs credentials.
func EnableAuth(t testing.TB, cli *clientv3.Client, rootPass, user, pass, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []struct {
		what string
		do   func() error
	}{
		{"user add root", func() error { _, err := cli.UserAdd(ctx, "root", rootPass); return err }},
		{"user grant-role root root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"role add " + user, func() error { _, err := cli.RoleAdd(ctx, user); return err }},
		{"role grant-permission " + user + " --prefix readwrite " + prefix, func() error {
			_, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user add " + user, func() error { _, err := cli.UserAdd(ctx, user, pass); return err }},
		{"user grant-role " + user + " " + user, func() error { _, err := cli.UserGrantRole(ctx, user, user); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("etcd %s: %v", s.what, err)
		}
	}
}
