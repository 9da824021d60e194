package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// raftLeader asks every member which one leads the raft group.
func raftLeader(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	for _, ep := range cli.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return ep
		}
	}
	return ""
}

// The leader's transactions go to etcd's raft leader through a connection
// of their own, and follow it when it changes: the Route finds the new one
// after the old leader's member stops, and transactions go on meanwhile.
func TestRouteFollowsTheRaftLeader(t *testing.T) {
	members, cli := etcdtest.StartCluster(t, 3)
	byURL := map[string]int{}
	for i, m := range members {
		byURL[m.ClientURL()] = i
	}
	dial := func(ep string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
	}
	route := NewRoute(cli, cli.Endpoints(), dial, zap.NewNop())
	t.Cleanup(route.Close)

	testkit.WaitFor(t, 10*time.Second, "the route pinned to the raft leader", func() bool {
		p := route.Pinned()
		return p != "" && p == raftLeader(t, cli)
	})

	w := electedWriter(t, cli, route.KV())
	commit := func(name string, n int) {
		t.Helper()
		// n batches in flight at once, committed in the order begun.
		var ps []*Pending
		for i := range n {
			ps = append(ps, w.Begin([]core.Entry{dagEntry(fmt.Sprintf("%s-%d", name, i), 1)}, DefaultLimits))
		}
		errs := make(chan error, n)
		revs := make([]int64, n)
		for i, p := range ps {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := p.Commit(ctx)
				if err == nil {
					revs[i] = res.Revs[0]
				}
				errs <- err
			}()
		}
		for range ps {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		for i := 1; i < n; i++ {
			if revs[i] <= revs[i-1] {
				t.Fatalf("%s: batch %d committed at %d, after batch %d at %d: out of order", name, i, revs[i], i-1, revs[i-1])
			}
		}
	}
	commit("before", 4)

	old := route.Pinned()
	if err := members[byURL[old]].Close(); err != nil {
		t.Logf("closing the raft leader's member: %v", err)
	}
	commit("during", 4) // sent while the route still names the stopped member, or looks again
	testkit.WaitFor(t, 10*time.Second, "the route pinned to the new raft leader", func() bool {
		p := route.Pinned()
		return p != "" && p != old && p == raftLeader(t, cli)
	})
	commit("after", 4)
}

// A transaction never waits on a pinned connection that is not up: when
// the raft leader's member dies (a node loss takes it with the leader
// replica), gRPC shows the lost connection as idle or connecting, not
// failed, and a transaction sent there would wait for it while the other
// members answer. The route sends it through the balanced client and
// looks for the new raft leader.
func TestRouteSkipsAPinnedConnectionThatIsNotUp(t *testing.T) {
	members, cli := etcdtest.StartCluster(t, 3)
	byURL := map[string]int{}
	for i, m := range members {
		byURL[m.ClientURL()] = i
	}
	dial := func(ep string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
	}
	route := NewRoute(cli, cli.Endpoints(), dial, zap.NewNop())
	t.Cleanup(route.Close)
	testkit.WaitFor(t, 10*time.Second, "the route pinned to the raft leader", func() bool {
		p := route.Pinned()
		return p != "" && p == raftLeader(t, cli)
	})
	// A transaction through the pinned connection brings it up.
	if _, err := route.KV().Txn(context.Background()).Then(clientv3.OpPut("k", "v")).Commit(); err != nil {
		t.Fatal(err)
	}
	route.mu.Lock()
	pinned := route.pinned
	route.mu.Unlock()
	if c, _ := route.pick(); c != pinned {
		t.Fatalf("a route pinned to a connection that is up picked another client")
	}

	old := route.Pinned()
	if err := members[byURL[old]].Close(); err != nil {
		t.Logf("closing the raft leader's member: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the dead member's connection down", func() bool {
		return pinned.ActiveConnection().GetState() != connectivity.Ready
	})
	if c, term := route.pick(); c != cli || term != 0 {
		t.Fatalf("pick chose the dead member's connection (state %v) over the balanced client", pinned.ActiveConnection().GetState())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := route.KV().Txn(ctx).Then(clientv3.OpPut("k", "w")).Commit(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the route pinned to the new raft leader", func() bool {
		p := route.Pinned()
		return p != "" && p != old && p == raftLeader(t, cli)
	})
}
