package apitypes

import (
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// Schedule is a schedule as the API shows it: its spec, where it stands
// (the last tick handled and its run) and its next fire times.
type Schedule struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Cron          string     `json:"cron"`
	Timezone      string     `json:"timezone"`
	Start         *time.Time `json:"start,omitempty"`
	End           *time.Time `json:"end,omitempty"`
	Paused        bool       `json:"paused"`
	Catchup       string     `json:"catchup"`
	CatchupLimit  int        `json:"catchup_limit,omitempty"`
	Grace         string     `json:"grace"`
	Overlap       string     `json:"overlap"`
	MaxActiveRuns int        `json:"max_active_runs"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	// LastTick is the cursor: every tick up to it has been handled.
	LastTick *time.Time `json:"last_tick,omitempty"`
	LastRun  string     `json:"last_run,omitempty"`
	// Next lists the next fire times (none when paused or past its end).
	Next []time.Time `json:"next"`
	// ActiveRuns counts its runs still running, on the answering replica.
	ActiveRuns int        `json:"active_runs"`
	Tasks      int        `json:"tasks"`
	DAG        *model.DAG `json:"dag,omitempty"` // one schedule only
	Revision   int64      `json:"revision,omitempty"`
}

// ScheduleList is GET /api/v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	Node      string     `json:"node,omitempty"`
}

// SchedulePutResponse answers POST /api/v1/schedules.
type SchedulePutResponse struct {
	ID      string      `json:"id"`
	Created bool        `json:"created"`
	Changed bool        `json:"changed"`
	Next    []time.Time `json:"next"`
}

// ScheduleRun is one run of a schedule.
type ScheduleRun struct {
	ID          string     `json:"id"`
	Tick        time.Time  `json:"tick"`
	Manual      bool       `json:"manual,omitempty"`
	Status      string     `json:"status"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// ScheduleRuns is GET /api/v1/schedules/{id}/runs: the runs the answering
// replica holds (finished ones until retention deletes them), newest tick
// first.
type ScheduleRuns struct {
	Schedule string        `json:"schedule"`
	Runs     []ScheduleRun `json:"runs"`
	Revision int64         `json:"revision"`
}

// TriggerResponse answers POST /api/v1/schedules/{id}/trigger.
type TriggerResponse struct {
	Schedule string `json:"schedule"`
	Run      string `json:"run"`
	Created  bool   `json:"created"`
}
