package events

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Subscribe follows the stream after revision since: every buffered event of
// a later revision, then live ones. A negative since means live events only,
// from now on. See SubscribeAfter.
func (h *Hub) Subscribe(since int64, opts ...SubscribeOption) (*Sub, error) {
	if since < 0 {
		return h.SubscribeLive(opts...)
	}
	return h.SubscribeAfter(RevCursor(since), opts...)
}

// SubscribeLive follows only the events published from now on.
func (h *Hub) SubscribeLive(opts ...SubscribeOption) (*Sub, error) {
	return h.subscribe(opts, func(s *Sub) {
		s.pos, s.floor, s.lastCur = h.next, h.last, h.last
	})
}

// SubscribeAfter follows the stream after cursor c. If the hub no longer has
// every event after c, the subscriber first gets a resync event and then
// live events from the current head.
func (h *Hub) SubscribeAfter(c Cursor, opts ...SubscribeOption) (*Sub, error) {
	return h.subscribe(opts, func(s *Sub) {
		s.floor, s.lastCur = c, c
		if h.baseKnown && c.Less(h.base) {
			s.resync = &Event{Type: TypeResync, Rev: h.last.Rev, Since: c.String(), idx: h.last.Idx}
			s.pos, s.lastCur = h.next, h.last
			return
		}
		size := uint64(len(h.ring))
		n := int(h.next - h.first)
		i := sort.Search(n, func(i int) bool { return c.Less(h.ring[(h.first+uint64(i))%size].Cursor()) })
		s.pos = h.first + uint64(i)
	})
}

func (h *Hub) subscribe(opts []SubscribeOption, init func(s *Sub)) (*Sub, error) {
	var o subscribeOptions
	for _, opt := range opts {
		opt(&o)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if err := h.admitLocked(o.client); err != nil {
		if h.cfg.Refused != nil {
			h.cfg.Refused.WithLabelValues(err.Limit).Inc()
		}
		return nil, err
	}
	s := &Sub{
		h:      h,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		client: o.client,
		waitAt: -1,
	}
	init(s)
	if h.lastLeader != nil {
		s.putControl(h.lastLeader)
	}
	if h.lastMetrics != nil {
		s.putControl(h.lastMetrics)
	}
	h.subs[s] = struct{}{}
	if s.client != "" {
		h.byClient[s.client]++
	}
	return s, nil
}

// SubscribeOption qualifies a subscription.
type SubscribeOption func(*subscribeOptions)

type subscribeOptions struct{ client string }

// As names the client that subscribes (guard.AddrKey of its address),
// which the per-client limit counts. Without it a subscription counts
// only towards the limit in all.
func As(client string) SubscribeOption {
	return func(o *subscribeOptions) { o.client = client }
}

// Limit names, as the config keys that set them.
const (
	LimitTotal     = "max_event_subscribers"
	LimitPerClient = "max_event_subscribers_per_client"
)

// LimitError refuses a subscription over a limit: Limit names it (its
// config key) and Max is its value. The stream endpoints answer it 503
// for LimitTotal (the replica serves all it may, whoever asks) and 429 for
// LimitPerClient (this client holds its share), with Retry-After.
type LimitError struct {
	Limit  string
	Max    int
	Client string // LimitPerClient: the client key
}

func (e *LimitError) Error() string {
	if e.Limit == LimitPerClient {
		return fmt.Sprintf("client %s already holds %d event streams, the most one client may open (%s); close one, or retry later",
			e.Client, e.Max, LimitPerClient)
	}
	return fmt.Sprintf("this replica already serves %d event streams, the most it serves at once (%s); retry later, or follow another replica",
		e.Max, LimitTotal)
}

// admitLocked checks the limits for one more subscription of client.
func (h *Hub) admitLocked(client string) *LimitError {
	if max := h.cfg.MaxSubscribers; max > 0 && len(h.subs) >= max {
		return &LimitError{Limit: LimitTotal, Max: max}
	}
	if max := h.cfg.MaxSubscribersPerClient; max > 0 && client != "" && h.byClient[client] >= max {
		return &LimitError{Limit: LimitPerClient, Max: max, Client: client}
	}
	return nil
}

// Sub is one subscription. Its methods must be called from one goroutine,
// except Dropped, Done and Close.
type Sub struct {
	h         *Hub
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	client    string // the client key the per-client limit counts ("": none)
	dropped   atomic.Int64

	// Read and written by the reader while it shares h.mu, and by the hub
	// (subscribe, Reset) while it holds h.mu exclusively.
	pos     uint64 // next sequence number to read from the ring
	floor   Cursor // only events after it are delivered
	lastCur Cursor // the last event copied out (or the point of a resync)
	resync  *Event // a resync to deliver next (a reset, or a cursor too old)

	waitAt int // index in h.waiting, or -1; guarded by h.waitMu

	// Control events (metrics, leader, system) waiting: written by the hub
	// with h.mu held exclusively and cmu, taken by the reader with cmu.
	cmu     sync.Mutex
	control []*Event
	hasCtl  atomic.Bool

	// Owned by the reader.
	buf   []Event
	bufAt int
	timer *time.Timer
}

// signal wakes the reader if it waits.
func (s *Sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// putControl queues a non-log event: only the latest metrics and leader
// events are kept, and a bounded number of system events. h.mu is held
// exclusively.
func (s *Sub) putControl(e *Event) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	defer s.signal()
	s.hasCtl.Store(true)
	for i, c := range s.control {
		if c.Type == e.Type && (e.Type == TypeMetrics || e.Type == TypeLeader) {
			s.control[i] = e
			return
		}
	}
	if len(s.control) >= maxControl {
		copy(s.control, s.control[1:])
		s.control = s.control[:len(s.control)-1]
	}
	s.control = append(s.control, e)
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
		if s.hasCtl.Load() {
			if ev, ok := s.popControl(); ok {
				return ev, true, nil
			}
		}
		if got := s.fill(&ev, timeout != 0); got {
			return s.deliver(ev), true, nil
		}
		if s.bufAt < len(s.buf) {
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
		// fill put this subscriber on the waiting list: the next event,
		// control event, reset or close signals it.
		select {
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

// fill copies the next batch of events out of the ring into s.buf, or
// returns a resync in *ev (got). With nothing new and wait set, it puts the
// subscriber on the hub's waiting list before it lets go of the ring.
func (s *Sub) fill(ev *Event, wait bool) (got bool) {
	h := s.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	if s.resync != nil {
		*ev = *s.resync
		ev.Time = time.Now().UTC()
		s.resync = nil
		return true
	}
	if s.pos < h.first {
		// The ring moved past this subscriber: what it missed is gone.
		missed := h.first - s.pos
		s.dropped.Add(int64(missed))
		h.countDropped(missed)
		*ev = Event{Type: TypeResync, Time: time.Now().UTC(), Rev: h.last.Rev, Since: s.lastCur.String(), idx: h.last.Idx}
		s.pos, s.lastCur = h.next, h.last
		if s.floor.Less(h.last) {
			s.floor = h.last
		}
		return true
	}
	size := uint64(len(h.ring))
	s.buf, s.bufAt = s.buf[:0], 0
	for s.pos < h.next && len(s.buf) < batch {
		e := &h.ring[s.pos%size]
		s.pos++
		if cur := e.Cursor(); s.floor.Less(cur) {
			s.buf = append(s.buf, *e)
			s.lastCur = cur
		}
	}
	if len(s.buf) == 0 && s.pos == h.next && wait {
		h.waitMu.Lock()
		if s.waitAt < 0 {
			s.waitAt = len(h.waiting)
			h.waiting = append(h.waiting, s)
		}
		h.waitMu.Unlock()
	}
	return false
}

// Linger waits up to d for more events to follow the one just taken, so
// that a stream sends them in one write: a subscriber woken for every event
// would cost a wake-up and a write (a syscall) per event and per
// subscriber. It returns at once when the subscriber is behind (more is
// already waiting in the ring), and early when ctx or the subscription
// ends or a control event comes.
func (s *Sub) Linger(ctx context.Context, d time.Duration) {
	if d <= 0 || s.bufAt < len(s.buf) {
		return
	}
	h := s.h
	h.mu.RLock()
	behind := s.pos < h.next || s.resync != nil
	h.mu.RUnlock()
	if behind {
		return
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	defer s.timer.Stop()
	select {
	case <-s.timer.C:
	case <-s.wake:
		// A control event, a reset or a close: Poll looks at everything
		// again, so the wake-up taken here is not lost.
	case <-ctx.Done():
	case <-s.done:
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
	s.cmu.Lock()
	defer s.cmu.Unlock()
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

// Dropped returns how many events this subscriber missed because the ring
// had moved past it.
func (s *Sub) Dropped() int64 { return s.dropped.Load() }

// Done is closed when the subscription is closed.
func (s *Sub) Done() <-chan struct{} { return s.done }

// Close ends the subscription.
func (s *Sub) Close() {
	h := s.h
	h.mu.Lock()
	if _, open := h.subs[s]; open {
		delete(h.subs, s)
		if s.client != "" {
			if h.byClient[s.client]--; h.byClient[s.client] <= 0 {
				delete(h.byClient, s.client)
			}
		}
	}
	h.mu.Unlock()
	h.waitMu.Lock()
	if i := s.waitAt; i >= 0 && i < len(h.waiting) && h.waiting[i] == s {
		last := len(h.waiting) - 1
		h.waiting[i] = h.waiting[last]
		h.waiting[i].waitAt = i
		h.waiting[last] = nil
		h.waiting = h.waiting[:last]
		s.waitAt = -1
	}
	h.waitMu.Unlock()
	s.closeOnce.Do(func() { close(s.done) })
}
