package workerstream

import "sync"

// outlet feeds a buffered channel without ever blocking the producer: when
// the channel is full, values wait in an unbounded FIFO that a goroutine
// (alive only while there is a backlog) moves into the channel in order.
type outlet[T any] struct {
	ch   chan T
	done <-chan struct{} // ends the backlog goroutine; what is left is dropped

	mu      sync.Mutex
	backlog []T
	head    int
	pumping bool // the backlog goroutine runs (and may hold one value)
}

func newOutlet[T any](size int, done <-chan struct{}) *outlet[T] {
	return &outlet[T]{ch: make(chan T, size), done: done}
}

func (o *outlet[T]) push(v T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.pumping {
		select {
		case o.ch <- v:
			return
		default:
		}
		o.pumping = true
		go o.pump()
	}
	o.backlog = append(o.backlog, v)
}

func (o *outlet[T]) pump() {
	var zero T
	for {
		o.mu.Lock()
		if o.head == len(o.backlog) {
			o.backlog, o.head, o.pumping = nil, 0, false
			o.mu.Unlock()
			return
		}
		v := o.backlog[o.head]
		o.backlog[o.head] = zero
		o.head++
		o.mu.Unlock()
		select {
		case o.ch <- v:
		case <-o.done:
			o.mu.Lock()
			o.backlog, o.head, o.pumping = nil, 0, false
			o.mu.Unlock()
			return
		}
	}
}

// sendQueue is a connection's unbounded outgoing queue: producers never
// block; the connection's writer takes everything queued at once.
type sendQueue struct {
	mu     sync.Mutex
	msgs   []Msg
	closed bool
	wake   chan struct{} // 1-buffered: something was queued
}

func newSendQueue() *sendQueue { return &sendQueue{wake: make(chan struct{}, 1)} }

// put queues m; false if the queue is closed (m is dropped).
func (q *sendQueue) put(m Msg) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// take returns everything queued, reusing buf's storage.
func (q *sendQueue) take(buf []Msg) []Msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	buf = append(buf[:0], q.msgs...)
	clear(q.msgs)
	q.msgs = q.msgs[:0]
	if cap(q.msgs) > 4096 {
		q.msgs = nil
	}
	return buf
}

func (q *sendQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.msgs = nil
	q.mu.Unlock()
}
