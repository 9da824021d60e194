package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// electedWriter puts an election key, as a campaign that won would, and
// returns a Writer fenced on it that sends its transactions through kv.
func electedWriter(t *testing.T, cli *clientv3.Client, kv clientv3.KV) *Writer {
	t.Helper()
	el, err := cli.Put(context.Background(), ElectionPrefix+"/a", "a")
	if err != nil {
		t.Fatal(err)
	}
	return NewWriter(kv, Fence{Key: ElectionPrefix + "/a", Rev: el.Header.Revision})
}

// hookKV passes every transaction's Commit through commit, which decides
// what the Writer sees: etcd's answer, a loss, a delay. Transactions are
// sent with a context of their own, as a proposal already on its way is
// not withdrawn when its caller gives up.
type hookKV struct {
	clientv3.KV
	commit func(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error)
}

func (k *hookKV) Txn(context.Context) clientv3.Txn {
	return &hookTxn{k: k, inner: k.KV.Txn(context.Background())}
}

type hookTxn struct {
	k     *hookKV
	inner clientv3.Txn
}

func (t *hookTxn) If(cs ...clientv3.Cmp) clientv3.Txn     { t.inner = t.inner.If(cs...); return t }
func (t *hookTxn) Then(ops ...clientv3.Op) clientv3.Txn   { t.inner = t.inner.Then(ops...); return t }
func (t *hookTxn) Else(ops ...clientv3.Op) clientv3.Txn   { t.inner = t.inner.Else(ops...); return t }
func (t *hookTxn) Commit() (*clientv3.TxnResponse, error) { return t.k.commit(t.inner.Commit) }

// lossyKV loses the answer of the first transaction, as an etcd leader that
// dies with the proposal (or a broken connection, or a deadline) loses it:
// "applied" commits it and then reports a deadline, "lost" drops it, "late"
// holds it back and commits it only when the test calls late.
type lossyKV struct {
	hookKV
	mode string

	mu   sync.Mutex
	txns int
	late func() (*clientv3.TxnResponse, error)
}

func newLossyKV(kv clientv3.KV, mode string) *lossyKV {
	k := &lossyKV{mode: mode}
	k.hookKV = hookKV{KV: kv, commit: k.send}
	return k
}

func (k *lossyKV) send(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	k.mu.Lock()
	k.txns++
	first := k.txns == 1
	k.mu.Unlock()
	if !first {
		return send()
	}
	switch k.mode {
	case "applied":
		if _, err := send(); err != nil {
			return nil, err
		}
	case "late":
		k.late = send
	}
	return nil, context.DeadlineExceeded
}

// refusalKV counts the transactions etcd refused (a compare failed).
type refusalKV struct {
	hookKV
	refused atomic.Int64
}

func newRefusalKV(kv clientv3.KV) *refusalKV {
	k := &refusalKV{}
	k.hookKV = hookKV{KV: kv, commit: func(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		resp, err := send()
		if err == nil && !resp.Succeeded {
			k.refused.Add(1)
		}
		return resp, err
	}}
	return k
}

// A transaction whose answer is lost is sent again and commits exactly once,
// whether the lost copy applied before, never, or after the second one; the
// revision returned is the one the entries committed at.
func TestWriterSendsAgainExactlyOnce(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	for _, mode := range []string{"applied", "lost", "late"} {
		t.Run(mode, func(t *testing.T) {
			fenceKey := ElectionPrefix + "/" + mode
			resp, err := cli.Put(ctx, fenceKey, "me")
			if err != nil {
				t.Fatal(err)
			}
			kv := newLossyKV(cli.KV, mode)
			w := NewWriter(kv, Fence{Key: fenceKey, Rev: resp.Header.Revision})
			id := "once-" + mode
			got, err := w.Commit(ctx, []core.Entry{dagEntry(id, 2)}, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if kv.late != nil {
				// The held copy arrives after the one sent again committed:
				// its compare fails and it writes nothing.
				if r, err := kv.late(); err != nil || r.Succeeded {
					t.Fatalf("the late copy: succeeded=%v err=%v, want a failed compare", r != nil && r.Succeeded, err)
				}
			}
			rec, err := cli.Get(ctx, DAGKey(id))
			if err != nil || len(rec.Kvs) != 1 {
				t.Fatalf("DAG record: %v %v", rec, err)
			}
			if v := rec.Kvs[0].Version; v != 1 {
				t.Fatalf("DAG record written %d times, want once", v)
			}
			if len(got.Revs) != 1 || got.Revs[0] != rec.Kvs[0].ModRevision {
				t.Fatalf("Commit says revisions %v, the record is at %d", got.Revs, rec.Kvs[0].ModRevision)
			}
			if kv.txns < 2 {
				t.Fatalf("%d transactions sent, want the lost one sent again", kv.txns)
			}
			if got.Retried != 1 {
				t.Errorf("Commit says %d attempts sent again, want 1", got.Retried)
			}
			// The next transaction follows on from the marker.
			if _, err := w.Commit(ctx, []core.Entry{dagEntry(id+"-next", 1)}, DefaultLimits); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Writer whose fence is gone is refused whole, and so is one that another
// leader's writer (a later term) overtook.
func TestWriterFenced(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	a, err := cli.Put(ctx, ElectionPrefix+"/a", "a")
	if err != nil {
		t.Fatal(err)
	}
	wa := NewWriter(cli.KV, Fence{Key: ElectionPrefix + "/a", Rev: a.Header.Revision})
	if _, err := wa.Commit(ctx, []core.Entry{dagEntry("by-a", 1)}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, ElectionPrefix+"/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := wa.Commit(ctx, []core.Entry{dagEntry("late-a", 1)}, DefaultLimits); err != ErrFenced {
		t.Fatalf("commit after the fence went: %v, want ErrFenced", err)
	}
	b, err := cli.Put(ctx, ElectionPrefix+"/b", "b")
	if err != nil {
		t.Fatal(err)
	}
	wb := NewWriter(cli.KV, Fence{Key: ElectionPrefix + "/b", Rev: b.Header.Revision})
	if _, err := wb.Commit(ctx, []core.Entry{dagEntry("by-b", 1)}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if r, _ := cli.Get(ctx, DAGKey("late-a")); len(r.Kvs) != 0 {
		t.Fatal("a fenced writer wrote")
	}
}

// Batches begun in order commit in that order even when the later one is
// sent first; when the earlier one fails, the later one fails with it,
// unapplied, and the next batch begins a new chain.
func TestWriterPipelinesInOrder(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	kv := newRefusalKV(cli.KV)
	w := electedWriter(t, cli, kv)
	first := w.Begin([]core.Entry{dagEntry("first", 1)}, DefaultLimits)
	second := w.Begin([]core.Entry{dagEntry("second", 1)}, DefaultLimits)
	done := make(chan error, 1)
	var secondRes Committed
	go func() {
		var err error
		secondRes, err = second.Commit(ctx) // sent before its predecessor
		done <- err
	}()
	// The second is refused until the first applies: it waits for it.
	testkit.WaitFor(t, 10*time.Second, "etcd refusing the second batch", func() bool { return kv.refused.Load() >= 1 })
	select {
	case err := <-done:
		t.Fatalf("the second batch finished before the first was sent: %v", err)
	default:
	}
	firstRes, err := first.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if secondRes.Revs[0] <= firstRes.Revs[0] {
		t.Fatalf("second committed at %d, not after the first at %d", secondRes.Revs[0], firstRes.Revs[0])
	}
	if firstRes.Resent != 0 || secondRes.Resent != 1 {
		t.Fatalf("sent again: first %d, second %d; want 0 and 1", firstRes.Resent, secondRes.Resent)
	}

	// An earlier batch refused (here: too many operations for etcd) fails
	// the later one, which writes nothing.
	big := make([]core.Entry, 0, 200)
	for i := 0; i < 200; i++ {
		big = append(big, dagEntry(fmt.Sprintf("big-%03d", i), 1))
	}
	refused := w.Begin(big, Limits{MaxOps: 1000, MaxBytes: 1 << 30})
	after := w.Begin([]core.Entry{dagEntry("after", 1)}, DefaultLimits)
	go func() {
		_, err := after.Commit(ctx)
		done <- err
	}()
	if _, err := refused.Commit(ctx); err == nil {
		t.Fatal("a transaction of 200 puts was accepted; want etcd's too-many-operations refusal")
	}
	err = <-done
	var pe *PredecessorError
	if !errors.As(err, &pe) {
		t.Fatalf("the batch after a refused one: %v, want a PredecessorError", err)
	}
	if r, _ := cli.Get(ctx, DAGKey("after")); len(r.Kvs) != 0 {
		t.Fatal("a batch behind a refused one was written")
	}
	// The chain starts again from what etcd holds.
	if _, err := w.Begin([]core.Entry{dagEntry("again", 1)}, DefaultLimits).Commit(ctx); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
}

// twoLostKV applies the first two transactions and loses both answers, the
// second sent while the first is still waiting for its answer: what an etcd
// leader that dies with two proposals in flight does.
type twoLostKV struct {
	hookKV
	mu       sync.Mutex
	n        int
	second   chan struct{} // closed once the second transaction applied
	onFirstF func()        // runs once the first applied, before its loss
}

func newTwoLostKV(kv clientv3.KV) *twoLostKV {
	k := &twoLostKV{second: make(chan struct{})}
	k.hookKV = hookKV{KV: kv, commit: k.send}
	return k
}

func (k *twoLostKV) send(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	k.mu.Lock()
	k.n++
	n := k.n
	k.mu.Unlock()
	switch n {
	case 1:
		if r, err := send(); err != nil || !r.Succeeded {
			return r, err
		}
		k.onFirstF()
		<-k.second
		return nil, context.DeadlineExceeded
	case 2:
		r, err := send()
		if err == nil && r.Succeeded {
			close(k.second)
			return nil, context.DeadlineExceeded
		}
		return r, err
	}
	return send()
}

// Two transactions in flight both commit and both answers are lost: each,
// sent again, learns that it committed and at which revision, the first
// from CommitKey's history since the second moved it on.
func TestWriterTwoLostAnswersInFlight(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	kv := newTwoLostKV(cli.KV)
	w := electedWriter(t, cli, kv)
	first := w.Begin([]core.Entry{dagEntry("first", 1)}, DefaultLimits)
	second := w.Begin([]core.Entry{dagEntry("second", 1)}, DefaultLimits)
	type result struct {
		res Committed
		err error
	}
	secondDone := make(chan result, 1)
	kv.onFirstF = func() {
		go func() {
			r, err := second.Commit(ctx)
			secondDone <- result{r, err}
		}()
	}
	r1, err := first.Commit(ctx)
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	r2 := <-secondDone
	if r2.err != nil {
		t.Fatalf("second: %v", r2.err)
	}
	for name, r := range map[string]int64{"first": r1.Revs[0], "second": r2.res.Revs[0]} {
		got, err := cli.Get(ctx, DAGKey(name))
		if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != r {
			t.Fatalf("%s: reported revision %d, etcd has %+v (%v)", name, r, got.Kvs, err)
		}
	}
	if r1.Revs[0] >= r2.res.Revs[0] {
		t.Fatalf("first at %d, second at %d", r1.Revs[0], r2.res.Revs[0])
	}
}

// While etcd's leader hands its leadership over (MoveLeader, or a member
// stopping gracefully) it drops every proposal, and etcd answers "raft
// proposal dropped": nothing was applied. The Writer sends the transaction
// again instead of failing the commit. Here the transactions go straight
// to the member that leads, and leadership moves away from it and back,
// ten times, while they flow.
func TestWriterRidesOutLeadershipTransfers(t *testing.T) {
	members, cli := etcdtest.StartCluster(t, 3)
	var lead string
	testkit.WaitFor(t, 10*time.Second, "a raft leader", func() bool { lead = raftLeader(t, cli); return lead != "" })
	one, err := clientv3.New(clientv3.Config{Endpoints: []string{lead}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	ids := map[string]uint64{} // client URL → member id
	ml, err := cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		ids[m.ClientURLs[0]] = m.ID
	}
	var other string
	for _, m := range members {
		if m.ClientURL() != lead {
			other = m.ClientURL()
			break
		}
	}

	w := electedWriter(t, cli, one.KV)
	stop := make(chan struct{})
	done := make(chan error, 1)
	var committed atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := w.Commit(ctx, []core.Entry{dagEntry(fmt.Sprintf("d%d", i), 1)}, DefaultLimits)
			cancel()
			if err != nil {
				done <- fmt.Errorf("commit %d: %w", i, err)
				return
			}
			committed.Add(1)
		}
	}()
	move := func(from, to string) {
		t.Helper()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{from}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.MoveLeader(ctx, ids[to]); err != nil {
			t.Fatalf("moving etcd's leadership from %s to %s: %v", from, to, err)
		}
	}
	for range 10 {
		move(lead, other)
		move(other, lead)
		n := committed.Load()
		testkit.WaitFor(t, 20*time.Second, "commits going on", func() bool {
			select {
			case err := <-done:
				t.Fatal(err)
			default:
			}
			return committed.Load() >= n+3
		})
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits over 20 leadership transfers", committed.Load())
}
