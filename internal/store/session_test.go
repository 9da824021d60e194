package store

import (
	"context"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// A session keeps its 1 s lease alive well past its TTL; revoked by
// another replica (a standby deposing it), it ends; orphaned, its lease
// expires; closed, it is revoked at once.
func TestLeaseSessionKeepsItsLeaseAndEnds(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	alive := func(s *LeaseSession) bool {
		r, err := cli.TimeToLive(ctx, s.Lease())
		return err == nil && r.TTL >= 0 // whole seconds left, -1 once gone
	}

	s, err := NewSession(ctx, cli, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Three TTLs: the lease lives only if it is renewed.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !alive(s) {
			t.Fatal("the lease expired while its session lived")
		}
		select {
		case <-s.Done():
			t.Fatal("the session ended by itself")
		default:
		}
	}
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the session of a revoked lease ends", func() bool {
		select {
		case <-s.Done():
			return true
		default:
			return false
		}
	})

	o, err := NewSession(ctx, cli, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o.Orphan()
	testkit.WaitFor(t, 10*time.Second, "an orphaned session's lease expires", func() bool { return !alive(o) })

	c, err := NewSession(ctx, cli, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(c) {
		t.Fatal("a closed session's lease is still there")
	}
}
