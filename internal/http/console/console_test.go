package console

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func serve(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantAPIError(t *testing.T, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != code {
		t.Fatalf("body %q: want error code %q (%v)", w.Body, code, err)
	}
}

func TestPlaceholderWhenNotBuilt(t *testing.T) {
	h := New(fstest.MapFS{".keep": {Data: nil}})
	for _, p := range []string{"/", "/index.html"} {
		w := serve(t, h, "GET", p, nil)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %q", p, w.Code, w.Header().Get("Content-Type"))
		}
		if !strings.Contains(w.Body.String(), "make console") {
			t.Fatalf("GET %s: the placeholder does not say how to build the console:\n%s", p, w.Body)
		}
	}
	wantAPIError(t, serve(t, h, "GET", "/.keep", nil), http.StatusNotFound, "not_found")
	wantAPIError(t, serve(t, h, "GET", "/assets/index.js", nil), http.StatusNotFound, "not_found")
}

func builtFS() fstest.MapFS {
	return fstest.MapFS{
		".keep":                 {Data: nil},
		"index.html":            {Data: []byte(`<!doctype html><script type="module" src="/assets/index-abc.js"></script>`)},
		"assets/index-abc.js":   {Data: bytes.Repeat([]byte("console.log('orion');\n"), 200)},
		"assets/index-abc.css":  {Data: []byte("body{margin:0}")},
		"assets/sub/x-0123.svg": {Data: []byte("<svg xmlns='http://www.w3.org/2000/svg'/>")},
	}
}

func TestServesBuiltAssets(t *testing.T) {
	h := New(builtFS())
	w := serve(t, h, "GET", "/", nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "/assets/index-abc.js") {
		t.Fatalf("GET /: %d %s", w.Code, w.Body)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("index Cache-Control %q", cc)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("index CSP %q", csp)
	}

	w = serve(t, h, "GET", "/assets/index-abc.js", nil)
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET js: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if cc := w.Header().Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Errorf("asset Cache-Control %q", cc)
	}
	if w.Header().Get("Content-Encoding") != "" {
		t.Errorf("gzip without Accept-Encoding")
	}
	plain := w.Body.String()

	// gzip when asked, and the same bytes once inflated.
	w = serve(t, h, "GET", "/assets/index-abc.js", map[string]string{"Accept-Encoding": "br, gzip"})
	if w.Header().Get("Content-Encoding") != "gzip" || w.Body.Len() >= len(plain) {
		t.Fatalf("gzip: encoding %q, %d bytes of %d", w.Header().Get("Content-Encoding"), w.Body.Len(), len(plain))
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(zr)
	if string(got) != plain {
		t.Fatalf("inflated asset differs")
	}
	if w := serve(t, h, "GET", "/assets/index-abc.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); w.Header().Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 still compressed")
	}

	// Revalidation.
	etag := w.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if w := serve(t, h, "GET", "/assets/index-abc.js", map[string]string{"If-None-Match": etag}); w.Code != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", w.Code)
	}

	// HEAD: headers, no body.
	w = serve(t, h, "HEAD", "/assets/index-abc.css", nil)
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "14" {
		t.Errorf("HEAD: %d, %d bytes, length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if w := serve(t, h, "GET", "/assets/sub/x-0123.svg", nil); w.Code != 200 || w.Header().Get("Content-Type") != "image/svg+xml" {
		t.Errorf("svg: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
}

func TestRefusesWhatIsNotAsset(t *testing.T) {
	h := New(builtFS())
	wantAPIError(t, serve(t, h, "GET", "/nope", nil), http.StatusNotFound, "not_found")
	wantAPIError(t, serve(t, h, "GET", "/api/v1/unknown", nil), http.StatusNotFound, "not_found")
	wantAPIError(t, serve(t, h, "GET", "/.keep", nil), http.StatusNotFound, "not_found")
	wantAPIError(t, serve(t, h, "GET", "/assets/../../console.go", nil), http.StatusNotFound, "not_found")
	w := serve(t, h, "POST", "/", nil)
	wantAPIError(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
	if w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("Allow %q", w.Header().Get("Allow"))
	}
}

// The embedded console serves either the built page or the placeholder.
func TestEmbedded(t *testing.T) {
	w := serve(t, Handler(), "GET", "/", nil)
	if w.Code != 200 {
		t.Fatalf("GET /: %d", w.Code)
	}
	placeholder := strings.Contains(w.Body.String(), "make console")
	if Built() == placeholder {
		t.Fatalf("Built() = %v but the placeholder served = %v", Built(), placeholder)
	}
}

// Routes leaves unknown paths and other methods to the mux (the API turns
// them into JSON errors).
func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	for p, h := range Routes() {
		mux.Handle(p, h)
	}
	mux.HandleFunc("GET /api/v1/dags", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") })
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/", 200}, {"HEAD", "/", 200}, {"GET", "/index.html", 200},
		{"GET", "/api/v1/dags", 200}, {"GET", "/api/v1/nothing", 404}, {"GET", "/nope", 404},
		{"POST", "/", 405}, {"DELETE", "/api/v1/dags", 405},
	} {
		w := serve(t, mux, c.method, c.path, nil)
		if w.Code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.code)
		}
	}
	for p, want := range map[string]bool{"/": true, "/index.html": true, "/assets/index-x.js": true, "/api/v1/dags": false, "/metrics": false, "/assetsx": false} {
		if Public(p) != want {
			t.Errorf("Public(%q) = %v", p, !want)
		}
	}
}
