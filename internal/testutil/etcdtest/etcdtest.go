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

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// Start starts a single-member etcd on free loopback ports in a temporary
// directory, and a client of it; both are closed when the test ends. mods
// change the member's configuration (a smaller request limit, say).
func Start(t testing.TB, mods ...func(*etcdmember.Config)) (*etcdmember.Member, *clientv3.Client) {
	t.Helper()
	cfg := etcdmember.Config{DataDir: t.TempDir(), ClientURL: testkit.FreeURL(t), PeerURL: testkit.FreeURL(t), Logger: zap.NewNop()}
	for _, mod := range mods {
		mod(&cfg)
	}
	m, err := etcdmember.Start(context.Background(), cfg)
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
// its backend quota (its NOSPACE alarm is then raised) with live data alone
// above the share of the quota under which a member disarms by itself
// (etcdmember.NoSpaceDisarmRatio), so that it stays full until the test
// deletes /fill/. etcd refuses by the database file's size, free pages
// included: a refusal that came early, with the file padded by free pages,
// is followed by a compaction, a defragmentation and a disarm, and the
// filling goes on. The test fails if that never happens within four times
// quota bytes of puts.
func FillToQuota(t testing.TB, cli *clientv3.Client, quota int) {
	t.Helper()
	ctx := context.Background()
	blob := strings.Repeat("x", 256<<10)
	endpoint := cli.Endpoints()[0]
	early := 0
	for i := 0; i < 4*quota/len(blob); i++ {
		_, err := cli.Put(ctx, fmt.Sprintf("/fill/%04d", i), blob)
		if err == nil {
			continue
		}
		if !isNoSpace(err) {
			t.Fatal(err)
		}
		st, serr := cli.Status(ctx, endpoint)
		if serr != nil {
			t.Fatal(serr)
		}
		if float64(st.DbSizeInUse) >= etcdmember.NoSpaceDisarmRatio*float64(quota) {
			return
		}
		// Refused early: free pages, not live data, filled the file.
		if _, err := cli.Compact(ctx, st.Header.Revision); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatal(err)
		}
		if _, err := cli.Defragment(ctx, endpoint); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil { // every alarm
			t.Fatal(err)
		}
		if early++; early > 8 {
			break
		}
		i-- // the refused put again
	}
	t.Fatal("etcd never refused a put at its quota with live data above the disarm mark")
}

func isNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrGRPCNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) ||
		strings.Contains(err.Error(), rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace))
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

// StartCluster starts a cluster of n embedded members in this process, on
// free loopback ports, and a client of all of them; everything is closed
// when the test ends (a member the test closed itself is closed again
// harmlessly). mods change member i's configuration (its node, say).
func StartCluster(t testing.TB, n int, mods ...func(i int, c *etcdmember.Config)) ([]*etcdmember.Member, *clientv3.Client) {
	t.Helper()
	cfgs := make([]etcdmember.Config, n)
	var initial []string
	for i := range cfgs {
		cfgs[i] = etcdmember.Config{Name: fmt.Sprintf("m%d", i+1), DataDir: t.TempDir(),
			ClientURL: testkit.FreeURL(t), PeerURL: testkit.FreeURL(t), Logger: zap.NewNop()}
		for _, mod := range mods {
			mod(i, &cfgs[i])
		}
		initial = append(initial, cfgs[i].Name+"="+cfgs[i].PeerURL)
	}
	// Each member is ready once a quorum is: start them together.
	members := make([]*etcdmember.Member, n)
	errs := make([]error, n)
	done := make(chan int, n)
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		go func() {
			members[i], errs[i] = etcdmember.Start(context.Background(), cfgs[i])
			done <- i
		}()
	}
	for range cfgs {
		if i := <-done; members[i] != nil {
			t.Cleanup(func() { members[i].Close() })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.ClientURL())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return members, cli
}
