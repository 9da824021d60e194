package server

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/workerstream"
)

// TestLeaderViewTellsWorkersTheRegistry: a connected worker is sent the
// replica registry (name and API URL) on every change a real etcd reports:
// a replica that registers, one whose lease ends, and a record that is not
// a replica's, which is skipped.
func TestLeaderViewTellsWorkersTheRegistry(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	register := func(name, url string, opts ...clientv3.OpOption) {
		t.Helper()
		rec, _ := json.Marshal(store.ReplicaRecord{Name: name, APIURL: url})
		if _, err := cli.Put(ctx, store.ReplicaPrefix+name, string(rec), opts...); err != nil {
			t.Fatal(err)
		}
	}
	register("n1", "http://127.0.0.1:1")

	hub := workerstream.NewHub(workerstream.HubConfig{Leader: "n1", StaleAfter: time.Minute})
	t.Cleanup(func() { _ = hub.Close() })
	hub.SetLeading(true)
	done := make(chan struct{})
	view := newLeaderView(store.NewEtcd(cli), zap.NewNop())
	view.onReplicas = hubPeers(hub)
	go func() { defer close(done); view.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	worker, leaderEnd := workerstream.Pipe()
	t.Cleanup(func() { _ = worker.Close() })
	hub.Accept(leaderEnd)
	if err := worker.Send(workerstream.Msg{Type: workerstream.TypeHello, Hello: &workerstream.Hello{Worker: "w", Slots: 1,
		Version: workerstream.ProtocolVersion}}); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan workerstream.Msg, 64)
	go func() {
		for {
			m, err := worker.Recv()
			if err != nil {
				close(msgs)
				return
			}
			msgs <- m
		}
	}()
	next := func(want ...workerstream.Peer) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatal("stream ended")
				}
				if m.Type != workerstream.TypePeers {
					continue
				}
				if !reflect.DeepEqual(m.Peers, want) {
					t.Fatalf("peers %v, want %v", m.Peers, want)
				}
				return
			case <-timeout:
				t.Fatalf("no peers message; want %v", want)
			}
		}
	}
	n1 := workerstream.Peer{Name: "n1", URL: "http://127.0.0.1:1"}
	n2 := workerstream.Peer{Name: "n2", URL: "http://127.0.0.1:2"}
	next(n1)

	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	register("n2", "http://127.0.0.1:2", clientv3.WithLease(lease.ID))
	next(n1, n2)
	if _, err := cli.Put(ctx, store.ReplicaPrefix+"garbage", "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	next(n1) // the garbage record changed nothing the workers see
}
