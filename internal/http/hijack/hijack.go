// Package hijack lets a handler reach its connection under HTTP
// middleware. gorilla/websocket asserts http.Hijacker on the ResponseWriter
// it is given, while middleware (metrics, logging) wraps that writer; the
// event stream and the worker stream both upgrade under such wrappers. A
// stream that is not upgraded (Server-Sent Events) reaches its socket
// through the request's context instead (ConnContext).
package hijack

import (
	"context"
	"net"
	"net/http"
)

// Writer returns the first ResponseWriter that can be hijacked, following
// wrappers that expose Unwrap (as http.ResponseController expects), or w
// itself when none can.
func Writer(w http.ResponseWriter) http.ResponseWriter {
	for cur := w; ; {
		if _, ok := cur.(http.Hijacker); ok {
			return cur
		}
		u, ok := cur.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		cur = u.Unwrap()
	}
}

type connKey struct{}

// ConnContext is an http.Server.ConnContext: it keeps each connection in
// the context of its requests, where Conn finds it.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Conn returns the connection r arrived on, or nil when the server was not
// given ConnContext.
func Conn(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}

// SetSendBuffer sets the kernel send buffer (SO_SNDBUF) of c's socket,
// looking through wrappers that expose NetConn (as tls.Conn does). It
// fixes the size, which turns the kernel's autotuning off: a peer that
// stops reading then holds at most that much of this process's output
// before its writes block. It does nothing for other connections (a pipe
// in tests).
func SetSendBuffer(c net.Conn, bytes int) error {
	for c != nil {
		if s, ok := c.(interface{ SetWriteBuffer(int) error }); ok {
			return s.SetWriteBuffer(bytes)
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}
