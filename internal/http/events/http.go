package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/hijack"
	"github.com/orion-sched/orion/internal/http/kit"
)

// Paths of the stream endpoints.
const (
	SSEPath = "/api/v1/events"
	WSPath  = "/api/v1/events/ws"
)

// HTTPConfig configures the stream endpoints.
type HTTPConfig struct {
	Origins      kit.Origins
	Heartbeat    time.Duration // SSE comment / WebSocket ping interval (default 15s)
	WriteTimeout time.Duration // a write that takes longer ends the stream (default 10s)
	// SendBuffer fixes the kernel send buffer of a stream's socket
	// (default DefaultSendBuffer; reached through hijack.ConnContext for
	// SSE). See DefaultSendBuffer.
	SendBuffer int
	// Linger is how long a stream waits after an event for more to send
	// with it (default DefaultLinger; see Sub.Linger).
	Linger time.Duration
	Logger *zap.Logger
	// Allowed, when set, is asked between writes whether the stream's
	// request may still be served (its token not revoked since); a stream
	// no longer allowed ends, within a heartbeat.
	Allowed func(ctx context.Context) bool
}

// DefaultLinger is the delay an event stream adds to an event at most, so
// that a burst goes out in one write per subscriber rather than one per
// event: under 1,000 events a second each subscriber writes at most 50
// times a second.
const DefaultLinger = 20 * time.Millisecond

// DefaultSendBuffer is the kernel send buffer of an event stream's socket
// (the kernel doubles it). Left to autotuning, a loopback peer that never
// reads absorbs megabytes before a write blocks, and every event written
// until then costs this process a copy and a syscall: a thousand such
// streams took both cores and the leader's lease. Fixed, a stream that
// stops reading blocks once this buffer and the peer's receive buffer
// (128 KiB by default) are full, about 400 events, and costs nothing
// more; one that reads still gets 640 KiB/s (1,500 events/s) across a
// 100 ms round trip, and far more nearer.
const DefaultSendBuffer = 32 << 10

// maxWrite bounds the bytes an event stream sends in one write: what a
// stream holds of its own while a write is blocked.
const maxWrite = 16 << 10

func (c *HTTPConfig) defaults() {
	if c.SendBuffer <= 0 {
		c.SendBuffer = DefaultSendBuffer
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Routes returns the stream endpoints keyed by ServeMux pattern, for
// api.Config.Routes. The patterns carry no method so that CORS preflights
// reach them; other methods get a JSON 405.
func (h *Hub) Routes(cfg HTTPConfig) map[string]http.Handler {
	return map[string]http.Handler{SSEPath: h.SSEHandler(cfg), WSPath: h.WSHandler(cfg)}
}

// SSEHandler serves GET /api/v1/events?since=CURSOR as Server-Sent Events.
func (h *Hub) SSEHandler(cfg HTTPConfig) http.Handler {
	cfg.defaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.Origins.Check(w, r, "GET") {
			return
		}
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		since := r.Header.Get("Last-Event-ID") // the browser's resume wins
		if since == "" {
			since = r.URL.Query().Get("since")
		}
		sub, err := h.subscribeParam(since, As(guard.AddrKey(r.RemoteAddr)))
		if err != nil {
			subscribeError(w, err)
			return
		}
		defer sub.Close()
		_ = hijack.SetSendBuffer(hijack.Conn(r), cfg.SendBuffer)
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		// A stream outlives the server's request read timeout, which would
		// otherwise end it (net/http cancels the request when its background
		// read times out); each write sets its own deadline below.
		if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
		var buf bytes.Buffer
		buf.WriteString("retry: 1000\n: orion events\n\n")
		ctx := r.Context()
		for {
			if cfg.Allowed != nil && !cfg.Allowed(ctx) {
				return
			}
			if err := flushSSE(w, rc, &buf, cfg.WriteTimeout); err != nil {
				cfg.Logger.Debug("event stream write failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
				return
			}
			ev, ok, err := sub.Poll(ctx, cfg.Heartbeat)
			if err != nil {
				return
			}
			if !ok {
				buf.WriteString(": heartbeat\n\n")
				continue
			}
			sub.Linger(ctx, cfg.Linger)
			// Send what is ready in one write, up to a bound.
			for n := 0; ok && n < 256 && buf.Len() < maxWrite; n++ {
				h.writeSSE(&buf, &ev)
				ev, ok, err = sub.Poll(ctx, 0)
				if err != nil {
					return
				}
			}
			if ok {
				h.writeSSE(&buf, &ev)
			}
		}
	})
}

func (h *Hub) writeSSE(buf *bytes.Buffer, ev *Event) {
	b, err := h.Encode(ev)
	if err != nil {
		return
	}
	if ev.ID != "" {
		buf.WriteString("id: ")
		buf.WriteString(ev.ID)
		buf.WriteByte('\n')
	}
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
}

func flushSSE(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer, timeout time.Duration) error {
	if buf.Len() == 0 {
		return nil
	}
	if err := rc.SetWriteDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := w.Write(buf.Bytes())
	buf.Reset()
	if err != nil {
		return err
	}
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// WSHandler serves GET /api/v1/events/ws?since=CURSOR: a WebSocket carrying
// one JSON event per text message. Messages from the client are ignored.
func (h *Hub) WSHandler(cfg HTTPConfig) http.Handler {
	cfg.defaults()
	up := Upgrader(cfg.Origins)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.Origins.Check(w, r, "GET") {
			return
		}
		if r.Method != http.MethodGet {
			methodNotAllowed(w, "GET")
			return
		}
		sub, err := h.subscribeParam(r.URL.Query().Get("since"), As(guard.AddrKey(r.RemoteAddr)))
		if err != nil {
			subscribeError(w, err)
			return
		}
		defer sub.Close()
		conn, err := up.Upgrade(hijack.Writer(w), r, nil)
		if err != nil {
			return // the upgrader has answered
		}
		_ = hijack.SetSendBuffer(conn.UnderlyingConn(), cfg.SendBuffer)
		ServeWS(r.Context(), conn, cfg, func(ctx context.Context) ([]byte, bool, error) {
			ev, ok, err := sub.Poll(ctx, cfg.Heartbeat)
			if err != nil || !ok {
				return nil, ok, err
			}
			b, err := h.Encode(&ev)
			return b, true, err
		})
	})
}

// ServeWS runs a WebSocket until the peer goes or ctx ends: next yields the
// messages to send (ok false: nothing within a heartbeat, so a ping is sent
// instead); the peer's messages are read and dropped. It closes conn.
func ServeWS(ctx context.Context, conn *websocket.Conn, cfg HTTPConfig, next func(ctx context.Context) (msg []byte, ok bool, err error)) {
	cfg.defaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer conn.Close()
	conn.SetReadLimit(4096)
	go func() {
		defer cancel()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	for {
		if cfg.Allowed != nil && !cfg.Allowed(ctx) {
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "token revoked"), time.Now().Add(time.Second))
			return
		}
		msg, ok, err := next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				_ = conn.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseGoingAway, "stream closed"), time.Now().Add(time.Second))
			}
			return
		}
		if !ok {
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.WriteTimeout)); err != nil {
				return
			}
			continue
		}
		_ = conn.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			cfg.Logger.Debug("websocket write failed", zap.Error(err))
			return
		}
	}
}

// subscribeParam subscribes from a since value: empty means live only.
func (h *Hub) subscribeParam(since string, opts ...SubscribeOption) (*Sub, error) {
	if strings.TrimSpace(since) == "" {
		return h.SubscribeLive(opts...)
	}
	c, err := ParseCursor(since)
	if err != nil {
		return nil, err
	}
	return h.SubscribeAfter(c, opts...)
}

// LimitRetryAfter is the Retry-After, in seconds, of a subscription refused
// by a limit: a stream's slot frees only when another ends, so sooner
// would only be refused again.
const LimitRetryAfter = 5

// subscribeError answers a refused subscription in the API's error shape:
// 400 for a bad cursor; for a limit (LimitError) 429 when it is the
// client's own share, 503 when the replica serves all it may, both with
// Retry-After and the limit named; 503 when the hub is closing.
func subscribeError(w http.ResponseWriter, err error) {
	var (
		ce *CursorError
		le *LimitError
	)
	switch {
	case errors.As(err, &ce):
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, err.Error(), nil)
	case errors.As(err, &le):
		status := http.StatusServiceUnavailable
		if le.Limit == LimitPerClient {
			status = http.StatusTooManyRequests
		}
		w.Header().Set("Retry-After", strconv.Itoa(LimitRetryAfter))
		kit.WriteError(w, status, apitypes.CodeTooManyStreams, le.Error(),
			[]string{fmt.Sprintf("limit: %s = %d", le.Limit, le.Max)})
	default:
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "the event stream is shutting down", nil)
	}
}

// methodNotAllowed answers 405 in the API's error shape.
func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow+", OPTIONS")
	kit.WriteError(w, http.StatusMethodNotAllowed, apitypes.CodeMethodNotAllowed, "method not allowed; allowed: "+allow, nil)
}

// Upgrader returns a WebSocket upgrader that applies the origin policy.
func Upgrader(o kit.Origins) *websocket.Upgrader {
	return &websocket.Upgrader{
		ReadBufferSize:  1024,
		WriteBufferSize: 16 << 10,
		CheckOrigin:     o.Allowed,
	}
}
