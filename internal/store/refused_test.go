package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// A real etcd's whole-transaction refusals reach the engine as the store's
// own errors: too many operations for its --max-txn-ops, too many bytes for
// its --max-request-bytes. The limits Orion was given are larger than the
// member's, as when an operator sets them wrong.
func TestRefusalsAreTheStoresOwn(t *testing.T) {
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) {
		c.MaxTxnOps = 16
		c.MaxRequestBytes = 64 << 10
	})
	ctx := context.Background()
	w := electedWriter(t, cli, cli.KV)
	lim := Limits{MaxOps: 1024, MaxBytes: 8 << 20, MaxRequest: 8 << 20}

	var many []core.Entry
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("d%02d", i)
		many = append(many, core.Entry{DAG: id, D: &core.DAGRecord{Status: core.DAGRunning, Run: 1,
			DAG: model.DAG{ID: id, Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}}})
	}
	_, err := w.Commit(ctx, many, lim)
	if !errors.Is(err, ErrTooManyOps) {
		t.Fatalf("40 puts against --max-txn-ops 16: %v, want ErrTooManyOps", err)
	}

	w = electedWriter(t, cli, cli.KV)
	big := core.Entry{DAG: "big", D: &core.DAGRecord{Status: core.DAGRunning, Run: 1,
		DAG: model.DAG{ID: "big", Name: strings.Repeat("x", 200<<10), Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}}}
	_, err = w.Commit(ctx, []core.Entry{big}, lim)
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("a 200 KiB record against --max-request-bytes 64 KiB: %v, want ErrRequestTooLarge", err)
	}
	if errors.Is(err, ErrTooManyOps) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("one refusal taken for another: %v", err)
	}
}
