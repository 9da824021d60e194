package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/kit"
)

// fail maps an error from parsing or from the backend to its response.
// Messages are the errors' own sentences, written for users; errors the API
// does not know are logged and answered with a bare 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ve  *dag.ValidationError
		ce  *core.Error
		le  *core.LimitError
		mbe *http.MaxBytesError
	)
	errors.As(err, &ce)
	switch {
	case errors.As(err, &mbe):
		kit.WriteError(w, http.StatusRequestEntityTooLarge, apitypes.CodeBodyTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit), nil)

	case errors.As(err, &ve):
		status := http.StatusBadRequest
		switch ve.Code {
		case dag.CodeUnsupportedMedia:
			status = http.StatusUnsupportedMediaType
		case dag.CodeTooLarge:
			status = http.StatusRequestEntityTooLarge
			s.m.TooLarge.Inc()
		}
		kit.WriteError(w, status, apitypes.Code(ve.Code), ve.Message, ve.Details)
	case errors.As(err, &le):
		// A global limit: the count it bounds goes down as DAGs finish
		// (max_live_dags, max_live_tasks) or as schedules are deleted.
		if le.Code != core.CodeTooManySchedules {
			w.Header().Set("Retry-After", "5")
		}
		code, status := kit.CoreCode(le.Code)
		kit.WriteError(w, status, code, le.Msg, []string{fmt.Sprintf("%s %d", le.Limit, le.Max)})
	case errors.Is(err, engine.ErrStorageFull):
		// A known outcome (nothing was written), unlike 503's "unknown":
		// retrying at once would be refused the same way.
		w.Header().Set("Retry-After", "10")
		kit.WriteError(w, http.StatusInsufficientStorage, apitypes.CodeStorageFull, err.Error(), nil)
	case errors.Is(err, core.ErrNotLeader), errors.Is(err, engine.ErrUnknown),
		errors.Is(err, engine.ErrStopped):
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeNotLeader, err.Error(), nil)
	case ce != nil && (ce.Code == core.CodeNotFound || ce.Code == core.CodeConflict):
		code, status := kit.CoreCode(ce.Code)
		kit.WriteError(w, status, code, ce.Msg, nil)
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("the scheduler did not answer within %s", s.cfg.WriteTimeout)
		switch {
		case r.Pattern == "POST /api/v1/dags":
			msg = fmt.Sprintf("the DAG was not committed within %s; it may still be: "+
				"retrying with the same DAG id (or Idempotency-Key) is safe", s.cfg.WriteTimeout)
		case r.Method == http.MethodPost, r.Method == http.MethodDelete:
			msg = fmt.Sprintf("the change was not committed within %s; it may still be", s.cfg.WriteTimeout)
		}
		kit.WriteError(w, http.StatusGatewayTimeout, apitypes.CodeTimeout, msg, nil)
	case errors.Is(err, context.Canceled):
		// The client went away or the server is shutting down.
		w.Header().Set("Retry-After", "1")
		kit.WriteError(w, http.StatusServiceUnavailable, apitypes.CodeUnavailable, "request cancelled before it completed", nil)
	default:
		s.log.Error("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		kit.WriteError(w, http.StatusInternalServerError, apitypes.CodeInternal, "internal error", nil)
	}
}
