package hijack

import (
	"net"
	"syscall"
	"testing"
)

// wrapped hides a connection's type, as a per-client counting listener's
// connections do, and exposes it through NetConn.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestSetSendBufferReachesTheSocketThroughWrappers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:])
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 32 << 10
	if err := SetSendBuffer(wrapped{c}, size); err != nil {
		t.Fatal(err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	_ = raw.Control(func(fd uintptr) { got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
	// Linux doubles the value set, for its bookkeeping; autotuning would
	// otherwise have left the default (16 KiB, growing to megabytes).
	if got != 2*size {
		t.Fatalf("SO_SNDBUF = %d, want %d", got, 2*size)
	}
	// A connection without a socket (a pipe) is left alone.
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if err := SetSendBuffer(p1, size); err != nil {
		t.Fatal(err)
	}
}
