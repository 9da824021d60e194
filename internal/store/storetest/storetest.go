// Package storetest is the contract of the engine's store seam
// (engine.Store): one table of cases, run against every implementation, so
// that the engine's scenario tests on its in-memory store
// (internal/engine/fakes_test.go) mean what they would on etcd
// (store.Etcd, internal/store/contract_test.go). River's driver tests are
// the model.
//
// A case that fails on one store and not on the other names a difference:
// the in-memory store is fixed to answer as etcd does.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// Store is the seam under test: engine.Store's methods, declared again here
// so that the engine's own tests can import this package (the engine's
// tests check that the two stay the same).
type Store interface {
	Load(ctx context.Context) (*store.Snapshot, error)
	Watch(ctx context.Context, from int64) <-chan store.WatchEvent
	RequestProgress(ctx context.Context) error
	OpenSession(ctx context.Context, ttl time.Duration, reg store.ReplicaRecord) (store.Session, error)
	Campaign(ctx context.Context, session store.Session, name string) (store.Term, error)
	Begin(fence store.Fence, entries []core.Entry, lim store.Limits, term *store.TermRecord) store.PendingCommit
	CurrentLeader(ctx context.Context) (store.Leader, bool, error)
	Depose(ctx context.Context, suspect string) (bool, error)
}

// Harness is a fresh store and what the cases need of it beyond the seam:
// what an operator or etcd itself does.
type Harness struct {
	Store Store
	// Compact compacts the history through rev, as etcd's compaction does.
	Compact func(t *testing.T, rev int64)
	// MaxOps and MaxRequest are the limits the store's etcd enforces on one
	// transaction (--max-txn-ops, --max-request-bytes): small ones, so
	// that the cases can exceed them.
	MaxOps, MaxRequest int
}

// Run runs every case against a fresh store from open.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, open(t))
		})
	}
}

// wait bounds every step that waits on the store.
const wait = 15 * time.Second

var cases = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"LoadReadsEveryRecordAtOneRevision", loadAtRevision},
	{"WatchDeliversTheLogFromARevisionInOrder", watchFrom},
	{"WatchFromACompactedRevisionSaysSo", watchCompacted},
	{"RequestProgressReachesTheWatch", requestProgress},
	{"CommitOnALostTermIsRefusedWhole", fencedOnLostTerm},
	{"RefusalsForOpsAndBytesApplyNothing", refusals},
	{"SessionLeaseExpiresWhenNotKeptAlive", leaseExpires},
	{"SessionCloseRevokesTheLease", sessionClose},
	{"CampaignWaitsForTheLeaderThenWins", campaign},
	{"CurrentLeaderNamesTheTerm", currentLeader},
	{"DeposeRevokesTheLeadersLease", depose},
}

// dagEntry is a DAG submission with n noop tasks.
func dagEntry(id string, n int) core.Entry {
	d := model.DAG{ID: id, Name: id}
	for i := 0; i < n; i++ {
		d.Tasks = append(d.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop, Timeout: model.Duration(time.Minute)})
	}
	return core.Entry{DAG: id, D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1}}
}

// taskEntry is a task's record at attempt.
func taskEntry(dagID, task string, st core.Status, attempt int) core.Entry {
	return core.Entry{DAG: dagID, Task: task, T: &core.TaskRecord{Status: st, Run: 1, Attempt: attempt}}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

type campaignResult struct {
	term store.Term
	err  error
}

// campaignAsync campaigns for name on sess in the background, until the
// test ends.
func campaignAsync(t *testing.T, st Store, sess store.Session, name string) <-chan campaignResult {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := st.Campaign(ctx, sess, name)
		ch <- campaignResult{term, err}
	}()
	return ch
}

// winner is the term a background campaign won.
func winner(t *testing.T, ch <-chan campaignResult, what string) store.Term {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: campaign: %v", what, r.err)
		}
		return r.term
	case <-time.After(wait):
		t.Fatalf("%s: no win within %s", what, wait)
		return nil
	}
}

func sameTerm(got, want *store.TermRecord) bool {
	return got != nil && got.Name == want.Name && got.APIURL == want.APIURL && got.Fence == want.Fence && got.Incarnation == want.Incarnation
}

// lead opens a session for name and wins the election on it.
func lead(t *testing.T, st Store, name string, ttl time.Duration) (store.Session, store.Term) {
	t.Helper()
	sess := session(t, st, name, ttl)
	term, err := st.Campaign(ctxFor(t), sess, name)
	if err != nil {
		t.Fatalf("%s: campaign: %v", name, err)
	}
	return sess, term
}

func session(t *testing.T, st Store, name string, ttl time.Duration) store.Session {
	t.Helper()
	sess, err := st.OpenSession(context.Background(), ttl, store.ReplicaRecord{Name: name, APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("%s: session: %v", name, err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

func commit(t *testing.T, st Store, f store.Fence, lim store.Limits, entries ...core.Entry) store.Committed {
	t.Helper()
	res, err := st.Begin(f, entries, lim, nil).Commit(ctxFor(t))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if len(res.Revs) != len(entries) {
		t.Fatalf("commit: revisions %v for %d entries", res.Revs, len(entries))
	}
	return res
}

// rev is the revision a commit's last entry got.
func rev(c store.Committed) int64 { return c.Revs[len(c.Revs)-1] }

var lim = store.DefaultLimits

// waitClosed waits for ch to close.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: not within %s", what, wait)
	}
}

// poll waits for cond, checking it every 10 ms.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entryKey names an entry as the cases compare them: its record and
// revision.
func entryKey(e core.Entry) string {
	switch {
	case e.Delete:
		return fmt.Sprintf("%s delete @%d", e.DAG, e.Rev)
	case e.Task != "":
		return fmt.Sprintf("%s/%s %s #%d @%d", e.DAG, e.Task, e.T.Status, e.T.Attempt, e.Rev)
	default:
		return fmt.Sprintf("%s %s run %d @%d", e.DAG, e.D.Status, e.D.Run, e.Rev)
	}
}

func keys(es []core.Entry) string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = entryKey(e)
	}
	return strings.Join(out, "; ")
}

// collect reads log entries from w until it has n, failing on a watch that
// ends, is compacted, or stays silent.
func collect(t *testing.T, w <-chan store.WatchEvent, n int) []core.Entry {
	t.Helper()
	var got []core.Entry
	timeout := time.After(wait)
	for len(got) < n {
		select {
		case ev, ok := <-w:
			if !ok || ev.Err != nil || ev.Compacted {
				t.Fatalf("the watch ended after %d entries (%s): %+v", len(got), keys(got), ev)
			}
			if len(ev.Bad) > 0 {
				t.Fatalf("undecodable values: %v", ev.Bad)
			}
			for _, e := range ev.Entries {
				if e.Rev > ev.MaxRev || ev.MaxRev > ev.HeaderRev && ev.HeaderRev != 0 {
					t.Errorf("event revisions out of order: entry @%d, max %d, header %d", e.Rev, ev.MaxRev, ev.HeaderRev)
				}
			}
			got = append(got, ev.Entries...)
		case <-timeout:
			t.Fatalf("%d of %d entries within %s: %s", len(got), n, wait, keys(got))
		}
	}
	return got
}

// Load returns the current records at one revision: a DAG record with the
// revision that created it, a task's latest record with the revision that
// wrote it, the term record; a deleted DAG takes its tasks with it.
func loadAtRevision(t *testing.T, h Harness) {
	st := h.Store
	_, term := lead(t, st, "n1", 5*time.Second)
	rec := &store.TermRecord{Name: "n1", APIURL: "http://127.0.0.1:1", Fence: term.Fence().Rev, Incarnation: "n1-1"}
	ctx := ctxFor(t)
	c1, err := st.Begin(term.Fence(), []core.Entry{dagEntry("d1", 2), taskEntry("d1", "t0", core.Running, 1)}, lim, rec).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2 := commit(t, st, term.Fence(), lim, taskEntry("d1", "t0", core.Succeeded, 1), dagEntry("d2", 1), taskEntry("d2", "t0", core.Running, 1))
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Rev < rev(c2) {
		t.Errorf("load at revision %d, before the last commit's %d", snap.Rev, rev(c2))
	}
	want := fmt.Sprintf("d1 running run 1 @%d; d2 running run 1 @%d", c1.Revs[0], c2.Revs[1])
	if got := keys(snap.DAGs); got != want {
		t.Errorf("DAGs: %s, want %s", got, want)
	}
	want = fmt.Sprintf("d1/t0 succeeded #1 @%d; d2/t0 running #1 @%d", c2.Revs[0], c2.Revs[2])
	if got := keys(snap.Tasks); got != want {
		t.Errorf("tasks: %s, want %s", got, want)
	}
	if !sameTerm(snap.Term, rec) {
		t.Errorf("term record: %+v, want %+v", snap.Term, rec)
	}
	if len(snap.DAGs[0].D.Tasks) != 2 {
		t.Errorf("d1 loaded with %d tasks, want 2", len(snap.DAGs[0].D.Tasks))
	}

	c3 := commit(t, st, term.Fence(), lim, core.Entry{DAG: "d1", Delete: true})
	if snap, err = st.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if snap.Rev < rev(c3) {
		t.Errorf("load at revision %d, before the delete's %d", snap.Rev, rev(c3))
	}
	if got, want := keys(snap.DAGs)+" | "+keys(snap.Tasks), fmt.Sprintf("d2 running run 1 @%d | d2/t0 running #1 @%d", c2.Revs[1], c2.Revs[2]); got != want {
		t.Errorf("after deleting d1: %s, want %s", got, want)
	}
}

// A watch from a revision delivers every entry committed from it on, each
// with its revision, in commit order: first what was committed before the
// watch began, then what is committed while it lasts.
func watchFrom(t *testing.T, h Harness) {
	st := h.Store
	_, term := lead(t, st, "n1", 5*time.Second)
	f := term.Fence()
	commit(t, st, f, lim, dagEntry("d1", 1))
	c2 := commit(t, st, f, lim, taskEntry("d1", "t0", core.Running, 1), dagEntry("d2", 1))
	c3 := commit(t, st, f, lim, taskEntry("d1", "t0", core.Failed, 1))
	w := st.Watch(ctxFor(t), c2.Revs[0])
	got := collect(t, w, 3)
	want := fmt.Sprintf("d1/t0 running #1 @%d; d2 running run 1 @%d; d1/t0 failed #1 @%d", c2.Revs[0], c2.Revs[1], rev(c3))
	if keys(got) != want {
		t.Fatalf("from %d: %s, want %s", c2.Revs[0], keys(got), want)
	}
	c4 := commit(t, st, f, lim, taskEntry("d1", "t0", core.Running, 2), core.Entry{DAG: "d2", Delete: true})
	got = collect(t, w, 2)
	want = fmt.Sprintf("d1/t0 running #2 @%d; d2 delete @%d", c4.Revs[0], c4.Revs[1])
	if keys(got) != want {
		t.Fatalf("live: %s, want %s", keys(got), want)
	}
}

// A watch from a revision compaction removed says so (Compacted, with the
// revision compacted through) and ends: the follower re-reads. From the
// compacted revision itself it is an ordinary watch, and a watch already
// caught up goes on across the compaction, as etcd's do.
func watchCompacted(t *testing.T, h Harness) {
	st := h.Store
	_, term := lead(t, st, "n1", 5*time.Second)
	f := term.Fence()
	c1 := commit(t, st, f, lim, dagEntry("d1", 1))
	c2 := commit(t, st, f, lim, dagEntry("d2", 1))
	c3 := commit(t, st, f, lim, dagEntry("d3", 1))
	live := st.Watch(ctxFor(t), rev(c3)+1)
	h.Compact(t, rev(c2))

	w := st.Watch(ctxFor(t), rev(c1))
	select {
	case ev, ok := <-w:
		if !ok || !ev.Compacted || ev.CompactRev != rev(c2) || len(ev.Entries) > 0 {
			t.Fatalf("watch from compacted revision %d: %+v (open %v), want compacted at %d", rev(c1), ev, ok, rev(c2))
		}
	case <-time.After(wait):
		t.Fatal("no answer from a watch of a compacted revision")
	}
	select {
	case ev, ok := <-w:
		if ok {
			t.Fatalf("the compacted watch goes on: %+v", ev)
		}
	case <-time.After(wait):
		t.Fatal("the compacted watch did not end")
	}

	got := collect(t, st.Watch(ctxFor(t), rev(c2)), 2)
	if want := fmt.Sprintf("d2 running run 1 @%d; d3 running run 1 @%d", rev(c2), rev(c3)); keys(got) != want {
		t.Fatalf("from the compaction's revision: %s, want %s", keys(got), want)
	}
	c4 := commit(t, st, f, lim, dagEntry("d4", 1))
	got = collect(t, live, 1)
	if want := fmt.Sprintf("d4 running run 1 @%d", rev(c4)); keys(got) != want {
		t.Fatalf("a caught-up watch after the compaction: %s, want %s", keys(got), want)
	}
}

// RequestProgress has a watch told etcd's revision with nothing in it,
// once etcd has reached the revision the watch started from: etcd tells a
// watch from a revision still to come nothing (nor any other watch on the
// same stream) until it gets there.
func requestProgress(t *testing.T, h Harness) {
	st := h.Store
	_, term := lead(t, st, "n1", 5*time.Second)
	c1 := commit(t, st, term.Fence(), lim, dagEntry("d1", 1))
	ctx := ctxFor(t)
	w := st.Watch(ctx, rev(c1))
	collect(t, w, 1)
	timeout := time.After(wait)
	for {
		if err := st.RequestProgress(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case ev, ok := <-w:
			if !ok || ev.Err != nil || ev.Compacted || len(ev.Entries) > 0 {
				t.Fatalf("waiting for progress: %+v (open %v)", ev, ok)
			}
			if ev.Progress {
				if ev.HeaderRev < rev(c1) {
					t.Fatalf("progress at %d, before the last commit's %d", ev.HeaderRev, rev(c1))
				}
				return
			}
		case <-time.After(100 * time.Millisecond): // asked before the watch was set up: ask again
		case <-timeout:
			t.Fatal("no progress notification")
		}
	}
}

// A leader whose term is over has its commits refused whole (ErrFenced),
// and so are those it began behind them; its successor's go through.
func fencedOnLostTerm(t *testing.T, h Harness) {
	st := h.Store
	_, a := lead(t, st, "n1", 5*time.Second)
	commit(t, st, a.Fence(), lim, dagEntry("d1", 1))
	won := campaignAsync(t, st, session(t, st, "n2", 5*time.Second), "n2")
	ctx := ctxFor(t)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := winner(t, won, "n2 after n1 resigned")
	p1 := st.Begin(a.Fence(), []core.Entry{dagEntry("late1", 1)}, lim, nil)
	p2 := st.Begin(a.Fence(), []core.Entry{dagEntry("late2", 1)}, lim, nil)
	if res, err := p1.Commit(ctx); !errors.Is(err, store.ErrFenced) || len(res.Revs) > 0 {
		t.Fatalf("n1's commit after its term: %+v %v, want ErrFenced and nothing", res, err)
	}
	if res, err := p2.Commit(ctx); !errors.Is(err, store.ErrFenced) || len(res.Revs) > 0 {
		t.Fatalf("n1's commit begun behind the refused one: %+v %v, want ErrFenced and nothing", res, err)
	}
	c := commit(t, st, b.Fence(), lim, dagEntry("d2", 1))
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(snap.DAGs), fmt.Sprintf("d1 running run 1 @%d; d2 running run 1 @%d", snap.DAGs[0].Rev, rev(c)); got != want {
		t.Fatalf("after the refused commits: %s, want %s", got, want)
	}
}

// etcd refuses a transaction with more operations than --max-txn-ops or
// more bytes than --max-request-bytes whole, in the store's own terms
// (ErrTooManyOps, ErrRequestTooLarge); the next commit goes through.
func refusals(t *testing.T, h Harness) {
	st := h.Store
	_, term := lead(t, st, "n1", 5*time.Second)
	f := term.Fence()
	ctx := ctxFor(t)
	var many []core.Entry
	for i := 0; i < h.MaxOps; i++ {
		many = append(many, taskEntry("d1", fmt.Sprintf("t%d", i), core.Running, 1))
	}
	// The store's limits allow the batch in one transaction; etcd's do not
	// (its entries and the commit marker).
	wide := store.Limits{MaxOps: 4 * h.MaxOps, MaxBytes: 1 << 20, MaxRequest: 4 * h.MaxRequest}
	if res, err := st.Begin(f, many, wide, nil).Commit(ctx); !errors.Is(err, store.ErrTooManyOps) || len(res.Revs) > 0 {
		t.Fatalf("%d operations against --max-txn-ops %d: %+v %v, want ErrTooManyOps", len(many)+1, h.MaxOps, res, err)
	}
	big := dagEntry("big", 1)
	big.D.Name = strings.Repeat("x", h.MaxRequest+1024)
	wide.MaxBytes = 4 * h.MaxRequest
	if res, err := st.Begin(f, []core.Entry{big}, wide, nil).Commit(ctx); !errors.Is(err, store.ErrRequestTooLarge) || len(res.Revs) > 0 {
		t.Fatalf("a record over --max-request-bytes %d: %+v %v, want ErrRequestTooLarge", h.MaxRequest, res, err)
	}
	c := commit(t, st, f, lim, dagEntry("d1", 1))
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(snap.DAGs)+" | "+keys(snap.Tasks), fmt.Sprintf("d1 running run 1 @%d | ", rev(c)); got != want {
		t.Fatalf("after the refusals: %s, want %s", got, want)
	}
}

// A session nobody keeps alive (Orphan, as a crash) is over for its holder
// at once; etcd lets its lease, and the election key on it, go after the
// TTL: the term's commits are refused and another candidate wins.
func leaseExpires(t *testing.T, h Harness) {
	st := h.Store
	sa, a := lead(t, st, "n1", time.Second)
	sa.Orphan()
	waitClosed(t, sa.Done(), "the orphaned session's Done")
	waitClosed(t, a.Done(), "the orphaned session's term's Done")
	ctx := ctxFor(t)
	poll(t, "the orphaned lease to expire", func() bool {
		_, ok, err := st.CurrentLeader(ctx)
		return err == nil && !ok
	})
	if _, err := st.Begin(a.Fence(), []core.Entry{dagEntry("late", 1)}, lim, nil).Commit(ctx); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a commit of the expired term: %v, want ErrFenced", err)
	}
	_, b := lead(t, st, "n2", 5*time.Second)
	commit(t, st, b.Fence(), lim, dagEntry("d1", 1))
}

// Close revokes the lease: the election key goes at once, so the next
// candidate need not wait for a TTL.
func sessionClose(t *testing.T, h Harness) {
	st := h.Store
	sa, a := lead(t, st, "n1", time.Minute)
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, a.Done(), "the closed session's term's Done")
	ctx := ctxFor(t)
	if _, ok, err := st.CurrentLeader(ctx); err != nil || ok {
		t.Fatalf("leader after its session closed: %v %v, want none", ok, err)
	}
	_, b := lead(t, st, "n2", 5*time.Second)
	if b.Fence().Rev <= a.Fence().Rev {
		t.Fatalf("n2's fence %d, not after n1's %d", b.Fence().Rev, a.Fence().Rev)
	}
}

// The first candidate leads; another waits until it resigns, then wins
// with a later fence and is told the term before (its record) and the
// revision the election was decided at. A campaign on the session that
// already leads returns the same term's fence.
func campaign(t *testing.T, h Harness) {
	st := h.Store
	sa, a := lead(t, st, "n1", 5*time.Second)
	ctx := ctxFor(t)
	if again, err := st.Campaign(ctx, sa, "n1"); err != nil || again.Fence() != a.Fence() {
		t.Fatalf("campaign again on the leading session: %+v %v, want fence %+v", again, err, a.Fence())
	}
	rec := &store.TermRecord{Name: "n1", APIURL: "http://127.0.0.1:1", Fence: a.Fence().Rev, Incarnation: "n1-1"}
	first, err := st.Begin(a.Fence(), []core.Entry{dagEntry("d1", 1)}, lim, rec).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	won := campaignAsync(t, st, session(t, st, "n2", 5*time.Second), "n2")
	// n1 still leads while n2 campaigns: its commits go through.
	c := commit(t, st, a.Fence(), lim, dagEntry("d2", 1))
	select {
	case r := <-won:
		t.Fatalf("n2 won while n1 leads: %+v %v", r.term, r.err)
	default:
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := winner(t, won, "n2 after n1 resigned")
	if b.Fence().Rev <= a.Fence().Rev || b.Fence().Key == a.Fence().Key {
		t.Errorf("n2's fence %+v, not after n1's %+v", b.Fence(), a.Fence())
	}
	el := b.Elected()
	if !sameTerm(el.Prev, rec) {
		t.Errorf("n2 told the term before: %+v, want %+v", el.Prev, rec)
	}
	if el.Rev < rev(c) || el.Rev < first.Revs[0] {
		t.Errorf("n2's election decided at %d, before n1's last commit at %d", el.Rev, rev(c))
	}
}

// CurrentLeader names nobody before a campaign, then the winner with its
// election key and the revision that created it: the term's fence.
func currentLeader(t *testing.T, h Harness) {
	st := h.Store
	ctx := ctxFor(t)
	if l, ok, err := st.CurrentLeader(ctx); err != nil || ok {
		t.Fatalf("before any campaign: %+v %v %v, want nobody", l, ok, err)
	}
	session(t, st, "n2", 5*time.Second) // registered, not campaigning
	_, a := lead(t, st, "n1", 5*time.Second)
	l, ok, err := st.CurrentLeader(ctx)
	if err != nil || !ok || l.Name != "n1" || l.Key != a.Fence().Key || l.Rev != a.Fence().Rev {
		t.Fatalf("leader: %+v %v %v, want n1 at %+v", l, ok, err, a.Fence())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := st.CurrentLeader(ctx); err != nil || ok {
		t.Fatalf("after n1 resigned: %+v %v %v, want nobody", l, ok, err)
	}
}

// Depose revokes the named leader's lease if it leads, and only then: its
// term ends (Done), its commits are refused, and a candidate wins.
func depose(t *testing.T, h Harness) {
	st := h.Store
	_, a := lead(t, st, "n1", 5*time.Second)
	sb := session(t, st, "n2", 5*time.Second)
	ctx := ctxFor(t)
	if ok, err := st.Depose(ctx, "n2"); err != nil || ok {
		t.Fatalf("depose n2, who does not lead: %v %v, want false", ok, err)
	}
	commit(t, st, a.Fence(), lim, dagEntry("d1", 1))
	if ok, err := st.Depose(ctx, "n1"); err != nil || !ok {
		t.Fatalf("depose n1: %v %v, want true", ok, err)
	}
	waitClosed(t, a.Done(), "the deposed term's Done")
	if _, err := st.Begin(a.Fence(), []core.Entry{dagEntry("late", 1)}, lim, nil).Commit(ctx); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a commit of the deposed term: %v, want ErrFenced", err)
	}
	b, err := st.Campaign(ctx, sb, "n2")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, st, b.Fence(), lim, dagEntry("d2", 1))
}
