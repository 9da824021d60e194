package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// StandbyWrites sends writes to standbys while a fault of the leader lasts,
// as clients that happen to know a standby's address do, and records how
// each was answered: submissions with and without an id, cancellations of
// running DAGs, and retries of a DAG that fails at once. Check then tells
// whether each was answered, how long the slowest took, and whether each
// was applied exactly once (a submission made one DAG, a retry one run).
//
// Every loop is bounded: StandbyWriteMax writes per kind, and Stop.
type StandbyWrites struct {
	c      *Cluster
	prefix string
	via    []*Server
	task   func(dag string) map[string]any
	hc     *http.Client

	stopc, done chan struct{}
	stopOnce    sync.Once

	mu      sync.Mutex
	writes  []Write
	cancels []string // DAGs to cancel, running before the fault
	retried string   // the DAG retried over and over
	runs    []string // what the retry loop saw that it should not have
	history []string // the retry loop's steps, for a failure's message
}

// Write is one write sent to a standby and its answer.
type Write struct {
	Kind       string // submit, submit-id, cancel, retry
	Name       string // the DAG's name (submit) or id
	ID         string // the DAG id the answer named (submit)
	Via        string
	Sent       time.Time
	Took       time.Duration
	Code       int // 0: no answer (Err)
	RetryAfter string
	Body       string
	Err        error
}

// StandbyWriteMax bounds the writes of each kind.
const StandbyWriteMax = 300

// StandbyWriteTimeout is the clients' timeout: far above what any write
// may take, so that a write that waits on a frozen leader shows as one
// answered late, or not at all.
const StandbyWriteTimeout = 15 * time.Second

// PrepareStandbyWrites submits, through any replica, what the writes will
// cancel (cancels DAGs whose one task sleeps, holding a worker slot each:
// keep it under the cluster's slots) and retry (a DAG that fails at once),
// and waits until the DAG to retry has failed. task builds the one task of
// each submitted DAG (nil: a noop).
func (c *Cluster) PrepareStandbyWrites(prefix string, cancels int, task func(dag string) map[string]any) *StandbyWrites {
	c.t.Helper()
	if task == nil {
		task = func(string) map[string]any { return map[string]any{"id": "t", "kind": "noop"} }
	}
	w := &StandbyWrites{c: c, prefix: prefix, task: task, hc: &http.Client{Timeout: StandbyWriteTimeout, Transport: c.HTTP.Transport},
		stopc: make(chan struct{}), done: make(chan struct{})}
	for i := 1; i <= cancels; i++ {
		id := fmt.Sprintf("%s-cancel%d", prefix, i)
		// The least urgent (9): its sleep holds a slot until cancelled, and
		// must not keep the writes' tasks waiting.
		c.SubmitAny(map[string]any{"id": id, "name": id, "tasks": []map[string]any{{"id": "s", "kind": "sleep", "duration": "5m", "priority": 9}}})
		w.cancels = append(w.cancels, id)
	}
	w.retried = prefix + "-retry"
	c.SubmitAny(map[string]any{"id": w.retried, "name": w.retried,
		"tasks": []map[string]any{{"id": "f", "kind": "shell", "command": "exit 3", "max_retries": 0, "priority": 0}}})
	c.WaitFor(w.retried+" failed", 30*time.Second, func() (bool, string) {
		d, err := c.DAGAny(w.retried)
		return err == nil && d.Status == "failed", fmt.Sprintf("%s %v", StatusOf(d), err)
	})
	return w
}

// Start sends the writes through via (the standbys), until Stop.
func (w *StandbyWrites) Start(via []*Server) {
	w.via = via
	var wg sync.WaitGroup
	loops := []func(){
		func() { w.submitLoop("submit", "a") },
		func() { w.submitLoop("submit-id", "i") },
		w.cancelLoop,
		w.retryLoop,
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop()
		}()
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	w.c.t.Cleanup(func() { w.Stop() })
}

// Stop ends the writes and waits for those in flight.
func (w *StandbyWrites) Stop() []Write {
	w.stopOnce.Do(func() { close(w.stopc) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// Answered reports how many writes were answered (any status).
func (w *StandbyWrites) Answered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wr := range w.writes {
		if wr.Err == nil {
			n++
		}
	}
	return n
}

func (w *StandbyWrites) stopped() bool {
	select {
	case <-w.stopc:
		return true
	default:
		return false
	}
}

// pause waits d, or less when stopped.
func (w *StandbyWrites) pause(d time.Duration) {
	select {
	case <-w.stopc:
	case <-time.After(d):
	}
}

func (w *StandbyWrites) send(kind, name, path string, body []byte, n int) Write {
	s := w.via[n%len(w.via)]
	wr := Write{Kind: kind, Name: name, Via: s.Name, Sent: time.Now()}
	method := "POST"
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		panic(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.hc.Do(req)
	wr.Took = time.Since(wr.Sent)
	if err != nil {
		wr.Err = err
	} else {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		wr.Code, wr.RetryAfter, wr.Body = resp.StatusCode, resp.Header.Get("Retry-After"), strings.TrimSpace(string(b))
		var a struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(b, &a) == nil {
			wr.ID = a.ID
		}
	}
	w.mu.Lock()
	w.writes = append(w.writes, wr)
	w.mu.Unlock()
	return wr
}

// submitLoop submits one-task DAGs one after another, each named apart;
// with idTag "i" each has that name as its id, with "a" none (the replica
// names it).
func (w *StandbyWrites) submitLoop(kind, idTag string) {
	for n := 1; n <= StandbyWriteMax && !w.stopped(); n++ {
		name := fmt.Sprintf("%s-%s%03d", w.prefix, idTag, n)
		d := map[string]any{"name": name, "tasks": []map[string]any{w.task(name)}}
		if idTag == "i" {
			d["id"] = name
		}
		body, _ := json.Marshal(d)
		w.send(kind, name, "/api/v1/dags", body, n)
		w.pause(20 * time.Millisecond)
	}
}

// cancelLoop cancels the prepared DAGs, one a second (so that a fault of a
// few seconds finds one in flight).
func (w *StandbyWrites) cancelLoop() {
	for n, id := range w.cancels {
		if w.stopped() {
			return
		}
		w.send("cancel", id, "/api/v1/dags/"+id+"/cancel", nil, n)
		w.pause(time.Second)
	}
}

// retryLoop retries the failing DAG, each time once it has failed again,
// and checks that each retry started exactly one run: a retry answered 2xx
// is followed by exactly the next run, one answered otherwise (503: it may
// have been applied) by the next run or none.
func (w *StandbyWrites) retryLoop() {
	run := 1
	// unsure: the last retry was not answered 2xx and the state read after
	// it may not show it yet, so the next may find one run more.
	unsure := false
	for n := 1; n <= StandbyWriteMax && !w.stopped(); n++ {
		wr := w.send("retry", w.retried, "/api/v1/dags/"+w.retried+"/retry", nil, n)
		applied := wr.Err == nil && wr.Code/100 == 2
		if wr.Code == 409 {
			w.pause(50 * time.Millisecond) // see Answered409
		}
		w.mu.Lock()
		w.history = append(w.history, fmt.Sprintf("%s retry %d of run %d via %s: %d in %v", wr.Sent.Format("15:04:05.000"), n, run, wr.Via, wr.Code, wr.Took.Round(time.Millisecond)))
		w.mu.Unlock()
		most := run + 1
		if unsure {
			most++
		}
		// The DAG fails again at once: wait until it has, at the run the
		// answer implies, reading from the standbys (the leader may be the
		// one frozen).
		deadline := time.Now().Add(StandbyWriteTimeout)
		for {
			d := w.readDAG(w.retried)
			if d != nil && d.Run > most {
				w.mu.Lock()
				w.runs = append(w.runs, fmt.Sprintf("retry %d of run %d (answered %d): the DAG went on to run %d", n, run, wr.Code, d.Run))
				w.mu.Unlock()
				return
			}
			if d != nil && d.Status == "failed" && (d.Run >= run+1 || !applied) {
				w.mu.Lock()
				w.history = append(w.history, fmt.Sprintf("%s read failed at run %d (revision %d)", time.Now().Format("15:04:05.000"), d.Run, d.Revision))
				w.mu.Unlock()
				run, unsure = d.Run, !applied
				break
			}
			if time.Now().After(deadline) {
				w.mu.Lock()
				w.runs = append(w.runs, fmt.Sprintf("retry %d of run %d (answered %d %q): no failed run %d within %v (%s)",
					n, run, wr.Code, wr.Body, run+1, StandbyWriteTimeout, StatusOf(d)))
				w.mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// readDAG reads a DAG from the first standby that answers.
func (w *StandbyWrites) readDAG(id string) *DAGState {
	for _, s := range w.via {
		var d DAGState
		code, body, _, err := w.c.Do("GET", s.URL, "/api/v1/dags/"+id, "", nil)
		if err == nil && code == 200 && json.Unmarshal(body, &d) == nil {
			return &d
		}
	}
	return nil
}

// StandbyWritesReport is what Check found.
type StandbyWritesReport struct {
	Writes, Answered2xx, Answered503 int
	Answered409                      int // retries refused: the leader had not applied the failure the standby showed
	Slowest                          time.Duration
	SlowestWrite                     Write
	Unanswered                       []string // sent and not answered (no answer within the client's timeout)
	Unexpected                       []string // answered neither 2xx nor 503 with Retry-After
	NotOnce                          []string // applied other than exactly once
	Accepted                         []string // the DAG ids submitted and accepted (to be checked as finished)
	RetryHistory                     []string // the retry loop's steps (to explain a failure)
}

// Check waits for the state the writes leave (reading through base, a
// replica that serves) and reports. It asserts nothing: the caller does.
func (w *StandbyWrites) Check(base string) StandbyWritesReport {
	c := w.c
	c.t.Helper()
	writes := w.Stop()
	rep := StandbyWritesReport{Writes: len(writes)}
	w.mu.Lock()
	rep.NotOnce = append(rep.NotOnce, w.runs...)
	rep.RetryHistory = slices.Clone(w.history)
	w.mu.Unlock()
	for _, wr := range writes {
		switch {
		case wr.Err != nil:
			rep.Unanswered = append(rep.Unanswered, fmt.Sprintf("%s %s via %s at %s: %v", wr.Kind, wr.Name, wr.Via, wr.Sent.Format("15:04:05.000"), wr.Err))
			continue
		case wr.Code/100 == 2:
			rep.Answered2xx++
		case wr.Code == 503 && wr.RetryAfter != "":
			rep.Answered503++
		case wr.Kind == "retry" && wr.Code == 409 && strings.Contains(wr.Body, "still running"):
			// The standby the loop reads from may show the DAG failed
			// before the leader does: a standby applies a commit from
			// etcd's watch, the leader once its transaction's answer
			// is back. The leader refuses the retry until then.
			rep.Answered409++
		default:
			rep.Unexpected = append(rep.Unexpected, fmt.Sprintf("%s %s via %s at %s (took %v): %d Retry-After %q %s", wr.Kind, wr.Name, wr.Via,
				wr.Sent.Format("15:04:05.000"), wr.Took.Round(time.Millisecond), wr.Code, wr.RetryAfter, wr.Body))
		}
		if wr.Took > rep.Slowest {
			rep.Slowest, rep.SlowestWrite = wr.Took, wr
		}
	}

	// Every submission made one DAG at most, exactly one if answered 2xx,
	// under the id the answer named.
	var list struct {
		DAGs []DAGState `json:"dags"`
	}
	if err := c.GetJSON(base, "/api/v1/dags?limit=1000", &list); err != nil {
		c.t.Fatalf("listing DAGs: %v", err)
	}
	byName := map[string][]string{}
	for _, d := range list.DAGs {
		byName[d.Name] = append(byName[d.Name], d.ID)
	}
	for _, wr := range writes {
		if !strings.HasPrefix(wr.Kind, "submit") {
			continue
		}
		ids := byName[wr.Name]
		ok2xx := wr.Err == nil && wr.Code/100 == 2
		if len(ids) == 0 && ok2xx && wr.ID != "" {
			// Older than the list's newest 1000 (a cluster that ran many
			// drills): read it by id.
			var d DAGState
			if err := c.GetJSON(base, "/api/v1/dags/"+wr.ID, &d); err == nil && d.Name == wr.Name {
				ids = []string{d.ID}
			}
		}
		switch {
		case len(ids) > 1:
			rep.NotOnce = append(rep.NotOnce, fmt.Sprintf("%s %s made %d DAGs: %v", wr.Kind, wr.Name, len(ids), ids))
		case ok2xx && len(ids) == 0:
			rep.NotOnce = append(rep.NotOnce, fmt.Sprintf("%s %s answered %d but made no DAG", wr.Kind, wr.Name, wr.Code))
		case ok2xx && ids[0] != wr.ID:
			rep.NotOnce = append(rep.NotOnce, fmt.Sprintf("%s %s answered id %q but the DAG is %q", wr.Kind, wr.Name, wr.ID, ids[0]))
		}
		if len(ids) == 1 {
			rep.Accepted = append(rep.Accepted, ids[0])
		}
		if ok2xx && !strings.Contains(wr.Body, `"created":true`) {
			rep.NotOnce = append(rep.NotOnce, fmt.Sprintf("%s %s: the only DAG it made, answered as not created: %s", wr.Kind, wr.Name, wr.Body))
		}
	}
	// Every cancellation answered 2xx left its DAG cancelled.
	for _, wr := range writes {
		if wr.Kind != "cancel" || wr.Err != nil || wr.Code/100 != 2 {
			continue
		}
		var d DAGState
		if err := c.GetJSON(base, "/api/v1/dags/"+wr.Name, &d); err != nil || d.Status != "cancelled" {
			rep.NotOnce = append(rep.NotOnce, fmt.Sprintf("cancel %s answered %d, the DAG is %s (%v)", wr.Name, wr.Code, StatusOf(&d), err))
		}
	}
	return rep
}
