package server_test

// The event-stream limits, through the real API of a single node: streams
// over the limits are refused with the limit named, the others go on, and
// a slot frees when a client goes.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/openapi/openapitest"
	"github.com/orion-sched/orion/internal/server/servertest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// clientFrom is an HTTP client whose connections come from ip (a loopback
// address of its own, so that the server counts it as another client).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// stream is an open SSE response.
type stream struct {
	resp *http.Response
	r    *bufio.Reader
}

// openSSE opens GET /api/v1/events from hc: the stream when the server
// accepts it, otherwise the refusal (status, Retry-After, error body).
func openSSE(t *testing.T, hc *http.Client, base string) (*stream, int, http.Header, apitypes.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/events", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		t.Cleanup(func() { resp.Body.Close() })
		return &stream{resp: resp, r: bufio.NewReader(resp.Body)}, resp.StatusCode, resp.Header, apitypes.ErrorBody{}
	}
	defer resp.Body.Close()
	var eb apitypes.ErrorBody
	b, _ := io.ReadAll(resp.Body)
	if _, err := openapitest.Validate(req, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("refusal %d is not what the OpenAPI document allows: %v", resp.StatusCode, err)
	}
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("refusal %d is not the API's JSON error: %q", resp.StatusCode, b)
	}
	return nil, resp.StatusCode, resp.Header, eb
}

// until reads the stream until a data line contains want.
func (s *stream) until(t *testing.T, want string) {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream while waiting for %q: %v", want, err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, want) {
			return
		}
	}
}

func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func TestEventStreamLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	_, base := servertest.Start(t, func(cfg *config.Server) {
		cfg.MaxEventStreams, cfg.MaxStreamsPerClient = 3, 2
	})
	local, second, third := clientFrom("127.0.0.1"), clientFrom("127.0.0.2"), clientFrom("127.0.0.3")

	a, _, _, _ := openSSE(t, local, base)
	b, _, _, _ := openSSE(t, local, base)
	if a == nil || b == nil {
		t.Fatal("the first two streams of a client were refused")
	}

	// A third from the same address: its share is used, 429. Loopback is
	// counted like any address.
	s, code, hdr, eb := openSSE(t, local, base)
	if s != nil || code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "5" ||
		eb.Error.Code != apitypes.CodeTooManyStreams || !strings.Contains(strings.Join(eb.Error.Details, " "), "max_event_subscribers_per_client = 2") {
		t.Fatalf("third stream of 127.0.0.1: %d Retry-After %q %+v, want 429 naming max_event_subscribers_per_client", code, hdr.Get("Retry-After"), eb)
	}
	// The WebSocket endpoint and the seed's /ws count the same streams.
	wsURL := "ws" + strings.TrimPrefix(base, "http")
	for _, path := range []string{"/api/v1/events/ws", "/ws"} {
		conn, resp, err := websocket.DefaultDialer.Dial(wsURL+path, nil)
		if err == nil {
			conn.Close()
			t.Fatalf("%s: a third stream of 127.0.0.1 was accepted", path)
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: %v %v, want 429 with Retry-After", path, resp, err)
		}
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		b, _ := io.ReadAll(resp.Body)
		if _, err := openapitest.Validate(req, resp.StatusCode, resp.Header, b); err != nil {
			t.Errorf("%s: refusal %d is not what the OpenAPI document allows: %v (%q)", path, resp.StatusCode, err, b)
		}
	}

	// Another address has its own share, up to the replica's limit.
	if c, _, _, _ := openSSE(t, second, base); c == nil {
		t.Fatal("a stream of 127.0.0.2 was refused below both limits")
	}
	s, code, hdr, eb = openSSE(t, third, base)
	if s != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
		eb.Error.Code != apitypes.CodeTooManyStreams || !strings.Contains(strings.Join(eb.Error.Details, " "), "max_event_subscribers = 3") {
		t.Fatalf("fourth stream in all: %d %+v, want 503 naming max_event_subscribers", code, eb)
	}
	if n := metric(t, base, "orion_event_subscribers"); n != 3 {
		t.Errorf("orion_event_subscribers = %v, want 3", n)
	}
	if n := metric(t, base, `orion_event_subscribers_refused_total{limit="max_event_subscribers_per_client"}`); n != 3 {
		t.Errorf("refused per client = %v, want 3", n)
	}
	if n := metric(t, base, `orion_event_subscribers_refused_total{limit="max_event_subscribers"}`); n != 1 {
		t.Errorf("refused in all = %v, want 1", n)
	}

	// The streams admitted are served as before.
	resp, err := http.Post(base+"/api/v1/dags", "application/json",
		strings.NewReader(`{"id": "limits-1", "name": "limits-1", "tasks": [{"id": "a", "kind": "noop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	b.until(t, `"dag":"limits-1"`)

	// A client that goes frees its slot.
	a.resp.Body.Close()
	testkit.WaitFor(t, 10*time.Second, "the closed stream's slot freed", func() bool {
		return metric(t, base, "orion_event_subscribers") == 2
	})
	c, code, _, eb := openSSE(t, local, base)
	if c == nil {
		t.Fatalf("a stream of 127.0.0.1 after one of its two closed: %d %+v", code, eb)
	}
	c.until(t, `"type":"metrics"`)
}
