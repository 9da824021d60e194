package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/apitypes"
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
	Logger       *zap.Logger
}

func (c *HTTPConfig) defaults() {
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
		sub, err := h.subscribeParam(since)
		if err != nil {
			subscribeError(w, err)
			return
		}
		defer sub.Close()
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
			// Send what is ready in one write, up to a bound.
			for n := 0; ok && n < 256 && buf.Len() < 64<<10; n++ {
				writeSSE(&buf, &ev)
				ev, ok, err = sub.Poll(ctx, 0)
				if err != nil {
					return
				}
			}
			if ok {
				writeSSE(&buf, &ev)
			}
		}
	})
}

func writeSSE(buf *bytes.Buffer, ev *Event) {
	b, err := json.Marshal(ev)
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
		sub, err := h.subscribeParam(r.URL.Query().Get("since"))
		if err != nil {
			subscribeError(w, err)
			return
		}
		defer sub.Close()
		conn, err := up.Upgrade(hijack.Writer(w), r, nil)
		if err != nil {
			return // the upgrader has answered
		}
		ServeWS(r.Context(), conn, cfg, func(ctx context.Context) ([]byte, bool, error) {
			ev, ok, err := sub.Poll(ctx, cfg.Heartbeat)
			if err != nil || !ok {
				return nil, ok, err
			}
			b, err := json.Marshal(&ev)
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
func (h *Hub) subscribeParam(since string) (*Sub, error) {
	if strings.TrimSpace(since) == "" {
		return h.SubscribeLive()
	}
	c, err := ParseCursor(since)
	if err != nil {
		return nil, err
	}
	return h.SubscribeAfter(c)
}

func subscribeError(w http.ResponseWriter, err error) {
	var ce *CursorError
	if errors.As(err, &ce) {
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, err.Error(), nil)
		return
	}
	w.Header().Set("Retry-After", "1")
	kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "the event stream is shutting down", nil)
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
