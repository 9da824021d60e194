// Package openapitest holds HTTP answers to the OpenAPI document the
// server embeds (internal/http/openapi): a test wraps the handler it drives
// in Checked, and every answer of a documented route must have a status the
// document lists for that route and, for JSON, a body that validates
// against the schema of that status (an error's code among those the
// response names). Tests of the API, the demo controls and the seed API do,
// so every answer they provoke checks the document too.
package openapitest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/orion-sched/orion/internal/http/openapi"
)

var (
	loadOnce sync.Once
	router   routers.Router
	loadErr  error
)

// Router returns a router over the embedded document.
func Router() (routers.Router, error) {
	loadOnce.Do(func() {
		var doc *openapi3.T
		doc, loadErr = openapi3.NewLoader().LoadFromData(openapi.Document())
		if loadErr != nil {
			return
		}
		router, loadErr = legacy.NewRouter(doc)
	})
	return router, loadErr
}

// maxBody bounds what is kept of an answer to validate it; a longer body
// (a large log) is checked for its status only.
const maxBody = 4 << 20

// Validate checks one answer to req. It returns false, with no error, when
// the document does not describe the route (a path no route serves, or a
// route a test mounted for itself).
func Validate(req *http.Request, status int, header http.Header, body []byte) (bool, error) {
	rt, err := Router()
	if err != nil {
		return false, err
	}
	u := *req.URL
	u.Scheme, u.Host = "", ""
	probe := &http.Request{Method: req.Method, URL: &u, Header: req.Header, Host: req.Host}
	route, params, err := rt.FindRoute(probe)
	var re *routers.RouteError
	if errors.As(err, &re) && (re.Reason == routers.ErrPathNotFound.Error() || re.Reason == routers.ErrMethodNotAllowed.Error()) {
		return false, nil // the legacy router returns copies of the sentinels
	}
	if err != nil {
		return false, err
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if len(body) > maxBody || mt != "application/json" {
		opts.ExcludeResponseBody = true
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                opts,
	})
	if err != nil {
		// kin-openapi's message goes on with the whole schema.
		msg := err.Error()
		if len(msg) > 1500 {
			msg = msg[:1500] + " …"
		}
		return true, errors.New(msg)
	}
	return true, nil
}

// Checked wraps h so that every answer it gives to a documented route is
// validated against the document; a mismatch fails t (with the request,
// the status and the body).
func Checked(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.hijacked {
			return // a WebSocket: its 101 went out on the raw connection
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if _, err := Validate(r, status, w.Header(), rec.body.Bytes()); err != nil {
			t.Errorf("%s %s answered %d, which the OpenAPI document (internal/http/openapi/openapi.json) does not allow: %v\nbody: %.2000s",
				r.Method, pathOf(r.URL), status, err, rec.body.Bytes())
		}
	})
}

func pathOf(u *url.URL) string {
	if u.RawQuery != "" {
		return u.Path + "?" + u.RawQuery
	}
	return u.Path
}

// recorder passes the answer through and keeps its status and the start of
// its body.
type recorder struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() <= maxBody {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("openapitest: the response writer cannot be hijacked")
	}
	r.hijacked = true
	return hj.Hijack()
}

// Unwrap gives http.ResponseController the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
