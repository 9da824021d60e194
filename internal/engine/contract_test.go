package engine

import (
	"testing"

	"github.com/orion-sched/orion/internal/store/storetest"
)

// The seam the contract covers is the engine's, method for method.
var (
	_ storetest.Store = Store(nil)
	_ Store           = storetest.Store(nil)
)

// The in-memory store keeps the contract etcd keeps
// (internal/store/contract_test.go runs the same cases on etcd), so that
// the scenario tests on it mean what they would on etcd.
func TestFakeStoreContract(t *testing.T) {
	const maxOps, maxRequest = 16, 64 << 10
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s := newFakeStore()
		s.maxOps, s.maxRequest = maxOps, maxRequest
		return storetest.Harness{Store: s, MaxOps: maxOps, MaxRequest: maxRequest,
			Compact: func(_ *testing.T, rev int64) { s.compactTo(rev) }}
	})
}
