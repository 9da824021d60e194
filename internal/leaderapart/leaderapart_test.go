package leaderapart

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// refusingDial is a store whose connections to single members are refused.
type refusingDial struct{ *store.Etcd }

func (refusingDial) DialMember(string) (*store.MemberConn, error) { return nil, errRefused }

// cluster starts 3 members on the given nodes.
func cluster(t *testing.T, nodes ...string) ([]*etcdmember.Member, *clientv3.Client) {
	t.Helper()
	return etcdtest.StartCluster(t, len(nodes), func(i int, c *etcdmember.Config) { c.Node = nodes[i] })
}

// leaderNode is the node of the member that leads etcd's raft group now.
func leaderNode(t *testing.T, members []*etcdmember.Member, nodes []string) string {
	t.Helper()
	for i, m := range members {
		if m.Server().Leader() == m.Server().MemberID() {
			return nodes[i]
		}
	}
	return ""
}

// The leader's node hosts etcd's raft leader: one look moves etcd's
// leadership to a member on another node; the next finds them apart.
func TestLookMovesTheRaftLeaderOffThisNode(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	members, cli := cluster(t, nodes...)
	var here string
	testkit.WaitFor(t, 10*time.Second, "a raft leader", func() bool { here = leaderNode(t, members, nodes); return here != "" })
	var outcomes []string
	var mu sync.Mutex
	k := New(Config{Etcd: store.NewEtcd(cli), Node: here, Moved: func(o string) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }})
	got, err := k.Look(context.Background())
	if err != nil || got != Moved {
		t.Fatalf("look with etcd's leader on this node (%s): %q %v, want moved", here, got, err)
	}
	testkit.WaitFor(t, 10*time.Second, "etcd's leader on another node", func() bool {
		n := leaderNode(t, members, nodes)
		return n != "" && n != here
	})
	if got, err := k.Look(context.Background()); err != nil || got != Apart {
		t.Fatalf("look after the move: %q %v, want apart", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 1 || outcomes[0] != "moved" {
		t.Errorf("outcomes told: %v, want [moved]", outcomes)
	}
}

// With every member on the leader's node there is nowhere to move etcd's
// leadership, and nothing moves; a member elsewhere that is not Orion's
// (it does not say its node) is no destination either.
func TestLookMovesNothingWithoutAnotherNode(t *testing.T) {
	nodes := []string{"node-a", "node-a", "node-a"}
	_, cli := cluster(t, nodes...)
	k := New(Config{Etcd: store.NewEtcd(cli), Node: "node-a"})
	testkit.WaitFor(t, 10*time.Second, "a look", func() bool {
		got, err := k.Look(context.Background())
		if err == nil && got != Nowhere {
			t.Fatalf("all members on this node: %q, want nowhere", got)
		}
		return err == nil
	})
}

// An etcd whose members do not say their node (not `orion etcd`) leaves
// nothing to compare: the look says so and moves nothing.
func TestLookWithMembersThatSayNothing(t *testing.T) {
	_, cli := cluster(t, "node-a", "node-b", "node-c")
	notFound := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 404, Status: "404 Not Found", Body: http.NoBody, Request: r}, nil
	})}
	k := New(Config{Etcd: store.NewEtcd(cli), Node: "node-a", HTTP: notFound})
	testkit.WaitFor(t, 10*time.Second, "a look", func() bool {
		got, err := k.Look(context.Background())
		if err == nil && got != Unknown {
			t.Fatalf("members that say nothing: %q, want unknown", got)
		}
		return err == nil
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// While the replica leads, the Keeper looks by itself: etcd's leader ends
// on another node; once it no longer leads, it moves nothing more.
func TestKeeperLooksWhileLeading(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	members, cli := cluster(t, nodes...)
	var here string
	testkit.WaitFor(t, 10*time.Second, "a raft leader", func() bool { here = leaderNode(t, members, nodes); return here != "" })
	k := New(Config{Etcd: store.NewEtcd(cli), Node: here, Every: 50 * time.Millisecond})
	defer k.Close()
	k.Leading(true)
	testkit.WaitFor(t, 20*time.Second, "etcd's leader off "+here, func() bool {
		n := leaderNode(t, members, nodes)
		return n != "" && n != here
	})
	k.Close()
	k.mu.Lock()
	running := k.stop != nil
	k.mu.Unlock()
	if running {
		t.Error("the Keeper still looks after Close")
	}
}

// A MoveLeader etcd refuses is reported, and the Keeper asks less often.
func TestLookReportsARefusedMove(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	members, cli := cluster(t, nodes...)
	var here string
	testkit.WaitFor(t, 10*time.Second, "a raft leader", func() bool { here = leaderNode(t, members, nodes); return here != "" })
	var told []string
	k := New(Config{Etcd: refusingDial{store.NewEtcd(cli)}, Node: here, Moved: func(o string) { told = append(told, o) }})
	if _, err := k.Look(context.Background()); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("look with MoveLeader refused: %v, want the refusal", err)
	}
	if len(told) != 1 || told[0] != "failed" {
		t.Errorf("outcomes told: %v, want [failed]", told)
	}
}

var errRefused = &refusal{}

type refusal struct{}

func (*refusal) Error() string { return "etcdserver: permission denied (refused for the test)" }
