package workerstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/segmentio/encoding/json"

	"github.com/orion-sched/orion/internal/jsonguard"
)

// Defaults of the websocket transport.
const (
	// DefaultWriteTimeout bounds one websocket write: a peer that stops
	// reading has its stream closed after it rather than blocking a writer.
	DefaultWriteTimeout = 2 * time.Second
	// MaxMessageBytes is the largest message accepted (an attempt carries
	// its task spec, which the API bounds at 1 MiB per DAG).
	MaxMessageBytes = 8 << 20
)

// NewWebsocketConn wraps an established websocket as a Conn. Each Send is
// one text frame holding one JSON Msg, written under a mutex (gorilla allows
// one writer at a time) with a write deadline of writeTimeout (<= 0:
// DefaultWriteTimeout). Close sends a close frame (best effort) and closes
// the connection, which unblocks a pending Recv.
func NewWebsocketConn(ws *websocket.Conn, writeTimeout time.Duration) Conn {
	if writeTimeout <= 0 {
		writeTimeout = DefaultWriteTimeout
	}
	ws.SetReadLimit(MaxMessageBytes)
	return &wsConn{ws: ws, writeTimeout: writeTimeout}
}

type wsConn struct {
	ws           *websocket.Conn
	writeTimeout time.Duration
	wmu          sync.Mutex
	once         sync.Once
	lastRead     atomic.Int64 // unix nanos of the last bytes read
	// rbuf holds one message while Recv decodes it, kept between calls
	// (Recv has one caller at a time, and the decoder copies what it keeps)
	// so that a stream of results does not allocate a buffer per message.
	rbuf bytes.Buffer
}

// maxKeptReadBuffer bounds the read buffer kept between messages: a rare
// large message (an attempt with a big spec) is not held for the stream's
// life.
const maxKeptReadBuffer = 64 << 10

// LastActivity is when bytes last arrived (see activityConn).
func (c *wsConn) LastActivity() time.Time { return time.Unix(0, c.lastRead.Load()) }

// activityReader notes the time of every read that returns bytes.
type activityReader struct {
	r io.Reader
	c *wsConn
}

func (a activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

// SendBatch sends ms in order, one frame each, gathered into as few write
// system calls as corkConn allows; without one (wss://, whose frames go
// through TLS first) each frame is a write.
func (c *wsConn) SendBatch(ms []Msg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	cork, _ := c.ws.NetConn().(*corkConn)
	if len(ms) < 2 {
		cork = nil // one frame is one write anyway
	}
	if cork != nil {
		cork.hold()
	}
	// Frames are encoded with segmentio/encoding/json (as the store's
	// records are: see store.marshal) into one buffer that WriteMessage
	// copies from.
	var b []byte
	for _, m := range ms {
		var err error
		b, err = json.Append(b[:0], m, json.SortMapKeys)
		if err == nil {
			_ = c.ws.SetWriteDeadline(time.Now().Add(c.writeTimeout))
			err = c.ws.WriteMessage(websocket.TextMessage, b)
		} else {
			err = fmt.Errorf("workerstream: encode %s: %w", m.Type, err)
		}
		if err != nil {
			if cork != nil {
				_ = cork.flush() // the frames before it still go
			}
			return err
		}
		if cork != nil && cork.buffered() >= corkFlushAt {
			if err := cork.flush(); err != nil {
				return err
			}
			cork.hold()
		}
	}
	if cork != nil {
		return cork.flush()
	}
	return nil
}

func (c *wsConn) Send(m Msg) error { return c.SendBatch([]Msg{m}) }

func (c *wsConn) Recv() (Msg, error) {
	t, r, err := c.ws.NextReader()
	if c.rbuf.Cap() > maxKeptReadBuffer {
		c.rbuf = bytes.Buffer{}
	}
	c.rbuf.Reset()
	if err == nil {
		_, err = c.rbuf.ReadFrom(activityReader{r: r, c: c})
	}
	b := c.rbuf.Bytes()
	if err != nil {
		if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
			return Msg{}, io.EOF
		}
		return Msg{}, err
	}
	if t != websocket.TextMessage {
		// The protocol is JSON text frames. Skipping others would
		// let a peer send them without end, unseen by any limit.
		return Msg{}, fmt.Errorf("workerstream: bad message: a binary frame (%d bytes); the protocol sends text frames", len(b))
	}
	// The decoder recurses without a limit: a frame of nested brackets
	// would overflow the stack (see jsonguard).
	if !jsonguard.Shallow(b, jsonguard.MaxDepth) {
		return Msg{}, fmt.Errorf("workerstream: bad message: nested more than %d levels deep", jsonguard.MaxDepth)
	}
	var m Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return Msg{}, fmt.Errorf("workerstream: bad message: %w", err)
	}
	return m, nil
}

func (c *wsConn) Close() error {
	var err error
	c.once.Do(func() {
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(100*time.Millisecond))
		err = c.ws.Close()
	})
	return err
}

// HTTPStatusError is a websocket handshake answered with something other
// than 101 Switching Protocols.
type HTTPStatusError struct {
	URL    string
	Status int
	Body   string
}

func (e *HTTPStatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.URL, e.Status)
	if e.Status == http.StatusUnauthorized {
		msg += " (missing or wrong token)"
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// DialWebsocket opens a worker stream to url (ws:// or wss://), sending
// token as a bearer token when non-empty. dialer nil: a dialer with a 5 s
// handshake timeout that honours the proxy environment.
func DialWebsocket(ctx context.Context, url, token string, dialer *websocket.Dialer) (Conn, error) {
	if dialer == nil {
		dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 5 * time.Second}
	}
	corked := *dialer // a plain ws:// stream gathers its frames (corkConn)
	corked.NetDialContext = corkDial(dialer.NetDialContext)
	dialer = &corked
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := dialer.DialContext(ctx, url, h)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close()
			return nil, &HTTPStatusError{URL: url, Status: resp.StatusCode, Body: string(body)}
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	return NewWebsocketConn(ws, 0), nil
}
