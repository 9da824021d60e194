package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// taskEvent is a log event for revision rev.
func taskEvent(rev int64, task string) Event {
	return Event{Type: TypeTask, Rev: rev, DAG: "d", Task: task, Status: "running"}
}

// publishN publishes n events, two per revision, starting after revision
// from; it returns the last revision used.
func publishN(h *Hub, from int64, n int) int64 {
	rev := from
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			rev++
		}
		h.Publish(taskEvent(rev, fmt.Sprintf("t%d", i)))
	}
	return rev
}

func next(t *testing.T, s *Sub) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// nextLog skips control events (metrics, leader, system).
func nextLog(t *testing.T, s *Sub) Event {
	t.Helper()
	for {
		ev := next(t, s)
		switch ev.Type {
		case TypeMetrics, TypeLeader, TypeSystem:
			continue
		}
		return ev
	}
}

func expectNone(t *testing.T, s *Sub) {
	t.Helper()
	ev, ok, err := s.Poll(context.Background(), 20*time.Millisecond)
	if err != nil || ok {
		t.Fatalf("expected no event, got %+v (ok=%v err=%v)", ev, ok, err)
	}
}

func TestCursorParseAndOrder(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Cursor
	}{{"12", RevCursor(12)}, {"12:3", Cursor{12, 3}}, {" 0 ", RevCursor(0)}} {
		got, err := ParseCursor(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseCursor(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if strings.TrimSpace(tc.in) != got.String() {
			t.Errorf("String() = %q, want %q", got.String(), strings.TrimSpace(tc.in))
		}
	}
	for _, bad := range []string{"", "x", "-1", "3:0", "3:x", "3:-2", "1.5"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
	if !(Cursor{5, 2}).Less(Cursor{5, 3}) || !(Cursor{5, 9}).Less(RevCursor(5)) || !RevCursor(5).Less(Cursor{6, 1}) {
		t.Error("cursor order is wrong")
	}
}

func TestFromEntry(t *testing.T) {
	code := 1
	started := time.Unix(100, 0).UTC()
	long := strings.Repeat("é", MaxErrorLen) // 2 bytes each
	ev := FromEntry(&core.Entry{Rev: 7, DAG: "d1", Task: "t1", T: &core.TaskRecord{
		Status: core.UpstreamFailed, Attempt: 2, Retries: 1, Worker: "w", Event: "cascade",
		ExitCode: &code, Error: long, StartedAt: &started, Cascade: true, Cause: "t0",
	}})
	if ev.Type != TypeTask || ev.Rev != 7 || ev.DAG != "d1" || ev.Task != "t1" || ev.Status != "upstream_failed" ||
		ev.Attempt != 2 || ev.Retries != 1 || ev.Worker != "w" || ev.Event != "cascade" || *ev.ExitCode != 1 ||
		!ev.Cascade || ev.Cause != "t0" || ev.StartedAt != &started {
		t.Fatalf("task event: %+v", ev)
	}
	if len(ev.Error) > MaxErrorLen || !strings.HasSuffix(ev.Error, "…") || !strings.HasPrefix(ev.Error, "éé") {
		t.Fatalf("error not truncated on a rune boundary: %d bytes", len(ev.Error))
	}

	// A success's event says how large its outputs are, not what they are.
	ev = FromEntry(&core.Entry{Rev: 7, DAG: "d1", Task: "t1", T: &core.TaskRecord{Status: core.Succeeded, Attempt: 1,
		Outputs: model.Outputs{"rows": []byte(`42`)}}})
	if b, _ := json.Marshal(ev); ev.OutputBytes != len(`{"rows":42}`) || strings.Contains(string(b), "rows") {
		t.Fatalf("success event: %s", b)
	}

	rec := &core.DAGRecord{DAG: model.DAG{ID: "d1", Name: "n", Tasks: make([]model.Task, 3)}, Status: core.DAGRunning, Run: 1, SubmittedAt: started}
	ev = FromEntry(&core.Entry{Rev: 8, DAG: "d1", D: rec})
	if ev.Type != TypeDAG || ev.Name != "n" || ev.Status != "running" || ev.Run != 1 || ev.Tasks != 3 ||
		ev.SubmittedAt == nil || ev.DAGRecord() != rec {
		t.Fatalf("dag event: %+v", ev)
	}
	ev = FromEntry(&core.Entry{Rev: 9, DAG: "d1", Delete: true})
	if ev.Type != TypeDAGDeleted || ev.DAG != "d1" || ev.Rev != 9 {
		t.Fatalf("delete event: %+v", ev)
	}
}

// A subscriber that never reads must not slow the publisher, and must not
// cost a fast subscriber anything; when it reads again it finds everything
// the ring still holds, in order, without a gap.
func TestSlowSubscriberDoesNotSlowPublisher(t *testing.T) {
	const n = 100_000
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	h := NewHub(Config{RingSize: n, Dropped: dropped}) // the ring covers the run: "everything" is checkable
	h.Reset(0)
	slow, err := h.SubscribeAfter(RevCursor(0))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := h.SubscribeAfter(RevCursor(0))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()

	var (
		got   []Cursor
		other []string
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for len(got) < n {
			ev, err := fast.Next(context.Background())
			if err != nil {
				return
			}
			if ev.Type == TypeTask {
				got = append(got, ev.Cursor())
			} else {
				other = append(other, ev.Type)
			}
		}
	}()

	start := time.Now()
	publishN(h, 0, n)
	took := time.Since(start)
	wg.Wait()

	// publishN returned while the slow subscriber had read nothing: the
	// publisher never waits on a subscriber (had it, this would block for
	// good). How long it took is logged, not asserted: the machine is
	// shared and noisy, and the cost per publish is the benchmark's.
	t.Logf("published %d events in %v (%v each)", n, took, took/n)
	if len(other) > 0 {
		t.Errorf("fast subscriber got unexpected events: %v", other)
	}
	if len(got) != n {
		t.Fatalf("fast subscriber got %d events, want %d", len(got), n)
	}
	for i := 1; i < n; i++ {
		if !got[i-1].Less(got[i]) {
			t.Fatalf("events out of order or repeated at %d: %v then %v", i, got[i-1], got[i])
		}
	}
	for i := 0; i < n; i++ {
		if ev := next(t, slow); ev.Type != TypeTask || ev.Cursor() != got[i] {
			t.Fatalf("slow subscriber's event %d: %+v, want %v", i, ev, got[i])
		}
	}
	if slow.Dropped() != 0 || h.Dropped() != 0 || testutil.ToFloat64(dropped) != 0 {
		t.Fatalf("dropped: subscriber %d, hub %d, counter %v; want none (the ring held everything)",
			slow.Dropped(), h.Dropped(), testutil.ToFloat64(dropped))
	}
}

// Publish costs the same whatever the subscribers do: one that stopped
// reading (a client whose socket is full) is not visited at all, so a
// thousand of them add nothing per event.
func TestPublishCostDoesNotGrowWithIdleSubscribers(t *testing.T) {
	const idle = 1000
	h := NewHub(Config{RingSize: 1000, MaxSubscribers: -1, MaxSubscribersPerClient: -1})
	h.Reset(0)
	subs := make([]*Sub, idle)
	for i := range subs {
		s, err := h.SubscribeLive(As("127.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	// Each reads once and waits (registered on the waiting list), then
	// stops reading, like a stream blocked in a write.
	h.Publish(taskEvent(1, "first"))
	for _, s := range subs {
		if ev := nextLog(t, s); ev.Task != "first" {
			t.Fatalf("got %+v", ev)
		}
		if _, ok, _ := s.Poll(context.Background(), time.Nanosecond); ok {
			t.Fatal("an event that was not published")
		}
	}
	h.Publish(taskEvent(2, "wakes them")) // empties the waiting list
	h.waitMu.Lock()
	waiting := len(h.waiting)
	h.waitMu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d subscribers still on the waiting list after a publish", waiting)
	}
	rev := int64(2)
	ev := taskEvent(rev, "x")
	allocs := testing.AllocsPerRun(5000, func() {
		rev++
		ev.Rev = rev
		h.Publish(ev)
	})
	if allocs > 0 {
		t.Fatalf("Publish allocates %v per call with %d idle subscribers", allocs, idle)
	}
	// The ring moved past them: each is told with a resync, and what it
	// missed is counted.
	missed := int64(h.next) - 1 - 1000 // all but the first, less what the ring holds
	for _, s := range subs[:3] {
		if ev := nextLog(t, s); ev.Type != TypeResync || ev.Since != "1:1" {
			t.Fatalf("after the ring moved past: %+v", ev)
		}
		if d := s.Dropped(); d != missed {
			t.Fatalf("dropped %d, want %d", d, missed)
		}
	}
}

// A client that reconnects with the id of the last event it saw gets the
// rest exactly: no gap, no duplicate, even in the middle of a revision.
func TestResumeFromCursorExactly(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(100)
	s, err := h.SubscribeAfter(RevCursor(100))
	if err != nil {
		t.Fatal(err)
	}
	// Revision 101 has three events, 102 one, 103 two.
	for _, ev := range []Event{taskEvent(101, "a"), taskEvent(101, "b"), taskEvent(101, "c"), taskEvent(102, "d"), taskEvent(103, "e"), taskEvent(103, "f")} {
		h.Publish(ev)
	}
	first := nextLog(t, s)
	second := nextLog(t, s)
	if first.ID != "101:1" || second.ID != "101:2" || second.Task != "b" {
		t.Fatalf("ids %q %q", first.ID, second.ID)
	}
	s.Close() // the connection drops mid-revision
	h.Publish(taskEvent(104, "g"))

	c, err := ParseCursor(second.ID)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := h.SubscribeAfter(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var tasks []string
	for i := 0; i < 5; i++ {
		ev := nextLog(t, s2)
		if ev.Type != TypeTask {
			t.Fatalf("got %s", ev.Type)
		}
		tasks = append(tasks, ev.Task+"@"+ev.ID)
	}
	if want := "c@101:3 d@102:1 e@103:1 f@103:2 g@104:1"; strings.Join(tasks, " ") != want {
		t.Fatalf("resumed with %v, want %s", tasks, want)
	}
	expectNone(t, s2)
	h.Publish(taskEvent(105, "h"))
	if ev := nextLog(t, s2); ev.Task != "h" {
		t.Fatalf("live after catch-up: %+v", ev)
	}

	// A REST snapshot at revision 103 continues with what came after it.
	s3, _ := h.Subscribe(103)
	defer s3.Close()
	if ev := nextLog(t, s3); ev.ID != "104:1" {
		t.Fatalf("since=103 starts at %s", ev.ID)
	}
}

func TestResyncWhenTooOld(t *testing.T) {
	h := NewHub(Config{RingSize: 10})
	h.Reset(0)
	last := publishN(h, 0, 50) // revisions 1..25, two events each
	s, err := h.Subscribe(5)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := nextLog(t, s)
	head := fmt.Sprintf("%d:2", last)
	if ev.Type != TypeResync || ev.Since != "5" || ev.ID != head || ev.Rev != last {
		t.Fatalf("want a resync continuing after %s, got %+v", head, ev)
	}
	expectNone(t, s) // nothing before the head is replayed
	h.Publish(taskEvent(last+1, "x"))
	if ev := nextLog(t, s); ev.Task != "x" {
		t.Fatalf("after resync: %+v", ev)
	}
	// The oldest cursor still served: the one just before the ring.
	s2, _ := h.SubscribeAfter(Cursor{last - 4, 2})
	defer s2.Close()
	if ev := nextLog(t, s2); ev.Type != TypeTask || ev.ID != fmt.Sprintf("%d:1", last-3) {
		t.Fatalf("oldest resumable cursor: %+v", ev)
	}
	// since=0 on a hub that started later: resync.
	s3, _ := h.Subscribe(0)
	defer s3.Close()
	if ev := nextLog(t, s3); ev.Type != TypeResync {
		t.Fatalf("since=0: %+v", ev)
	}
}

// A subscriber that falls behind by more than the ring gets a resync, not
// a silent hole; the events it missed are counted.
func TestLaggingBeyondRingResyncs(t *testing.T) {
	h := NewHub(Config{RingSize: 20})
	h.Reset(0)
	s, _ := h.SubscribeAfter(RevCursor(0))
	defer s.Close()
	h.Publish(taskEvent(1, "a"))
	if ev := nextLog(t, s); ev.Task != "a" || ev.ID != "1:1" {
		t.Fatalf("first: %+v", ev)
	}
	publishN(h, 1, 100) // revisions 2..51, two events each
	if ev := nextLog(t, s); ev.Type != TypeResync || ev.Since != "1:1" || ev.ID != "51:2" {
		t.Fatalf("want resync from 1:1 to 51:2, got %+v", ev)
	}
	h.Publish(taskEvent(52, "z"))
	if ev := nextLog(t, s); ev.Task != "z" {
		t.Fatalf("live after resync: %+v", ev)
	}
	if s.Dropped() != 80 || h.Dropped() != 80 {
		t.Fatalf("dropped %d (hub %d), want 80: 100 published, 20 still in the ring", s.Dropped(), h.Dropped())
	}
}

func TestResetResyncsOnlyWhoMayHaveMissedSomething(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(10)
	behind, _ := h.Subscribe(10)
	defer behind.Close()
	h.Publish(taskEvent(11, "a"))
	if ev := nextLog(t, behind); ev.Task != "a" {
		t.Fatal(ev)
	}
	ahead, _ := h.Subscribe(30) // e.g. loaded REST from another replica at 30
	defer ahead.Close()

	h.Reset(11) // nothing missed: the hub saw 11
	expectNone(t, behind)

	h.Reset(30) // reloaded at 30: 12..30 may be missing here
	ev := nextLog(t, behind)
	if ev.Type != TypeResync || ev.ID != "30" || ev.Since != "11:1" {
		t.Fatalf("want resync to 30, got %+v", ev)
	}
	expectNone(t, ahead)
	h.Publish(taskEvent(31, "b"))
	if ev := nextLog(t, behind); ev.Task != "b" {
		t.Fatal(ev)
	}
	if ev := nextLog(t, ahead); ev.Task != "b" {
		t.Fatal(ev)
	}
	// Resuming before the reset point resyncs; at or after it does not.
	old, _ := h.Subscribe(20)
	defer old.Close()
	if ev := nextLog(t, old); ev.Type != TypeResync {
		t.Fatalf("since=20 after reset at 30: %+v", ev)
	}
	fresh, _ := h.Subscribe(30)
	defer fresh.Close()
	if ev := nextLog(t, fresh); ev.Task != "b" {
		t.Fatalf("since=30: %+v", ev)
	}
}

// A replica behind the client (a standby that lags) must not repeat what the
// client already has.
func TestSinceAheadOfHubSkipsDuplicates(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(10)
	s, _ := h.SubscribeAfter(Cursor{12, 1})
	defer s.Close()
	h.Publish(taskEvent(11, "a"))
	h.Publish(taskEvent(12, "b"))
	h.Publish(taskEvent(12, "c"))
	if ev := nextLog(t, s); ev.Task != "c" || ev.ID != "12:2" {
		t.Fatalf("got %+v", ev)
	}
}

func TestControlEvents(t *testing.T) {
	h := NewHub(Config{Node: "n1", MetricsInterval: 10 * time.Millisecond, Snapshot: func(m *Metrics) {
		m.Role, m.Leader, m.LeaderKnown = "leader", "n1", true
	}})
	h.Reset(0)
	s, _ := h.SubscribeLive()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan struct{})
	go func() { h.Run(ctx); close(runDone) }()
	var sawMetrics, sawLeader bool
	for !(sawMetrics && sawLeader) {
		ev := next(t, s)
		switch ev.Type {
		case TypeMetrics:
			sawMetrics = ev.Metrics != nil && ev.Metrics.Node == "n1" && ev.Metrics.Tasks != nil
		case TypeLeader:
			sawLeader = ev.Leader != nil && *ev.Leader == "n1" && ev.Node == "n1"
		}
	}
	// Metrics are not buffered per subscriber: only the latest waits. Run
	// must have stopped, or its own next metrics could come after ours.
	cancel()
	<-runDone
	for i := 0; i < 5; i++ {
		h.Publish(Event{Type: TypeMetrics, Metrics: &Metrics{Revision: int64(i)}})
	}
	h.PublishSystem("crash", map[string]string{"k": "v"})
	var got []string
	for {
		ev, ok, _ := s.Poll(context.Background(), 0)
		if !ok {
			break
		}
		if ev.Type == TypeMetrics {
			got = append(got, fmt.Sprint("metrics", ev.Metrics.Revision))
		} else {
			got = append(got, ev.Type+":"+ev.Event)
		}
	}
	if len(got) < 2 || got[len(got)-2] != "metrics4" || got[len(got)-1] != "system:crash" {
		t.Fatalf("control events %v", got)
	}
	// A new subscriber starts with the latest metrics and leader.
	s2, _ := h.SubscribeLive()
	defer s2.Close()
	a, b := next(t, s2), next(t, s2)
	if a.Type != TypeLeader || b.Type != TypeMetrics {
		t.Fatalf("new subscriber got %s, %s", a.Type, b.Type)
	}
	if h.LatestMetrics() == nil || h.Subscribers() != 2 {
		t.Fatal("hub accessors")
	}
}

func TestTotalsAndThroughput(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(0)
	for i, st := range []string{"running", "succeeded", "running", "retrying", "running", "failed", "upstream_failed", "cancelled"} {
		h.Publish(Event{Type: TypeTask, Rev: int64(i + 1), Status: st})
	}
	h.Publish(Event{Type: TypeDAG, Rev: 20, Status: "running", Run: 1})
	h.Publish(Event{Type: TypeDAG, Rev: 21, Status: "failed", Run: 1})
	want := Totals{Started: 3, Succeeded: 1, Failed: 1, Retried: 1, UpstreamFailed: 1, Cancelled: 1, DAGsSubmitted: 1, DAGsFinished: 1}
	if got := h.Totals(); got != want {
		t.Fatalf("totals %+v, want %+v", got, want)
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	h := NewHub(Config{})
	s, _ := h.SubscribeLive()
	done := make(chan error, 1)
	go func() { _, err := s.Next(context.Background()); done <- err }()
	time.Sleep(10 * time.Millisecond)
	h.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return after Close")
	}
	if _, err := h.SubscribeLive(); err != ErrClosed {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	h.Publish(taskEvent(1, "a")) // ignored, no panic
}

// Publishing a log event allocates nothing.
func TestPublishDoesNotAllocate(t *testing.T) {
	h := NewHub(Config{RingSize: 1000})
	h.Reset(0)
	s, _ := h.SubscribeLive()
	defer s.Close()
	rev := int64(0)
	ev := taskEvent(1, "a")
	allocs := testing.AllocsPerRun(2000, func() {
		rev++
		ev.Rev = rev
		h.Publish(ev)
	})
	if allocs > 0 {
		t.Fatalf("Publish allocates %v per call", allocs)
	}
}

func TestQuantiles(t *testing.T) {
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat", Buckets: prometheus.ExponentialBuckets(0.001, 2, 10)})
	q, err := NewQuantiles(hist, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	if _, ok := q.Sample(t0, 0.5); ok {
		t.Fatal("first sample has no window")
	}
	for i := 0; i < 99; i++ {
		hist.Observe(0.0015) // bucket (0.001, 0.002]
	}
	hist.Observe(0.3) // bucket (0.256, 0.512]
	v, ok := q.Sample(t0.Add(time.Second), 0.5, 0.99, 1)
	if !ok || v[0] <= 0.001 || v[0] > 0.002 || v[1] <= 0.001 || v[1] > 0.002 || v[2] <= 0.256 || v[2] > 0.512 {
		t.Fatalf("quantiles %v ok=%v", v, ok)
	}
	// Old samples leave the window.
	if _, ok := q.Sample(t0.Add(30*time.Second), 0.5); ok {
		t.Fatal("window should be empty after 30s without samples")
	}
}

// A standby that did not look its leader up must not announce "no leader".
func TestNoLeaderEventWithoutLookup(t *testing.T) {
	h := NewHub(Config{MetricsInterval: 5 * time.Millisecond, Snapshot: func(m *Metrics) { m.Role = "standby" }})
	s, _ := h.SubscribeLive()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	for metrics := 0; metrics < 3; {
		switch ev := next(t, s); ev.Type {
		case TypeMetrics:
			metrics++
		case TypeLeader:
			t.Fatalf("leader event %+v", ev)
		}
	}
}
