package schedule

import (
	"maps"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// tickLayout names a tick in a run's id: UTC, to the second.
const tickLayout = "20060102T150405Z"

// manualSuffix marks a run started by a trigger rather than a tick.
const manualSuffix = "-m"

// RunID is the id of the run a tick of schedule id creates: the same on
// every replica and after every failover, so a tick fired twice creates
// one DAG.
func RunID(id string, tick time.Time) string {
	return id + "-" + tick.UTC().Format(tickLayout)
}

// ManualRunID is the id of a run triggered by hand at at (to the second:
// two triggers within one second start one run).
func ManualRunID(id string, at time.Time) string {
	return RunID(id, at) + manualSuffix
}

// ParseRunID splits a run's id into its schedule's id and its tick; ok is
// false for ids that do not name a run.
func ParseRunID(runID string) (id string, tick time.Time, manual, ok bool) {
	rest := runID
	if strings.HasSuffix(rest, manualSuffix) {
		rest, manual = strings.TrimSuffix(rest, manualSuffix), true
	}
	n := len(tickLayout)
	if len(rest) < n+2 || rest[len(rest)-n-1] != '-' {
		return "", time.Time{}, false, false
	}
	tick, err := time.Parse(tickLayout, rest[len(rest)-n:])
	if err != nil {
		return "", time.Time{}, false, false
	}
	return rest[:len(rest)-n-1], tick, manual, true
}

// Env names the variables every shell task of a run gets.
const (
	EnvSchedule = "ORION_SCHEDULE_ID"
	EnvTick     = "ORION_SCHEDULE_TICK" // RFC 3339, UTC: the time the run stands for
)

// RunDAG is the DAG a tick (or a trigger, at tick) runs: the schedule's DAG
// under the run's id, its shell tasks told the schedule and the tick. The
// run stands for the data interval [the tick before, tick) (Airflow's data
// interval; for a trigger, from the last tick before it): templates read
// it as run.tick, run.interval_start and run.interval_end, and a DAG that
// declares params named tick, interval_start or interval_end gets them set
// (RFC 3339, UTC). It is bound as a submission is (dag.Bind), so the same
// tick makes the same DAG on every leader. The error is Bind's.
func (s *Schedule) RunDAG(runID string, tick time.Time) (*model.DAG, error) {
	d := s.DAG
	d.ID = runID
	if d.Name == "" || d.Name == s.ID {
		d.Name = s.ID
	}
	tick = tick.UTC()
	start := tick
	if c, err := s.Compile(); err == nil {
		if prev := c.Prev(tick); !prev.IsZero() {
			start = prev
		}
	}
	d.Scheduled = &model.ScheduledRun{Schedule: s.ID, Tick: tick, IntervalStart: start, IntervalEnd: tick}
	overrides := map[string]string{}
	for name, v := range map[string]time.Time{model.ParamTick: tick, model.ParamIntervalStart: start, model.ParamIntervalEnd: tick} {
		if _, declared := d.Params[name]; declared {
			overrides[name] = v.Format(time.RFC3339)
		}
	}
	d.Tasks = make([]model.Task, len(s.DAG.Tasks))
	for i, t := range s.DAG.Tasks {
		if t.Kind == model.KindShell {
			env := maps.Clone(t.Env)
			if env == nil {
				env = make(map[string]string, 2)
			}
			env[EnvSchedule] = s.ID
			env[EnvTick] = tick.UTC().Format(time.RFC3339)
			t.Env = env
		}
		d.Tasks[i] = t
	}
	if err := dag.Bind(&d, overrides); err != nil {
		return nil, err
	}
	return &d, nil
}
