package workerstream

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/http/hijack"
	"github.com/orion-sched/orion/internal/model"
)

// Hub defaults.
const (
	DefaultHeartbeatInterval = 100 * time.Millisecond
	DefaultStaleAfter        = 500 * time.Millisecond
	DefaultReconnectGrace    = time.Second
	DefaultLogTimeout        = 5 * time.Second
)

// HubConfig configures a Hub. Zero fields take the defaults.
type HubConfig struct {
	// Leader is this replica's name, sent to workers in the welcome.
	Leader string
	// HeartbeatInterval is how often the hub sends a heartbeat on every
	// stream, and how often it asks workers to send theirs.
	HeartbeatInterval time.Duration
	// StaleAfter drops a stream on which nothing arrived for this long.
	StaleAfter time.Duration
	// ReconnectGrace is how long a disconnected worker keeps its identity
	// (and its queued dispatches) before it is reported Left.
	ReconnectGrace time.Duration
	// SilentGrace replaces ReconnectGrace for a worker whose stream went
	// silent (nothing for StaleAfter) rather than closed: it may be alive
	// and running its attempts (paused, partitioned, on a hung host), so it
	// keeps them at least as long as a new leader waits for a worker to
	// report (orion's orphan_grace). A stream that closed (EOF, reset) means
	// a dead or restarted process, and ReconnectGrace applies. Zero:
	// ReconnectGrace.
	SilentGrace time.Duration
	// WriteTimeout bounds one websocket write (DefaultWriteTimeout).
	WriteTimeout time.Duration
	// LogTimeout is how long OpenLog and each Read of a remote log wait for
	// the worker (DefaultLogTimeout).
	LogTimeout time.Duration
	// Redirect names the current leader and its API URL; a stream opened
	// while the hub is not leading gets them in a not_leader message. Nil:
	// an empty redirect.
	Redirect func() (leader, url string)
	// Logger receives connection-level events. Nil: no logging.
	Logger *zap.Logger
	// MaxSlots bounds the slots a hello may announce (DefaultMaxSlots;
	// at most MaxSlotsCeiling).
	MaxSlots int
	// MaxWorkers bounds the workers the hub holds, connected or within
	// their grace (DefaultMaxWorkers); one more is refused until one
	// leaves.
	MaxWorkers int
	// MaxRate bounds the messages a second a stream may send beyond the
	// results of the attempts its worker holds, with a burst of as many
	// (DefaultMaxRate): heartbeats, confirmations, log chunks beyond their
	// credit, websocket pings, results of attempts it was never sent. A
	// stream over it is closed.
	MaxRate float64
	// OnRefused, when set, is called with the reason of every hello
	// refused (RefusedID, RefusedSlots...); OnFlood for every stream
	// closed for exceeding MaxRate. They count them (metrics).
	OnRefused func(reason string)
	OnFlood   func()
}

// EventKind says what happened to a worker.
type EventKind int

const (
	// Joined: a worker said hello, for the first time or again after a
	// reconnection (within the grace period it is the same *RemoteWorker,
	// and attempts dispatched meanwhile are sent now). InFlight lists what
	// it reported running or finished-but-unacknowledged: adopt them.
	Joined EventKind = iota + 1
	// Disconnected: the worker's stream dropped (EOF, error or no message
	// for StaleAfter). Its attempts are kept for ReconnectGrace.
	Disconnected
	// Left: the worker did not come back within ReconnectGrace, was closed,
	// or the hub stopped leading. Re-queue its attempts. Every Joined
	// worker gets exactly one Left; the *RemoteWorker is then dead (Start
	// reports Cancelled results at once) and a reconnection creates a new
	// one.
	Left
	// Confirmed: the worker answered the welcome with joined: it refuses
	// every leader older than this one from now on (see Term). Once per
	// stream, after its Joined.
	Confirmed
	// Draining: the worker is stopping: no new attempts for it (its Slots
	// are 0 from now on); it finishes those it runs, then leaves.
	Draining
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Disconnected:
		return "disconnected"
	case Left:
		return "left"
	case Confirmed:
		return "confirmed"
	case Draining:
		return "draining"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event reports a change of a worker. Events of one worker arrive in order.
type Event struct {
	Kind     EventKind
	ID       string            // the worker's id
	Worker   *RemoteWorker     // set for every kind; the same pointer from Joined to Left
	InFlight []model.AttemptID // Joined: the attempts the worker reported
}

// WorkerInfo describes a worker for the cluster endpoint.
type WorkerInfo struct {
	ID        string       `json:"id"`
	Replica   string       `json:"replica,omitempty"`
	Slots     int          `json:"slots"`
	Labels    model.Labels `json:"labels,omitempty"`
	Connected bool         `json:"connected"`
	InFlight  int          `json:"in_flight"`
	Since     time.Time    `json:"since"`          // when Connected last changed
	Host      string       `json:"host,omitempty"` // as the worker's hello said
	PID       int          `json:"pid,omitempty"`
}

// Hub is the leader's end of the worker streams.
//
// Concurrency: one mutex guards the hub and all its workers' state; each
// stream has a reader goroutine (which also serves the HTTP request, for a
// websocket) and a writer goroutine fed by an unbounded queue, so
// RemoteWorker.Start and Cancel never block on a slow or stuck stream. A
// stuck stream is closed by the write deadline or by staleness.
type Hub struct {
	cfg      HubConfig
	log      *zap.Logger
	upgrader websocket.Upgrader
	events   *outlet[Event]
	results  *outlet[model.Result]
	done     chan struct{}
	nextReq  atomic.Uint64

	mu      sync.Mutex
	leading bool
	term    *Term // the term led, as welcomes name it
	closed  bool
	conns   map[*hubConn]struct{}
	workers map[string]*RemoteWorker
	budgets *keptBudgets // workers' budgets across their streams (budget.go)
	peers   []Peer       // sorted by name
}

// NewHub returns a hub that is not leading: every stream is redirected until
// SetLeading(true).
func NewHub(cfg HubConfig) *Hub {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.ReconnectGrace <= 0 {
		cfg.ReconnectGrace = DefaultReconnectGrace
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.LogTimeout <= 0 {
		cfg.LogTimeout = DefaultLogTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxSlots <= 0 {
		cfg.MaxSlots = DefaultMaxSlots
	}
	cfg.MaxSlots = min(cfg.MaxSlots, MaxSlotsCeiling)
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.MaxRate <= 0 {
		cfg.MaxRate = DefaultMaxRate
	}
	done := make(chan struct{})
	return &Hub{
		cfg: cfg,
		log: cfg.Logger,
		// Workers are programs and send no Origin. A request that carries
		// one comes from a browser page, which must never pose as a worker
		// and receive tasks, whatever origin it claims.
		upgrader: websocket.Upgrader{CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" }},
		events:   newOutlet[Event](256, done),
		results:  newOutlet[model.Result](4096, done),
		done:     done,
		conns:    make(map[*hubConn]struct{}),
		workers:  make(map[string]*RemoteWorker),
		budgets:  newKeptBudgets(2 * cfg.MaxWorkers),
	}
}

// Events delivers worker changes. The channel is never closed. Read it
// continuously (a backlog waits in memory, unbounded).
func (h *Hub) Events() <-chan Event { return h.events.ch }

// Results delivers the results of every worker, including results of
// attempts a worker was never asked to run here (reported after a leader
// change) and repeats; the core decides by attempt identity. The channel is
// never closed.
func (h *Hub) Results() <-chan model.Result { return h.results.ch }

// SetLeading switches the hub on or off. Off: every stream is closed, every
// worker is reported Disconnected (if connected) and Left, and new streams
// get not_leader. Call it from the scheduling loop when leadership changes.
func (h *Hub) SetLeading(leading bool) {
	h.mu.Lock()
	if h.closed || h.leading == leading {
		h.mu.Unlock()
		return
	}
	h.leading = leading
	var drop []*hubConn
	var logs []*logReader
	if !leading {
		drop, logs = h.dropAllLocked()
	}
	h.mu.Unlock()
	for _, hc := range drop {
		hc.close()
	}
	for _, lr := range logs {
		lr.fail(errNotLeading)
	}
	if leading {
		h.log.Info("worker hub leading: accepting workers")
	} else {
		h.log.Info("worker hub not leading: streams closed", zap.Int("streams", len(drop)))
	}
}

// SetPeers records the registered replicas. Every standalone worker gets the
// list after its welcome, and again whenever it changes: it is how a worker
// given one address learns where to look when that replica goes away.
// Replicas' own slots are not told (they find the leader through etcd).
func (h *Hub) SetPeers(peers []Peer) {
	// The hub's own copy; it is replaced, never changed in place, so every
	// message can share it (a Pipe passes the slice itself).
	peers = slices.Clone(peers)
	slices.SortFunc(peers, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Equal(h.peers, peers) {
		return
	}
	h.peers = peers
	for hc := range h.conns {
		if w := hc.worker; w != nil && w.replica == "" {
			hc.send(Msg{Type: TypePeers, Peers: peers})
		}
	}
}

// SetTerm names the term the hub leads in its welcomes from now on (call it
// before SetLeading(true)): workers that joined it then refuse older
// leaders.
func (h *Hub) SetTerm(t Term) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.term = &t
}

// Leading reports whether the hub accepts workers.
func (h *Hub) Leading() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leading
}

// Close stops the hub for good: like SetLeading(false), and later streams
// are redirected. Channels are not closed.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed, h.leading = true, false
	drop, logs := h.dropAllLocked()
	h.mu.Unlock()
	for _, hc := range drop {
		hc.close()
	}
	for _, lr := range logs {
		lr.fail(errNotLeading)
	}
	close(h.done)
	return nil
}

var errNotLeading = fmt.Errorf("workerstream: this replica stopped leading")

func (h *Hub) dropAllLocked() ([]*hubConn, []*logReader) {
	drop := make([]*hubConn, 0, len(h.conns))
	for hc := range h.conns {
		drop = append(drop, hc)
	}
	clear(h.conns)
	ws := make([]*RemoteWorker, 0, len(h.workers))
	for _, w := range h.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *RemoteWorker) int { return cmp.Compare(a.id, b.id) })
	var logs []*logReader
	for _, w := range ws {
		logs = append(logs, h.leaveLocked(w)...)
	}
	return drop, logs
}

// Worker returns the live worker with this id, or nil.
func (h *Hub) Worker(id string) *RemoteWorker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.workers[id]
}

// Workers lists the workers, connected or within their reconnect grace,
// sorted by id.
func (h *Hub) Workers() []WorkerInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]WorkerInfo, 0, len(h.workers))
	for _, w := range h.workers {
		out = append(out, WorkerInfo{ID: w.id, Replica: w.replica, Slots: w.slots, Labels: w.labels, Connected: w.conn != nil,
			InFlight: len(w.inFlightLocked()), Since: w.since, Host: w.host, PID: w.pid})
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Handler serves the websocket endpoint (mount it at GET Path, behind the
// API's authentication). The request's goroutine serves the stream until it
// ends. Any request with an Origin header (a browser) is refused; workers
// send none.
func (h *Hub) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := h.upgrader.Upgrade(corkable(hijack.Writer(w)), r, nil)
		if err != nil {
			h.log.Debug("worker stream upgrade failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
			return // the upgrader has answered
		}
		// Control frames never reach Recv: pings and pongs draw on the
		// stream's budget where the websocket handles them (a ping is
		// answered with a pong, a write).
		budget := newStreamBudget(h.cfg.MaxRate)
		ping := ws.PingHandler()
		ws.SetPingHandler(func(data string) error {
			if !budget.Allow() {
				return errFlood
			}
			return ping(data)
		})
		ws.SetPongHandler(func(string) error {
			if !budget.Allow() {
				return errFlood
			}
			return nil
		})
		h.serve(NewWebsocketConn(ws, h.cfg.WriteTimeout), r.RemoteAddr, budget, auth.From(r.Context()))
	})
}

// Accept serves an in-process stream (the hub's end of a Pipe) in a new
// goroutine and returns at once.
func (h *Hub) Accept(c Conn) {
	go h.serve(c, "in-process", newStreamBudget(h.cfg.MaxRate), auth.Anonymous)
}

// DialSelf connects a worker in this process to this hub through a Pipe,
// nothing serialized: how a replica's own slots reach the engine when the
// replica leads. It fails while the hub is not leading (name is what the
// agent records as its leader).
func (h *Hub) DialSelf(name string) (Conn, string, error) {
	if !h.Leading() {
		return nil, "", errors.New("this replica does not lead")
	}
	mine, theirs := Pipe()
	h.Accept(theirs)
	return mine, name, nil
}

// hubConn is one stream on the hub.
type hubConn struct {
	*link
	remote    string
	who       auth.Principal // the stream's credential (the API's middleware judged it)
	worker    *RemoteWorker  // set by hello; guarded by hub.mu
	term      *Term          // the term its welcome named; guarded by hub.mu
	confirmed bool           // the worker answered it with joined; guarded by hub.mu
}

// serve runs one stream to its end. budget is the stream's allowance of
// messages beyond the results of the attempts its worker holds.
func (h *Hub) serve(c Conn, remote string, budget *streamBudget, who auth.Principal) {
	hc := &hubConn{link: newLink(c, h.cfg.HeartbeatInterval, h.cfg.StaleAfter), remote: remote, who: who}
	h.mu.Lock()
	if !h.leading || h.closed {
		h.mu.Unlock()
		h.refuse(c, remote)
		return
	}
	h.conns[hc] = struct{}{}
	h.mu.Unlock()
	go hc.writeLoop()
	var endErr error
	defer func() { h.ended(hc, endErr) }()

	m, err := c.Recv()
	if err != nil {
		endErr = hc.endReason(err)
		h.log.Debug("worker stream ended before hello", zap.String("remote", remote), zap.Error(endErr))
		return
	}
	hc.touch()
	if reason, msg := checkHello(m, h.cfg.MaxSlots); reason != "" {
		endErr = h.refuseHello(c, remote, reason, msg)
		return
	}
	if msg := who.MayBeWorker(m.Hello.Worker, m.Hello.Labels); msg != "" {
		endErr = h.refuseHello(c, remote, RefusedIdentity, msg)
		return
	}
	if m.Hello.Replica != "" && !who.Cluster {
		endErr = h.refuseHello(c, remote, RefusedIdentity, fmt.Sprintf("token %q may not speak for replica %q's own slots: only the cluster token does", who.Name, m.Hello.Replica))
		return
	}
	if remote != "in-process" {
		key := budgetKey(remote, m.Hello.Worker)
		h.budgets.adopt(key, budget, time.Now())
		defer func() { h.budgets.ended(key, time.Now()) }()
		if !budget.Rested() {
			// Closed for flooding and back before its budget refilled:
			// refused before it joins, at no cost to the engine.
			endErr = errFlood
			h.floodedAtHello(c, remote, m.Hello.Worker)
			return
		}
	}
	if ok, reason, why := h.join(hc, m.Hello); !ok {
		if reason != "" {
			endErr = h.refuseHello(c, remote, reason, why)
		}
		return
	}
	for {
		m, err := c.Recv()
		if err != nil {
			endErr = hc.endReason(err)
			if errors.Is(err, errFlood) {
				h.flooded(hc, c, "ping or pong frames")
			}
			return
		}
		hc.touch()
		if !h.handle(hc, m) && !budget.Allow() {
			endErr = errFlood
			h.flooded(hc, c, m.Type)
			return
		}
	}
}

// refuseHello answers a hello the hub refuses with why, then waits
// (briefly) for the worker to close. A refusal of the worker's own
// settings is final: it stops rather than send them again.
func (h *Hub) refuseHello(c Conn, remote, reason, msg string) error {
	if h.cfg.OnRefused != nil {
		h.cfg.OnRefused(reason)
	}
	h.log.Warn("worker stream refused at its hello", zap.String("remote", remote), zap.String("reason", reason),
		zap.String("why", msg))
	final := reason != RefusedVersion && reason != RefusedWorkers && reason != RefusedHeld
	h.answerAndWait(c, Msg{Type: TypeRefused, Refusal: &Refusal{Reason: reason, Message: msg, Final: final}})
	return fmt.Errorf("hello refused (%s): %s", reason, msg)
}

// flooded counts and reports a stream closed for exceeding its budget,
// telling the worker why (best effort: it may not be reading).
func (h *Hub) flooded(hc *hubConn, c Conn, last string) {
	if h.cfg.OnFlood != nil {
		h.cfg.OnFlood()
	}
	id := ""
	h.mu.Lock()
	if w := hc.worker; w != nil {
		id = w.id
	}
	h.mu.Unlock()
	h.log.Warn("worker stream closed: it sent messages faster than its limit", zap.String("worker", id),
		zap.String("remote", hc.remote), zap.Float64("max_rate", h.cfg.MaxRate), zap.String("last", quoteCut(last)))
	t := time.AfterFunc(time.Second, func() { _ = c.Close() })
	defer t.Stop()
	_ = c.Send(Msg{Type: TypeRefused, Refusal: &Refusal{Reason: RefusedFlood,
		Message: fmt.Sprintf("more than %g messages a second beyond the results of its attempts (worker_stream_max_rate)", h.cfg.MaxRate)}})
}

// floodedAtHello is flooded for a worker refused at its hello: it dialed
// again before the budget its last stream spent had refilled.
func (h *Hub) floodedAtHello(c Conn, remote, worker string) {
	if h.cfg.OnFlood != nil {
		h.cfg.OnFlood()
	}
	h.log.Debug("worker stream refused at its hello: its budget is spent", zap.String("worker", worker),
		zap.String("remote", remote))
	h.answerAndWait(c, Msg{Type: TypeRefused, Refusal: &Refusal{Reason: RefusedFlood,
		Message: fmt.Sprintf("more than %g messages a second beyond the results of its attempts (worker_stream_max_rate); dial again later", h.cfg.MaxRate)}})
}

// refuse answers a stream opened while not leading with not_leader.
func (h *Hub) refuse(c Conn, remote string) {
	var rd Redirect
	if h.cfg.Redirect != nil {
		rd.Leader, rd.URL = h.cfg.Redirect()
	}
	h.log.Debug("worker stream redirected", zap.String("remote", remote), zap.String("leader", rd.Leader))
	h.answerAndWait(c, Msg{Type: TypeNotLeader, Redirect: &rd})
}

// answerAndWait sends a stream's last message, then waits (at most a
// second) for the worker to close, so that the message is not lost to a
// TCP reset caused by closing with the worker's messages unread.
func (h *Hub) answerAndWait(c Conn, m Msg) {
	t := time.AfterFunc(time.Second, func() { _ = c.Close() })
	defer t.Stop()
	if c.Send(m) == nil {
		for {
			if _, err := c.Recv(); err != nil {
				break
			}
		}
	}
	_ = c.Close()
}

// join attaches a stream to its worker, new or reconnecting.
func (h *Hub) join(hc *hubConn, hello *Hello) (ok bool, reason, why string) {
	h.mu.Lock()
	if _, ok := h.conns[hc]; !ok || !h.leading || h.closed {
		h.mu.Unlock()
		return false, "", ""
	}
	now := time.Now()
	w := h.workers[hello.Worker]
	if w != nil && w.owner != ownerOf(hc.who) && !hc.who.Cluster {
		// Another credential's worker (the cluster's too): this one may
		// not take its id, nor evict it. Not final: it may leave, and the
		// id be free.
		h.mu.Unlock()
		return false, RefusedHeld, fmt.Sprintf("worker %q is connected with another token; token %q may not replace it", hello.Worker, hc.who.Name)
	}
	var old *hubConn
	var oldLogs []*logReader
	if w != nil && w.instance != hello.Instance {
		// A restarted process under the same id: the old one is gone, with
		// what it ran (Hello.Instance). It leaves, so the leader re-queues
		// its attempts through the log, and the new one joins as a new
		// worker: nothing of the old one's is sent to it from here.
		old = w.conn
		oldLogs = h.leaveLocked(w)
		w = nil
	}
	if w == nil && len(h.workers) >= h.cfg.MaxWorkers {
		// Every worker costs the hub its state and the term record its
		// id (early.go): their number is bounded like everything else.
		// Not final: one may leave.
		h.mu.Unlock()
		if old != nil {
			old.close()
		}
		for _, lr := range oldLogs {
			lr.fail(errDisconnected(hello.Worker))
		}
		return false, RefusedWorkers, fmt.Sprintf("%d workers are connected, the leader's max_workers", h.cfg.MaxWorkers)
	}
	reconnect := w != nil
	if w == nil {
		w = &RemoteWorker{hub: h, id: hello.Worker, outstanding: make(map[model.AttemptID]outAttempt),
			logs: make(map[uint64]*logReader)}
		h.workers[w.id] = w
	} else {
		if w.grace != nil {
			w.grace.Stop()
			w.grace = nil
		}
		if w.conn != nil { // a second stream of the same worker: the new one wins
			old = w.conn
			old.worker = nil
			oldLogs = w.takeLogsLocked(old)
		}
	}
	w.slots, w.replica, w.labels, w.host, w.pid, w.instance = hello.Slots, hello.Replica, hello.Labels, hello.Host, hello.PID, hello.Instance
	w.owner = ownerOf(hc.who)
	w.draining = hello.Draining
	w.conn, hc.worker, w.since = hc, w, now
	w.reported = make(map[model.AttemptID]struct{}, len(hello.InFlight))
	for _, id := range hello.InFlight {
		w.reported[id] = struct{}{}
	}
	hc.send(Msg{Type: TypeWelcome, Welcome: &Welcome{Leader: h.cfg.Leader, Term: h.term,
		HeartbeatMs: max(1, int(h.cfg.HeartbeatInterval/time.Millisecond)), StaleAfterMs: int(h.cfg.StaleAfter / time.Millisecond)}})
	hc.term = h.term
	if hello.Replica == "" && len(h.peers) > 0 {
		hc.send(Msg{Type: TypePeers, Peers: h.peers})
	}
	// Attempts dispatched while it was away, or sent on a stream that
	// died before the worker read them, are sent (again) now.
	redo := make([]outAttempt, 0, len(w.outstanding))
	for id, oa := range w.outstanding {
		if _, ok := w.reported[id]; !ok {
			redo = append(redo, oa)
		}
	}
	slices.SortFunc(redo, func(a, b outAttempt) int { return cmp.Compare(a.seq, b.seq) })
	for _, oa := range redo {
		a := oa.a
		hc.send(Msg{Type: TypeDispatch, Attempt: &a})
	}
	for _, id := range w.cancels {
		hc.send(Msg{Type: TypeCancel, ID: &id})
	}
	w.cancels = nil
	inflight := slices.Clone(hello.InFlight)
	h.events.push(Event{Kind: Joined, ID: w.id, Worker: w, InFlight: inflight})
	h.mu.Unlock()
	if old != nil {
		old.close()
	}
	for _, lr := range oldLogs {
		lr.fail(errDisconnected(w.id))
	}
	h.log.Info("worker joined", zap.String("worker", w.id), zap.String("replica", hello.Replica),
		zap.Int("slots", hello.Slots), zap.Stringer("labels", hello.Labels), zap.Int("in_flight", len(hello.InFlight)), zap.Bool("reconnect", reconnect),
		zap.Int("redispatched", len(redo)), zap.String("remote", hc.remote), zap.String("token", hc.who.Name))
	return true, "", ""
}

// ended cleans up after a stream: its worker, if the stream was still its
// current one, is Disconnected and gets ReconnectGrace to come back.
func (h *Hub) ended(hc *hubConn, why error) {
	hc.close()
	h.mu.Lock()
	delete(h.conns, hc)
	w := hc.worker
	if w == nil || w.conn != hc || w.left {
		h.mu.Unlock()
		return
	}
	w.conn, hc.worker, w.since = nil, nil, time.Now()
	logs := w.takeLogsLocked(hc)
	h.events.push(Event{Kind: Disconnected, ID: w.id, Worker: w})
	w.gen++
	gen := w.gen
	grace := h.cfg.ReconnectGrace
	if hc.stale.Load() && h.cfg.SilentGrace > grace {
		grace = h.cfg.SilentGrace
	}
	w.grace = time.AfterFunc(grace, func() { h.expire(w, gen) })
	h.mu.Unlock()
	for _, lr := range logs {
		lr.fail(errDisconnected(w.id))
	}
	h.log.Info("worker disconnected", zap.String("worker", w.id), zap.NamedError("reason", why),
		zap.Duration("grace", grace))
}

func (h *Hub) expire(w *RemoteWorker, gen uint64) {
	h.mu.Lock()
	if w.left || w.conn != nil || w.gen != gen {
		h.mu.Unlock()
		return
	}
	logs := h.leaveLocked(w)
	h.mu.Unlock()
	for _, lr := range logs {
		lr.fail(errDisconnected(w.id))
	}
	h.log.Info("worker left: no reconnection within the grace period", zap.String("worker", w.id))
}

// leaveLocked reports w Disconnected (if it was connected) and Left, and
// forgets it. The caller closes w's stream (it is in h.conns or already
// closing) and fails the returned log readers outside the lock.
func (h *Hub) leaveLocked(w *RemoteWorker) []*logReader {
	if w.left {
		return nil
	}
	var logs []*logReader
	if w.conn != nil {
		logs = w.takeLogsLocked(w.conn)
		w.conn.worker = nil
		w.conn = nil
		h.events.push(Event{Kind: Disconnected, ID: w.id, Worker: w})
	}
	logs = append(logs, w.takeLogsLocked(nil)...)
	if w.grace != nil {
		w.grace.Stop()
		w.grace = nil
	}
	w.left = true
	w.since = time.Now()
	if h.workers[w.id] == w {
		delete(h.workers, w.id)
	}
	w.outstanding, w.reported, w.cancels = nil, nil, nil
	h.events.push(Event{Kind: Left, ID: w.id, Worker: w})
	return logs
}

// handle processes one message from a worker that said hello. It reports
// whether the message is free of the stream's budget: a result of an
// attempt the worker holds (sent to it, or listed in its hello), or a log
// chunk within its transfer's credit. The rest (heartbeats, confirmations,
// anything a worker has no reason to send) draws on the budget.
func (h *Hub) handle(hc *hubConn, m Msg) (free bool) {
	switch m.Type {
	case TypeHeartbeat:
	case TypeResult:
		if m.Result == nil {
			return false
		}
		// A worker's result is written into a task record: its text is
		// cut to the record's bounds here, where it enters, whatever the
		// worker sent (an earlier version, or one that lies).
		r := m.Result.Bounded()
		h.mu.Lock()
		if w := hc.worker; w != nil {
			if r.Worker != w.id {
				// A stream speaks for one worker: its hello's.
				r.Worker = w.id
			}
			_, sent := w.outstanding[r.AttemptID]
			_, listed := w.reported[r.AttemptID]
			free = sent || listed
			delete(w.outstanding, r.AttemptID)
			delete(w.reported, r.AttemptID)
		}
		// Whether held or not, the scheduler judges it (and counts one
		// the worker does not hold).
		h.results.push(r)
		h.mu.Unlock()
		// No ack yet: the scheduler acks (RemoteWorker.Ack) once the
		// result is committed.
	case TypeLogChunk:
		if m.Log == nil {
			return false
		}
		h.mu.Lock()
		var lr *logReader
		if w := hc.worker; w != nil {
			lr = w.logs[m.Log.Req]
		}
		h.mu.Unlock()
		if lr != nil {
			free = lr.deliver(*m.Log)
		}
	case TypeJoined:
		h.mu.Lock()
		if w := hc.worker; w != nil && !hc.confirmed && m.Term != nil && hc.term != nil && *m.Term == *hc.term {
			hc.confirmed = true
			h.events.push(Event{Kind: Confirmed, ID: w.id, Worker: w})
		}
		h.mu.Unlock()
	case TypeDraining:
		h.mu.Lock()
		if w := hc.worker; w != nil && !w.draining {
			w.draining = true
			h.events.push(Event{Kind: Draining, ID: w.id, Worker: w})
			h.log.Info("worker draining: it takes no new attempts", zap.String("worker", w.id))
		}
		h.mu.Unlock()
	case TypeHello:
		h.log.Debug("worker sent a second hello; ignored", zap.String("remote", hc.remote))
	default:
		h.log.Debug("unknown message from worker; ignored", zap.String("type", quoteCut(m.Type)), zap.String("remote", hc.remote))
	}
	return free
}

func errDisconnected(worker string) error {
	return fmt.Errorf("workerstream: worker %s disconnected", worker)
}

// DropRevoked closes the streams whose token is no longer what it was when
// they opened (still reports it: auth.Keyring.Still): revoked, or narrowed.
// Their workers may dial again, and are judged again.
func (h *Hub) DropRevoked(still func(auth.Principal) bool) {
	h.mu.Lock()
	var drop []*hubConn
	for hc := range h.conns {
		if !still(hc.who) {
			drop = append(drop, hc)
		}
	}
	h.mu.Unlock()
	for _, hc := range drop {
		h.log.Warn("worker stream closed: its token was revoked or changed", zap.String("token", hc.who.Name), zap.String("remote", hc.remote))
		hc.close()
	}
}

// clusterOwner owns the workers that joined with the cluster token (a
// replica's own slots among them): not a name a tokens file can give.
const clusterOwner = "\x00cluster"

// ownerOf is whom a worker joined by who belongs to: only the same owner,
// or the cluster token, may take its id over.
func ownerOf(who auth.Principal) string {
	if who.Cluster {
		return clusterOwner
	}
	return who.Name
}
