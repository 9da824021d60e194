package events

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/kit"
)

type sseMsg struct {
	id   string
	data string
}

// sseClient reads an SSE response, frame by frame.
type sseClient struct {
	resp     *http.Response
	r        *bufio.Reader
	comments int
}

func dialSSE(t *testing.T, url, lastID string) *sseClient {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sseClient{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next frame with data, counting comment frames.
func (c *sseClient) next(t *testing.T) (sseMsg, Event) {
	t.Helper()
	var m sseMsg
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if m.data != "" {
				var ev Event
				if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
					t.Fatalf("bad JSON %q: %v", m.data, err)
				}
				return m, ev
			}
		case strings.HasPrefix(line, ":"):
			c.comments++
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			m.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

func (c *sseClient) nextLog(t *testing.T) (sseMsg, Event) {
	t.Helper()
	for {
		m, ev := c.next(t)
		if ev.Type == TypeMetrics || ev.Type == TypeLeader {
			continue
		}
		return m, ev
	}
}

func TestSSEEndToEnd(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(0)
	srv := httptest.NewServer(h.SSEHandler(HTTPConfig{Heartbeat: 30 * time.Millisecond}))
	defer srv.Close()
	for _, ev := range []Event{taskEvent(1, "a"), taskEvent(1, "b"), taskEvent(2, "c")} {
		h.Publish(ev)
	}

	c := dialSSE(t, srv.URL+"?since=0", "")
	m, ev := c.nextLog(t)
	if m.id != "1:1" || ev.ID != "1:1" || ev.Task != "a" || ev.Type != TypeTask {
		t.Fatalf("first frame id=%q %+v", m.id, ev)
	}
	m, _ = c.nextLog(t)
	if m.id != "1:2" {
		t.Fatalf("second frame id=%q", m.id)
	}
	c.resp.Body.Close() // drop mid-stream, as a browser losing its connection

	h.Publish(taskEvent(3, "d"))
	// EventSource reconnects to the same URL with Last-Event-ID: it wins.
	c2 := dialSSE(t, srv.URL+"?since=0", m.id)
	defer c2.resp.Body.Close()
	var got []string
	for len(got) < 2 {
		m, ev := c2.nextLog(t)
		got = append(got, ev.Task+"@"+m.id)
	}
	if strings.Join(got, " ") != "c@2:1 d@3:1" {
		t.Fatalf("resumed with %v", got)
	}
	h.Publish(taskEvent(4, "e"))
	if _, ev := c2.nextLog(t); ev.Task != "e" {
		t.Fatalf("live: %+v", ev)
	}
	// Heartbeats flow while idle.
	done := make(chan struct{})
	go func() {
		time.Sleep(100 * time.Millisecond)
		h.Publish(taskEvent(5, "f"))
		close(done)
	}()
	c2.nextLog(t)
	<-done
	if c2.comments < 2 {
		t.Fatalf("saw %d comment lines, want the greeting and heartbeats", c2.comments)
	}

	// A too-old cursor yields a resync frame carrying the id to go on from.
	small := NewHub(Config{RingSize: 2})
	small.Reset(0)
	for i := int64(1); i <= 5; i++ {
		small.Publish(taskEvent(i, "x"))
	}
	srv2 := httptest.NewServer(small.SSEHandler(HTTPConfig{}))
	defer srv2.Close()
	c3 := dialSSE(t, srv2.URL+"?since=1", "")
	defer c3.resp.Body.Close()
	if m, ev := c3.nextLog(t); ev.Type != TypeResync || m.id != "5:1" || ev.Since != "1" {
		t.Fatalf("resync frame id=%q %+v", m.id, ev)
	}
}

func TestSSEBadSince(t *testing.T) {
	h := NewHub(Config{})
	srv := httptest.NewServer(h.SSEHandler(HTTPConfig{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "?since=abc")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "bad_request" {
		t.Fatalf("status %d body %+v", resp.StatusCode, body)
	}
}

func TestWebSocketEndToEnd(t *testing.T) {
	h := NewHub(Config{})
	h.Reset(10)
	srv := httptest.NewServer(h.WSHandler(HTTPConfig{Heartbeat: 20 * time.Millisecond}))
	defer srv.Close()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")
	h.Publish(taskEvent(11, "a"))
	h.Publish(taskEvent(11, "b"))

	read := func(conn *websocket.Conn) Event {
		t.Helper()
		for {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			var ev Event
			if err := conn.ReadJSON(&ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == TypeMetrics || ev.Type == TypeLeader {
				continue
			}
			return ev
		}
	}
	conn, _, err := websocket.DefaultDialer.Dial(wsURL+"?since=10", nil)
	if err != nil {
		t.Fatal(err)
	}
	pings := make(chan struct{}, 100)
	conn.SetPingHandler(func(string) error { pings <- struct{}{}; return nil })
	a := read(conn)
	if a.Task != "a" || a.ID != "11:1" {
		t.Fatalf("first: %+v", a)
	}
	conn.Close()

	h.Publish(taskEvent(12, "c"))
	conn2, _, err := websocket.DefaultDialer.Dial(wsURL+"?since="+a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	pings2 := make(chan struct{}, 100)
	conn2.SetPingHandler(func(string) error { pings2 <- struct{}{}; return nil })
	if b, c := read(conn2), read(conn2); b.ID != "11:2" || c.ID != "12:1" {
		t.Fatalf("resumed with %s, %s", b.ID, c.ID)
	}
	go func() { // the ping handler runs inside reads
		for {
			if _, _, err := conn2.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case <-pings2:
	case <-time.After(5 * time.Second):
		t.Fatal("no ping while idle")
	}
	// The handler's subscription goes when the client does.
	conn2.Close()
	deadline := time.Now().Add(5 * time.Second)
	for h.Subscribers() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := h.Subscribers(); n != 0 {
		t.Fatalf("%d subscriptions left after clients went", n)
	}
}

func TestOriginPolicy(t *testing.T) {
	h := NewHub(Config{})
	// orion.example is a configured name; rebind.example is a name whose
	// page rebound itself to this server: its Origin equals its Host, which
	// proves nothing.
	handler := h.SSEHandler(HTTPConfig{Origins: kit.Origins{Hosts: guard.NewHosts("orion.example")}})
	do := func(method, host, origin string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://"+host+"/api/v1/events?since=abc", nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	for _, c := range []struct{ host, origin string }{
		{"orion.example:8080", "http://evil.example"},
		{"rebind.example:8080", "http://rebind.example:8080"},
		{"127.0.0.1:8080", "null"},
		{"127.0.0.1:8080", "http://192.0.2.7:8080"}, // another machine's page
	} {
		if rec := do(http.MethodGet, c.host, c.origin); rec.Code != http.StatusForbidden {
			t.Errorf("Host %s, Origin %s: %d, want 403", c.host, c.origin, rec.Code)
		}
	}
	if rec := do(http.MethodOptions, "127.0.0.1:8080", "http://localhost:3000"); rec.Code != http.StatusNoContent ||
		rec.Header().Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Fatalf("preflight from loopback: %d %v", rec.Code, rec.Header())
	}
	// A configured origin, a loopback one, and none at all reach the handler
	// (400: bad since).
	for _, o := range []string{"", "http://orion.example:8080", "http://127.0.0.1:8080"} {
		if rec := do(http.MethodGet, "orion.example:8080", o); rec.Code != http.StatusBadRequest {
			t.Errorf("origin %q: %d", o, rec.Code)
		}
	}
	if rec := do(http.MethodPost, "127.0.0.1", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
	o := kit.Origins{Allow: []string{"https://console.example"}}
	req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
	req.Header.Set("Origin", "https://console.example")
	if !o.Allowed(req) {
		t.Fatal("listed origin refused")
	}
	req.Header.Set("Origin", "https://other.example")
	if o.Allowed(req) {
		t.Fatal("unlisted origin allowed")
	}
}

// The handlers work behind middleware that wraps the ResponseWriter.
func TestWebSocketBehindWrappingMiddleware(t *testing.T) {
	h := NewHub(Config{})
	inner := h.WSHandler(HTTPConfig{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(wrapped{w}, r)
	}))
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.DialContext(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }
