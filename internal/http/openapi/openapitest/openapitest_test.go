package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func answer(method, path string, status int, body string) (bool, error) {
	req := httptest.NewRequest(method, "http://127.0.0.1:8080"+path, nil)
	h := http.Header{"Content-Type": {"application/json"}}
	return Validate(req, status, h, []byte(body))
}

// The checker accepts what the document allows and refuses the rest: an
// undocumented status, a code the response does not name, a body of the
// wrong shape. Without this, a check that passes everything would pass.
func TestValidate(t *testing.T) {
	notFound := `{"error":{"code":"not_found","message":"no DAG x","details":[]}}`
	for _, tc := range []struct {
		name, method, path string
		status             int
		body, fails        string // fails: part of the error, "" for none
	}{
		{"documented error", "GET", "/api/v1/dags/x", 404, notFound, ""},
		{"documented answer", "POST", "/api/v1/dags/x/cancel", 200, `{"id":"x","status":"cancelled"}`, ""},
		{"undocumented status", "GET", "/api/v1/dags/x", 418, notFound, "status is not supported"},
		{"code the response does not name", "GET", "/api/v1/dags/x", 404,
			`{"error":{"code":"conflict","message":"m","details":[]}}`, "conflict"},
		{"the seed's shape on an API route", "GET", "/api/v1/dags/x", 404, `{"error":"no DAG x","code":"not_found"}`, "error"},
		{"a missing required field", "POST", "/api/v1/dags/x/cancel", 200, `{"id":"x"}`, "status"},
		{"a status outside the enum", "GET", "/api/v1/dags", 200, `{"dags":[{"id":"d","name":"d","status":"sleeping","run":1,` +
			`"submitted_at":"2026-01-01T00:00:00Z","task_count":0,"counts":{}}],"revision":1,"node":"n1"}`, "sleeping"},
		{"the seed's shape on a seed route", "POST", "/api/v1/dag", 429, `{"error":"system overloaded","code":"overloaded"}`, ""},
		{"the API's shape from the middleware on a seed route", "POST", "/api/v1/dag", 429,
			`{"error":{"code":"rate_limited","message":"m","details":[]}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			described, err := answer(tc.method, tc.path, tc.status, tc.body)
			if !described {
				t.Fatalf("%s %s is not described: %v", tc.method, tc.path, err)
			}
			switch {
			case tc.fails == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.fails != "" && err == nil:
				t.Fatal("accepted")
			case tc.fails != "" && !strings.Contains(err.Error(), tc.fails):
				t.Fatalf("refused for another reason than %q: %v", tc.fails, err)
			}
		})
	}
	if described, err := answer("GET", "/no/such/route", 404, notFound); described || err != nil {
		t.Fatalf("an undescribed route: described %v, %v", described, err)
	}
}
