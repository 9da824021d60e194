// Package guard decides which Host and Origin values an Orion server
// answers, so that a web page cannot drive it through DNS rebinding.
//
// Loopback is not a trust boundary for browsers: a page on any site can
// rebind its own host name to 127.0.0.1 and then send requests whose Host and
// Origin both name that site. Comparing Origin with Host therefore proves
// nothing. Instead every request's Host must be a name this server serves:
//
//   - an IP literal (127.0.0.1:8080, [::1], 10.0.0.5): a rebinding attack needs
//     a DNS name, since a browser sends an IP literal as Host only to a page
//     whose own origin is that IP;
//   - localhost, which browsers resolve to loopback themselves;
//   - a name configured by the operator (allowed_hosts; the Helm chart fills
//     in its Service names), or "*" to accept any.
//
// An Origin header is trusted only when it names a loopback page, a
// configured name, or the very address the connection arrived on; never
// because it equals the request's own Host.
package guard

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Hosts is the allow-list of host names. The zero value allows IP literals
// and localhost only: the right policy for a loopback server.
type Hosts struct {
	names    map[string]bool // exact, lower case, no port
	suffixes []string        // ".example.com" matches any subdomain
	any      bool            // "*": every name (the operator's explicit choice)
}

// NewHosts builds the allow-list from configured entries: "name",
// "name:port" (the port is ignored), ".suffix" for every subdomain, "*" for
// any, or a URL whose host is taken (so an advertise URL can be passed as
// is). Empty entries are skipped.
func NewHosts(entries ...string) Hosts {
	h := Hosts{names: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if strings.Contains(e, "://") {
			if u, err := url.Parse(e); err == nil {
				e = u.Host
			}
		}
		switch {
		case e == "":
		case e == "*":
			h.any = true
		case strings.HasPrefix(e, "."):
			h.suffixes = append(h.suffixes, normalize(e))
		default:
			h.names[normalize(hostOnly(e))] = true
		}
	}
	return h
}

// Any reports whether every host name is allowed ("*" was configured).
func (h Hosts) Any() bool { return h.any }

// AllowedHost reports whether a request's Host header (with or without a
// port) names this server.
func (h Hosts) AllowedHost(hostport string) bool {
	host := normalize(hostOnly(hostport))
	if host == "" {
		return false
	}
	if host == "localhost" || net.ParseIP(host) != nil {
		return true
	}
	return h.configured(host)
}

func (h Hosts) configured(host string) bool {
	if h.any || h.names[host] {
		return true
	}
	for _, s := range h.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// AllowedOrigin reports whether a browser page of this Origin may use the
// server: a page served from loopback (any port: a local development server
// is a local process), from a configured name, or from the local address r
// arrived on. An absent Origin (CLI, programs, same-origin GETs) is allowed;
// "null" (sandboxed frames, file://) and unparsable values are not.
func (h Hosts) AllowedOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	host := normalize(u.Hostname())
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback() || sameAddr(r.Context(), u)
	}
	return h.configured(host)
}

// sameAddr reports whether the origin's host and port are the address the
// connection was accepted on: a page this server served to that address.
func sameAddr(ctx context.Context, origin *url.URL) bool {
	local, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	lhost, lport, err := net.SplitHostPort(local.String())
	if err != nil {
		return false
	}
	port := origin.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[origin.Scheme]
	}
	lip, oip := net.ParseIP(lhost), net.ParseIP(origin.Hostname())
	return lip != nil && oip != nil && lip.Equal(oip) && port == lport
}

// hostOnly strips a port from "host:port" or "[v6]:port", and the brackets
// from "[v6]".
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// normalize lower-cases a name and drops the trailing dot of a fully
// qualified one ("Example.COM." and "example.com" are the same host).
func normalize(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
