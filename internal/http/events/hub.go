package events

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orion-sched/orion/internal/core"
)

// Defaults for zero Config fields.
const (
	DefaultRingSize = 10000
	// DefaultQueueSize bounds what one subscriber holds of its own: an
	// Event is 352 bytes, so 256 queued cost 90 KiB per stream that does
	// not read (1024 cost 360 KiB: 300 such streams held 106 MiB of the
	// leader's heap in the flood drill). A subscriber that falls further
	// behind goes on from the ring, which all share.
	DefaultQueueSize        = 256
	DefaultMetricsInterval  = time.Second
	DefaultThroughputWindow = 10 * time.Second
)

// batch bounds the events a catching-up subscriber copies out of the ring
// per lock.
const batch = 128

// maxControl bounds the system events waiting for one subscriber.
const maxControl = 16

// ErrClosed is returned by Sub.Next once the subscription or the hub is
// closed.
var ErrClosed = errors.New("events: subscription closed")

// Config configures a Hub; every field is optional.
type Config struct {
	RingSize  int // events kept for resuming (default 10000)
	QueueSize int // live events queued per subscriber (default 256)
	// Dropped counts events that could not be queued for a subscriber
	// (metrics.DroppedEvents).
	Dropped prometheus.Counter
	// Node names this replica in leader and system events.
	Node string
	// Snapshot fills a metrics event's fields the hub cannot know (see
	// Metrics); Run calls it every MetricsInterval, off the scheduler's
	// loop. It should return quickly. Its Leader, when LeaderKnown and
	// changed, also produces a leader event.
	Snapshot         func(m *Metrics)
	MetricsInterval  time.Duration // default 1s
	ThroughputWindow time.Duration // default 10s
}

// Hub buffers the applied log's events and fans them out. Publish is called
// on the scheduler's loop: it copies the event into a ring and offers it to
// each live subscriber's bounded queue without ever waiting. A subscriber
// that falls behind by more than its queue is marked: it is told with a gap
// event and continues from the ring at its own pace (or with a resync if
// the ring has moved past it), while the hub counts the events it could not
// queue.
type Hub struct {
	cfg     Config
	dropped atomic.Int64

	mu        sync.Mutex
	ring      []Event
	first     uint64 // sequence number of the oldest event in the ring
	next      uint64 // sequence number the next event gets
	last      Cursor // cursor of the latest event (or of the last reset)
	base      Cursor // every event after base is in the ring
	baseKnown bool
	subs      map[*Sub]struct{}
	totals    Totals
	closed    bool
	// The latest metrics and leader events, given to new subscribers.
	lastMetrics *Event
	lastLeader  *Event
	leaderSeen  bool
	leader      string
}

// NewHub returns an empty hub. Call Reset with the revision of the state the
// scheduler loaded (every time it loads one) so the hub knows what it may
// replay.
func NewHub(cfg Config) *Hub {
	if cfg.RingSize <= 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.MetricsInterval <= 0 {
		cfg.MetricsInterval = DefaultMetricsInterval
	}
	if cfg.ThroughputWindow <= 0 {
		cfg.ThroughputWindow = DefaultThroughputWindow
	}
	return &Hub{cfg: cfg, ring: make([]Event, cfg.RingSize), subs: make(map[*Sub]struct{})}
}

// Observe publishes an applied entry: pass it as engine.Config.Observer.
func (h *Hub) Observe(e *core.Entry) { h.Publish(FromEntry(e)) }

// Publish adds an event. Log events (Rev > 0) must come in the order applied;
// they enter the ring and every live subscriber's queue. Other events
// (metrics, leader, system) go only to current subscribers, latest first.
// It never blocks and does not allocate for log events.
func (h *Hub) Publish(ev Event) {
	if ev.Rev <= 0 {
		h.publishControl(ev)
		return
	}
	var dropped int
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	if ev.Rev == h.last.Rev && h.last.Idx != All {
		ev.idx = h.last.Idx + 1
	} else {
		ev.idx = 1
	}
	cur := ev.Cursor()
	if h.baseKnown && !h.last.Less(cur) {
		// Out of order: only a reset reported after the entries it covers
		// can cause it. Start afresh before this revision rather than
		// break the order subscribers rely on.
		h.resetLocked(RevCursor(ev.Rev - 1))
		ev.idx = 1
		cur = ev.Cursor()
	}
	if !h.baseKnown {
		// No reset yet: everything after the revision before this first
		// event is known to be here.
		h.base, h.baseKnown = RevCursor(ev.Rev-1), true
	}
	h.last = cur
	size := uint64(len(h.ring))
	if h.next-h.first == size {
		h.base = h.ring[h.first%size].Cursor()
		h.ring[h.first%size] = Event{} // let go of what it references
		h.first++
	}
	seq := h.next
	h.ring[seq%size] = ev
	h.next++
	h.totals.count(&ev)
	for s := range h.subs {
		switch s.mode {
		case modeLive:
			if !s.floor.Less(cur) {
				continue
			}
			select {
			case s.ch <- ev:
				s.lastCur = cur
			default:
				// Queue full: this and what follows are not queued live.
				s.mode = modeDraining
				s.marker = Event{Type: TypeGap, Since: s.lastCur.String()}
				s.resume = seq
				s.lagging = true
				s.dropped++
				dropped++
				s.signal()
			}
		default:
			if s.lagging {
				s.dropped++
				dropped++
			}
		}
	}
	h.mu.Unlock()
	if dropped > 0 {
		h.countDropped(dropped)
	}
}

func (h *Hub) countDropped(n int) {
	h.dropped.Add(int64(n))
	if h.cfg.Dropped != nil {
		h.cfg.Dropped.Add(float64(n))
	}
}

// Dropped returns how many events could not be queued for a subscriber.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Subscribers returns the number of open subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Totals returns what this hub has counted since it started.
func (h *Hub) Totals() Totals {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.totals
}

// LatestMetrics returns the last metrics snapshot published, or nil.
func (h *Hub) LatestMetrics() *Metrics {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastMetrics == nil {
		return nil
	}
	return h.lastMetrics.Metrics
}

// Reset tells the hub that the scheduler (re)loaded its state from etcd at
// revision rev, without applying the entries in between one by one: at
// start, after falling behind etcd's compaction, after a commit of unknown
// outcome, and when a crashed engine is replaced. Subscribers that may have
// missed something get a resync; the ring starts afresh. Safe to call on the
// scheduler's loop.
func (h *Hub) Reset(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := RevCursor(rev)
	if h.baseKnown && h.last.Rev >= rev {
		// Nothing can have been missed: the hub has seen revision rev (the
		// scheduler applies a transaction's entries together).
		return
	}
	h.resetLocked(at)
}

func (h *Hub) resetLocked(at Cursor) {
	size := uint64(len(h.ring))
	for seq := h.first; seq < h.next; seq++ {
		h.ring[seq%size] = Event{}
	}
	h.first = h.next
	h.base, h.baseKnown, h.last = at, true, at
	for s := range h.subs {
		have := s.lastCur
		if have.Less(s.floor) {
			have = s.floor
		}
		if !have.Less(at) {
			continue
		}
		s.mode = modeDraining
		s.marker = Event{Type: TypeResync, Rev: at.Rev, Since: have.String(), idx: at.Idx}
		s.resume = h.next
		s.lastCur = at
		s.signal()
	}
}

// NoteLeader records who leads ("" for nobody) and publishes a leader event
// if that changed. Run calls it with each snapshot's Leader; it may also be
// called from engine.Config.OnLeading for a faster report.
func (h *Hub) NoteLeader(leader string) {
	h.mu.Lock()
	changed := !h.leaderSeen || h.leader != leader
	h.leaderSeen, h.leader = true, leader
	h.mu.Unlock()
	if changed {
		l := leader
		h.Publish(Event{Type: TypeLeader, Time: time.Now().UTC(), Node: h.cfg.Node, Leader: &l})
	}
}

// PublishSystem publishes a system event such as "crash" or "recover".
func (h *Hub) PublishSystem(event string, meta map[string]string) {
	h.Publish(Event{Type: TypeSystem, Time: time.Now().UTC(), Node: h.cfg.Node, Event: event, Meta: meta})
}

func (h *Hub) publishControl(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	e := ev
	switch ev.Type {
	case TypeMetrics:
		h.lastMetrics = &e
	case TypeLeader:
		h.lastLeader = &e
	}
	for s := range h.subs {
		s.putControl(&e)
	}
}

// Run publishes a metrics event every MetricsInterval, and leader events
// when the snapshot's leader changes, until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	t := time.NewTicker(h.cfg.MetricsInterval)
	defer t.Stop()
	type sample struct {
		at       time.Time
		finished int64
	}
	var samples []sample
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var m Metrics
			if h.cfg.Snapshot != nil {
				h.cfg.Snapshot(&m)
			}
			h.mu.Lock()
			m.Totals = h.totals
			m.Subscribers = len(h.subs)
			h.mu.Unlock()
			m.DroppedEvents = h.dropped.Load()
			finished := m.Totals.Succeeded + m.Totals.Failed
			samples = append(samples, sample{now, finished})
			for len(samples) > 2 && now.Sub(samples[1].at) >= h.cfg.ThroughputWindow {
				samples = samples[1:]
			}
			if dt := now.Sub(samples[0].at).Seconds(); dt > 0 {
				m.Throughput = float64(finished-samples[0].finished) / dt
				m.ThroughputWindow = dt
			}
			if m.Tasks == nil {
				m.Tasks = map[string]int{}
			}
			if m.Workers == nil {
				m.Workers = []WorkerLoad{}
			}
			if m.Node == "" {
				m.Node = h.cfg.Node
			}
			h.Publish(Event{Type: TypeMetrics, Time: now.UTC(), Metrics: &m})
			if m.LeaderKnown {
				h.NoteLeader(m.Leader)
			}
		}
	}
}

// Close ends every subscription; later publishes are ignored.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = map[*Sub]struct{}{}
	h.mu.Unlock()
	for s := range subs {
		s.closeOnce.Do(func() { close(s.done) })
	}
}

// Subscribe follows the stream after revision since: every buffered event of
// a later revision, then live ones. A negative since means live events only,
// from now on. See SubscribeAfter.
func (h *Hub) Subscribe(since int64) (*Sub, error) {
	if since < 0 {
		return h.SubscribeLive()
	}
	return h.SubscribeAfter(RevCursor(since))
}

// SubscribeLive follows only the events published from now on.
func (h *Hub) SubscribeLive() (*Sub, error) {
	return h.subscribe(func(s *Sub) {
		s.mode, s.floor, s.lastCur = modeLive, h.last, h.last
	})
}

// SubscribeAfter follows the stream after cursor c. If the hub no longer has
// every event after c, the subscriber first gets a resync event and then
// live events from the current head.
func (h *Hub) SubscribeAfter(c Cursor) (*Sub, error) {
	return h.subscribe(func(s *Sub) {
		s.floor, s.lastCur = c, c
		if h.baseKnown && c.Less(h.base) {
			s.mode = modeDraining
			s.marker = Event{Type: TypeResync, Rev: h.last.Rev, Since: c.String(), idx: h.last.Idx}
			s.resume = h.next
			s.lastCur = h.last
			return
		}
		size := uint64(len(h.ring))
		n := int(h.next - h.first)
		i := sort.Search(n, func(i int) bool { return c.Less(h.ring[(h.first+uint64(i))%size].Cursor()) })
		s.pos = h.first + uint64(i)
		if s.pos == h.next {
			s.mode = modeLive
		} else {
			s.mode = modeCatchup
		}
	})
}

func (h *Hub) subscribe(init func(s *Sub)) (*Sub, error) {
	s := &Sub{
		h:    h,
		ch:   make(chan Event, h.cfg.QueueSize),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	init(s)
	if h.lastLeader != nil {
		s.putControl(h.lastLeader)
	}
	if h.lastMetrics != nil {
		s.putControl(h.lastMetrics)
	}
	h.subs[s] = struct{}{}
	return s, nil
}

// Subscriber modes.
const (
	modeLive     = iota // Publish queues events in ch
	modeDraining        // ch is read to its end, then marker, then catch-up from resume
	modeCatchup         // events are read from the ring at pos
)

// Sub is one subscription. Its methods must be called from one goroutine.
type Sub struct {
	h         *Hub
	ch        chan Event
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// Guarded by h.mu.
	mode    int
	pos     uint64 // modeCatchup: next sequence number to read
	marker  Event  // modeDraining: the gap or resync to deliver
	resume  uint64 // modeDraining: where the catch-up starts
	lagging bool   // overflowed; cleared once caught up
	lastCur Cursor // the last event queued or handed out
	floor   Cursor // only events after it are delivered
	dropped int64
	control []*Event // metrics, leader and system events waiting
	hasCtl  atomic.Bool

	// Owned by the reader.
	buf   []Event
	bufAt int
	timer *time.Timer
}

// signal wakes the reader if it waits. Called with h.mu held or not.
func (s *Sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// putControl queues a non-log event: only the latest metrics and leader
// events are kept, and a bounded number of system events. h.mu is held.
func (s *Sub) putControl(e *Event) {
	for i, c := range s.control {
		if c.Type == e.Type && (e.Type == TypeMetrics || e.Type == TypeLeader) {
			s.control[i] = e
			s.hasCtl.Store(true)
			s.signal()
			return
		}
	}
	if len(s.control) >= maxControl {
		copy(s.control, s.control[1:])
		s.control = s.control[:len(s.control)-1]
	}
	s.control = append(s.control, e)
	s.hasCtl.Store(true)
	s.signal()
}

// Next waits for the next event. It returns ErrClosed once the subscription
// is closed, or ctx's error.
func (s *Sub) Next(ctx context.Context) (Event, error) {
	ev, _, err := s.Poll(ctx, -1)
	return ev, err
}

// Poll returns the next event, waiting at most timeout for one (forever if
// timeout < 0; not at all if 0). ok is false when none came in time.
func (s *Sub) Poll(ctx context.Context, timeout time.Duration) (ev Event, ok bool, err error) {
	var timerC <-chan time.Time
	for {
		if s.bufAt < len(s.buf) {
			ev = s.buf[s.bufAt]
			s.buf[s.bufAt] = Event{}
			s.bufAt++
			return s.deliver(ev), true, nil
		}
		select {
		case ev = <-s.ch:
			return s.deliver(ev), true, nil
		default:
		}
		if s.hasCtl.Load() {
			if ev, ok := s.popControl(); ok {
				return ev, true, nil
			}
		}
		got, progressed := s.step(&ev)
		if got {
			return s.deliver(ev), true, nil
		}
		if progressed {
			continue
		}
		select {
		case <-s.done:
			return Event{}, false, ErrClosed
		default:
		}
		if timeout == 0 {
			return Event{}, false, nil
		}
		if timeout > 0 && timerC == nil {
			if s.timer == nil {
				s.timer = time.NewTimer(timeout)
			} else {
				s.timer.Reset(timeout)
			}
			timerC = s.timer.C
			defer s.timer.Stop()
		}
		select {
		case ev = <-s.ch:
			return s.deliver(ev), true, nil
		case <-s.wake:
		case <-timerC:
			return Event{}, false, nil
		case <-ctx.Done():
			return Event{}, false, ctx.Err()
		case <-s.done:
			return Event{}, false, ErrClosed
		}
	}
}

// deliver sets the cursor a client sends back.
func (s *Sub) deliver(ev Event) Event {
	if ev.Rev > 0 || ev.Type == TypeResync {
		c := ev.Cursor()
		if c.Idx == 0 {
			c.Idx = All
		}
		ev.ID = c.String()
	}
	return ev
}

func (s *Sub) popControl() (Event, bool) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(s.control) == 0 {
		s.hasCtl.Store(false)
		return Event{}, false
	}
	e := s.control[0]
	s.control[0] = nil
	s.control = s.control[1:]
	if len(s.control) == 0 {
		s.control = nil
		s.hasCtl.Store(false)
	}
	return *e, true
}

// step advances a subscriber that is not live: it delivers the marker once
// the queue is drained and copies the next batch from the ring. got reports
// an event in *ev; progressed that the caller should look again.
func (s *Sub) step(ev *Event) (got, progressed bool) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	switch s.mode {
	case modeDraining:
		if len(s.ch) > 0 {
			return false, true
		}
		*ev = s.marker
		ev.Time = time.Now().UTC()
		if ev.Type == TypeGap {
			ev.Dropped = s.dropped
		}
		s.marker = Event{}
		s.mode, s.pos = modeCatchup, s.resume
		return true, false
	case modeCatchup:
		size := uint64(len(h.ring))
		if s.pos < h.first {
			// The ring moved past this subscriber: what it missed is gone.
			*ev = Event{Type: TypeResync, Time: time.Now().UTC(), Rev: h.last.Rev, Since: s.lastCur.String(), idx: h.last.Idx}
			s.pos, s.lastCur = h.next, h.last
			if s.floor.Less(h.last) {
				s.floor = h.last
			}
			s.mode, s.lagging = modeLive, false
			return true, false
		}
		s.buf, s.bufAt = s.buf[:0], 0
		for s.pos < h.next && len(s.buf) < batch {
			e := h.ring[s.pos%size]
			s.pos++
			if cur := e.Cursor(); s.floor.Less(cur) {
				s.buf = append(s.buf, e)
				s.lastCur = cur
			}
		}
		if s.pos == h.next {
			s.mode, s.lagging = modeLive, false
		}
		return false, true
	}
	return false, false
}

// Dropped returns how many events this subscriber could not be sent live.
func (s *Sub) Dropped() int64 {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.dropped
}

// Done is closed when the subscription is closed.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Close ends the subscription.
func (s *Sub) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
	s.closeOnce.Do(func() { close(s.done) })
}
