package api

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/kit"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/schedule/firer"
	"github.com/orion-sched/orion/internal/store"
)

// Schedules is what the API does with schedules (*firer.Service).
type Schedules interface {
	Put(ctx context.Context, sc *schedule.Schedule) (firer.PutResult, error)
	SetPaused(ctx context.Context, id string, paused bool) (store.StoredSchedule, int64, error)
	Delete(ctx context.Context, id string) (int64, error)
	// TriggerAt creates a manual run named after at (zero: now).
	TriggerAt(ctx context.Context, id string, at time.Time) (run string, created bool, err error)
	List(ctx context.Context) ([]store.StoredSchedule, error)
	Get(ctx context.Context, id string) (store.StoredSchedule, error)
}

var _ Schedules = (*firer.Service)(nil)

// upcoming is how many fire times a schedule view lists.
const upcoming = 5

func (s *server) scheduleRoutes() {
	if s.cfg.Schedules == nil {
		return
	}
	s.mux.HandleFunc("POST /api/v1/schedules", s.putSchedule)
	s.mux.HandleFunc("GET /api/v1/schedules", s.listSchedules)
	s.mux.HandleFunc("GET /api/v1/schedules/{id}", s.getSchedule)
	s.mux.HandleFunc("DELETE /api/v1/schedules/{id}", s.deleteSchedule)
	s.mux.HandleFunc("POST /api/v1/schedules/{id}/pause", func(w http.ResponseWriter, r *http.Request) { s.pauseSchedule(w, r, true) })
	s.mux.HandleFunc("POST /api/v1/schedules/{id}/resume", func(w http.ResponseWriter, r *http.Request) { s.pauseSchedule(w, r, false) })
	s.mux.HandleFunc("POST /api/v1/schedules/{id}/trigger", s.triggerSchedule)
	s.mux.HandleFunc("GET /api/v1/schedules/{id}/runs", s.scheduleRuns)
}

func schedulePath(id string) string { return "/api/v1/schedules/" + url.PathEscape(id) }

// markRev sets the revision header to an etcd revision the leader wrote.
func markRev(w http.ResponseWriter, rev int64) {
	if rev > 0 {
		w.Header().Set(kit.RevisionHeader, strconv.FormatInt(rev, 10))
	}
}

func (s *server) putSchedule(w http.ResponseWriter, r *http.Request) {
	body, ct, release, ok := s.readDocument(w, r)
	if !ok {
		return
	}
	defer release()
	// A schedule is a DAG file with a schedule: block, its tasks at the
	// top level: counted before they are decoded, as a submission's are.
	err := dag.CheckTaskCount(body, ct, s.cfg.MaxTasks)
	var sc *schedule.Schedule
	if err == nil {
		sc, err = schedule.Parse(body, ct)
	}
	if err == nil {
		err = sc.Validate(s.dagLimits())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wr := kit.Write{Body: body}
	if s.forwards(r) {
		if had, known := s.scheduleExists(r, sc.ID); known {
			wr.ResendSet = map[string]string{kit.ExistedHeader: existed(had)}
		}
	}
	if s.forward(w, r, wr, "schedule "+sc.ID) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	res, err := s.cfg.Schedules.Put(ctx, sc)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !res.Created && !res.Changed && hint(r, kit.ExistedHeader, "0") {
		res.Created = true // the first send of this very request created it
	}
	resp := apitypes.SchedulePutResponse{ID: sc.ID, Created: res.Created, Changed: res.Changed, Next: []time.Time{}}
	if c, err := sc.Compile(); err == nil && !sc.Paused {
		resp.Next = c.Upcoming(time.Now(), upcoming)
	}
	w.Header().Set("Location", schedulePath(sc.ID))
	markRev(w, res.Rev)
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	kit.WriteJSON(w, status, resp)
}

// scheduleView renders a stored schedule; active counts its running runs.
func scheduleView(sc *store.StoredSchedule, now time.Time, active int, withDAG bool) apitypes.Schedule {
	v := apitypes.Schedule{
		ID: sc.ID, Name: sc.DAG.Name, Cron: sc.Cron, Timezone: sc.Timezone, Start: sc.Start, End: sc.End,
		Paused: sc.Paused, Catchup: sc.Catchup, CatchupLimit: sc.CatchupLimit, Grace: sc.Grace.D().String(),
		Overlap: sc.Overlap, MaxActiveRuns: sc.MaxActiveRuns, CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt,
		Next: []time.Time{}, ActiveRuns: active, Tasks: len(sc.DAG.Tasks), Revision: sc.ModRev,
	}
	if sc.Cursor != nil {
		t := sc.Cursor.Tick
		v.LastTick, v.LastRun = &t, sc.Cursor.Run
	}
	if c, err := sc.Compile(); err == nil && !sc.Paused {
		from := now
		if v.LastTick != nil && v.LastTick.After(from) {
			from = *v.LastTick
		}
		v.Next = c.Upcoming(from, upcoming)
	}
	if withDAG {
		d := sc.DAG
		v.DAG = &d
	}
	return v
}

// isScheduleRun selects the DAGs that are a schedule's runs.
func isScheduleRun(d *core.DAGSummary) bool {
	_, _, _, ok := schedule.ParseRunID(d.ID)
	return ok
}

// activeRuns counts the running runs of each schedule in the replica's
// state.
func (s *server) activeRuns(r *http.Request) (map[string]int, error) {
	ctx, cancel := s.readCtx(r)
	defer cancel()
	runs, _, err := s.b.DAGs(ctx, core.DAGQuery{Status: core.DAGRunning, Keep: isScheduleRun})
	out := make(map[string]int)
	for _, d := range runs {
		id, _, _, _ := schedule.ParseRunID(d.ID)
		out[id]++
	}
	return out, err
}

func (s *server) listSchedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	list, err := s.cfg.Schedules.List(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	active, err := s.activeRuns(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now()
	resp := apitypes.ScheduleList{Schedules: make([]apitypes.Schedule, 0, len(list)), Node: s.node()}
	for i := range list {
		resp.Schedules = append(resp.Schedules, scheduleView(&list[i], now, active[list[i].ID], false))
	}
	kit.WriteJSON(w, http.StatusOK, resp)
}

func (s *server) getSchedule(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	sc, err := s.cfg.Schedules.Get(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	active, err := s.activeRuns(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	kit.WriteJSON(w, http.StatusOK, scheduleView(&sc, time.Now(), active[sc.ID], true))
}

func (s *server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var wr kit.Write
	if s.forwards(r) {
		if had, known := s.scheduleExists(r, id); known {
			wr.ResendSet = map[string]string{kit.ExistedHeader: existed(had)}
		}
	}
	if s.forward(w, r, wr, "schedule "+id) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	rev, err := s.cfg.Schedules.Delete(ctx, id)
	if isNotFound(err) && hint(r, kit.ExistedHeader, "1") {
		err = nil // gone: the first send of this deletion deleted it
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	markRev(w, rev)
	kit.WriteJSON(w, http.StatusOK, apitypes.ActionResponse{ID: id, Status: "deleted"})
}

func (s *server) pauseSchedule(w http.ResponseWriter, r *http.Request, paused bool) {
	// Pausing and resuming set a state: a second send needs no identity.
	if s.forward(w, r, kit.Write{}, "schedule "+r.PathValue("id")) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	id := r.PathValue("id")
	_, rev, err := s.cfg.Schedules.SetPaused(ctx, id, paused)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	markRev(w, rev)
	status := "active"
	if paused {
		status = "paused"
	}
	kit.WriteJSON(w, http.StatusOK, apitypes.ActionResponse{ID: id, Status: status})
}

func (s *server) triggerSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var wr kit.Write
	if s.forwards(r) {
		// A standby names the manual run (after this second), so that a
		// second send names the same run and creates nothing more.
		wr.Set = map[string]string{kit.TriggerAtHeader: strconv.FormatInt(time.Now().Unix(), 10), kit.IDAssignedHeader: "1"}
	}
	if s.forward(w, r, wr, "schedule "+id) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
	defer cancel()
	var at time.Time
	if v := r.Header.Get(kit.TriggerAtHeader); v != "" && r.Header.Get(kit.ForwardedHeader) != "" {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			at = time.Unix(sec, 0)
		}
	}
	run, created, err := s.cfg.Schedules.TriggerAt(ctx, id, at)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !created && !at.IsZero() && hint(r, kit.IDAssignedHeader, "1") {
		created = true // the first send of this very trigger created the run
	}
	w.Header().Set("Location", dagPath(run))
	kit.MarkRevision(s.b, w)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	kit.WriteJSON(w, status, apitypes.TriggerResponse{Schedule: id, Run: run, Created: created})
}

// scheduleExists reads whether schedule id exists; known is false when the
// read failed.
func (s *server) scheduleExists(r *http.Request, id string) (exists, known bool) {
	ctx, cancel := context.WithTimeout(r.Context(), kit.LeaderTimeout)
	defer cancel()
	_, err := s.cfg.Schedules.Get(ctx, id)
	switch {
	case err == nil:
		return true, true
	case isNotFound(err):
		return false, true
	}
	return false, false
}

// scheduleRuns lists the runs of a schedule the replica holds; they are
// DAGs whose id names the schedule and a tick, so the schedule itself may
// be gone.
func (s *server) scheduleRuns(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	resp := apitypes.ScheduleRuns{Schedule: id, Runs: []apitypes.ScheduleRun{}}
	ctx, cancel := s.readCtx(r)
	runs, rev, err := s.b.DAGs(ctx, core.DAGQuery{Keep: func(d *core.DAGSummary) bool {
		sid, _, _, ok := schedule.ParseRunID(d.ID)
		return ok && sid == id
	}})
	cancel()
	for _, d := range runs {
		_, tick, manual, _ := schedule.ParseRunID(d.ID)
		resp.Runs = append(resp.Runs, apitypes.ScheduleRun{ID: d.ID, Tick: tick, Manual: manual,
			Status: string(d.Status), SubmittedAt: d.SubmittedAt, FinishedAt: d.FinishedAt})
	}
	resp.Revision = rev
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(resp.Runs) == 0 {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
		_, gerr := s.cfg.Schedules.Get(ctx, id)
		cancel()
		if gerr != nil {
			s.fail(w, r, gerr)
			return
		}
	}
	sort.SliceStable(resp.Runs, func(i, j int) bool { return resp.Runs[i].Tick.After(resp.Runs[j].Tick) })
	kit.WriteJSON(w, http.StatusOK, resp)
}
