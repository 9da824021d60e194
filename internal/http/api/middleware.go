package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/http/console"
	"github.com/orion-sched/orion/internal/http/guard"
	"github.com/orion-sched/orion/internal/http/kit"
)

// ServeHTTP wraps the routes with panic recovery, request logging and
// metrics, the Host allow-list, the rate limit and authentication, in that
// order from outside in: the rate limit comes before authentication so that
// guessing tokens is limited too, and the Host check comes first so that a
// rebound name reaches nothing, not even the probes.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w, req: r}
	defer func() {
		p := recover()
		if p != nil && p != http.ErrAbortHandler {
			s.log.Error("panic serving request", zap.String("method", r.Method),
				zap.String("path", r.URL.Path), zap.Any("panic", p), zap.Stack("stack"))
			if !rw.wroteHeader {
				clear(rw.Header()) // drop what the handler set before it panicked
				kit.WriteError(rw, http.StatusInternalServerError, apitypes.CodeInternal, "internal error", nil)
			}
		}
		s.observe(rw, r, start)
		if p == http.ErrAbortHandler {
			panic(p) // net/http's way to abort a response; it logs nothing
		}
	}()

	if !s.cfg.Hosts.AllowedHost(r.Host) {
		s.m.HostRefused.Inc()
		kit.WriteError(rw, http.StatusMisdirectedRequest, apitypes.CodeHostNotAllowed,
			fmt.Sprintf("host %q is not served here: use 127.0.0.1 or localhost, or add the name to allowed_hosts (--allowed-hosts, ORION_ALLOWED_HOSTS)", r.Host), nil)
		return
	}
	open := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
	// A write a standby forwarded with the cluster's token was limited where
	// it arrived; limiting it again would throttle every forwarded client as
	// one address.
	// The token is read once, for both.
	p, authed := s.keys.Authenticate(r)
	forwarded := r.Header.Get(kit.ForwardedHeader) != "" && s.cfg.AuthToken != "" && authed && p.Cluster
	if !open && !forwarded && s.limiter != nil && !s.allow(rw, r) {
		return
	}
	if !open && s.keys.Enabled() && !(s.cfg.MetricsNoAuth && r.URL.Path == "/metrics") && !console.Public(r.URL.Path) {
		if !authed {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="orion"`)
			kit.WriteError(rw, http.StatusUnauthorized, apitypes.CodeUnauthorized, "missing or invalid bearer token", nil)
			return
		}
		if need, ok := auth.Permits(p, r.Method, r.URL.Path); !ok {
			kit.WriteError(rw, http.StatusForbidden, apitypes.CodeForbidden,
				fmt.Sprintf("token %q has role %s: %s %s needs role %s", p.Name, p.Role, r.Method, r.URL.Path, need), nil)
			return
		}
		r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	}
	if s.crossSiteWrite(r) {
		kit.WriteError(rw, http.StatusForbidden, apitypes.CodeCrossOrigin,
			"a write from another origin ("+r.Header.Get("Origin")+") is refused: shell tasks mean remote execution", nil)

		return
	}
	// The mux sets the pattern it routed by on the request it is given,
	// which is a copy once a principal is attached: rw must look at that
	// one, or a handler's own 404 reads as no route at all.
	rw.req, rw.routing = r, true
	s.mux.ServeHTTP(rw, r)
}

// crossSiteWrite reports a state-changing request that a browser sent on
// behalf of another site. Without this check any web page open on this
// machine could POST a DAG of shell tasks to a loopback server that needs
// no token (browsers send text/plain and form bodies cross-origin without
// asking). Browsers always send Origin on such requests; CLI and other
// programs send none. The Origin is judged by the allow-list, never by the
// request's own Host, which a rebinding page chooses.
func (s *server) crossSiteWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return !s.cfg.Hosts.AllowedOrigin(r)
}

// allow applies the per-IP rate limit; loopback clients are never limited.
func (s *server) allow(w http.ResponseWriter, r *http.Request) bool {
	key, limited := guard.ClientKey(r.RemoteAddr)
	if !limited {
		return true
	}
	ok, wait := s.limiter.allow(key, time.Now())
	if ok {
		return true
	}
	s.m.RateLimited.Inc()
	secs := int((wait + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	kit.WriteError(w, http.StatusTooManyRequests, apitypes.CodeRateLimited,
		fmt.Sprintf("too many requests from this address; retry in %ds", secs), nil)

	return false
}

// observe logs the request at debug level and counts it by route pattern.
func (s *server) observe(rw *responseWriter, r *http.Request, start time.Time) {
	status := rw.status
	if !rw.wroteHeader {
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	route := r.Pattern
	if route == "" {
		// Refused before routing (401, 429), or no route matched.
		_, route = s.mux.Handler(r)
		if route == "" {
			route = "unmatched"
		}
	}
	s.m.HTTPRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	if ce := s.log.Check(zap.DebugLevel, "http request"); ce != nil {
		ce.Write(zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("route", route),
			zap.Int("status", status), zap.Duration("duration", time.Since(start)),
			zap.String("remote", r.RemoteAddr), zap.Int64("bytes", rw.bytes))
	}
}

// responseWriter records the status for logs and metrics, and turns the
// plain-text 404 and 405 replies of http.ServeMux into JSON errors (keeping
// the Allow header the mux sets for 405).
type responseWriter struct {
	http.ResponseWriter
	req         *http.Request
	routing     bool // handed to the mux: req.Pattern is meaningful
	wroteHeader bool
	status      int
	bytes       int64
	swallow     bool // the mux's text body is replaced by JSON
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code >= 100 && code < 200 {
		w.ResponseWriter.WriteHeader(code) // informational: not the final status
		return
	}
	w.wroteHeader, w.status = true, code
	if w.routing && w.req.Pattern == "" && (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) {
		w.Header().Del("X-Content-Type-Options")
		msg := "no such route: " + w.req.Method + " " + w.req.URL.Path
		errCode := apitypes.CodeNotFound
		if code == http.StatusMethodNotAllowed {
			errCode = apitypes.CodeMethodNotAllowed
			msg = fmt.Sprintf("method %s is not allowed on %s; allowed: %s", w.req.Method, w.req.URL.Path, w.Header().Get("Allow"))
		}
		w.routing = false // WriteError calls WriteHeader again
		w.wroteHeader = false
		kit.WriteError(w, code, errCode, msg, nil)
		w.swallow = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.swallow {
		return len(p), nil
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Flush lets the log endpoint push output as it copies it.
func (w *responseWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
