package workerstream

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
)

// logWindow is how many log chunks a worker may send ahead of the reader.
const logWindow = 4

// RemoteWorker is a worker connected to the hub, as an executor.Executor.
// It lives from its Joined event to its Left event, across reconnections
// within the grace period. Start and Cancel only queue a message to the
// worker's stream and never block; while the worker is disconnected they are
// kept and sent when it reconnects.
type RemoteWorker struct {
	hub *Hub
	id  string

	// Guarded by hub.mu.
	replica     string
	slots       int
	labels      model.Labels
	host        string
	pid         int
	instance    string   // Hello.Instance of the process it is
	owner       string   // ownerOf the token it joined with: only it, or the cluster token, may take the id over
	conn        *hubConn // nil while disconnected
	left        bool
	since       time.Time
	gen         uint64 // disconnections; tells a stale grace timer
	grace       *time.Timer
	seq         uint64
	outstanding map[model.AttemptID]outAttempt // started here, no result yet
	reported    map[model.AttemptID]struct{}   // in the last hello, no result yet
	cancels     []model.AttemptID              // asked while disconnected
	logs        map[uint64]*logReader
	draining    bool // it said it is stopping: no slots for new attempts
}

type outAttempt struct {
	a   model.Attempt
	seq uint64
}

var _ executor.Executor = (*RemoteWorker)(nil)

// ID is the worker's id as it introduced itself.
func (w *RemoteWorker) ID() string { return w.id }

// Slots is the slot count of the worker's latest hello.
func (w *RemoteWorker) Slots() int {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if w.draining {
		return 0
	}
	return w.slots
}

// Labels are the labels of the worker's latest hello.
func (w *RemoteWorker) Labels() model.Labels {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.labels
}

// Replica is the replica whose own slots this worker is, or "".
func (w *RemoteWorker) Replica() string {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.replica
}

// Connected reports whether the worker's stream is up.
func (w *RemoteWorker) Connected() bool {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.conn != nil
}

// Start sends a dispatch; it never blocks. While the worker is disconnected
// the attempt is kept and sent when it reconnects within the grace period
// (if it reconnects without reporting it). On a worker that has Left, Start
// reports a Cancelled result at once, which the scheduler turns into a
// re-queue without consuming a retry.
func (w *RemoteWorker) Start(a model.Attempt) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.left {
		now := time.Now()
		h.results.push(model.Result{AttemptID: a.AttemptID, Worker: w.id, Outcome: model.Cancelled,
			ExitCode: -1, Error: "worker " + w.id + " is gone", StartedAt: now, FinishedAt: now})
		return
	}
	w.seq++
	w.outstanding[a.AttemptID] = outAttempt{a: a, seq: w.seq}
	if w.conn != nil {
		w.conn.send(Msg{Type: TypeDispatch, Attempt: &a})
	}
}

// Cancel asks the worker to stop an attempt; it never blocks. While the
// worker is disconnected the request is kept and sent when it reconnects.
func (w *RemoteWorker) Cancel(id model.AttemptID) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.left {
		return
	}
	if w.conn != nil && w.conn.send(Msg{Type: TypeCancel, ID: &id}) {
		return
	}
	// Disconnected, or the stream is closing: send it after the reconnection.
	w.cancels = append(w.cancels, id)
}

// Release tells the worker that an attempt is another worker's now: it
// stops following it without stopping what it started (a pod). It never
// blocks. The worker sends no result for it, so it is no longer
// outstanding here: it is not sent to the worker again when it reconnects.
func (w *RemoteWorker) Release(id model.AttemptID) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.left {
		return
	}
	delete(w.outstanding, id)
	if w.conn != nil {
		w.conn.send(Msg{Type: TypeRelease, ID: &id})
	}
}

// Ack tells the worker its result for id is committed, so it may forget it;
// it never blocks. recorded says the log took the result as the attempt's
// end (package engine's Worker.Ack). A worker that is disconnected gets no
// ack: it sends the result again when it reconnects, and the scheduler
// acks it then.
func (w *RemoteWorker) Ack(id model.AttemptID, recorded bool) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.conn != nil {
		w.conn.send(Msg{Type: TypeAck, ID: &id, Recorded: recorded})
	}
}

// Results returns the hub's results channel, shared by all workers.
func (w *RemoteWorker) Results() <-chan model.Result { return w.hub.Results() }

// InFlight lists what the worker's latest hello reported plus what was
// started here, minus what has a result.
func (w *RemoteWorker) InFlight() []model.AttemptID {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.inFlightLocked()
}

func (w *RemoteWorker) inFlightLocked() []model.AttemptID {
	out := make([]model.AttemptID, 0, len(w.outstanding)+len(w.reported))
	for id := range w.reported {
		out = append(out, id)
	}
	for id := range w.outstanding {
		if _, dup := w.reported[id]; !dup {
			out = append(out, id)
		}
	}
	return out
}

// Close disconnects the worker now and reports it Left (no grace). The
// worker process is not stopped: it will reconnect as a new worker.
func (w *RemoteWorker) Close() error {
	h := w.hub
	h.mu.Lock()
	conn := w.conn
	logs := h.leaveLocked(w)
	h.mu.Unlock()
	if conn != nil {
		conn.close()
	}
	for _, lr := range logs {
		lr.fail(errDisconnected(w.id))
	}
	return nil
}

// OpenLog asks the worker for the full log of an attempt. It waits for the
// worker's first answer (at most LogTimeout), so a missing log is reported
// here, as an error wrapping os.ErrNotExist, like the local executor does.
// The reader's Read fails when the worker disconnects or stays silent for
// LogTimeout. Close it to end the transfer early.
func (w *RemoteWorker) OpenLog(id model.AttemptID) (io.ReadCloser, error) {
	h := w.hub
	h.mu.Lock()
	if w.left || w.conn == nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("workerstream: log of %s: worker %s is not connected", id, w.id)
	}
	lr := &logReader{w: w, hc: w.conn, req: h.nextReq.Add(1), id: id, timeout: h.cfg.LogTimeout,
		chunks: make(chan LogChunk, logWindow+2), failed: make(chan struct{})}
	if !w.conn.send(Msg{Type: TypeLogRequest, LogReq: &LogRequest{Req: lr.req, ID: id, Credit: logWindow}}) {
		h.mu.Unlock()
		return nil, fmt.Errorf("workerstream: log of %s: worker %s is disconnecting", id, w.id)
	}
	w.logs[lr.req] = lr
	h.mu.Unlock()
	if err := lr.fill(); err != nil && err != io.EOF {
		lr.Close()
		return nil, err
	}
	return lr, nil
}

// takeLogsLocked removes and returns the log transfers on stream hc (all of
// them when hc is nil).
func (w *RemoteWorker) takeLogsLocked(hc *hubConn) []*logReader {
	var out []*logReader
	for req, lr := range w.logs {
		if hc == nil || lr.hc == hc {
			out = append(out, lr)
			delete(w.logs, req)
		}
	}
	return out
}

// logReader is the leader's end of one log transfer.
type logReader struct {
	w       *RemoteWorker
	hc      *hubConn
	req     uint64
	id      model.AttemptID
	timeout time.Duration
	chunks  chan LogChunk

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// Owned by the reader's caller.
	cur    []byte
	end    error // io.EOF or the transfer's error, once its last chunk is taken
	closed bool
}

// deliver hands a chunk over; the credit bounds how many can be waiting.
// It reports whether the chunk was within the credit.
func (lr *logReader) deliver(c LogChunk) bool {
	select {
	case lr.chunks <- c:
		return true
	default:
		lr.fail(fmt.Errorf("workerstream: worker %s sent log chunks beyond its credit", lr.w.id))
		return false
	}
}

func (lr *logReader) fail(err error) {
	lr.failOnce.Do(func() {
		lr.failErr = err
		close(lr.failed)
	})
}

// fill waits for the next chunk when the current one is used up.
func (lr *logReader) fill() error {
	for len(lr.cur) == 0 {
		if lr.end != nil {
			return lr.end
		}
		var c LogChunk
		select {
		case c = <-lr.chunks: // what arrived wins over a failure noticed since
		default:
			t := time.NewTimer(lr.timeout)
			select {
			case c = <-lr.chunks:
				t.Stop()
			case <-lr.failed:
				t.Stop()
				return lr.failErr
			case <-t.C:
				err := fmt.Errorf("workerstream: log of %s: no answer from worker %s within %s", lr.id, lr.w.id, lr.timeout)
				lr.fail(err)
				return err
			}
		}
		lr.cur = c.Data
		switch {
		case c.Err != "":
			lr.end = &logError{msg: fmt.Sprintf("worker %s: %s", lr.w.id, c.Err), notExist: c.NotExist}
			lr.unregister()
		case c.EOF:
			lr.end = io.EOF
			lr.unregister()
		default:
			lr.hc.send(Msg{Type: TypeLogRequest, LogReq: &LogRequest{Req: lr.req, ID: lr.id, Credit: 1}})
		}
	}
	return nil
}

func (lr *logReader) Read(p []byte) (int, error) {
	if lr.closed {
		return 0, os.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := lr.fill(); err != nil && len(lr.cur) == 0 {
		return 0, err
	}
	n := copy(p, lr.cur)
	lr.cur = lr.cur[n:]
	return n, nil
}

func (lr *logReader) Close() error {
	if lr.closed {
		return nil
	}
	lr.closed = true
	if lr.end == nil {
		lr.hc.send(Msg{Type: TypeLogRequest, LogReq: &LogRequest{Req: lr.req, ID: lr.id, Close: true}})
		lr.unregister()
	}
	lr.fail(os.ErrClosed)
	return nil
}

func (lr *logReader) unregister() {
	h := lr.w.hub
	h.mu.Lock()
	if lr.w.logs[lr.req] == lr {
		delete(lr.w.logs, lr.req)
	}
	h.mu.Unlock()
}

// logError is a worker's error about a log; it matches os.ErrNotExist when
// the worker has no log for the attempt.
type logError struct {
	msg      string
	notExist bool
}

func (e *logError) Error() string { return e.msg }

func (e *logError) Is(target error) bool { return e.notExist && target == os.ErrNotExist }
