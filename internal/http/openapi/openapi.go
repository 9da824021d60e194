// Package openapi serves the OpenAPI 3.1 document of Orion's HTTP API at
// GET /api/v1/openapi.json: every route of /api/v1 with its parameters,
// bodies, statuses and error codes, the probes and metrics, and the
// seed-compatible routes.
//
// The document (openapi.json beside this file) is generated from the Go
// wire types (internal/http/apitypes and the seed API's) and the route
// table of internal/http/openapi/contract, whose tests fail when it is out
// of date, when the server's mux serves a route the document does not
// describe (or the other way round), or when a route answers a status or
// an error code the document does not name. Regenerate it with
// `make openapi`. It is embedded: the binary serves the document it was
// built with, without generating anything at run time.
package openapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"
)

// Path is where the API serves the document.
const Path = "/api/v1/openapi.json"

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI document (JSON). Callers must not modify it.
func Document() []byte { return document }

var etag = func() string {
	sum := sha256.Sum256(document)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}()

// Handler serves the document, with an ETag so that generators polling it
// get 304 until the server is upgraded.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("ETag", etag)
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(document))
	})
}
