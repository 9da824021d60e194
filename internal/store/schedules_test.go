package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
)

// Schedule writes go the way the log's commits go: fenced on the leader's
// term (a write after the term ends is refused whole, ErrFenced), through
// the store Dial opens (its commit route), refused for their size in the
// store's own terms; and a stale revision is an answer of its own
// (ErrScheduleChanged), not a lost term.
func TestScheduleWritesAreFencedLikeTheLog(t *testing.T) {
	m, _ := etcdtest.Start(t, func(c *etcdmember.Config) { c.MaxRequestBytes = 64 << 10 })
	s, err := Dial(DialConfig{Endpoints: m.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := s.OpenSession(ctx, 30*time.Second, ReplicaRecord{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	term, err := s.Campaign(ctx, sess, "n1")
	if err != nil {
		t.Fatal(err)
	}
	f := term.Fence()

	sc := &schedule.Schedule{ID: "nightly", Spec: schedule.Spec{Cron: "0 3 * * *"}, DAG: model.DAG{Name: "nightly"}}
	rev, err := s.PutSchedule(ctx, f, sc, 0)
	if err != nil || rev == 0 {
		t.Fatalf("create: rev %d, %v", rev, err)
	}
	if _, err := s.PutSchedule(ctx, f, sc, 0); !errors.Is(err, ErrScheduleChanged) {
		t.Fatalf("create again over an existing id: %v, want ErrScheduleChanged", err)
	}
	got, ok, err := s.Schedule(ctx, "nightly")
	if err != nil || !ok || got.ModRev != rev {
		t.Fatalf("read back: %+v %v %v, want mod revision %d", got, ok, err, rev)
	}
	tick := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	if _, err := s.PutCursor(ctx, f, "nightly", got.CreateRev, Cursor{Tick: tick, At: tick, Fence: f.Rev}); err != nil {
		t.Fatalf("cursor: %v", err)
	}

	big := *sc
	big.DAG.Name = strings.Repeat("x", 100<<10)
	if _, err := s.PutSchedule(ctx, f, &big, got.ModRev); !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("a schedule over --max-request-bytes: %v, want ErrRequestTooLarge", err)
	}

	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutSchedule(ctx, f, sc, got.ModRev); !errors.Is(err, ErrFenced) {
		t.Fatalf("update after the term ended: %v, want ErrFenced", err)
	}
	if _, err := s.PutCursor(ctx, f, "nightly", got.CreateRev, Cursor{Tick: tick.Add(time.Hour), Fence: f.Rev}); !errors.Is(err, ErrFenced) {
		t.Fatalf("cursor after the term ended: %v, want ErrFenced", err)
	}
	if _, err := s.DeleteSchedule(ctx, f, "nightly", got.ModRev); !errors.Is(err, ErrFenced) {
		t.Fatalf("delete after the term ended: %v, want ErrFenced", err)
	}
	after, ok, err := s.Schedule(ctx, "nightly")
	if err != nil || !ok || after.ModRev != got.ModRev || after.Cursor == nil || !after.Cursor.Tick.Equal(tick) {
		t.Fatalf("after the refused writes: %+v %v %v, want the schedule and cursor as they were", after, ok, err)
	}
}
