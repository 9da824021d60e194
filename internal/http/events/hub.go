package events

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orion-sched/orion/internal/core"
)

// Defaults for zero Config fields.
const (
	DefaultRingSize         = 10000
	DefaultMetricsInterval  = time.Second
	DefaultThroughputWindow = 10 * time.Second
	// DefaultMaxSubscribers bounds the subscriptions of a hub in all, and
	// DefaultMaxSubscribersPerClient those of one client address (loopback
	// included: every local process shares 127.0.0.1). A subscription
	// holds a batch of at most 64 events (22 KiB), a write of at most
	// 16 KiB and its socket's send buffer (64 KiB: HTTPConfig.SendBuffer,
	// doubled by the kernel), so 512 cost at most about 50 MiB; a browser
	// holds at most 6 connections per origin, and the flood drill's 300
	// streams come from 4 addresses.
	DefaultMaxSubscribers          = 512
	DefaultMaxSubscribersPerClient = 128
)

// batch bounds the events a subscriber copies out of the ring per lock, and
// so what it holds of its own.
const batch = 64

// maxControl bounds the system events waiting for one subscriber.
const maxControl = 16

// ErrClosed is returned by Sub.Next once the subscription or the hub is
// closed.
var ErrClosed = errors.New("events: subscription closed")

// Config configures a Hub; every field is optional.
type Config struct {
	RingSize int // events kept for resuming and for subscribers to read (default 10000)
	// Dropped counts the events subscribers missed because they read so
	// slowly that the ring moved past them (metrics.DroppedEvents).
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
	// MaxSubscribers bounds the open subscriptions (default
	// DefaultMaxSubscribers), MaxSubscribersPerClient those of one client
	// (default DefaultMaxSubscribersPerClient); see LimitError. A negative
	// value removes the bound.
	MaxSubscribers          int
	MaxSubscribersPerClient int
	// Refused, if set, counts subscriptions refused by a limit, labelled
	// by the limit's config key (metrics.SubscribersRefused).
	Refused *prometheus.CounterVec
}

// Hub buffers the applied log's events in a ring and lets subscribers read
// it. Publish is called on the scheduler's loop: it copies the event into
// the ring and wakes the subscribers that wait for one, and nothing else,
// so its cost does not grow with the subscribers that are busy, slow, or
// stopped reading. Each subscriber reads the ring at its own position, in
// batches; one that falls so far behind that the ring has moved past its
// position is told with a resync event and goes on from the head, while
// the hub counts the events it missed.
type Hub struct {
	cfg     Config
	dropped atomic.Int64
	// enc caches each log event's JSON by ring position, so that a
	// thousand subscribers send one encoding rather than encode it a
	// thousand times each (see Encode). It has its own synchronisation:
	// encoding never holds mu.
	enc []atomic.Pointer[encoded]

	// mu guards the ring and the subscriber set. Publish, Reset and
	// (un)subscribing take it exclusively; a subscriber copying events
	// out of the ring shares it, and then touches only its own Sub.
	mu        sync.RWMutex
	ring      []Event
	first     uint64 // sequence number of the oldest event in the ring
	next      uint64 // sequence number the next event gets
	last      Cursor // cursor of the latest event (or of the last reset)
	base      Cursor // every event after base is in the ring
	baseKnown bool
	subs      map[*Sub]struct{}
	byClient  map[string]int // open subscriptions per client key
	totals    Totals
	closed    bool
	// The latest metrics and leader events, given to new subscribers.
	lastMetrics *Event
	lastLeader  *Event
	leaderSeen  bool
	leader      string

	// waiting lists the subscribers that have read everything and wait for
	// the next event; Publish wakes them and empties it. Subscribers add
	// themselves while they share mu, so waitMu orders them; Publish holds
	// mu exclusively, so no subscriber can find nothing new and miss the
	// wake-up.
	waitMu  sync.Mutex
	waiting []*Sub
}

// NewHub returns an empty hub. Call Reset with the revision of the state the
// scheduler loaded (every time it loads one) so the hub knows what it may
// replay.
func NewHub(cfg Config) *Hub {
	if cfg.RingSize <= 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.MetricsInterval <= 0 {
		cfg.MetricsInterval = DefaultMetricsInterval
	}
	if cfg.ThroughputWindow <= 0 {
		cfg.ThroughputWindow = DefaultThroughputWindow
	}
	if cfg.MaxSubscribers == 0 {
		cfg.MaxSubscribers = DefaultMaxSubscribers
	}
	if cfg.MaxSubscribersPerClient == 0 {
		cfg.MaxSubscribersPerClient = DefaultMaxSubscribersPerClient
	}
	return &Hub{cfg: cfg, ring: make([]Event, cfg.RingSize), enc: make([]atomic.Pointer[encoded], cfg.RingSize),
		subs: make(map[*Sub]struct{}), byClient: make(map[string]int)}
}

// Observe publishes an applied entry: pass it as engine.Config.Observer.
func (h *Hub) Observe(e *core.Entry) { h.Publish(FromEntry(e)) }

// Publish adds an event. Log events (Rev > 0) must come in the order applied;
// they enter the ring, where every subscriber reads them. Other events
// (metrics, leader, system) go only to current subscribers, latest first.
// It never blocks on a subscriber, and does not allocate for log events.
func (h *Hub) Publish(ev Event) {
	if ev.Rev <= 0 {
		h.publishControl(ev)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
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
	ev.seq = seq + 1
	h.ring[seq%size] = ev
	h.next++
	h.totals.count(&ev)
	h.wakeWaiting()
}

// wakeWaiting wakes the subscribers waiting for an event. h.mu is held
// exclusively.
func (h *Hub) wakeWaiting() {
	h.waitMu.Lock()
	for i, s := range h.waiting {
		s.waitAt = -1
		s.signal()
		h.waiting[i] = nil
	}
	h.waiting = h.waiting[:0]
	h.waitMu.Unlock()
}

func (h *Hub) countDropped(n uint64) {
	h.dropped.Add(int64(n))
	if h.cfg.Dropped != nil {
		h.cfg.Dropped.Add(float64(n))
	}
}

// Dropped returns how many events subscribers missed because the ring had
// moved past them (each subscriber's misses counted).
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Subscribers returns the number of open subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs)
}

// Totals returns what this hub has counted since it started.
func (h *Hub) Totals() Totals {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.totals
}

// LatestMetrics returns the last metrics snapshot published, or nil.
func (h *Hub) LatestMetrics() *Metrics {
	h.mu.RLock()
	defer h.mu.RUnlock()
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

// resetLocked empties the ring and tells every subscriber that has not
// seen everything through at to resync there. h.mu is held exclusively.
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
		// What the subscriber already copied out is delivered first, then
		// the resync.
		s.resync = &Event{Type: TypeResync, Rev: at.Rev, Since: have.String(), idx: at.Idx}
		s.pos = h.next
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
			h.mu.RLock()
			m.Totals = h.totals
			m.Subscribers = len(h.subs)
			h.mu.RUnlock()
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

// encoded is a log event's JSON, cached by Encode.
type encoded struct {
	seq uint64
	b   []byte
}

// Encode returns the JSON of an event a subscription delivered. A log
// event's encoding is made once and shared by every subscriber that sends
// it (the first to ask encodes it, off the scheduler's loop): the bytes
// must not be modified. Other events are encoded each time.
func (h *Hub) Encode(ev *Event) ([]byte, error) {
	if ev.seq == 0 {
		return json.Marshal(ev)
	}
	slot := &h.enc[(ev.seq-1)%uint64(len(h.enc))]
	if e := slot.Load(); e != nil && e.seq == ev.seq {
		return e.b, nil
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	// Two subscribers may encode the same event at once: the same bytes,
	// whichever is kept. A slot only ever moves on to a later event.
	e := &encoded{seq: ev.seq, b: b}
	for {
		old := slot.Load()
		if (old != nil && old.seq >= ev.seq) || slot.CompareAndSwap(old, e) {
			return b, nil
		}
	}
}

// Close ends every subscription; later publishes are ignored.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = map[*Sub]struct{}{}
	clear(h.byClient)
	h.mu.Unlock()
	h.waitMu.Lock()
	clear(h.waiting)
	h.waiting = h.waiting[:0]
	h.waitMu.Unlock()
	for s := range subs {
		s.closeOnce.Do(func() { close(s.done) })
	}
}
