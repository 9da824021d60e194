package workerstream

import (
	"sync"
	"sync/atomic"
	"time"
)

// link is what both ends of a stream run: an unbounded send queue drained by
// one writer goroutine (so producers never block and the Conn has one
// writer), a heartbeat every interval, and a watchdog that closes the
// stream when nothing has been received for the stale timeout.
type link struct {
	c          Conn
	q          *sendQueue
	done       chan struct{}
	once       sync.Once
	lastRecv   atomic.Int64 // unix nanos
	heartbeat  atomic.Int64 // nanos
	staleAfter atomic.Int64 // nanos
	stale      atomic.Bool  // closed by the watchdog
	writeErr   atomic.Value // error: the write that failed
}

func newLink(c Conn, heartbeat, staleAfter time.Duration) *link {
	l := &link{c: c, q: newSendQueue(), done: make(chan struct{})}
	l.heartbeat.Store(int64(heartbeat))
	l.staleAfter.Store(int64(staleAfter))
	l.touch()
	return l
}

// send queues m; false once the link is closed.
func (l *link) send(m Msg) bool { return l.q.put(m) }

// touch records that something was received.
func (l *link) touch() { l.lastRecv.Store(time.Now().UnixNano()) }

// close ends the link: queued messages are dropped and Conn is closed, which
// unblocks its reader. Idempotent.
func (l *link) close() {
	l.once.Do(func() {
		l.q.close()
		close(l.done)
		_ = l.c.Close()
	})
}

// closing reports whether close was called.
func (l *link) closing() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// activityConn is a Conn that knows when it last received bytes, even of
// a message not yet complete: on a slow link a large message (a log chunk,
// an attempt with a big spec) must not look like silence.
type activityConn interface {
	LastActivity() time.Time
}

func (l *link) lastActivity() time.Time {
	last := time.Unix(0, l.lastRecv.Load())
	if ac, ok := l.c.(activityConn); ok {
		if t := ac.LastActivity(); t.After(last) {
			last = t
		}
	}
	return last
}

func (l *link) writeLoop() {
	interval := time.Duration(l.heartbeat.Load())
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// The watchdog fires when the stale timeout has passed since the last
	// thing received, not at the next heartbeat tick after it: a silent
	// peer is found up to one heartbeat sooner, and every standby finds it
	// at the same moment.
	watchdog := time.NewTimer(time.Duration(l.staleAfter.Load()))
	defer watchdog.Stop()
	var buf []Msg
	for {
		select {
		case <-l.done:
			return
		case <-l.q.wake:
		case now := <-watchdog.C:
			stale := time.Duration(l.staleAfter.Load())
			idle := now.Sub(l.lastActivity())
			if idle > stale {
				l.stale.Store(true)
				l.close()
				return
			}
			watchdog.Reset(stale - idle + time.Millisecond)
		case <-tick.C:
			if d := time.Duration(l.heartbeat.Load()); d != interval {
				interval = d
				tick.Reset(d)
			}
			l.q.put(Msg{Type: TypeHeartbeat})
		}
		buf = l.q.take(buf)
		if err := sendAll(l.c, buf); err != nil {
			l.writeErr.Store(err)
			l.close()
			return
		}
		clear(buf)
	}
}

// endReason explains why the link's reader saw err.
func (l *link) endReason(err error) error {
	if l.stale.Load() {
		return errStale(time.Duration(l.staleAfter.Load()))
	}
	if we, ok := l.writeErr.Load().(error); ok && we != nil {
		return we
	}
	return err
}

type errStale time.Duration

func (e errStale) Error() string { return "no message for " + time.Duration(e).String() }

// batchSender is a Conn that sends several messages in fewer writes
// (wsConn.SendBatch).
type batchSender interface {
	SendBatch([]Msg) error
}

// sendAll sends ms in order, as one batch when c can.
func sendAll(c Conn, ms []Msg) error {
	if b, ok := c.(batchSender); ok {
		return b.SendBatch(ms)
	}
	for i := range ms {
		if err := c.Send(ms[i]); err != nil {
			return err
		}
	}
	return nil
}
