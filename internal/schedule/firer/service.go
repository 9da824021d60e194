package firer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/store"
)

// Service is what the API does with schedules. Writes run on the leader
// (the API forwards them there), fenced on its term; reads answer from
// etcd on any replica.
type Service struct {
	Engine func() Engine
	Store  Store
	Firer  *Firer // poked after each write
	Clock  Clock  // nil: the wall clock
	// Limits bounds a schedule record like a submitted DAG (etcd's request
	// limit).
	Limits store.Limits
	// MaxSchedules bounds the schedules (0: none); MinInterval the time
	// between two ticks of one (0: none).
	MaxSchedules int
	MinInterval  time.Duration
	// Refused counts refusals by the setting that refused (nil: none).
	Refused *prometheus.CounterVec

	// creating serializes the creation of schedules on the leader, so
	// that the count MaxSchedules bounds is read and raised by one
	// creation at a time.
	creating sync.Mutex
}

// PutResult says what a Put did.
type PutResult struct {
	Created bool // a new schedule
	Changed bool // an existing schedule was updated (false: it was identical)
	Rev     int64
}

func (s *Service) now() time.Time {
	if s.Clock == nil {
		return time.Now().UTC()
	}
	return s.Clock.Now().UTC()
}

func notFound(id string) error {
	return &core.Error{Code: core.CodeNotFound, Msg: "no schedule " + id}
}

// fence returns the leader's fence, or engine.ErrNotLeader.
func (s *Service) fence(ctx context.Context) (store.Fence, error) {
	return s.Engine().LeaderFence(ctx)
}

// mapErr turns the store's errors into the API's.
func mapErr(err error) error {
	switch {
	case errors.Is(err, store.ErrFenced):
		return engine.ErrNotLeader
	case errors.Is(err, store.ErrScheduleChanged):
		return &core.Error{Code: core.CodeConflict, Msg: "the schedule was changed by another request meanwhile; try again"}
	}
	var ns *store.NoSpaceError
	if errors.As(err, &ns) {
		return fmt.Errorf("%w: %v", engine.ErrStorageFull, err)
	}
	return err
}

// same reports whether two schedules have the same spec and DAG.
func same(a, b *schedule.Schedule) bool {
	ja, _ := json.Marshal(struct {
		schedule.Spec
		DAG any
	}{a.Spec, a.DAG})
	jb, _ := json.Marshal(struct {
		schedule.Spec
		DAG any
	}{b.Spec, b.DAG})
	return string(ja) == string(jb)
}

// Put creates a schedule or replaces the spec and DAG of an existing one
// (its cursor stays: an update does not fire the ticks it already fired).
// An update keeps the schedule paused or active as it is: pausing is an
// operator's act (Pause, Resume), and a deploy that submits the schedule's
// file again must not resume one paused during an incident; the file's
// `paused` counts when the schedule is created. sc must be normalized and
// validated.
func (s *Service) Put(ctx context.Context, sc *schedule.Schedule) (PutResult, error) {
	f, err := s.fence(ctx)
	if err != nil {
		return PutResult{}, err
	}
	now := s.now()
	sc.CreatedAt, sc.UpdatedAt = now, now
	if err := s.checkSize(sc); err != nil {
		return PutResult{}, err
	}
	if err := s.checkInterval(sc); err != nil {
		return PutResult{}, err
	}
	for range 3 {
		old, ok, err := s.Store.Schedule(ctx, sc.ID)
		if err != nil {
			return PutResult{}, err
		}
		var modRev int64
		if ok {
			sc.Paused = old.Paused
			if same(&old.Schedule, sc) {
				return PutResult{Rev: old.ModRev}, nil
			}
			sc.CreatedAt, modRev = old.CreatedAt, old.ModRev
		}
		rev, err := s.put(ctx, f, sc, modRev)
		if errors.Is(err, store.ErrScheduleChanged) {
			continue
		}
		if err != nil {
			return PutResult{}, mapErr(err)
		}
		s.Firer.Poke()
		return PutResult{Created: !ok, Changed: ok, Rev: rev}, nil
	}
	return PutResult{}, mapErr(store.ErrScheduleChanged)
}

// put writes sc, and when it creates one (modRev 0), counts the schedules
// first, one creation at a time.
func (s *Service) put(ctx context.Context, f store.Fence, sc *schedule.Schedule, modRev int64) (int64, error) {
	if modRev != 0 || s.MaxSchedules <= 0 {
		return s.Store.PutSchedule(ctx, f, sc, modRev)
	}
	s.creating.Lock()
	defer s.creating.Unlock()
	n, err := s.Store.CountSchedules(ctx)
	if err != nil {
		return 0, err
	}
	if n >= s.MaxSchedules {
		s.refused("max_schedules")
		return 0, &core.LimitError{Code: core.CodeTooManySchedules, Limit: "max_schedules", Max: s.MaxSchedules,
			Msg: fmt.Sprintf("schedule %s refused: there are %d schedules, the most this server keeps (max_schedules %d); "+
				"delete one first", sc.ID, n, s.MaxSchedules)}
	}
	return s.Store.PutSchedule(ctx, f, sc, modRev)
}

func (s *Service) refused(limit string) {
	if s.Refused != nil {
		s.Refused.WithLabelValues(limit).Inc()
	}
}

// checkInterval refuses a schedule whose ticks come closer together than
// MinInterval.
func (s *Service) checkInterval(sc *schedule.Schedule) error {
	if s.MinInterval <= 0 {
		return nil
	}
	c, err := sc.Compile()
	if err != nil {
		return nil // Validate said why already
	}
	if d := c.MinInterval(); d > 0 && d < s.MinInterval {
		s.refused("min_schedule_interval")
		msg := fmt.Sprintf("schedule.cron: %q ticks %s apart; this server allows ticks at least %s apart (min_schedule_interval %s)",
			sc.Cron, d, s.MinInterval, s.MinInterval)
		return &dag.ValidationError{Code: string(apitypes.CodeScheduleTooFrequent), Message: msg, Details: []string{msg}}
	}
	return nil
}

func (s *Service) checkSize(sc *schedule.Schedule) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	lim := s.Limits
	if lim.MaxOps == 0 {
		lim = store.DefaultLimits
	}
	if len(b) > lim.RecordLimit() {
		msg := fmt.Sprintf("schedule %s encodes to %d bytes; one etcd request holds at most %d for a record: "+
			"move large scripts into files the commands run", sc.ID, len(b), lim.RecordLimit())
		return &dag.ValidationError{Code: dag.CodeTooLarge, Message: msg, Details: []string{msg}}
	}
	return nil
}

// SetPaused pauses or resumes a schedule. Ticks due while it was paused are
// the catch-up policy's when it resumes.
func (s *Service) SetPaused(ctx context.Context, id string, paused bool) (store.StoredSchedule, int64, error) {
	f, err := s.fence(ctx)
	if err != nil {
		return store.StoredSchedule{}, 0, err
	}
	for range 3 {
		cur, ok, err := s.Store.Schedule(ctx, id)
		if err != nil {
			return cur, 0, err
		}
		if !ok {
			return cur, 0, notFound(id)
		}
		if cur.Paused == paused {
			return cur, cur.ModRev, nil
		}
		cur.Paused, cur.UpdatedAt = paused, s.now()
		rev, err := s.Store.PutSchedule(ctx, f, &cur.Schedule, cur.ModRev)
		if errors.Is(err, store.ErrScheduleChanged) {
			continue
		}
		if err != nil {
			return cur, 0, mapErr(err)
		}
		s.Firer.Poke()
		cur.ModRev = rev
		return cur, rev, nil
	}
	return store.StoredSchedule{}, 0, mapErr(store.ErrScheduleChanged)
}

// Delete deletes a schedule and its cursor; its runs stay.
func (s *Service) Delete(ctx context.Context, id string) (int64, error) {
	f, err := s.fence(ctx)
	if err != nil {
		return 0, err
	}
	for range 3 {
		cur, ok, err := s.Store.Schedule(ctx, id)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, notFound(id)
		}
		rev, err := s.Store.DeleteSchedule(ctx, f, id, cur.ModRev)
		if errors.Is(err, store.ErrScheduleChanged) {
			continue
		}
		if err != nil {
			return 0, mapErr(err)
		}
		s.Firer.Poke()
		return rev, nil
	}
	return 0, mapErr(store.ErrScheduleChanged)
}

// Trigger starts a run of a schedule now, outside its ticks (paused or
// not). Two triggers within one second start one run.
func (s *Service) Trigger(ctx context.Context, id string) (runID string, created bool, err error) {
	return s.TriggerAt(ctx, id, time.Time{})
}

// TriggerAt is Trigger for a run named after at (its second) rather than
// the leader's clock: a standby that forwards a trigger names the time, so
// that the same trigger sent again (to a new leader, after the first one
// froze) names the same run and creates nothing more. The zero at means
// now; so does one more than maxTriggerSkew away from this replica's clock.
func (s *Service) TriggerAt(ctx context.Context, id string, at time.Time) (runID string, created bool, err error) {
	if _, err := s.fence(ctx); err != nil {
		return "", false, err
	}
	sc, ok, err := s.Store.Schedule(ctx, id)
	if err != nil {
		return "", false, err
	}
	if !ok {
		return "", false, notFound(id)
	}
	now := s.now().Truncate(time.Second)
	if !at.IsZero() && at.Sub(now).Abs() <= maxTriggerSkew {
		now = at.UTC().Truncate(time.Second)
	}
	runID = schedule.ManualRunID(id, now)
	d, err := sc.RunDAG(runID, now)
	if err != nil {
		return runID, false, err
	}
	res, err := s.Engine().Submit(ctx, d)
	if err != nil {
		return runID, false, err
	}
	s.Firer.Track(id, runID)
	return runID, res.Created, nil
}

// maxTriggerSkew bounds how far a forwarded trigger's time may be from the
// leader's clock (the replicas' clocks differ by little; a time further
// off is a mistake, not a clock).
const maxTriggerSkew = 5 * time.Minute

// List reads every schedule.
func (s *Service) List(ctx context.Context) ([]store.StoredSchedule, error) {
	out, _, err := s.Store.Schedules(ctx)
	return out, err
}

// Get reads one schedule.
func (s *Service) Get(ctx context.Context, id string) (store.StoredSchedule, error) {
	sc, ok, err := s.Store.Schedule(ctx, id)
	if err != nil {
		return sc, err
	}
	if !ok {
		return sc, notFound(id)
	}
	return sc, nil
}
