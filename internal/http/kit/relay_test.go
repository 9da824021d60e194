package kit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRelayCopiesRequestAndAnswer(t *testing.T) {
	var got *http.Request
	var gotBody string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/api/v1/dags/d1")
		w.Header().Set("X-Internal", "not copied")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"d1"}`)
	}))
	defer other.Close()

	in := httptest.NewRequest("POST", "/api/v1/dags?wait=1", strings.NewReader("ignored: the body is passed"))
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set("Idempotency-Key", "k1")
	in.Header.Set("Cookie", "secret=1")
	rec := httptest.NewRecorder()
	err := Relay{
		Client: other.Client(), To: other.URL + "/", From: "n2", Token: "tok", Timeout: 5 * time.Second,
		Headers: []string{"Content-Type", "Idempotency-Key"},
		Set:     map[string]string{"X-Orion-Leader": "n1"},
	}.Do(rec, in, []byte(`{"tasks":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Method != "POST" || got.URL.RequestURI() != "/api/v1/dags?wait=1" || gotBody != `{"tasks":[]}` {
		t.Errorf("relayed %s %s %q", got.Method, got.URL.RequestURI(), gotBody)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/json", "Idempotency-Key": "k1", "Authorization": "Bearer tok",
		ForwardedHeader: "n2", "Cookie": "",
	} {
		if v := got.Header.Get(h); v != want {
			t.Errorf("relayed header %s = %q, want %q", h, v, want)
		}
	}
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"id":"d1"}` {
		t.Errorf("answer %d %q", rec.Code, rec.Body)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/json", "Location": "/api/v1/dags/d1", "X-Orion-Leader": "n1", "X-Internal": "",
	} {
		if v := rec.Header().Get(h); v != want {
			t.Errorf("answer header %s = %q, want %q", h, v, want)
		}
	}
}

func TestRelayToAnUnreachableReplicaWritesNothing(t *testing.T) {
	other := httptest.NewServer(http.NotFoundHandler())
	url := other.URL
	other.Close() // nothing listens there now
	rec := httptest.NewRecorder()
	err := Relay{To: url, From: "n2"}.Do(rec, httptest.NewRequest("POST", "/admin/simulate-crash", nil), nil)
	if err == nil {
		t.Fatal("no error from a replica that is gone")
	}
	if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("wrote %d %v %q after a failed relay", rec.Code, rec.Header(), rec.Body)
	}
}
