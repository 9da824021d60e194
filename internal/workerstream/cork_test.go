package workerstream

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/model"
)

// countingConn counts the write system calls a connection makes.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A batch of messages goes out as its frames, in order, in a few writes
// rather than one per message, both ways: a worker's dial and a hub's
// upgrade both cork their connection.
func TestSendBatchGathersFramesIntoFewWrites(t *testing.T) {
	const n = 200
	batch := make([]Msg, n)
	for i := range batch {
		batch[i] = Msg{Type: TypeAck, ID: &model.AttemptID{DAG: "d", Task: strings.Repeat("t", 40), Attempt: i + 1}}
	}
	check := func(t *testing.T, c Conn) {
		t.Helper()
		for i := range n {
			m, err := c.Recv()
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if m.Type != TypeAck || m.ID == nil || m.ID.Attempt != i+1 {
				t.Fatalf("message %d: %+v, want ack of attempt %d", i, m, i+1)
			}
		}
	}

	var serverWrites atomic.Int64
	upgrader := websocket.Upgrader{}
	got := make(chan Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(corkable(countingWriter{w, &serverWrites}), r, nil)
		if err != nil {
			return
		}
		c := NewWebsocketConn(ws, time.Second)
		got <- c
		<-r.Context().Done()
	}))
	defer srv.Close()

	var clientWrites atomic.Int64
	dialer := &websocket.Dialer{HandshakeTimeout: 5 * time.Second, NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &clientWrites}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := DialWebsocket(ctx, wsURL(srv), "", dialer)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-got
	defer server.Close()

	before := clientWrites.Load()
	if err := sendAll(client, batch); err != nil {
		t.Fatal(err)
	}
	check(t, server)
	if w := clientWrites.Load() - before; w > 2 {
		t.Errorf("the worker's side wrote %d messages in %d writes; want at most 2", n, w)
	}

	before = serverWrites.Load()
	if err := sendAll(server, batch); err != nil {
		t.Fatal(err)
	}
	check(t, client)
	if w := serverWrites.Load() - before; w > 2 {
		t.Errorf("the hub's side wrote %d messages in %d writes; want at most 2", n, w)
	}
}

// countingWriter counts the writes of the connection it hands the upgrader.
type countingWriter struct {
	http.ResponseWriter
	writes *atomic.Int64
}

func (w countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := w.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return countingConn{c, w.writes}, rw, nil
}

// A frame nested more deeply than any message ends the stream with an
// error instead of reaching the decoder (whose recursion has no limit), and
// a large frame before a small one is read whole, through the kept buffer.
func TestRecvRefusesDeepFramesAndReadsLargeOnes(t *testing.T) {
	upgrader := websocket.Upgrader{}
	got := make(chan Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		got <- NewWebsocketConn(ws, time.Second)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	server := <-got
	defer server.Close()

	large := `{"type":"` + TypeAck + `","log":{"data":"` + strings.Repeat("x", 200<<10) + `"}}`
	for _, frame := range []string{large, `{"type":"` + TypeAck + `","id":{"attempt":7}}`, `{"type":"ack","x":` + strings.Repeat("[", 1<<20)} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := server.Recv(); err != nil || m.Type != TypeAck {
		t.Fatalf("large frame: %+v %v", m, err)
	}
	if m, err := server.Recv(); err != nil || m.ID == nil || m.ID.Attempt != 7 {
		t.Fatalf("small frame after it: %+v %v", m, err)
	}
	if m, err := server.Recv(); err == nil || !strings.Contains(err.Error(), "levels deep") {
		t.Fatalf("deep frame: %+v %v", m, err)
	}
}
