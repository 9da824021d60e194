package kit

import (
	"net/http"
	"strings"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/guard"
)

// Origins is the cross-origin policy of the browser-facing endpoints (the
// event stream and the seed API). A request with no Origin header (curl,
// scripts) is always allowed. A browser's Origin is judged by Hosts
// (loopback pages, configured names, the address the connection arrived
// on), never by the request's own Host, which a DNS-rebinding page
// controls. Allow lists further origins ("http://host:port", or "*" for
// any).
type Origins struct {
	Hosts guard.Hosts
	Allow []string
}

// Allowed reports whether r's Origin may use the endpoints.
func (o Origins) Allowed(r *http.Request) bool {
	if o.Hosts.AllowedOrigin(r) {
		return true
	}
	origin := r.Header.Get("Origin")
	for _, a := range o.Allow {
		if a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin) {
			return true
		}
	}
	return false
}

// Check applies the policy: it sets the CORS headers for an allowed
// origin, answers a preflight (OPTIONS) itself, and refuses a request from
// an origin that is not allowed with a JSON 403, so that no other site's
// page can make a browser change anything here. It reports whether the
// caller should go on serving the request.
func (o Origins) Check(w http.ResponseWriter, r *http.Request, methods string) bool {
	proceed, denied := o.Apply(w, r, methods)
	if denied {
		WriteError(w, http.StatusForbidden, apitypes.CodeForbidden, "requests from origin "+r.Header.Get("Origin")+" are not allowed", nil)
	}
	return proceed
}

// Apply is Check without the error response: denied reports a refused
// origin, for the caller to answer in its own error shape; proceed is false
// also after a preflight it answered.
func (o Origins) Apply(w http.ResponseWriter, r *http.Request, methods string) (proceed, denied bool) {
	origin := r.Header.Get("Origin")
	if !o.Allowed(r) {
		return false, true
	}
	if origin != "" {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Methods", methods+", OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type, Idempotency-Key, X-Orion-Admin-Token, Authorization, Last-Event-ID")
		h.Set("Access-Control-Max-Age", "600")
	}
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return false, false
	}
	return true, false
}
