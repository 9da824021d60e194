package guard

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// fakeListener hands out the connections it is given, as if accepted.
type fakeListener struct {
	conns chan net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// remoteConn is one end of a pipe that claims a remote address.
type remoteConn struct {
	net.Conn
	remote net.Addr
	closed *atomic.Int32
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }
func (c remoteConn) Close() error         { c.closed.Add(1); return c.Conn.Close() }

func TestLimitPerClient(t *testing.T) {
	fl := &fakeListener{conns: make(chan net.Conn, 16)}
	var refused, closed atomic.Int32
	ln := LimitPerClient(fl, 2, func() { refused.Add(1) })
	conn := func(ip string) remoteConn {
		a, _ := net.Pipe()
		return remoteConn{Conn: a, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}, closed: &closed}
	}
	accept := func() net.Conn {
		t.Helper()
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := ln.Accept(); ch <- res{c, err} }()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.c
		case <-time.After(5 * time.Second):
			t.Fatal("Accept did not return")
			return nil
		}
	}
	a1, a2 := conn("203.0.113.9"), conn("203.0.113.9")
	fl.conns <- a1
	fl.conns <- a2
	c1, c2 := accept(), accept()
	// The third from the same address is closed at once; the next
	// connection, from elsewhere, is the one Accept returns.
	fl.conns <- conn("203.0.113.9")
	fl.conns <- conn("198.51.100.1")
	other := accept()
	if other.RemoteAddr().String() != "198.51.100.1:4000" || refused.Load() != 1 || closed.Load() != 1 {
		t.Fatalf("got %s, refused %d, closed %d; want the other client, 1 refused and closed", other.RemoteAddr(), refused.Load(), closed.Load())
	}
	// Closing one (twice: net/http and a websocket library may both) frees
	// exactly one slot.
	_ = c1.Close()
	_ = c1.Close()
	fl.conns <- conn("203.0.113.9")
	c3 := accept()
	if p := ln.(*perClient).Open("203.0.113.9"); p != 2 {
		t.Fatalf("open = %d, want 2", p)
	}
	// Loopback clients are never limited.
	for i := 0; i < 5; i++ {
		fl.conns <- conn("127.0.0.1")
		accept()
	}
	if refused.Load() != 1 {
		t.Fatalf("refused %d, want 1 (loopback is not limited)", refused.Load())
	}
	_, _, _ = c2, c3, other
}
