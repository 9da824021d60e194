package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/scheduler"
)

// ErrorBody is the JSON of every error response.
type ErrorBody struct {
	Error ErrorInfo `json:"error"`
}

// ErrorInfo says what went wrong. Code is stable for clients to switch on:
// the dag validation codes (parse_error, invalid_dag, cycle, too_many_tasks,
// unsupported_media_type), body_too_large, bad_request, not_found,
// method_not_allowed, conflict, not_leader, unavailable, rate_limited,
// unauthorized, timeout, internal. Details is never null.
type ErrorInfo struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []string `json:"details"`
}

// writeJSON writes v with the status. v is marshalled before anything is
// written, so a value that does not encode yields a clean 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error","details":[]}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers with the API's error body (ErrorBody). Other packages
// that serve routes of the API (the event stream) use it, so every error a
// client of /api/v1 sees has the same shape.
func WriteError(w http.ResponseWriter, status int, code, msg string, details []string) {
	if details == nil {
		details = []string{}
	}
	writeJSON(w, status, ErrorBody{Error: ErrorInfo{Code: code, Message: msg, Details: details}})
}

// fail maps an error from parsing or from the backend to its response.
// Messages are the errors' own sentences, written for users; errors the API
// does not know are logged and answered with a bare 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ve  *dag.ValidationError
		ce  *core.Error
		mbe *http.MaxBytesError
	)
	errors.As(err, &ce)
	switch {
	case errors.As(err, &mbe):
		WriteError(w, http.StatusRequestEntityTooLarge, "body_too_large",
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
		WriteError(w, status, ve.Code, ve.Message, ve.Details)
	case errors.Is(err, scheduler.ErrNotLeader), errors.Is(err, scheduler.ErrUnknown),
		errors.Is(err, scheduler.ErrStopped), ce != nil && ce.Code == core.ErrNotLeader.Code:
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "not_leader", err.Error(), nil)
	case ce != nil && ce.Code == "not_found":
		WriteError(w, http.StatusNotFound, "not_found", ce.Msg, nil)
	case ce != nil && ce.Code == "conflict":
		WriteError(w, http.StatusConflict, "conflict", ce.Msg, nil)
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("the scheduler did not answer within %s", s.cfg.WriteTimeout)
		switch {
		case r.Pattern == "POST /api/v1/dags":
			msg = fmt.Sprintf("the DAG was not committed within %s; it may still be: "+
				"retrying with the same DAG id (or Idempotency-Key) is safe", s.cfg.WriteTimeout)
		case r.Method == http.MethodPost:
			msg = fmt.Sprintf("the change was not committed within %s; it may still be", s.cfg.WriteTimeout)
		}
		WriteError(w, http.StatusGatewayTimeout, "timeout", msg, nil)
	case errors.Is(err, context.Canceled):
		// The client went away or the server is shutting down.
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "unavailable", "request cancelled before it completed", nil)
	default:
		s.log.Error("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		WriteError(w, http.StatusInternalServerError, "internal", "internal error", nil)
	}
}
