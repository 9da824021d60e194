package workerstream

import (
	"io"
	"net"
	"sync"
)

// PipeBuffer is how many messages each direction of a Pipe holds before Send
// blocks.
const PipeBuffer = 1024

// Pipe returns the two ends of an in-process stream: what one end sends the
// other receives. Messages are passed as Msg values, never serialized, so
// the pointers in them are shared: a sender must not modify a message (nor
// the byte slice of a log chunk) after sending it. Closing one end makes the
// other's Recv return io.EOF after the messages already sent, and its Send
// fail.
//
// A replica whose own slots connect to its own leader engine uses it:
//
//	worker, leader := workerstream.Pipe()
//	hub.Accept(leader)
//	return worker, self, nil // from the agent's Dial
func Pipe() (Conn, Conn) {
	ab := make(chan Msg, PipeBuffer)
	ba := make(chan Msg, PipeBuffer)
	a := &pipeEnd{in: ba, out: ab, done: make(chan struct{})}
	b := &pipeEnd{in: ab, out: ba, done: make(chan struct{})}
	a.peer, b.peer = b, a
	return a, b
}

type pipeEnd struct {
	in, out chan Msg
	peer    *pipeEnd
	done    chan struct{} // closed by Close
	once    sync.Once
}

func (p *pipeEnd) Send(m Msg) error {
	select {
	case <-p.done:
		return net.ErrClosed
	case <-p.peer.done:
		return io.ErrClosedPipe
	default:
	}
	select {
	case p.out <- m:
		return nil
	case <-p.done:
		return net.ErrClosed
	case <-p.peer.done:
		return io.ErrClosedPipe
	}
}

func (p *pipeEnd) Recv() (Msg, error) {
	select {
	case <-p.done:
		return Msg{}, net.ErrClosed
	default:
	}
	select {
	case m := <-p.in:
		return m, nil
	case <-p.done:
		return Msg{}, net.ErrClosed
	case <-p.peer.done:
		// Deliver what the peer sent before it closed, then EOF.
		select {
		case m := <-p.in:
			return m, nil
		default:
			return Msg{}, io.EOF
		}
	}
}

func (p *pipeEnd) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}
