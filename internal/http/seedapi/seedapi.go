// Package seedapi serves the HTTP surface of OrionScheduler, the project
// Orion grew from ("the seed", github.com/Hrushikesh-ramilla/OrionScheduler),
// so that its web console and its load tester work against Orion unchanged:
//
//	POST /api/v1/dag             submit a JSON array of {id, payload, priority, dependencies}
//	GET  /api/v1/status          {"pending","running","completed","failed","retried"}
//	GET  /api/v1/metrics/live    the status bar's metrics
//	GET  /api/v1/dag/state       every recent task, keyed by task id, to redraw the graph
//	GET  /ws                     the seed's TaskEvent stream
//	POST /admin/simulate-crash   alias of POST /api/v1/demo/crash (package demo)
//	POST /admin/recover          alias of POST /api/v1/demo/recover
//	GET  /admin/status           alias of GET /api/v1/demo/status
//
// Each seed submission becomes one Orion DAG of sleep tasks (the seed only
// simulated work; see ToDAG), so everything Orion gives a DAG applies: it is
// committed to etcd before the 201, survives a crash and can be read,
// cancelled and retried through /api/v1/dags/{dag_id}. Task ids are scoped
// to their DAG in Orion, where the seed had one global namespace: a
// dependency on a task of an earlier submission is refused.
//
// Errors keep the seed's {"error": "message"} body, with a "code" added and
// the Content-Type the seed got wrong (it sent text/plain) set to JSON.
package seedapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/demo"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/model"
)

// Backend is what the seed surface needs of a replica: *engine.Engine,
// or whatever the API's Backend is (it is a subset of api.Backend).
type Backend interface {
	Submit(ctx context.Context, d *model.DAG) (engine.SubmitResult, error)
	// Counts, DAGViews and Rev read the replica's state
	// (engine/reads.go).
	Counts(ctx context.Context) (core.StatusCounts, int64, error)
	DAGViews(ctx context.Context, q core.DAGQuery) ([]*core.DAGView, int64, error)
	Rev() int64
	Status() *engine.Status
	WaitApplied(ctx context.Context, rev int64) error
}

// Defaults for zero Config fields.
const (
	DefaultMaxQueue     = 10000
	DefaultWriteTimeout = 30 * time.Second
	DefaultStateDAGs    = 20
	DefaultStateTasks   = 5000
)

// Config configures the handlers. Backend and Hub are required.
type Config struct {
	Backend Backend
	Hub     *events.Hub
	// Demo, when set, is served at /admin/simulate-crash, /admin/recover
	// and /admin/status, the seed's paths for Orion's demo controls.
	Demo *demo.Handler
	// AuthToken is the API's bearer token: sent with submissions forwarded
	// to the leader.
	AuthToken string
	// Cluster, when set, lets a standby forward submissions to the leader.
	Cluster    kit.ClusterInfo
	Node       string
	HTTPClient *http.Client
	// MaxBodyBytes bounds a submission (default kit.DefaultMaxBodyBytes);
	// MaxTasks the tasks of one (default dag.DefaultMaxTasks).
	MaxBodyBytes int64
	MaxTasks     int
	// MaxQueue: submissions are refused with 429 while more tasks than this
	// are ready and waiting for a slot (default 10000, as in the seed).
	MaxQueue     int
	WriteTimeout time.Duration // how long a submission waits for its commit (default 30s)
	// SlowTasks makes ordinary payloads take 2–5 s instead of 50–200 ms, as
	// the seed's DEMO_MODE did, so a person can watch them.
	SlowTasks bool
	// StateDAGs and StateTasks bound /api/v1/dag/state: running DAGs and
	// the StateDAGs most recent others, at most StateTasks tasks.
	StateDAGs  int
	StateTasks int
	Origins    kit.Origins
	HTTP       events.HTTPConfig // /ws heartbeat and write timeout
	Started    time.Time         // for uptime_seconds (default: New's time)
	Logger     *zap.Logger
}

// Handler serves the seed surface.
type Handler struct {
	cfg Config
	log *zap.Logger
}

// New returns the handlers; it panics without a Backend or a Hub.
func New(cfg Config) *Handler {
	if cfg.Backend == nil || cfg.Hub == nil {
		panic("seedapi: Config.Backend and Config.Hub are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = kit.DefaultMaxBodyBytes
	}
	if cfg.MaxTasks <= 0 {
		cfg.MaxTasks = dag.DefaultMaxTasks
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.StateDAGs <= 0 {
		cfg.StateDAGs = DefaultStateDAGs
	}
	if cfg.StateTasks <= 0 {
		cfg.StateTasks = DefaultStateTasks
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.HTTP.Logger == nil {
		cfg.HTTP.Logger = cfg.Logger
	}
	if cfg.HTTP.SendBuffer <= 0 {
		cfg.HTTP.SendBuffer = events.DefaultSendBuffer
	}
	return &Handler{cfg: cfg, log: cfg.Logger}
}

// Paths of the seed surface.
const (
	PathSubmit   = "/api/v1/dag"
	PathStatus   = "/api/v1/status"
	PathLive     = "/api/v1/metrics/live"
	PathState    = "/api/v1/dag/state"
	PathWS       = "/ws"
	PathCrash    = "/admin/simulate-crash"
	PathRecover  = "/admin/recover"
	PathAdminSts = "/admin/status"
)

// Routes returns the handlers keyed by ServeMux pattern, for
// api.Config.Routes. Patterns carry no method, so CORS preflights reach
// them; each answers other methods with a JSON 405. GET /api/v1/dags is not
// among them: Orion serves that route (see ListDAGs). The /admin aliases
// are among them only with a Config.Demo.
func (h *Handler) Routes() map[string]http.Handler {
	routes := map[string]http.Handler{
		PathSubmit: h.route("POST", h.submit),
		PathStatus: h.route("GET", h.status),
		PathLive:   h.route("GET", h.metricsLive),
		PathState:  h.route("GET", h.dagState),
		PathWS:     h.route("GET", h.ws),
	}
	if h.cfg.Demo != nil {
		// The demo package's own handlers, answering errors in the seed's
		// shape.
		controls := h.cfg.Demo.Handlers(writeError)
		routes[PathCrash] = h.route("POST", controls.Crash)
		routes[PathRecover] = h.route("POST", controls.Recover)
		routes[PathAdminSts] = h.route("GET", controls.Status)
	}
	return routes
}

func (h *Handler) route(method string, fn http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proceed, denied := h.cfg.Origins.Apply(w, r, method)
		if denied {
			writeError(w, http.StatusForbidden, apitypes.CodeForbidden, "requests from origin "+r.Header.Get("Origin")+" are not allowed")
		}
		if !proceed {
			return
		}
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method+", OPTIONS")
			writeError(w, http.StatusMethodNotAllowed, apitypes.CodeMethodNotAllowed, "method not allowed")
			return
		}
		fn(w, r)
	})
}

// internalBody answers, in the seed's error shape, a value that does not
// encode.
var internalBody = []byte(`{"error":"internal error","code":"internal"}`)

// writeJSON writes v through the shared JSON writer, with the seed's own
// 500 body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	kit.WriteJSONOr(w, status, v, internalBody)
}

// ErrorBody is the seed's error shape, with a machine-readable code and,
// for invalid DAGs, the list of problems. It is a compatibility contract:
// flat, unlike the API's apitypes.ErrorBody; the codes are the API's.
type ErrorBody struct {
	Error   string        `json:"error"`
	Code    apitypes.Code `json:"code"`
	Details []string      `json:"details,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code apitypes.Code, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg, Code: code})
}

// SubmitResponse answers POST /api/v1/dag, as the seed did (201 created,
// 200 for a repeated Idempotency-Key).
type SubmitResponse struct {
	Status   string `json:"status"` // "accepted"
	Ingested int    `json:"ingested"`
	DAGID    string `json:"dag_id"`
}

func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key == "" {
		writeError(w, http.StatusBadRequest, apitypes.CodeBadRequest, "missing Idempotency-Key header")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, apitypes.CodeBodyTooLarge,
				fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, apitypes.CodeBadRequest, "could not read the request body")
		return
	}
	d, tasks, ve := ParseSubmission(key, body, dag.Limits{MaxTasks: h.cfg.MaxTasks, MaxDecodedBytes: 2 * h.cfg.MaxBodyBytes}, h.cfg.SlowTasks)
	if ve != nil {
		writeValidationError(w, ve)
		return
	}
	st := h.cfg.Backend.Status()
	if st != nil && st.Counts[core.Ready] > h.cfg.MaxQueue {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, apitypes.CodeOverloaded, "system overloaded")
		return
	}
	if st != nil && st.Loaded && !st.Leader && h.forward(w, r, body) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WriteTimeout)
	defer cancel()
	res, err := h.cfg.Backend.Submit(ctx, d)
	if err != nil {
		if errors.Is(err, core.ErrNotLeader) && h.forward(w, r, body) {
			return
		}
		h.fail(w, r, err)
		return
	}
	if res.ID == "" {
		res.ID = d.ID
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/api/v1/dags/"+res.ID)
	kit.MarkRevision(h.cfg.Backend, w)
	writeJSON(w, status, SubmitResponse{Status: "accepted", Ingested: len(tasks), DAGID: res.ID})
}

// fail maps a submission error to the seed's error shape.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ce *core.Error
		le *core.LimitError
		ve *dag.ValidationError
	)
	errors.As(err, &ce)
	switch {
	case errors.Is(err, core.ErrNotLeader), errors.Is(err, engine.ErrStopped), errors.Is(err, engine.ErrUnknown),
		errors.Is(err, engine.ErrCrashed):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "scheduler is offline or recovering: "+err.Error())
	case errors.Is(err, engine.ErrStorageFull):
		// Nothing was written: a known outcome, as on /api/v1/dags.
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusInsufficientStorage, apitypes.CodeStorageFull, err.Error())
	case ce != nil && ce.Code == core.CodeConflict:
		writeError(w, http.StatusConflict, apitypes.CodeConflict,
			"this Idempotency-Key was already used for a different DAG: "+ce.Msg)
	case errors.As(err, &le):
		// A global limit (max_live_dags, max_live_tasks), as on /api/v1/dags.
		w.Header().Set("Retry-After", "5")
		code, status := kit.CoreCode(le.Code)
		writeError(w, status, code, le.Msg)
	case errors.As(err, &ve):
		writeValidationError(w, ve)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, apitypes.CodeTimeout, fmt.Sprintf(
			"the DAG was not committed within %s; it may still be: retrying with the same Idempotency-Key is safe", h.cfg.WriteTimeout))
	case errors.Is(err, context.Canceled):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "request cancelled before it completed")
	default:
		h.log.Error("seed submission failed", zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, http.StatusInternalServerError, apitypes.CodeInternal, "internal error")
	}
}

// ParseSubmission reads the seed's array format as the DAG it maps to
// (ToDAG), validated within limits: the task count, the decoded-size budget
// and every field limit, as for POST /api/v1/dags.
func ParseSubmission(key string, body []byte, limits dag.Limits, slow bool) (*model.DAG, []Task, *dag.ValidationError) {
	maxTasks := limits.MaxTasks
	if maxTasks <= 0 {
		maxTasks = dag.DefaultMaxTasks
	}
	// Counted before decoding, as on /api/v1/dags (dag.CheckTaskCount).
	if n := dag.CountJSONArray(body); n > maxTasks {
		return nil, nil, &dag.ValidationError{Code: dag.CodeTooMany,
			Message: fmt.Sprintf("too many tasks in request: %d; the limit is %d (max_tasks_per_dag)", n, maxTasks)}
	}
	var tasks []Task
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tasks); err != nil {
		return nil, nil, &dag.ValidationError{Code: dag.CodeParse, Message: "invalid JSON body: " + err.Error()}
	}
	if len(tasks) == 0 {
		return nil, nil, &dag.ValidationError{Code: dag.CodeInvalid, Message: "empty task list"}
	}
	if len(tasks) > maxTasks {
		return nil, nil, &dag.ValidationError{Code: dag.CodeTooMany,
			Message: fmt.Sprintf("too many tasks in request: %d; the limit is %d (max_tasks_per_dag)", len(tasks), maxTasks)}
	}
	d := ToDAG(key, tasks, slow)
	if err := dag.Validate(d, limits); err != nil {
		var ve *dag.ValidationError
		if errors.As(err, &ve) {
			return nil, nil, ve
		}
		return nil, nil, &dag.ValidationError{Code: dag.CodeInvalid, Message: err.Error()}
	}
	return d, tasks, nil
}

// writeValidationError answers a refused DAG in the seed's error shape: 413
// for one too large to store, 400 otherwise.
func writeValidationError(w http.ResponseWriter, ve *dag.ValidationError) {
	status := http.StatusBadRequest
	if ve.Code == dag.CodeTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	writeJSON(w, status, ErrorBody{Error: ve.Message, Code: apitypes.Code(ve.Code), Details: ve.Details})
}

// forward sends a submission a standby received to the leader, which
// serves the same route, and relays its answer. It reports whether it
// answered. The Idempotency-Key the seed's clients must send is the
// submission's identity: sent again to a new leader after the first one
// froze, it creates the DAG once (kit.Forwarder.Forward).
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, body []byte) bool {
	fw := kit.Forwarder{
		Cluster: h.cfg.Cluster, Node: h.cfg.Node, Client: h.cfg.HTTPClient, Token: h.cfg.AuthToken,
		Timeout: h.cfg.WriteTimeout, AwaitRev: h.cfg.Backend.WaitApplied,
	}.Forward(w, r, kit.Write{Body: body, Headers: []string{"Content-Type", "Idempotency-Key"}})
	switch fw.Outcome {
	case kit.Answered:
		return true
	case kit.NotForwarded, kit.NoLeader:
		return false
	}
	h.log.Warn("forwarding a seed submission to the leader failed", zap.String("leader", fw.Leader), zap.Int("sends", fw.Sends), zap.Error(fw.Err))
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, apitypes.CodeNotLeader,
		"this replica is not the leader, and neither the leader "+fw.Leader+" nor a successor answered; "+
			"the DAG may have been submitted: sending it again with the same Idempotency-Key is safe")
	return true
}

// running reports the replica's status if its scheduler has loaded state.
func (h *Handler) running() (*engine.Status, bool) {
	st := h.cfg.Backend.Status()
	return st, st != nil && st.Loaded
}

// counts reads the task counters on the scheduler's loop rather than from
// its status, which is refreshed only every 250 ms: a client that was just
// told 201 must see its tasks counted (the load tester waits for "pending"
// and "running" to reach 0 right after submitting).
func (h *Handler) counts(ctx context.Context) (c Counts, rev int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
	defer cancel()
	n, rev, err := h.cfg.Backend.Counts(ctx)
	c = countsOf(n.Of)
	c.Retried = int(h.cfg.Hub.Totals().Retried)
	return c, rev, err
}

func (h *Handler) offline(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "scheduler offline")
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.running(); !ok {
		h.offline(w)
		return
	}
	c, _, err := h.counts(r.Context())
	if err != nil {
		h.offline(w)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// LiveMetrics answers GET /api/v1/metrics/live.
type LiveMetrics struct {
	Counts
	QueueSize     int    `json:"queue_size"`
	WSClients     int    `json:"ws_clients"`
	UptimeSeconds int    `json:"uptime_seconds"`
	Workers       int    `json:"workers"` // executor slots
	DroppedEvents int64  `json:"dropped_events"`
	Node          string `json:"node"`
	Leader        bool   `json:"leader"`
	Revision      int64  `json:"revision"`
}

func (h *Handler) metricsLive(w http.ResponseWriter, r *http.Request) {
	st, ok := h.running()
	if !ok {
		h.offline(w)
		return
	}
	c, rev, err := h.counts(r.Context())
	if err != nil {
		h.offline(w)
		return
	}
	slots := 0
	for _, wk := range st.Workers {
		slots += wk.Slots
	}
	if slots == 0 {
		if m := h.cfg.Hub.LatestMetrics(); m != nil {
			slots = m.WorkerSlots
		}
	}
	writeJSON(w, http.StatusOK, LiveMetrics{
		Counts:        c,
		QueueSize:     st.Counts[core.Ready],
		WSClients:     h.cfg.Hub.Subscribers(),
		UptimeSeconds: int(time.Since(h.cfg.Started).Seconds()),
		Workers:       slots,
		DroppedEvents: h.cfg.Hub.Dropped(),
		Node:          st.Node,
		Leader:        st.Leader,
		Revision:      rev,
	})
}

// TaskInfo is one task of GET /api/v1/dag/state, as the seed's TaskInfo
// plus the DAG it belongs to.
type TaskInfo struct {
	ID           string     `json:"id"`
	DAGID        string     `json:"dag_id"`
	Payload      string     `json:"payload"`
	Priority     int        `json:"priority"`
	Dependencies []string   `json:"dependencies"`
	Status       string     `json:"status"`
	RetryCount   int        `json:"retry_count"`
	MaxRetries   int        `json:"max_retries"`
	StartTime    *time.Time `json:"start_time,omitempty"`
	EndTime      *time.Time `json:"end_time,omitempty"`
}

// StateResponse answers GET /api/v1/dag/state.
type StateResponse struct {
	Tasks            map[string]TaskInfo `json:"tasks"`
	SchedulerRunning bool                `json:"scheduler_running"`
	QueueSize        int                 `json:"queue_size"`
	DroppedEvents    int64               `json:"dropped_events"`
	Metrics          Counts              `json:"metrics"`
	ServerTime       time.Time           `json:"server_time"`
	Revision         int64               `json:"revision,omitempty"`
	Truncated        bool                `json:"truncated,omitempty"`
}

// dagState lists the tasks of the running DAGs and of the most recent ones,
// keyed by task id as the seed did; where two DAGs have a task of the same
// id, the newer DAG's wins.
func (h *Handler) dagState(w http.ResponseWriter, r *http.Request) {
	st, ok := h.running()
	resp := StateResponse{Tasks: map[string]TaskInfo{}, ServerTime: time.Now().UTC(), DroppedEvents: h.cfg.Hub.Dropped()}
	if !ok {
		writeJSON(w, http.StatusOK, resp) // the seed's offline answer: scheduler_running false
		return
	}
	resp.SchedulerRunning = true
	resp.QueueSize = st.Counts[core.Ready]
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WriteTimeout)
	defer cancel()
	n, rev, err := h.cfg.Backend.Counts(ctx)
	resp.Metrics, resp.Revision = countsOf(n.Of), rev
	var (
		views     []*core.DAGView
		truncated bool
	)
	if err == nil {
		tasks, recent := 0, 0
		views, _, err = h.cfg.Backend.DAGViews(ctx, core.DAGQuery{Keep: func(d *core.DAGSummary) bool { // newest first
			if d.Status != core.DAGRunning {
				if recent >= h.cfg.StateDAGs {
					return false
				}
				recent++
			}
			if tasks+d.TaskCount > h.cfg.StateTasks {
				truncated = true // read once the query has run
				return false
			}
			tasks += d.TaskCount
			return true
		}})
	}
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "scheduler offline: "+err.Error())
		return
	}
	resp.Truncated = truncated
	resp.Metrics.Retried = int(h.cfg.Hub.Totals().Retried)
	for i := len(views) - 1; i >= 0; i-- { // oldest first: newer DAGs overwrite
		v := views[i]
		for k := range v.Tasks {
			t := &v.Tasks[k]
			deps := t.DependsOn
			if deps == nil {
				deps = []string{}
			}
			resp.Tasks[t.ID] = TaskInfo{ID: t.ID, DAGID: v.ID, Payload: payloadOf(&t.Spec), Priority: t.Priority,
				Dependencies: deps, Status: seedStatus(t.Status), RetryCount: t.Retries, MaxRetries: t.MaxRetries,
				StartTime: t.StartedAt, EndTime: t.FinishedAt}
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// DAGInfo is one DAG of the seed's GET /api/v1/dags.
type DAGInfo struct {
	ID          string    `json:"id"`
	TaskIDs     []string  `json:"task_ids"`
	TaskCount   int       `json:"task_count"`
	SubmittedAt time.Time `json:"submitted_at"`
	Status      string    `json:"status"`
}

// ListDAGs serves the seed's GET /api/v1/dags: {"dags":[{id, task_ids,
// task_count, submitted_at}], "count"}, newest first, at most 1000. It is
// not in Routes, since Orion's own API owns that route; neither the seed's
// console nor its load tester reads it.
func (h *Handler) ListDAGs() http.Handler {
	return h.route("GET", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.WriteTimeout)
		defer cancel()
		views, _, err := h.cfg.Backend.DAGViews(ctx, core.DAGQuery{Limit: 1000})
		out := make([]DAGInfo, 0, len(views))
		for _, v := range views {
			ids := make([]string, len(v.Tasks))
			for i := range v.Tasks {
				ids[i] = v.Tasks[i].ID
			}
			out = append(out, DAGInfo{ID: v.ID, TaskIDs: ids, TaskCount: v.TaskCount, SubmittedAt: v.SubmittedAt, Status: string(v.Status)})
		}
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "scheduler offline: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"dags": out, "count": len(out)})
	})
}
