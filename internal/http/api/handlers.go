package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
)

// List bounds of GET /api/v1/dags.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

func dagPath(id string) string { return "/api/v1/dags/" + url.PathEscape(id) }

// readDocument reads a DAG or schedule document: its content type is
// checked before the body is read, and the body is bounded by
// max_body_bytes (a YAML one by dag.MaxYAMLBytes). On false the error has
// been answered.
//
// The bytes of the documents a replica reads and decodes at once are
// bounded too (docBudget): one document of max_body_bytes costs several
// times its size to decode, and the per-client rate limit does not bound
// many clients. The caller calls release once it is done with the body.
func (s *server) readDocument(w http.ResponseWriter, r *http.Request) (body []byte, ct string, release func(), ok bool) {
	ct = r.Header.Get("Content-Type")
	if _, err := dag.FormatOf(ct); err != nil { // refuse before reading the body
		s.fail(w, r, err)
		return nil, "", nil, false
	}
	want := s.cfg.MaxBodyBytes // a body of unknown length may take it all
	if r.ContentLength >= 0 && r.ContentLength < want {
		want = r.ContentLength
	}
	limit := docBudgetFactor * s.cfg.MaxBodyBytes
	if !s.docs.take(want, limit) {
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable,
			fmt.Sprintf("this replica is already reading and decoding DAG documents up to its limit of %d bytes (%d × max_body_bytes); try again", limit, docBudgetFactor), nil)
		return nil, "", nil, false
	}
	release = func() { s.docs.give(want) }
	body, ok = s.readBody(w, r, ct)
	if !ok {
		release()
		return nil, "", nil, false
	}
	return body, ct, release, true
}

// readBody reads a document's body within max_body_bytes (a YAML one
// within dag.MaxYAMLBytes).
func (s *server) readBody(w http.ResponseWriter, r *http.Request, ct string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, r, err)
			return nil, false
		}
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, "could not read the request body", nil)
		return nil, false
	}
	if err := dag.CheckYAMLSize(body, ct); err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return body, true
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	body, ct, release, ok := s.readDocument(w, r)
	if !ok {
		return
	}
	defer release()
	err := dag.CheckTaskCount(body, ct, s.cfg.MaxTasks)
	var d *model.DAG
	if err == nil {
		d, err = dag.Parse(body, ct)
	}
	if err == nil {
		// The key names the DAG before defaults apply, so a DAG given only
		// a key and tasks takes the key as its id and its name.
		if key := strings.TrimSpace(r.Header.Get("Idempotency-Key")); d.ID == "" && key != "" {
			d.ID = kit.IdempotencyID(key)
		}
		d.Normalize()
		err = bindParams(d, r)
		if err == nil {
			err = dag.Validate(d, s.dagLimits())
		}
	}
	if err != nil && schedule.HasSchedule(body, ct) {
		msg := "this DAG file has a schedule: block: create the schedule with POST /api/v1/schedules (orion submit -f does)"
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeInvalidSchedule, msg, []string{msg})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wr := kit.Write{Body: body}
	switch {
	case !s.forwards(r):
	case d.ID == "":
		// A standby names the DAG before it forwards it, so that a second
		// send (to a new leader, the first having frozen) is the same
		// submission, created once.
		d.ID = dag.NewID(time.Now())
		wr.Set = map[string]string{"Idempotency-Key": d.ID, kit.IDAssignedHeader: "1"}
	default:
		// The client named it: a second send that finds it was created
		// by the first if it did not exist before.
		_, _, ok := s.dagState(r, d.ID)
		wr.ResendSet = map[string]string{kit.ExistedHeader: existed(ok)}
	}
	if s.forward(w, r, wr, "DAG "+d.ID) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	res, err := s.b.Submit(ctx, d)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.ID == "" {
		res.ID = d.ID
	}
	if !res.Created && (hint(r, kit.IDAssignedHeader, "1") || hint(r, kit.ExistedHeader, "0")) {
		res.Created = true // an earlier send of this very submission created it
	}
	w.Header().Set("Location", dagPath(res.ID))
	kit.MarkRevision(s.b, w)
	if res.Created {
		kit.WriteJSON(w, http.StatusCreated, apitypes.SubmitResponse{ID: res.ID, Created: true, Status: string(core.DAGRunning)})
		return
	}
	kit.WriteJSON(w, http.StatusOK, apitypes.SubmitResponse{ID: res.ID, Created: false})
}

// bindParams sets the params a submission's query gives (?param=name=value,
// repeated), for JSON and YAML bodies alike, and renders pool and selector
// (dag.Bind).
func bindParams(d *model.DAG, r *http.Request) error {
	overrides, err := dag.ParseParamFlags(r.URL.Query()["param"])
	if err != nil {
		return err
	}
	return dag.Bind(d, overrides)
}

// readCtx bounds a read of the replica's state by WriteTimeout.
func (s *server) readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
}

func (s *server) listDAGs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var want core.DAGStatus
	switch st := core.DAGStatus(q.Get("status")); st {
	case "":
	case core.DAGRunning, core.DAGSucceeded, core.DAGFailed, core.DAGCancelled:
		want = st
	default:
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest,
			fmt.Sprintf("status %q is not one of running, succeeded, failed, cancelled", st), nil)

		return
	}
	limit := DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest,
				fmt.Sprintf("limit %q is not a positive integer", v), nil)

			return
		}
		limit = min(n, MaxListLimit)
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	dags, rev, err := s.b.DAGs(ctx, core.DAGQuery{Status: want, Limit: limit})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := apitypes.DAGList[core.DAGStatus]{DAGs: make([]dagSummary, len(dags)), Revision: rev, Node: s.node()}
	for i := range dags {
		resp.DAGs[i] = wireSummary(&dags[i])
	}
	kit.WriteJSON(w, http.StatusOK, resp)
}

// getDAG answers a DAG with at most task_limit of its tasks (at most, and
// by default, MaxViewTasks), and the shape of one that has more.
func (s *server) getDAG(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	limit := apitypes.MaxViewTasks
	if v := r.URL.Query().Get("task_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, fmt.Sprintf("task_limit %q is not a non-negative integer", v), nil)
			return
		}
		limit = min(n, apitypes.MaxViewTasks)
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	h, err := s.b.DAGHead(ctx, id, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if h.View == nil {
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, "no DAG "+id, nil)
		return
	}
	kit.WriteJSON(w, http.StatusOK, wireHead(&h))
}

// listTasks answers a page of a DAG's tasks: ?status= (repeated or
// comma-separated), ?group= (a map group or a shape node), ?limit=,
// ?cursor= (a page's next).
func (s *server) listTasks(w http.ResponseWriter, r *http.Request) {
	id, qs := r.PathValue("id"), r.URL.Query()
	bad := func(msg string) {
		kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, msg, nil)
	}
	var q engine.TasksQuery
	for _, v := range qs["status"] {
		for name := range strings.SplitSeq(v, ",") {
			st, err := core.ParseStatus(strings.TrimSpace(name))
			if err != nil {
				bad(fmt.Sprintf("status %q is not a task status (pending, ready, running, retrying, succeeded, failed, upstream_failed, cancelled, skipped)", name))
				return
			}
			q.Statuses = q.Statuses.Add(st)
		}
	}
	q.Group = qs.Get("group")
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad(fmt.Sprintf("limit %q is not a positive integer", v))
			return
		}
		q.Limit = min(n, apitypes.MaxTaskPage)
	}
	if v := qs.Get("cursor"); v != "" {
		c, err := core.ParseTaskCursor(v)
		if err != nil {
			bad(err.Error())
			return
		}
		q.Cursor = c
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	tr, err := s.b.Tasks(ctx, id, q)
	switch {
	case err != nil:
		s.fail(w, r, err)
	case !tr.DAGFound:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, "no DAG "+id, nil)
	case tr.Page == nil:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound,
			fmt.Sprintf("DAG %s has no group %s: a group is a map group's id or a node of the DAG's shape", id, q.Group), nil)
	default:
		kit.WriteJSON(w, http.StatusOK, wireTaskPage(tr.Page, tr.Rev))
	}
}

// lookupTask reads a task, with the revision this replica has applied, or
// writes the 404 (or error) and returns nil.
func (s *server) lookupTask(w http.ResponseWriter, r *http.Request) (*core.TaskView, int64) {
	id, taskID := r.PathValue("id"), r.PathValue("task")
	ctx, cancel := s.readCtx(r)
	defer cancel()
	tr, err := s.b.Task(ctx, id, taskID)
	switch {
	case err != nil:
		s.fail(w, r, err)
		return nil, 0
	case tr.View == nil && !tr.DAGFound:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, "no DAG "+id, nil)
	case tr.View == nil:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, fmt.Sprintf("DAG %s has no task %s", id, taskID), nil)
	}
	return tr.View, tr.Rev
}

func (s *server) getTask(w http.ResponseWriter, r *http.Request) {
	if tv, rev := s.lookupTask(w, r); tv != nil {
		v := wireTask(tv)
		v.Revision = rev
		kit.WriteJSON(w, http.StatusOK, v)
	}
}

// listInstances answers a page of a map group's instances.
func (s *server) listInstances(w http.ResponseWriter, r *http.Request) {
	id, taskID := r.PathValue("id"), r.PathValue("task")
	var page [2]int // offset, limit
	for i, name := range []string{"offset", "limit"} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, fmt.Sprintf("%s %q is not a non-negative integer", name, v), nil)
				return
			}
			page[i] = n
		}
	}
	ctx, cancel := s.readCtx(r)
	defer cancel()
	ir, err := s.b.Instances(ctx, id, taskID, page[0], page[1])
	switch {
	case err != nil:
		s.fail(w, r, err)
	case ir.List != nil:
		kit.WriteJSON(w, http.StatusOK, wireInstances(ir.List, ir.Rev))
	case !ir.DAGFound:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, "no DAG "+id, nil)
	case ir.TaskFound:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, fmt.Sprintf("task %s of DAG %s is not a map group (it has no for_each)", taskID, id), nil)
	default:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, fmt.Sprintf("DAG %s has no task %s", id, taskID), nil)
	}
}

func (s *server) taskLog(w http.ResponseWriter, r *http.Request) {
	attempt := 0
	if v := r.URL.Query().Get("attempt"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, fmt.Sprintf("attempt %q is not a positive integer", v), nil)
			return
		}
		attempt = n
	}
	tv, _ := s.lookupTask(w, r)
	if tv == nil {
		return
	}
	id, taskID := r.PathValue("id"), tv.ID
	switch {
	case tv.Attempts == 0:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound,
			fmt.Sprintf("task %s of DAG %s has not run yet: there is no log", taskID, id), nil)

		return
	case attempt > tv.Attempts:
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound,
			fmt.Sprintf("task %s of DAG %s has no attempt %d; its latest is %d", taskID, id, attempt, tv.Attempts), nil)

		return
	case attempt == 0:
		attempt = tv.Attempts
	}
	worker := workerOf(tv, attempt)
	notHere := func() {
		msg := fmt.Sprintf("the log of attempt %d of task %s is not on this node (%s)", attempt, taskID, s.node())
		if worker != "" {
			msg += fmt.Sprintf("; it lives on worker %s, which ran it", worker)
		}
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, msg, nil)
	}
	logs := s.cfg.Logs
	if logs == nil || (worker != "" && worker != logs.ID()) {
		// Another worker ran it: the leader reaches every worker over its
		// stream, so ask it (or be it).
		logs = nil
		if s.cfg.RemoteLogs != nil && worker != "" && s.status().Leader {
			logs = s.cfg.RemoteLogs(worker)
		} else if s.forwardRead(w, r) {
			return
		}
		if logs == nil {
			notHere()
			return
		}
	}
	rc, err := logs.OpenLog(model.AttemptID{DAG: id, Task: taskID, Attempt: attempt})
	if errors.Is(err, fs.ErrNotExist) {
		if worker == "" {
			notHere()
			return
		}
		kit.WriteError(w, http.StatusNotFound, apitypes.CodeNotFound, fmt.Sprintf(
			"attempt %d of task %s has no log on worker %s: noop tasks write none, and a log is gone once it was removed",
			attempt, taskID, worker), nil)

		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	// A log may be large or come from a remote worker: it gets longer than
	// the server's write timeout, and still a bound.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(logWriteTimeout))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Debug("copying a task log failed", zap.String("dag", id), zap.String("task", taskID),
			zap.Int("attempt", attempt), zap.Error(err))
	}
}

// logWriteTimeout bounds the copy of one task log to the client.
const logWriteTimeout = 10 * time.Minute

// workerOf names the worker that ran an attempt, or "" if unknown.
func workerOf(tv *core.TaskView, attempt int) string {
	if attempt == tv.Attempts {
		return tv.Worker
	}
	for _, h := range tv.History {
		if h.Attempt == attempt {
			return h.Worker
		}
	}
	return ""
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	// Cancelling is idempotent by state (scheduler.Engine.Cancel): a
	// second send needs no identity.
	s.change(w, r, kit.Write{}, s.b.Cancel, core.DAGCancelled)
}

// retry starts a new run of a failed or cancelled DAG; ?run=N retries run N
// only, so that sending the same retry twice starts one run.
func (s *server) retry(w http.ResponseWriter, r *http.Request) {
	run := 0
	if v := r.URL.Query().Get("run"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			kit.WriteError(w, http.StatusBadRequest, apitypes.CodeBadRequest, fmt.Sprintf("run %q is not a positive integer", v), nil)
			return
		}
		run = n
	}
	var wr kit.Write
	if run == 0 && s.forwards(r) {
		// A second send names the run this replica saw before the first,
		// so that a retry the first leader applied is recognised.
		if _, cur, ok := s.dagState(r, r.PathValue("id")); ok {
			wr.ResendQuery = url.Values{"run": {strconv.Itoa(cur)}}
		}
	}
	s.change(w, r, wr, func(ctx context.Context, id string) (core.DAGStatus, error) {
		return s.b.Retry(ctx, id, run)
	}, core.DAGRunning)
}

// deleteDAG deletes a finished DAG with its tasks, as retention would later.
// It answers once the deletion is committed.
func (s *server) deleteDAG(w http.ResponseWriter, r *http.Request) {
	var wr kit.Write
	if s.forwards(r) {
		_, _, ok := s.dagState(r, r.PathValue("id"))
		wr.ResendSet = map[string]string{kit.ExistedHeader: existed(ok)}
	}
	s.change(w, r, wr, func(ctx context.Context, id string) (core.DAGStatus, error) {
		err := s.b.Delete(ctx, id)
		if isNotFound(err) && hint(r, kit.ExistedHeader, "1") {
			err = nil // gone: the first send of this deletion deleted it
		}
		return "", err
	}, apitypes.StatusDeleted)
}

func (s *server) change(w http.ResponseWriter, r *http.Request, wr kit.Write,
	fn func(context.Context, string) (core.DAGStatus, error), want core.DAGStatus) {
	id := r.PathValue("id")
	if s.forward(w, r, wr, "DAG "+id) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	st, err := fn(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st == "" {
		st = want
	}
	// A cancel answers running only when the DAG's cancellation is
	// requested: its handlers and notifications run before it is
	// cancelled (core.CancelDAG).
	requested := want == core.DAGCancelled && st == core.DAGRunning
	kit.MarkRevision(s.b, w)
	kit.WriteJSON(w, http.StatusOK, apitypes.ActionResponse{ID: id, Status: string(st), CancelRequested: requested})
}

// forwards reports whether r would be forwarded to the leader: a write
// that arrived first at a standby of a cluster.
func (s *server) forwards(r *http.Request) bool {
	return s.cfg.Cluster != nil && r.Header.Get(kit.ForwardedHeader) == "" && !s.status().Leader
}

// dagState reads a DAG's status and run from this replica's state.
func (s *server) dagState(r *http.Request, id string) (st core.DAGStatus, run int, ok bool) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	st, run, ok, _ = s.b.DAGState(ctx, id)
	return st, run, ok
}

// hint reads a forwarded write's hint (see kit.IDAssignedHeader).
func hint(r *http.Request, header, value string) bool {
	return r.Header.Get(kit.ForwardedHeader) != "" && r.Header.Get(header) == value
}

func existed(ok bool) string {
	if ok {
		return "1"
	}
	return "0"
}

func isNotFound(err error) bool {
	var ce *core.Error
	return errors.As(err, &ce) && ce.Code == core.CodeNotFound
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	kit.WriteJSON(w, http.StatusOK, apitypes.Health{Status: "ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	st := s.status()
	if !st.Loaded {
		w.Header().Set("Retry-After", "1")
		kit.WriteJSON(w, http.StatusServiceUnavailable, apitypes.Ready{Status: "not_ready"})
		return
	}
	if st.Problem != "" {
		// Loaded and serving reads from what it applied, but cut off from
		// etcd: writes through it would fail, and a probe should say so.
		w.Header().Set("Retry-After", "1")
		kit.WriteJSON(w, http.StatusServiceUnavailable, apitypes.Ready{Status: "not_ready", Leader: st.Leader, Problem: st.Problem,
			Term: st.HoldsTerm, Storage: s.storage()})
		return
	}
	// Limited or full storage leaves the replica ready: it serves reads,
	// cancellations and deletions, and says what it refuses.
	kit.WriteJSON(w, http.StatusOK, apitypes.Ready{Status: "ready", Leader: st.Leader, Term: st.HoldsTerm, Storage: s.storage()})
}

// docBudgetFactor is how many bodies of max_body_bytes a replica reads and
// decodes at once: 128 MiB of documents at the default, a few hundred MB
// of decoded DAGs at most.
const docBudgetFactor = 4

// docBudget counts the bytes of the documents being read and decoded.
type docBudget struct{ inUse atomic.Int64 }

// take reserves n bytes if they fit under limit. One document always fits
// an idle replica, whatever its size.
func (b *docBudget) take(n, limit int64) bool {
	for {
		cur := b.inUse.Load()
		if cur > 0 && cur+n > limit {
			return false
		}
		if b.inUse.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (b *docBudget) give(n int64) { b.inUse.Add(-n) }
