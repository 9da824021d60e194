package seedapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/hijack"
)

// TaskEvent is the seed's event JSON (its models.TaskEvent), plus the DAG a
// task belongs to.
type TaskEvent struct {
	Type      string            `json:"type"`
	TaskID    string            `json:"task_id,omitempty"`
	DAGTasks  []string          `json:"dag_tasks,omitempty"`
	WorkerID  int               `json:"worker_id,omitempty"`
	Duration  float64           `json:"duration_ms,omitempty"`
	Retry     int               `json:"retry,omitempty"`
	MaxRetry  int               `json:"max_retry,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Timestamp time.Time         `json:"timestamp"`
	DAGID     string            `json:"dag_id,omitempty"`
}

// The seed's event types.
const (
	EventTaskStarted   = "task.started"
	EventTaskCompleted = "task.completed"
	EventTaskFailed    = "task.failed"
	EventTaskCascade   = "task.cascade"
	EventTaskRetry     = "task.retry"
	EventDAGSubmitted  = "dag.submitted"
	EventSystemCrash   = "system.crash"
	EventSystemRecover = "system.recover"
	EventMetricsUpdate = "metrics.update"
)

// maxTracked bounds the per-connection maps of the translator.
const maxTracked = 4096

// Translator turns Orion events into the seed's, for one connection. The
// seed numbered its workers 1..N, one task at a time each; Orion's
// executors have slots, so each running task is given the lowest free
// number, which is what the seed's worker panel shows.
type Translator struct {
	slots    map[string]int // dag/task → worker number
	free     []int          // released numbers, kept sorted
	nextSlot int
	retries  map[string]map[string]int // dag → task → max_retries, from dag events
	leader   string
}

// NewTranslator returns a translator with no history.
func NewTranslator() *Translator {
	return &Translator{slots: map[string]int{}, retries: map[string]map[string]int{}, nextSlot: 1}
}

// Translate maps one event; ok is false for events the seed has no
// counterpart for (they are not sent).
func (t *Translator) Translate(ev *events.Event) (out TaskEvent, ok bool) {
	out.Timestamp = ev.Time
	if out.Timestamp.IsZero() {
		out.Timestamp = time.Now().UTC()
	}
	switch ev.Type {
	case events.TypeTask:
		return t.task(ev, out)
	case events.TypeDAG:
		rec := ev.DAGRecord()
		if rec != nil {
			if len(t.retries) >= maxTracked {
				clear(t.retries)
			}
			m := make(map[string]int, len(rec.Tasks))
			for i := range rec.Tasks {
				m[rec.Tasks[i].ID] = rec.Tasks[i].MaxRetries
			}
			t.retries[ev.DAG] = m
		}
		if ev.Status != "running" {
			return out, false
		}
		out.Type, out.DAGID = EventDAGSubmitted, ev.DAG
		out.Metadata = map[string]string{"dag_id": ev.DAG, "run": strconv.Itoa(ev.Run)}
		if rec != nil {
			out.DAGTasks = make([]string, len(rec.Tasks))
			for i := range rec.Tasks {
				out.DAGTasks[i] = rec.Tasks[i].ID
			}
		}
		return out, true
	case events.TypeDAGDeleted:
		delete(t.retries, ev.DAG)
		return out, false
	case events.TypeMetrics:
		m := ev.Metrics
		if m == nil {
			return out, false
		}
		c := countsOf(func(s core.Status) int { return m.Tasks[s.String()] })
		out.Type = EventMetricsUpdate
		out.Metadata = map[string]string{
			"pending":        strconv.Itoa(c.Pending),
			"running":        strconv.Itoa(c.Running),
			"completed":      strconv.Itoa(c.Completed),
			"failed":         strconv.Itoa(c.Failed),
			"retried":        strconv.FormatInt(m.Totals.Retried, 10),
			"queue_size":     strconv.Itoa(m.QueueSize),
			"dropped_events": strconv.FormatInt(m.DroppedEvents, 10),
			"throughput":     strconv.FormatFloat(m.Throughput, 'f', 2, 64),
			"role":           m.Role,
			"leader":         m.Leader,
		}
		return out, true
	case events.TypeLeader:
		// A new leader has taken over the log: tell the console to redraw
		// from /api/v1/dag/state, as the seed did after its recovery.
		prev := t.leader
		if ev.Leader == nil || *ev.Leader == "" {
			return out, false
		}
		t.leader = *ev.Leader
		if prev == "" || prev == t.leader {
			return out, false
		}
		out.Type = EventSystemRecover
		out.Metadata = map[string]string{"reason": "leader_change", "leader": t.leader, "previous_leader": prev}
		return out, true
	case events.TypeSystem:
		switch ev.Event {
		case "crash":
			out.Type = EventSystemCrash
		case "recover":
			out.Type = EventSystemRecover
		default:
			return out, false
		}
		out.Metadata = ev.Meta
		t.releaseAll()
		return out, true
	case events.TypeResync:
		// Events were lost for this connection: the state must be reloaded.
		out.Type = EventSystemRecover
		out.Metadata = map[string]string{"reason": "resync"}
		t.releaseAll()
		return out, true
	}
	return out, false // gap: the stream replays what follows; nothing to do
}

func (t *Translator) task(ev *events.Event, out TaskEvent) (TaskEvent, bool) {
	key := ev.DAG + "/" + ev.Task
	out.TaskID, out.DAGID = ev.Task, ev.DAG
	switch ev.Status {
	case "running":
		out.Type = EventTaskStarted
		out.WorkerID = t.acquire(key)
		return out, true
	case "succeeded":
		out.Type = EventTaskCompleted
		out.WorkerID = t.release(key)
		if ev.StartedAt != nil && ev.FinishedAt != nil {
			out.Duration = float64(ev.FinishedAt.Sub(*ev.StartedAt).Microseconds()) / 1000
		}
		return out, true
	case "retrying", "failed", "cancelled":
		out.Type = EventTaskFailed
		if ev.Status == "retrying" {
			out.Type = EventTaskRetry
		}
		out.WorkerID = t.release(key)
		out.Retry = ev.Retries
		if m, ok := t.retries[ev.DAG]; ok {
			out.MaxRetry = m[ev.Task]
		}
		if ev.Status == "cancelled" {
			out.Metadata = map[string]string{"reason": "cancelled"}
		} else if ev.Error != "" {
			out.Metadata = map[string]string{"error": ev.Error}
		}
		return out, true
	case "upstream_failed":
		t.release(key)
		out.Type = EventTaskCascade
		out.TaskID = ev.Cause
		if out.TaskID == "" {
			out.TaskID = ev.Task
		}
		out.DAGTasks = []string{ev.Task}
		return out, true
	default: // ready again (orphan, requeue): its slot is free
		t.release(key)
		return out, false
	}
}

func (t *Translator) acquire(key string) int {
	if n, ok := t.slots[key]; ok {
		return n
	}
	if len(t.slots) >= maxTracked {
		t.releaseAll() // events were missed somewhere; start numbering again
	}
	var n int
	if len(t.free) > 0 {
		n, t.free = t.free[0], t.free[1:]
	} else {
		n = t.nextSlot
		t.nextSlot++
	}
	t.slots[key] = n
	return n
}

func (t *Translator) release(key string) int {
	n, ok := t.slots[key]
	if !ok {
		return 0
	}
	delete(t.slots, key)
	i := sort.SearchInts(t.free, n)
	t.free = append(t.free, 0)
	copy(t.free[i+1:], t.free[i:])
	t.free[i] = n
	return n
}

func (t *Translator) releaseAll() {
	clear(t.slots)
	t.free = t.free[:0]
	t.nextSlot = 1
}

// ws serves the seed's /ws: live events only, from now on (the seed's
// clients cannot resume; they reload /api/v1/dag/state on system.recover,
// which is also what a resync becomes).
func (h *Handler) ws(w http.ResponseWriter, r *http.Request) {
	sub, err := h.cfg.Hub.SubscribeLive(events.As(guard.AddrKey(r.RemoteAddr)))
	var le *events.LimitError
	switch {
	case errors.As(err, &le):
		// The event-stream endpoints' answer to a limit, in the seed's
		// error shape.
		status := http.StatusServiceUnavailable
		if le.Limit == events.LimitPerClient {
			status = http.StatusTooManyRequests
		}
		w.Header().Set("Retry-After", strconv.Itoa(events.LimitRetryAfter))
		writeError(w, status, apitypes.CodeTooManyStreams, le.Error())
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "the event stream is shutting down")
		return
	}
	defer sub.Close()
	conn, err := events.Upgrader(h.cfg.Origins).Upgrade(hijack.Writer(w), r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	_ = hijack.SetSendBuffer(conn.UnderlyingConn(), h.cfg.HTTP.SendBuffer)
	tr := NewTranslator()
	hb := h.cfg.HTTP.Heartbeat
	if hb <= 0 {
		hb = 15 * time.Second
	}
	events.ServeWS(r.Context(), conn, h.cfg.HTTP, func(ctx context.Context) ([]byte, bool, error) {
		deadline := time.Now().Add(hb)
		for {
			wait := time.Until(deadline)
			if wait <= 0 {
				return nil, false, nil // time for a ping
			}
			ev, ok, err := sub.Poll(ctx, wait)
			if err != nil || !ok {
				return nil, ok, err
			}
			if out, ok := tr.Translate(&ev); ok {
				b, err := json.Marshal(out)
				return b, true, err
			}
		}
	})
}
