package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// TestFollowClusterTracksLeaderAndRegistry: against a real etcd, the view
// names the campaigner with the lowest create revision (the one
// CurrentLeader names), follows a leader whose key is revoked to the next
// campaigner, drops a replica whose lease ends, skips a record that does not
// decode, and carries the revision of the last change it reflects.
func TestFollowClusterTracksLeaderAndRegistry(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	views := make(chan ClusterView, 64)
	done := make(chan error, 1)
	go func() { done <- FollowCluster(ctx, cli, func(v ClusterView) { views <- v }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("FollowCluster returned %v after cancel", err)
		}
	})
	// until waits for a view that satisfies ok.
	until := func(what string, ok func(ClusterView) bool) ClusterView {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case v := <-views:
				if ok(v) {
					return v
				}
			case <-timeout:
				t.Fatalf("no view where %s", what)
			}
		}
	}
	until("nobody campaigns", func(v ClusterView) bool { return !v.HasLeader && len(v.Replicas) == 0 })

	join := func(name string) clientv3.LeaseID {
		t.Helper()
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := json.Marshal(ReplicaRecord{Name: name, APIURL: "http://127.0.0.1/" + name})
		if _, err := cli.Put(ctx, ReplicaPrefix+name, string(rec), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		key := ElectionPrefix + "/" + name
		if _, err := cli.Put(ctx, key, name, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		return lease.ID
	}
	l1 := join("n1")
	join("n2")
	if _, err := cli.Put(ctx, ReplicaPrefix+"junk", "not json"); err != nil {
		t.Fatal(err)
	}
	v := until("n1 leads with n2 registered", func(v ClusterView) bool {
		return v.HasLeader && v.Leader.Name == "n1" && len(v.Replicas) == 2
	})
	if v.Replicas[0].Name != "n1" || v.Replicas[1].Name != "n2" || v.Replicas[1].APIURL != "http://127.0.0.1/n2" {
		t.Fatalf("replicas %+v", v.Replicas)
	}
	l, ok, err := CurrentLeader(ctx, cli)
	if err != nil || !ok || l != v.Leader {
		t.Fatalf("CurrentLeader %+v %v %v, the view %+v", l, ok, err, v.Leader)
	}

	resp, err := cli.Revoke(ctx, l1)
	if err != nil {
		t.Fatal(err)
	}
	v = until("n2 leads alone", func(v ClusterView) bool {
		return v.HasLeader && v.Leader.Name == "n2" && len(v.Replicas) == 1
	})
	if v.Revision < resp.Header.Revision {
		t.Fatalf("view at revision %d, the revoke happened at %d", v.Revision, resp.Header.Revision)
	}
	if _, ok := v.Replica("n1"); ok {
		t.Fatal("n1 still registered after its lease ended")
	}
}

// TestFollowClusterEndsOnCompaction: a watch that starts on a compacted
// revision fails, so the caller re-reads rather than trusting a view with a
// hole in it. The read and the watch start together, so a compaction is
// made to land in between by compacting inside publish.
func TestFollowClusterEndsOnCompaction(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	first := true
	err := FollowCluster(ctx, cli, func(v ClusterView) {
		if !first {
			return
		}
		first = false
		for range 3 {
			if _, err := cli.Put(ctx, ReplicaPrefix+"x", "{}"); err != nil {
				t.Error(err)
			}
		}
		resp, err := cli.Get(ctx, "nothing")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Error(err)
		}
	})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("FollowCluster returned %v", err)
	}
}
