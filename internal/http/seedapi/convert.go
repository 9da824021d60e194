package seedapi

import (
	"encoding/json"
	"hash/fnv"
	"time"
	"unicode/utf8"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/model"
)

// Task is one element of the seed's submission array (its models.Task).
// The runtime fields a client may echo back (status, retry_count,
// start_time, end_time) are accepted and ignored, as the seed did.
type Task struct {
	ID           string          `json:"id"`
	Payload      string          `json:"payload"`
	Priority     int             `json:"priority"`
	Dependencies []string        `json:"dependencies"`
	Status       string          `json:"status,omitempty"`
	RetryCount   int             `json:"retry_count,omitempty"`
	MaxRetries   int             `json:"max_retries,omitempty"`
	StartTime    json.RawMessage `json:"start_time,omitempty"`
	EndTime      json.RawMessage `json:"end_time,omitempty"`
}

// Payload values with a meaning; any other payload is ordinary work.
const (
	PayloadSleep = "sleep" // runs 2 s
	PayloadFail  = "fail"  // fails every attempt
)

// Durations of the seed's simulated work.
const (
	sleepDuration = 2 * time.Second
	workMin       = 50 * time.Millisecond   // ordinary work: 50–199 ms
	workSpread    = 150                     // ms
	slowMin       = 2000 * time.Millisecond // with SlowTasks (the seed's DEMO_MODE): 2–4.999 s
	slowSpread    = 3000                    // ms
)

// DefaultMaxRetries is what the seed gives a task whose max_retries is 0.
const DefaultMaxRetries = 3

// ToDAG maps a seed submission to an Orion DAG, normalized but not
// validated. Every task becomes a sleep task, as the seed only simulated
// work: payload "sleep" sleeps 2 s, "fail" fails every attempt (after the
// usual simulated duration), anything else takes 50–199 ms (2–5 s with
// slow). The duration is drawn from the idempotency key and the task id, so
// the same request always maps to the same DAG and a retried submission is
// recognised as identical. The DAG's id is derived from the key as for
// POST /api/v1/dags; the payload is kept as each task's name (its label).
// Priority keeps its meaning (lower runs first); max_retries 0 means 3, as
// in the seed.
func ToDAG(key string, tasks []Task, slow bool) *model.DAG {
	d := &model.DAG{ID: kit.IdempotencyID(key), Tasks: make([]model.Task, len(tasks))}
	for i := range tasks {
		st := &tasks[i]
		t := model.Task{
			ID:         st.ID,
			Name:       label(st.Payload),
			Kind:       model.KindSleep,
			DependsOn:  st.Dependencies,
			Priority:   st.Priority,
			MaxRetries: st.MaxRetries,
		}
		if t.MaxRetries == 0 {
			t.MaxRetries = DefaultMaxRetries
		}
		switch {
		case st.Payload == PayloadSleep:
			t.Duration = model.Duration(sleepDuration)
		case slow:
			t.Duration = model.Duration(slowMin + time.Duration(draw(key, st.ID)%slowSpread)*time.Millisecond)
		default:
			t.Duration = model.Duration(workMin + time.Duration(draw(key, st.ID)%workSpread)*time.Millisecond)
		}
		if st.Payload == PayloadFail {
			t.Fail = 1
		}
		d.Tasks[i] = t
	}
	d.Normalize()
	return d
}

func draw(key, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// label fits a payload into a task name.
func label(payload string) string {
	if len(payload) <= dag.MaxNameLen {
		return payload
	}
	cut := dag.MaxNameLen
	for cut > 0 && !utf8.RuneStart(payload[cut]) {
		cut--
	}
	return payload[:cut]
}

// payloadOf recovers a task's seed payload: the label a seed submission
// stored, or for a DAG submitted natively, its command or kind.
func payloadOf(s *model.Task) string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Kind == model.KindShell:
		return s.Command
	case s.Kind == model.KindHTTP:
		return s.Method + " " + s.URL
	}
	return string(s.Kind)
}

// Seed task statuses.
const (
	statusPending   = "pending"
	statusReady     = "ready"
	statusRunning   = "running"
	statusCompleted = "completed"
	statusFailed    = "failed"
)

// seedStatus maps a task status to the seed's five: a task waiting for its
// retry is pending, as in the seed; cascade victims and cancelled tasks are
// failed.
func seedStatus(s core.Status) string {
	switch s {
	case core.Pending, core.Retrying:
		return statusPending
	case core.Ready:
		return statusReady
	case core.Running:
		return statusRunning
	case core.Succeeded:
		return statusCompleted
	}
	return statusFailed
}

// Counts are the seed's task counters.
type Counts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Retried   int `json:"retried"`
}

// countsOf folds task counts by status into the seed's counters; retried
// comes from elsewhere (the seed counts retries, not tasks).
func countsOf(by func(core.Status) int) Counts {
	return Counts{
		Pending:   by(core.Pending) + by(core.Ready) + by(core.Retrying),
		Running:   by(core.Running),
		Completed: by(core.Succeeded) + by(core.Skipped), // ended without failing: the seed has no skipped
		Failed:    by(core.Failed) + by(core.UpstreamFailed) + by(core.Cancelled),
	}
}
