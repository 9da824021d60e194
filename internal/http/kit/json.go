package kit

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// encodeLog receives the values no answer could encode: a bug, or a value
// written by hand into etcd that a view cannot render. Its 500 alone would
// tell the client nothing and the operator less.
var encodeLog atomic.Pointer[zap.Logger]

// SetLogger names the logger of encoding failures (the server's).
func SetLogger(l *zap.Logger) { encodeLog.Store(l) }

// internalBody answers with the API's error body when a value does not
// encode.
var internalBody = []byte(`{"error":{"code":"internal","message":"internal error","details":[]}}`)

// WriteJSON writes v as JSON with the status, Cache-Control: no-store and a
// final newline. v is marshalled before anything is written, so a value that
// does not encode yields a clean 500 with the API's error body.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	WriteJSONOr(w, status, v, internalBody)
}

// WriteJSONOr is WriteJSON with the body of the 500 that answers a value
// that does not encode: a surface with its own error shape (the seed API)
// gives it.
func WriteJSONOr(w http.ResponseWriter, status int, v any, internal []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		if l := encodeLog.Load(); l != nil {
			l.Error("an answer did not encode as JSON; answered 500", zap.Int("status", status), zap.Error(err))
		}
		status, b = http.StatusInternalServerError, internal
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers with the API's error body (apitypes.ErrorBody). Every
// route of /api/v1, whichever package serves it, answers errors through it,
// so a client sees one shape. details may be nil (sent as []).
func WriteError(w http.ResponseWriter, status int, code apitypes.Code, msg string, details []string) {
	if details == nil {
		details = []string{}
	}
	WriteJSON(w, status, apitypes.ErrorBody{Error: apitypes.ErrorInfo{Code: code, Message: msg, Details: details}})
}
