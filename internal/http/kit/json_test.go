package kit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

func TestWriteErrorShape(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusConflict, apitypes.CodeConflict, "DAG d already succeeded", nil)
	want := `{"error":{"code":"conflict","message":"DAG d already succeeded","details":[]}}` + "\n"
	if rec.Code != http.StatusConflict || rec.Body.String() != want {
		t.Fatalf("got %d %q, want 409 %q", rec.Code, rec.Body.String(), want)
	}
	if ct, cc := rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
		t.Fatalf("headers: Content-Type %q, Cache-Control %q", ct, cc)
	}
}

// A value that does not encode is a clean 500 in the caller's error shape.
func TestWriteJSONOrFallback(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSONOr(rec, http.StatusOK, map[string]any{"f": func() {}}, []byte(`{"error":"internal error","code":"internal"}`))
	if rec.Code != http.StatusInternalServerError || rec.Body.String() != `{"error":"internal error","code":"internal"}`+"\n" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, func() {})
	if rec.Code != http.StatusInternalServerError || rec.Body.String() != string(internalBody)+"\n" {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}

// The 500 of a value that does not encode is logged with its cause: a time
// past year 9999 (a schedule's tick, once) failed every listing silently.
func TestWriteJSONLogsWhatDidNotEncode(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	SetLogger(zap.New(core))
	defer SetLogger(nil)
	WriteJSON(httptest.NewRecorder(), http.StatusOK, map[string]time.Time{"next": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if logs.Len() != 1 || !strings.Contains(logs.All()[0].ContextMap()["error"].(string), "year outside of range") {
		t.Fatalf("logged %+v", logs.All())
	}
}
