package workerstream

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// hostname is this host's name as a hello reports it ("" if the kernel
// gives none).
var hostname, _ = os.Hostname()

// Agent defaults.
const (
	DefaultMinBackoff = 20 * time.Millisecond
	DefaultMaxBackoff = time.Second
	// logIdle ends a log transfer whose reader stopped asking for more.
	logIdle = time.Minute
)

// AgentConfig configures an Agent. Exec and Dial are required.
type AgentConfig struct {
	// Exec runs the attempts. The agent reads its Results and never closes
	// it: its owner does.
	Exec executor.Executor
	// Dial opens a stream to the current leader and names it (the name may
	// be empty if unknown; the welcome names it). It is called again after
	// every stream ends, with a jittered backoff.
	Dial func(ctx context.Context) (Conn, string, error)
	// Replica is set when the agent runs a replica's own slots (its name).
	Replica string
	// Labels are announced in every hello (--labels).
	Labels model.Labels
	// HeartbeatInterval is how often the agent sends a heartbeat
	// (DefaultHeartbeatInterval; shortened to the leader's if the welcome
	// asks for more often).
	HeartbeatInterval time.Duration
	// StaleAfter drops the stream when nothing arrived for this long
	// (DefaultStaleAfter; at least 3 leader heartbeats).
	StaleAfter time.Duration
	// OnLeaderLost is called once per stream that ends other than by a
	// not_leader redirect, a refusal or the end of Run's context, with the leader's
	// name, before redialing. It runs on the agent's loop: return quickly.
	OnLeaderLost func(leader string)
	// OnPeers is called with the leader's list of registered replicas, after
	// its welcome and whenever the list changes (HTTPDialer.SetPeers takes
	// it). It runs on the stream's reader: return quickly.
	OnPeers func([]Peer)
	// MinBackoff and MaxBackoff bound the delay between dials, which
	// doubles after each failure and is jittered (DefaultMinBackoff,
	// DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// Logger receives connection events. Nil: no logging.
	Logger *zap.Logger
}

// Agent is the worker's end: it keeps a stream to the leader, runs what it
// is dispatched on Exec, and sends the results back, none lost while the
// process lives: a result stays queued until a leader acknowledges it, and
// is sent again after every reconnection until then.
type Agent struct {
	cfg       AgentConfig
	log       *zap.Logger
	instance  string // Hello.Instance
	helloReqs chan *session
	syncReqs  chan chan int
	running   atomic.Bool

	mu      sync.Mutex
	cur     *session // the stream results go to, once it said hello
	unacked resultLog
	joined  *Term // the newest term the agent joined: it refuses older ones
}

// NewAgent returns an agent; Run starts it.
func NewAgent(cfg AgentConfig) *Agent {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Agent{cfg: cfg, log: cfg.Logger, instance: crand.Text(), helloReqs: make(chan *session), syncReqs: make(chan chan int)}
}

// dialWarnAfter is how long the leader must stay unreachable before the
// agent warns.
const dialWarnAfter = 3 * time.Second

// Run keeps the agent connected until ctx ends, then closes the stream and
// returns nil; or until a leader refuses the worker for good (a
// *RefusedError: its id, slots or labels are out of the leader's bounds,
// and would be again on every stream). It does not close Exec. Run may be
// called once at a time.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Exec == nil || a.cfg.Dial == nil {
		return errors.New("workerstream: agent needs Exec and Dial")
	}
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("workerstream: agent already running")
	}
	defer a.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.resultsLoop(ctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	worker := a.cfg.Exec.ID()
	backoff := a.cfg.MinBackoff
	var lastDialErr string
	var failingSince time.Time // zero while the leader is reachable
	for ctx.Err() == nil {
		c, leader, err := a.cfg.Dial(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			// An election or a failover takes well under a second: only a
			// leader missing for longer is worth a warning (every start of a
			// single node would otherwise log one).
			if msg := err.Error(); msg != lastDialErr && time.Since(failingSince) >= dialWarnAfter {
				lastDialErr = msg
				a.log.Warn("cannot reach the leader; retrying", zap.String("worker", worker),
					zap.Duration("for", time.Since(failingSince).Round(time.Millisecond)), zap.Error(err))
			} else {
				a.log.Debug("cannot reach the leader; retrying", zap.String("worker", worker), zap.Error(err))
			}
			backoff = a.sleep(ctx, backoff)
			continue
		}
		failingSince, lastDialErr = time.Time{}, ""
		out := a.session(ctx, c, leader)
		if ctx.Err() != nil {
			break
		}
		switch {
		case out.refusal != nil && out.refusal.Final:
			// Its id, slots or labels: the same hello would be refused
			// again by any leader of this cluster.
			err := &RefusedError{Leader: out.leader, Reason: out.refusal.Reason, Msg: out.refusal.Message}
			a.log.Error("the leader refused this worker; stopping", zap.String("worker", worker), zap.Error(err))
			return err
		case out.refusal != nil:
			// The leader is alive (it said why): nothing to suspect.
			a.log.Warn("the leader closed the stream; reconnecting", zap.String("worker", worker),
				zap.String("leader", out.leader), zap.String("reason", out.refusal.Reason), zap.String("why", out.refusal.Message))
			backoff = a.sleep(ctx, max(backoff, a.cfg.MaxBackoff/2))
		case out.stale != nil:
			a.log.Warn("refused a leader older than one this worker joined (it was deposed and does not know yet); redialing",
				zap.String("worker", worker), zap.String("leader", out.leader),
				zap.Int64("its_fence", out.stale.Fence), zap.Int64("joined_fence", out.joined.Fence))
			// It steps down within a lease's time: try again soon, so as
			// not to reach the next leader after its barrier gave up.
			backoff = a.sleep(ctx, a.cfg.MinBackoff)
		case out.redirect != nil:
			a.log.Debug("not the leader; redialing", zap.String("worker", worker),
				zap.String("leader", out.redirect.Leader), zap.String("url", out.redirect.URL))
			backoff = a.sleep(ctx, backoff)
		default:
			lastDialErr = ""
			if out.welcomed {
				a.log.Warn("lost the leader; reconnecting", zap.String("worker", worker),
					zap.String("leader", out.leader), zap.Error(out.err))
			} else {
				a.log.Warn("stream ended before the leader welcomed us; reconnecting", zap.String("worker", worker),
					zap.String("leader", out.leader), zap.Error(out.err))
			}
			if a.cfg.OnLeaderLost != nil {
				a.cfg.OnLeaderLost(out.leader)
			}
			if out.welcomed {
				backoff = a.cfg.MinBackoff // the next leader appears quickly
			}
			backoff = a.sleep(ctx, backoff)
		}
	}
	return nil
}

// sleep waits a jittered backoff (half to all of it) and returns the next.
func (a *Agent) sleep(ctx context.Context, backoff time.Duration) time.Duration {
	d := backoff/2 + rand.N(backoff/2+1)
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	return min(2*backoff, a.cfg.MaxBackoff)
}

// Drain waits until every result the executor has delivered so far has been
// acknowledged by a leader, or ctx ends. Call it before stopping Run, after
// closing the executor, to hand its last (Cancelled) results over.
func (a *Agent) Drain(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		reply := make(chan int, 1)
		select {
		case a.syncReqs <- reply:
		case <-ctx.Done():
			return ctx.Err()
		}
		if <-reply == 0 {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Leader names the leader of the current stream, if one has welcomed us.
func (a *Agent) Leader() (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil || !a.cur.welcomed.Load() {
		return "", false
	}
	return a.cur.leader, true
}

// resultsLoop is the only reader of Exec.Results. It also builds each hello
// (so that no result is in its hands, unaccounted, while the hello lists
// the attempts in flight) and answers Drain.
func (a *Agent) resultsLoop(ctx context.Context) {
	results := a.cfg.Exec.Results()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-results:
			a.addResult(r)
		case s := <-a.helloReqs:
			a.hello(s, results)
		case reply := <-a.syncReqs:
			a.drainResults(results)
			a.mu.Lock()
			reply <- a.unacked.len()
			a.mu.Unlock()
		}
	}
}

func (a *Agent) drainResults(results <-chan model.Result) {
	for {
		select {
		case r := <-results:
			a.addResult(r)
		default:
			return
		}
	}
}

func (a *Agent) addResult(r model.Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unacked.add(r)
	if a.cur != nil {
		a.cur.send(Msg{Type: TypeResult, Result: &r})
	}
}

// hello queues the hello and every unacknowledged result on s, in order,
// and makes s the stream new results go to.
func (a *Agent) hello(s *session, results <-chan model.Result) {
	// In this order: an attempt that finishes after InFlight is read has
	// its result in the channel, or already taken, by the time it is
	// drained.
	running := a.cfg.Exec.InFlight()
	a.drainResults(results)
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[model.AttemptID]struct{}, len(running)+a.unacked.len())
	inflight := make([]model.AttemptID, 0, len(running)+a.unacked.len())
	for _, id := range running {
		if _, dup := seen[id]; !dup {
			seen[id] = struct{}{}
			inflight = append(inflight, id)
		}
	}
	a.unacked.each(func(r model.Result) {
		if _, dup := seen[r.AttemptID]; !dup {
			seen[r.AttemptID] = struct{}{}
			inflight = append(inflight, r.AttemptID)
		}
	})
	s.send(Msg{Type: TypeHello, Hello: &Hello{Worker: a.cfg.Exec.ID(), Slots: a.cfg.Exec.Slots(), InFlight: inflight,
		Replica: a.cfg.Replica, Version: ProtocolVersion, Labels: a.cfg.Labels, Host: hostname, PID: os.Getpid(), Instance: a.instance}})
	a.unacked.each(func(r model.Result) {
		s.send(Msg{Type: TypeResult, Result: &r})
	})
	a.cur = s
}

// ack forgets a result the leader has committed (or found moot). Until then
// it stays queued and goes to every leader the agent connects to, however
// long that takes: an ack means durable, not received.
func (a *Agent) ack(id model.AttemptID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unacked.ack(id)
}

// welcome records the leader that answered the hello, unless its term is
// older than one the agent joined: that leader was deposed, and whatever it
// sends could run beside what its successor dispatches. It returns false
// then. A welcome with a term is answered with joined.
func (a *Agent) welcome(s *session, w *Welcome) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.Leader != "" {
		s.leader = w.Leader
	}
	if t := w.Term; t != nil {
		if a.joined != nil && t.Older(*a.joined) {
			s.stale, s.joinedThen = t, a.joined
			return false
		}
		a.joined = t
		s.send(Msg{Type: TypeJoined, Term: t})
	}
	s.welcomed.Store(true)
	return true
}

// Joined returns the newest term the agent joined, if any.
func (a *Agent) Joined() (Term, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.joined == nil {
		return Term{}, false
	}
	return *a.joined, true
}

// session is one stream on the agent.
type session struct {
	*link
	a        *Agent
	leader   string // guarded by a.mu
	welcomed atomic.Bool
	// stale is the term of a welcome refused as older than joinedThen,
	// the term joined then; guarded by a.mu.
	stale, joinedThen *Term

	lmu  sync.Mutex
	logs map[uint64]*logServe
}

type outcome struct {
	leader   string
	welcomed bool
	redirect *Redirect
	refusal  *Refusal // the leader closed the stream, saying why
	err      error
	// stale: the leader's term is older than joined, one the agent joined.
	stale, joined *Term
}

func (a *Agent) session(ctx context.Context, c Conn, leader string) outcome {
	s := &session{link: newLink(c, a.cfg.HeartbeatInterval, a.cfg.StaleAfter), a: a, leader: leader,
		logs: make(map[uint64]*logServe)}
	select {
	case a.helloReqs <- s:
	case <-ctx.Done():
		s.close()
		return outcome{leader: leader, err: ctx.Err()}
	}
	go s.writeLoop()
	stop := context.AfterFunc(ctx, s.close)
	defer stop()
	out := outcome{}
	for {
		m, err := c.Recv()
		if err != nil {
			out.err = s.endReason(err)
			break
		}
		s.touch()
		if m.Type == TypeNotLeader {
			out.redirect = m.Redirect
			if out.redirect == nil {
				out.redirect = &Redirect{}
			}
			break
		}
		if m.Type == TypeRefused {
			out.refusal = m.Refusal
			if out.refusal == nil {
				out.refusal = &Refusal{}
			}
			break
		}
		s.handle(m)
	}
	s.close()
	a.mu.Lock()
	if a.cur == s {
		a.cur = nil
	}
	out.leader = s.leader
	out.stale, out.joined = s.stale, s.joinedThen
	a.mu.Unlock()
	out.welcomed = s.welcomed.Load()
	return out
}

func (s *session) handle(m Msg) {
	a := s.a
	if s.closing() {
		// Refused (or ending): nothing of it counts, an ack of a result
		// it judged moot least of all.
		return
	}
	switch m.Type {
	case TypeHeartbeat:
	case TypeWelcome:
		if m.Welcome == nil {
			return
		}
		if hb := time.Duration(m.Welcome.HeartbeatMs) * time.Millisecond; hb > 0 {
			if hb < time.Duration(s.heartbeat.Load()) {
				s.heartbeat.Store(int64(hb))
			}
			s.staleAfter.Store(int64(max(a.cfg.StaleAfter, 3*hb)))
		}
		if !a.welcome(s, m.Welcome) {
			s.close() // the session ends; Run redials
			return
		}
		a.log.Info("connected to the leader", zap.String("worker", a.cfg.Exec.ID()), zap.String("leader", m.Welcome.Leader))
	case TypeDispatch:
		if m.Attempt != nil {
			a.cfg.Exec.Start(*m.Attempt)
		}
	case TypeCancel:
		if m.ID != nil {
			a.cfg.Exec.Cancel(*m.ID)
		}
	case TypeAck:
		if m.ID != nil {
			a.ack(*m.ID)
		}
	case TypeLogRequest:
		if m.LogReq != nil {
			s.logRequest(*m.LogReq)
		}
	case TypePeers:
		if a.cfg.OnPeers != nil {
			a.cfg.OnPeers(m.Peers)
		}
	default:
		a.log.Debug("unknown message from the leader; ignored", zap.String("type", m.Type))
	}
}

// logServe is the worker's end of one log transfer.
type logServe struct {
	credit int  // guarded by session.lmu
	closed bool // guarded by session.lmu
	wake   chan struct{}
}

func (s *session) logRequest(lr LogRequest) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if ls := s.logs[lr.Req]; ls != nil {
		if lr.Close {
			ls.closed = true
		}
		ls.credit += max(lr.Credit, 0)
		select {
		case ls.wake <- struct{}{}:
		default:
		}
		return
	}
	if lr.Close {
		return // already over
	}
	ls := &logServe{credit: max(lr.Credit, 1), wake: make(chan struct{}, 1)}
	s.logs[lr.Req] = ls
	go s.serveLog(lr.Req, lr.ID, ls)
}

// serveLog streams one log in chunks, no more than the leader's credit
// ahead of its reader.
func (s *session) serveLog(req uint64, id model.AttemptID, ls *logServe) {
	defer func() {
		s.lmu.Lock()
		delete(s.logs, req)
		s.lmu.Unlock()
	}()
	rc, err := s.a.cfg.Exec.OpenLog(id)
	if err != nil {
		s.send(Msg{Type: TypeLogChunk, Log: &LogChunk{Req: req, EOF: true, Err: err.Error(),
			NotExist: errors.Is(err, os.ErrNotExist)}})
		return
	}
	defer rc.Close()
	idle := time.NewTimer(logIdle)
	defer idle.Stop()
	for {
		s.lmu.Lock()
		credit, closed := ls.credit, ls.closed
		if credit > 0 {
			ls.credit--
		}
		s.lmu.Unlock()
		if closed {
			return
		}
		if credit == 0 {
			select {
			case <-ls.wake:
				idle.Reset(logIdle)
				continue
			case <-s.done:
				return
			case <-idle.C:
				return
			}
		}
		buf := make([]byte, MaxChunk)
		n, err := io.ReadFull(rc, buf)
		c := &LogChunk{Req: req, Data: buf[:n:n]}
		switch {
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			c.EOF = true
		case err != nil:
			c.EOF, c.Err = true, fmt.Sprintf("reading the log of %s: %v", id, err)
		}
		if !s.send(Msg{Type: TypeLogChunk, Log: c}) || c.EOF {
			return
		}
	}
}
