package schedule

import (
	"maps"
	"strings"
	"time"

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
// under the run's id, its shell tasks told the schedule and the tick.
func (s *Schedule) RunDAG(runID string, tick time.Time) *model.DAG {
	d := s.DAG
	d.ID = runID
	if d.Name == "" || d.Name == s.ID {
		d.Name = s.ID
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
	return &d
}
