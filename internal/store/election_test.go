package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// campaignResult is what a Campaign running on a goroutine returned.
type campaignResult struct {
	term Term
	err  error
}

func startCampaign(ctx context.Context, s *LeaseSession, name string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		t, err := Campaign(ctx, s, name)
		ch <- campaignResult{t, err}
	}()
	return ch
}

func newTestSession(t *testing.T, cli *clientv3.Client) *LeaseSession {
	t.Helper()
	s, err := NewSession(context.Background(), cli, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func won(t *testing.T, ch <-chan campaignResult, who string) Term {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: campaign: %v", who, r.err)
		}
		return r.term
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not win within 10s", who)
		return nil
	}
}

func waiting(t *testing.T, ch <-chan campaignResult, who string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s won while an older candidate campaigns: %+v %v", who, r.term, r.err)
	default:
	}
}

// The election keeps concurrency.Election's keys and order (what etcdctl
// elect reads): the oldest key leads, a candidate waits for every older
// key, whichever order they go in, and the winner learns the term record
// and the revision that decided it from the deciding read.
func TestCampaignOrderAndElected(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa, sb, sc := newTestSession(t, cli), newTestSession(t, cli), newTestSession(t, cli)

	a := won(t, startCampaign(ctx, sa, "a"), "a")
	if el := a.Elected(); el.Prev != nil || el.Rev < a.Fence().Rev {
		t.Fatalf("first term's elected %+v, fence %+v", el, a.Fence())
	}
	// What etcdctl elect -l and concurrency.Election's Leader read.
	lead, err := cli.Get(ctx, ElectionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil || string(lead.Kvs[0].Value) != "a" || string(lead.Kvs[0].Key) != a.Fence().Key {
		t.Fatalf("concurrency.Election sees %v %v", lead, err)
	}

	chB := startCampaign(ctx, sb, "b")
	chC := startCampaign(ctx, sc, "c")
	waitKeys(t, cli, 3)
	waiting(t, chB, "b")
	waiting(t, chC, "c")

	// a writes its term record, as a leader's first commit does.
	rec, _ := json.Marshal(TermRecord{Name: "a", Fence: a.Fence().Rev, Incarnation: "inc-1"})
	if _, err := cli.Put(ctx, LeaderKey, string(rec)); err != nil {
		t.Fatal(err)
	}

	// b, the newest key older than c's, goes first: c must go on waiting
	// for a.
	if _, err := cli.Revoke(ctx, sb.Lease()); err != nil {
		t.Fatal(err)
	}
	if r := <-chB; r.err == nil {
		t.Fatalf("b won after its lease was revoked: %+v", r.term.Fence())
	}
	waitKeys(t, cli, 2)
	waiting(t, chC, "c")

	revoked, err := cli.Revoke(ctx, sa.Lease())
	if err != nil {
		t.Fatal(err)
	}
	c := won(t, chC, "c")
	el := c.Elected()
	if el.Prev == nil || el.Prev.Name != "a" || el.Prev.Incarnation != "inc-1" || el.Rev < revoked.Header.Revision {
		t.Fatalf("c elected %+v after a's lease went at %d", el, revoked.Header.Revision)
	}
	if l, ok, err := CurrentLeader(ctx, cli); err != nil || !ok || l.Name != "c" || l.Key != c.Fence().Key || l.Rev != c.Fence().Rev {
		t.Fatalf("current leader %+v %v %v, c's fence %+v", l, ok, err, c.Fence())
	}

	// Resign hands over at once; the session lives on and can campaign
	// again, under another value, keeping nothing of the old key.
	sd := newTestSession(t, cli)
	chD := startCampaign(ctx, sd, "d")
	waitKeys(t, cli, 2)
	if err := c.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	d := won(t, chD, "d")
	if p := d.Elected().Prev; p == nil || p.Name != "a" {
		t.Fatalf("d elected %+v", d.Elected())
	}
	chC2 := startCampaign(ctx, sc, "c2")
	waitKeys(t, cli, 2)
	waiting(t, chC2, "c2")
	if err := d.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := won(t, chC2, "c2")
	if l, _, _ := CurrentLeader(ctx, cli); l.Name != "c2" || c2.Fence().Key != c.Fence().Key || c2.Fence().Rev <= c.Fence().Rev {
		t.Fatalf("leader %+v; c's fence %+v, c2's %+v", l, c.Fence(), c2.Fence())
	}
}

// A campaign given up (its context cancelled, as when a replica retires)
// deletes its key, as concurrency.Election's does, so that it does not hold
// back younger candidates while its session lives on. A campaign on the
// same lease finds its key and keeps its place in the line; only the value
// changes.
func TestCampaignAgainKeepsItsPlace(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	sa, sb := newTestSession(t, cli), newTestSession(t, cli)
	a := won(t, startCampaign(ctx, sa, "a"), "a")
	cctx, cancel := context.WithCancel(ctx)
	chB := startCampaign(cctx, sb, "b")
	waitKeys(t, cli, 2)
	cancel()
	if r := <-chB; r.err == nil {
		t.Fatal("a cancelled campaign won")
	}
	// The campaign given up left the line; its session lives on.
	waitKeys(t, cli, 1)
	select {
	case <-sb.Done():
		t.Fatal("b's session ended")
	default:
	}
	again := won(t, startCampaign(ctx, sa, "a-again"), "a again")
	if again.Fence() != a.Fence() {
		t.Fatalf("fence %+v, first %+v", again.Fence(), a.Fence())
	}
	if l, _, _ := CurrentLeader(ctx, cli); l.Name != "a-again" {
		t.Fatalf("leader value %q", l.Name)
	}
}

// A session that ends ends its campaign: a key on a lease that is gone
// cannot lead.
func TestCampaignEndsWithItsSession(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	sa := newTestSession(t, cli)
	won(t, startCampaign(ctx, sa, "a"), "a")
	sb, err := NewSession(ctx, cli, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	chB := startCampaign(ctx, sb, "b")
	waitKeys(t, cli, 2)
	sb.Orphan() // keep-alives stop: Done closes, the lease lives on
	select {
	case r := <-chB:
		if r.err == nil {
			t.Fatal("campaign won on an ended session")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("campaign still waits 10s after its session ended")
	}
}

func waitKeys(t *testing.T, cli *clientv3.Client, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(context.Background(), ElectionPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("election keys: %v %v, want %d", resp, err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Deposing a leader known from the cluster view revokes its lease and the
// next candidate wins; a view that holds a lease gone since falls back to
// reading who leads, and a view that names another leader deposes nobody
// it does not suspect.
func TestDeposeKnown(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	sa, sb, sc := newTestSession(t, cli), newTestSession(t, cli), newTestSession(t, cli)
	won(t, startCampaign(ctx, sa, "a"), "a")
	chB := startCampaign(ctx, sb, "b")
	waitKeys(t, cli, 2) // b's key before c's: b is next in line
	chC := startCampaign(ctx, sc, "c")
	waitKeys(t, cli, 3)
	a, ok, err := CurrentLeader(ctx, cli)
	if err != nil || !ok || a.Name != "a" {
		t.Fatalf("leader %+v %v %v", a, ok, err)
	}

	// The view names a, the suspect is x: the election is read, x does not
	// lead, and nothing is revoked.
	if ok, err := DeposeKnown(ctx, cli, "x", Leader{Name: "a", Lease: sa.Lease()}); ok || err != nil {
		t.Fatalf("deposed an unsuspected leader: %v %v", ok, err)
	}
	if ok, err := DeposeKnown(ctx, cli, "a", a); !ok || err != nil {
		t.Fatalf("depose a: %v %v", ok, err)
	}
	won(t, chB, "b")
	waiting(t, chC, "c")

	// A view still holding a's revoked lease for b: etcd no longer knows
	// the lease, so the election is read, and b, leading, is deposed.
	if ok, err := DeposeKnown(ctx, cli, "b", Leader{Name: "b", Lease: a.Lease}); !ok || err != nil {
		t.Fatalf("depose b through a stale view: %v %v", ok, err)
	}
	won(t, chC, "c")
	if ttl, err := cli.TimeToLive(ctx, sb.Lease()); err != nil || ttl.TTL > 0 {
		t.Fatalf("b's lease lives on: %+v %v", ttl, err)
	}
}
