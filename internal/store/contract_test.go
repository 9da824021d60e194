package store_test

import (
	"context"
	"testing"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/store/storetest"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// The store's contract on etcd itself: a member with small limits, reached
// as a replica reaches it (Dial). internal/engine runs the same cases on
// its in-memory store.
func TestStoreContract(t *testing.T) {
	const maxOps, maxRequest = 16, 64 << 10
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		m, cli := etcdtest.Start(t, func(c *etcdmember.Config) { c.MaxTxnOps, c.MaxRequestBytes = maxOps, maxRequest })
		s, err := store.Dial(store.DialConfig{Endpoints: m.Endpoints()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return storetest.Harness{Store: s, MaxOps: maxOps, MaxRequest: maxRequest,
			Compact: func(t *testing.T, rev int64) {
				if _, err := cli.Compact(context.Background(), rev); err != nil {
					t.Fatal(err)
				}
			}}
	})
}
