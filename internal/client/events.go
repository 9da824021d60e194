package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Event is one event of the live stream (GET /api/v1/events): the fields a
// client follows a DAG by. The stream's full format, and what each type
// means, is documented in package events; unknown types and fields are
// ignored, as that format asks.
type Event struct {
	Type   string `json:"type"` // task, dag, dag_deleted, resync, gap, leader, metrics, system
	ID     string `json:"id,omitempty"`
	Rev    int64  `json:"rev,omitempty"`
	DAG    string `json:"dag,omitempty"`
	Task   string `json:"task,omitempty"`
	Status string `json:"status,omitempty"`
	Run    int    `json:"run,omitempty"`
	Since  string `json:"since,omitempty"`
}

// EventStream reads events from one server-sent event stream.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	data bytes.Buffer

	mu     sync.Mutex
	idle   *time.Timer
	dead   bool // the idle deadline passed (or Close was called)
	closed bool // Close was called
	limit  time.Duration
}

// Stream bounds: a line of the stream longer than maxEventLine is an error
// (the server's events are a few hundred bytes; a task's error is cut to
// 512), and a stream silent for longer than streamIdle is taken for dead
// (the server sends a heartbeat every 15 s, so a connection broken without
// a reset, which would otherwise block a reader for ever, is noticed).
const (
	maxEventLine = 1 << 20
	streamIdle   = 45 * time.Second
)

// Events opens the event stream from cursor since ("" for live events from
// now on; a revision, such as a GET's "revision", for every event after
// it). Opening it fails over and retries as other GETs do; once open, the
// stream is one server's: when it ends, open another from the last event's
// ID. The stream ends with ctx.
func (c *Client) Events(ctx context.Context, since string) (*EventStream, error) {
	path := "/api/v1/events"
	if since != "" {
		path += "?since=" + url.QueryEscape(since)
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, accept: "text/event-stream", idempotent: true})
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, &APIError{Status: resp.StatusCode, Message: "the server did not answer with an event stream (Content-Type " + ct + ")"}
	}
	s := &EventStream{body: resp.Body, limit: streamIdle}
	s.sc = bufio.NewScanner(readerFunc(s.read))
	s.sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	s.idle = time.AfterFunc(s.limit, s.expire)
	return s, nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// read reads the body and pushes the idle deadline back on every byte.
func (s *EventStream) read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 {
		s.mu.Lock()
		if !s.dead {
			s.idle.Reset(s.limit)
		}
		s.mu.Unlock()
	}
	if err != nil && s.expired() {
		err = errors.New("event stream silent for " + s.limit.String() + "; taken for dead")
	}
	return n, err
}

func (s *EventStream) expire() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	s.body.Close()
}

func (s *EventStream) expired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead && !s.closed
}

// Next blocks until the next event. It returns io.EOF when the server ends
// the stream, and an error when it breaks, goes silent or ctx ends.
func (s *EventStream) Next() (Event, error) {
	s.data.Reset()
	id := ""
	for s.sc.Scan() {
		line := s.sc.Bytes()
		switch {
		case len(line) == 0:
			if s.data.Len() == 0 {
				continue // a heartbeat comment's end, or stray blank lines
			}
			var ev Event
			if err := json.Unmarshal(s.data.Bytes(), &ev); err != nil {
				return Event{}, errors.New("event stream: an event is not JSON: " + err.Error())
			}
			if ev.ID == "" {
				ev.ID = id
			}
			return ev, nil
		case line[0] == ':':
			// A comment: the server's heartbeat.
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "data":
				if s.data.Len() > 0 {
					s.data.WriteByte('\n')
				}
				if s.data.Len()+len(value) > maxEventLine {
					return Event{}, errors.New("event stream: an event is larger than 1 MiB")
				}
				s.data.Write(value)
			case "id":
				id = string(value)
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF
}

// Close ends the stream.
func (s *EventStream) Close() error {
	s.mu.Lock()
	s.dead, s.closed = true, true
	s.idle.Stop()
	s.mu.Unlock()
	return s.body.Close()
}
