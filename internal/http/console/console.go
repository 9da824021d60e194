// Package console serves Orion's web console: a single page (TypeScript,
// built by Vite from internal/http/console/web) that submits DAGs, shows them
// running live over the event stream, and shows the cluster and its metrics.
//
// The built page is embedded from internal/http/console/dist, which is not
// committed: `make console` (Node.js 20.19+ and npm) fills it, and a later
// `go build` embeds it. Built without it (only dist/.keep), the binary serves
// a short page that says how to build the console; the API is unaffected.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

//go:embed all:dist
var dist embed.FS

// Handler serves the embedded console: "/" and "/index.html" (the page, or
// the placeholder when the console was not built) and "/assets/..."; any
// other path is a JSON 404 in the API's error format, and any method but GET
// and HEAD a JSON 405. Routes mounts it next to the API.
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic("console: " + err.Error()) // cannot happen: dist is embedded
	}
	return New(sub)
}

// Routes mounts the console on a ServeMux (api.Config.Routes) with patterns
// that leave every other path to the API: "/" and "/index.html" serve the
// page, "/assets/" its scripts and styles. Unknown paths keep the API's own
// JSON 404 and 405 answers.
func Routes() map[string]http.Handler {
	h := Handler()
	return map[string]http.Handler{"GET /{$}": h, "GET /index.html": h, "GET /assets/": h}
}

// Public reports whether path is one of the console's static files, which
// hold no data and may be served without the bearer token: the page asks
// for the token itself when the API answers 401.
func Public(path string) bool {
	return path == "/" || path == "/index.html" || strings.HasPrefix(path, "/assets/")
}

// Built reports whether the embedded console holds a built page (false when
// the binary was built without `make console`).
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}

// file is one asset held in memory, with its ETag and, once asked for, its
// gzip form.
type file struct {
	name  string
	data  []byte
	ctype string
	etag  string

	gzOnce sync.Once
	gz     []byte // nil: not worth compressing
}

type handler struct {
	files map[string]*file // by path without the leading slash
	built bool
}

// New serves the console from fsys, whose root holds index.html and
// assets/. Files are read once, here.
func New(fsys fs.FS) http.Handler {
	h := &handler{files: map[string]*file{}}
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(path.Base(p), ".") {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil
		}
		sum := sha256.Sum256(data)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(data)
		}
		h.files[p] = &file{name: p, data: data, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if _, ok := h.files["index.html"]; ok {
		h.built = true
	} else {
		data := []byte(placeholder)
		sum := sha256.Sum256(data)
		h.files["index.html"] = &file{name: "index.html", data: data, ctype: "text/html; charset=utf-8", etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
	}
	return h
}

// csp allows the page only its own scripts and styles. connect-src also
// allows other http(s) origins: in demo mode the page may ask another
// replica (the leader) to crash.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self' data:; connect-src 'self' http: https:; worker-src 'self' blob:; object-src 'none'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if p == "" {
		p = "index.html"
	}
	f := h.files[p]
	if f == nil {
		writeError(w, http.StatusNotFound, "not_found", "no route GET /"+p)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("ETag", f.etag)
	hd.Set("Vary", "Accept-Encoding")
	if strings.HasPrefix(p, "assets/") {
		// Vite names assets by their content hash.
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache")
	}
	if strings.HasSuffix(p, ".html") {
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Frame-Options", "DENY")
	}
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatch(match, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := f.data
	if acceptsGzip(r) {
		if gz := f.gzipped(); gz != nil {
			body = gz
			hd.Set("Content-Encoding", "gzip")
		}
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// gzipped returns the gzip form of a compressible file, or nil.
func (f *file) gzipped() []byte {
	f.gzOnce.Do(func() {
		if len(f.data) < 1024 || !compressible(f.ctype) {
			return
		}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(f.data)
		_ = zw.Close()
		if b.Len() < len(f.data)*9/10 {
			f.gz = b.Bytes()
		}
	})
	return f.gz
}

func compressible(ctype string) bool {
	for _, p := range []string{"text/", "application/javascript", "text/javascript", "application/json", "image/svg+xml"} {
		if strings.HasPrefix(ctype, p) {
			return true
		}
	}
	return false
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// writeError answers in the API's error format.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "details": []any{}}})
}

// placeholder is served at / when the binary was built without the console.
const placeholder = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Orion: console not built</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; max-width: 46em; margin: 3em auto; padding: 0 1em; color: #0f172a; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; background: #f1f5f9; border-radius: 4px; }
code { padding: 1px 4px; } pre { padding: 10px 12px; }
</style>
</head>
<body>
<h1>Orion is running; its web console was not built into this binary</h1>
<p>The console is a TypeScript page embedded at build time. This binary was built
without it (for example with a plain <code>go build</code> on a machine without Node.js).
To build it, you need Node.js 20.19 or later and npm, then:</p>
<pre>make console   # npm ci and vite build into internal/http/console/dist
make run       # rebuilds orion with the console embedded, then starts it</pre>
<p><code>make build</code> and <code>make run</code> build the console by themselves when npm is installed.</p>
<p>The API works without it:
<a href="/api/v1/dags">/api/v1/dags</a>,
<a href="/api/v1/cluster">/api/v1/cluster</a>,
<a href="/metrics">/metrics</a>, and the CLI: <code>bin/orion submit -f test/fixtures/etl.yaml --wait</code>.</p>
</body>
</html>
`
