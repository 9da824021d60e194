// Package demo owns demo mode (`orion server --demo`): controls that crash
// a replica's scheduler as kill -9 would and recover it from etcd, while
// the process, its HTTP server and the pages connected to it stay up.
// Orion's console calls them under Orion's own routes:
//
//	POST /api/v1/demo/crash     demo mode only: kill the scheduler as kill -9 would
//	POST /api/v1/demo/recover   demo mode only: start a new scheduler from etcd
//	GET  /api/v1/demo/status    {"demo": bool, "running": bool, "last_crash"?, "detail"?}
//
// The seed API serves the same handlers at its own paths (/admin/*), in
// its own error shape (see Handler.Handlers).
//
// The controls answer 403 outside demo mode, and to clients beyond
// loopback when the server has no auth token (the API's middleware checks
// the token when there is one). With ?target=NAME, the replica that
// receives a control relays it to the replica NAME, so a page never talks
// to another origin.
package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/kit"
)

// Scheduler is what the controls crash and recover: Replica in a server.
type Scheduler interface {
	// Crash stops the scheduler the way kill -9 would (Engine.Crash): the
	// in-memory state is dropped and the etcd session abandoned without
	// resigning. The HTTP server stays up.
	Crash() error
	// Recover starts a new scheduler that loads its state from etcd, and
	// returns once that state is loaded.
	Recover(ctx context.Context) error
	// Status says whether a scheduler is running.
	Status() Status
}

// Status is what the status control reports of the scheduler.
type Status struct {
	Running bool
	// Detail, if not nil, is included as "detail".
	Detail any
}

// Backend reads the state a recovered scheduler loaded, for the recovery
// event: *EngineRef, or whatever the API's Backend is.
type Backend interface {
	Counts(ctx context.Context) (core.StatusCounts, int64, error)
}

// DefaultTimeout bounds a recovery or a relayed control when
// Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Config configures the controls. Scheduler, Backend and Events are
// required.
type Config struct {
	Scheduler Scheduler
	// Enabled is demo mode: without it crash and recover answer 403 and
	// status says {"demo": false}.
	Enabled bool
	Backend Backend
	// Events carries the "crash" and "recover" system events to every
	// page and seed console that follows the stream.
	Events *events.Hub
	// AuthToken is the API's bearer token: sent with relayed controls.
	// When it is empty the controls refuse clients beyond loopback.
	AuthToken string
	// Cluster, when set, names the replicas ?target= may relay to.
	Cluster    kit.ClusterInfo
	Node       string // this replica's name: a ?target= naming it acts here
	HTTPClient *http.Client
	Timeout    time.Duration // for a recovery or a relay (default DefaultTimeout)
	Logger     *zap.Logger
}

// Handler serves the controls.
type Handler struct {
	cfg Config
	log *zap.Logger

	controlMu sync.Mutex // one crash or recovery at a time
	mu        sync.Mutex
	crashedAt time.Time
	known     map[string]string // replica name → API URL, remembered for relays
}

// New returns the controls; it panics without a Scheduler, a Backend or
// Events.
func New(cfg Config) *Handler {
	if cfg.Scheduler == nil || cfg.Backend == nil || cfg.Events == nil {
		panic("demo: Config.Scheduler, Config.Backend and Config.Events are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Handler{cfg: cfg, log: cfg.Logger}
}

// Paths of Orion's demo routes.
const (
	PathCrash   = "/api/v1/demo/crash"
	PathRecover = "/api/v1/demo/recover"
	PathStatus  = "/api/v1/demo/status"
)

// ErrorWriter answers an error in one HTTP surface's error shape.
type ErrorWriter func(w http.ResponseWriter, status int, code apitypes.Code, msg string)

// Handlers are the three controls, answering errors through one surface's
// ErrorWriter. They check no method: the surface routes them.
type Handlers struct {
	Crash, Recover, Status http.HandlerFunc
}

// Handlers returns the controls answering errors with writeError. Every
// set shares this Handler's state: its lock, its last crash and the
// replicas it knows.
func (h *Handler) Handlers(writeError ErrorWriter) Handlers {
	return Handlers{
		Crash:   func(w http.ResponseWriter, r *http.Request) { h.crash(w, r, writeError) },
		Recover: func(w http.ResponseWriter, r *http.Request) { h.recoverScheduler(w, r, writeError) },
		Status:  h.status,
	}
}

// Routes returns Orion's routes, keyed by ServeMux pattern for
// api.Config.Routes, which answer errors with the API's error body.
func (h *Handler) Routes() map[string]http.Handler {
	hs := h.Handlers(func(w http.ResponseWriter, status int, code apitypes.Code, msg string) {
		kit.WriteError(w, status, code, msg, nil)
	})
	return map[string]http.Handler{
		"POST " + PathCrash:   hs.Crash,
		"POST " + PathRecover: hs.Recover,
		"GET " + PathStatus:   hs.Status,
	}
}

// allowed answers 403 unless the controls may be used by r.
func (h *Handler) allowed(w http.ResponseWriter, r *http.Request, writeError ErrorWriter) bool {
	if !h.cfg.Enabled {
		writeError(w, http.StatusForbidden, apitypes.CodeDemoDisabled,
			"demo controls are disabled: start orion server with --demo to crash and recover the scheduler from the console")
		return false
	}
	if h.cfg.AuthToken == "" && !loopback(r.RemoteAddr) {
		writeError(w, http.StatusForbidden, apitypes.CodeForbidden,
			"demo controls need an auth token when the server is reached from beyond loopback")
		return false
	}
	return true
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// relay sends a control naming another replica (?target=NAME) to that
// replica, at the path it was received on, and reports whether it did (the
// answer is then written).
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, writeError ErrorWriter) bool {
	target := r.URL.Query().Get("target")
	if target == "" || target == h.cfg.Node || h.cfg.Cluster == nil || r.Header.Get(kit.ForwardedHeader) != "" {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	// On an error the addresses seen before still serve.
	replicas, _ := h.cfg.Cluster.Replicas(ctx)
	cancel()
	// A crashed replica's registration goes with its lease, so remember
	// every address seen: "recover" must still reach it.
	h.mu.Lock()
	if h.known == nil {
		h.known = map[string]string{}
	}
	for _, rep := range replicas {
		if rep.APIURL != "" {
			h.known[rep.Name] = rep.APIURL
		}
	}
	url := h.known[target]
	h.mu.Unlock()
	if url == "" {
		writeError(w, http.StatusNotFound, apitypes.CodeNotFound, "no replica named "+target+" is registered")
		return true
	}
	// The other replica sees ForwardedHeader and acts on itself, whatever
	// ?target= says.
	err := kit.Relay{
		Client: h.cfg.HTTPClient, To: url, From: h.cfg.Node, Token: h.cfg.AuthToken,
		Timeout: h.cfg.Timeout,
	}.Do(w, r, nil)
	if err != nil {
		writeError(w, http.StatusBadGateway, apitypes.CodeUnreachable, "replica "+target+" did not answer: "+err.Error())
	}
	return true
}

func (h *Handler) crash(w http.ResponseWriter, r *http.Request, writeError ErrorWriter) {
	if !h.allowed(w, r, writeError) || h.relay(w, r, writeError) {
		return
	}
	h.controlMu.Lock()
	defer h.controlMu.Unlock()
	if !h.cfg.Scheduler.Status().Running {
		writeError(w, http.StatusConflict, apitypes.CodeConflict, "scheduler is already stopped")
		return
	}
	if err := h.cfg.Scheduler.Crash(); err != nil {
		h.log.Error("demo crash failed", zap.Error(err))
		writeError(w, http.StatusInternalServerError, apitypes.CodeInternal, "crash failed: "+err.Error())
		return
	}
	now := time.Now().UTC()
	h.mu.Lock()
	h.crashedAt = now
	h.mu.Unlock()
	h.log.Warn("scheduler crashed on request (demo)", zap.String("remote", r.RemoteAddr))
	h.cfg.Events.PublishSystem("crash", nil)
	kit.WriteJSON(w, http.StatusOK, apitypes.DemoCrash{Status: "crashed", CrashTime: now})
}

func (h *Handler) recoverScheduler(w http.ResponseWriter, r *http.Request, writeError ErrorWriter) {
	if !h.allowed(w, r, writeError) || h.relay(w, r, writeError) {
		return
	}
	h.controlMu.Lock()
	defer h.controlMu.Unlock()
	if h.cfg.Scheduler.Status().Running {
		writeError(w, http.StatusConflict, apitypes.CodeConflict, "scheduler is already running")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	if err := h.cfg.Scheduler.Recover(ctx); err != nil {
		h.log.Error("demo recovery failed", zap.Error(err))
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "recovery failed: "+err.Error())
		return
	}
	now := time.Now().UTC()
	h.mu.Lock()
	crashed := h.crashedAt
	h.mu.Unlock()
	var downtime int64
	if !crashed.IsZero() {
		downtime = now.Sub(crashed).Milliseconds()
	}
	meta := map[string]string{"downtime_ms": fmt.Sprint(downtime)}
	h.addRecovered(ctx, meta)
	h.log.Info("scheduler recovered on request (demo)", zap.Int64("downtime_ms", downtime))
	h.cfg.Events.PublishSystem("recover", meta)
	kit.WriteJSON(w, http.StatusOK, apitypes.DemoRecover{Status: "recovered", RecoveryTime: now, DowntimeMs: downtime})
}

// addRecovered adds to a recovery event what the new scheduler loaded, as
// the consoles narrate it: tasks done, failed (in the seed's sense, which
// counts tasks that will not run: failed, upstream failed or cancelled) and
// running, and the revision it replayed to. If the scheduler does not
// answer, the event goes without them.
func (h *Handler) addRecovered(ctx context.Context, meta map[string]string) {
	n, rev, err := h.cfg.Backend.Counts(ctx)
	if err != nil {
		return
	}
	meta["completed_recovered"] = fmt.Sprint(n[core.Succeeded])
	meta["failed_recovered"] = fmt.Sprint(n[core.Failed] + n[core.UpstreamFailed] + n[core.Cancelled])
	meta["in_flight"] = fmt.Sprint(n[core.Running])
	meta["revision"] = fmt.Sprint(rev)
}

// status is read-only and answers whether or not demo mode is on: the
// consoles poll it, and the seed's takes any failure for a dead backend.
func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	ds := h.cfg.Scheduler.Status()
	resp := apitypes.DemoStatus{Demo: h.cfg.Enabled, Running: ds.Running, Detail: ds.Detail}
	h.mu.Lock()
	if !h.crashedAt.IsZero() {
		t := h.crashedAt
		resp.LastCrash = &t
	}
	h.mu.Unlock()
	kit.WriteJSON(w, http.StatusOK, resp)
}
