package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// With etcd member i and replica i on node i (--node-name, as the chart
// sets it from spec.nodeName), etcd's raft leader does not stay on the
// Orion leader's node: put there (etcdctl move-leader, or an election), it
// is moved off within seconds by the leader, also by the leader of a new
// term. The moves happen while DAGs are submitted, and none makes the
// leader re-read etcd (etcd drops proposals during a handover; they are
// sent again). Without --node-name every process says the host name: one
// node, and nothing moves (the other tests).
func TestLeaderMovesEtcdLeaderOffItsNode(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	c := cluster.New(t, cluster.Options{Nodes: nodes})
	members := etcdMembers(t, c)

	submitted := 0
	for round := 1; round <= 3; round++ {
		l, _ := c.Leader()
		here := slices.IndexFunc(c.Servers, func(s *cluster.Server) bool { return s == l })
		// Start apart (the leader may be moving etcd's leadership now: a
		// second handover asked meanwhile would cancel the first), then
		// hand etcd's leadership to the member on the leader's node, as
		// an election may.
		c.WaitFor(fmt.Sprintf("round %d: etcd's raft leader off %s, %s's node", round, nodes[here], l.Name), 30*time.Second, func() (bool, string) {
			i, err := etcdLeaderIndex(c, members)
			return err == nil && i != here, fmt.Sprintf("etcd leader %d (%v)", i, err)
		})
		moved := time.Now()
		moveEtcdLeader(t, c, members, here)
		for i := 0; i < 5; i++ {
			submitted++
			c.SubmitAny(map[string]any{"id": fmt.Sprintf("apart-%d", submitted), "tasks": []map[string]any{{"id": "t", "kind": "noop"}}})
		}
		c.WaitFor(fmt.Sprintf("round %d: %s moved etcd's raft leadership off %s", round, l.Name, nodes[here]), 30*time.Second, func() (bool, string) {
			i, err := etcdLeaderIndex(c, members)
			if err != nil || i == here {
				return false, fmt.Sprintf("etcd leader %d (%v)", i, err)
			}
			n := movesSince(l, moved)
			return n > 0, fmt.Sprintf("etcd's leader moved to member %d, and %s logged %d moves since", i+1, l.Name, n)
		})
		if round == 2 {
			// A new term keeps them apart too.
			t0 := time.Now()
			l.Kill9()
			c.AwaitNewLeader(l.Name, t0, 30*time.Second)
			c.Restart(l)
		}
	}
	var ids []string
	for i := 1; i <= submitted; i++ {
		ids = append(ids, fmt.Sprintf("apart-%d", i))
	}
	for id, st := range c.WaitDAGs(ids, time.Minute) {
		if st.Status != "succeeded" {
			t.Errorf("%s: %s", id, st.Status)
		}
	}
	for _, s := range c.Servers {
		b, _ := os.ReadFile(s.LogPath)
		if strings.Contains(string(b), "resynchronising") {
			t.Errorf("%s re-read etcd after a commit failed:\n%s", s.Name, grepLines(string(b), "resynchronising"))
		}
	}
}

// movesSince counts the moves of etcd's leadership s logged after since.
func movesSince(s *cluster.Server, since time.Time) int {
	b, _ := os.ReadFile(s.LogPath)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var m struct {
			TS  float64 `json:"ts"`
			Msg string  `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "moved etcd's raft leadership off this replica's node" &&
			time.Unix(0, int64(m.TS*1e9)).After(since) {
			n++
		}
	}
	return n
}

type etcdMember struct {
	id  uint64
	url string
}

// etcdMembers are the members, in the order of c.Etcd.
func etcdMembers(t *testing.T, c *cluster.Cluster) []etcdMember {
	t.Helper()
	var out []etcdMember
	for _, u := range c.ClientURLs {
		cli := etcdClient(t, u)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, u)
		cancel()
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, etcdMember{id: st.Header.MemberId, url: u})
	}
	return out
}

// etcdLeaderIndex is the index of the member that leads etcd's raft group.
func etcdLeaderIndex(c *cluster.Cluster, members []etcdMember) (int, error) {
	for _, m := range members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.url}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.url)
		cancel()
		cli.Close()
		if err != nil || st.Leader == 0 {
			continue
		}
		for i, o := range members {
			if o.id == st.Leader {
				return i, nil
			}
		}
	}
	return -1, fmt.Errorf("no member names a leader")
}

// moveEtcdLeader hands etcd's leadership to member to, as etcdctl
// move-leader does: one request to the member that leads, answered once
// the handover is done.
func moveEtcdLeader(t *testing.T, c *cluster.Cluster, members []etcdMember, to int) {
	t.Helper()
	c.WaitFor(fmt.Sprintf("etcd's leadership handed to member %d", to+1), 30*time.Second, func() (bool, string) {
		i, err := etcdLeaderIndex(c, members)
		if err != nil {
			return false, err.Error()
		}
		cli := etcdClient(t, members[i].url)
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.MoveLeader(ctx, members[to].id)
		return err == nil, fmt.Sprint(err)
	})
}

func grepLines(s, what string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
