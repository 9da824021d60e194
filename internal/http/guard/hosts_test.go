package guard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAllowedHost(t *testing.T) {
	h := NewHosts("orion.example.com", "api.internal:8080", ".svc.cluster.local", "http://orion-0.orion:8080/")
	for _, c := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.9.9.9", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"10.0.0.5:8080", true}, // an IP literal cannot be a rebound name
		{"localhost:8080", true},
		{"LOCALHOST.", true},
		{"orion.example.com", true},
		{"Orion.Example.Com.:443", true},
		{"api.internal:9999", true}, // the port of an entry is ignored
		{"orion-api.orion.svc.cluster.local:8080", true},
		{"orion-0.orion:8080", true}, // taken from a URL
		{"svc.cluster.local", false}, // ".suffix" matches subdomains only
		{"rebind.example:8080", false},
		{"example.com", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.nip.io", false},
		{"", false},
	} {
		if got := h.AllowedHost(c.host); got != c.want {
			t.Errorf("AllowedHost(%q) = %v, want %v", c.host, got, c.want)
		}
	}
	var zero Hosts
	if zero.AllowedHost("orion.example.com") || !zero.AllowedHost("127.0.0.1:1") || !zero.AllowedHost("localhost") {
		t.Error("the zero value must serve IP literals and localhost only")
	}
	if !NewHosts("*").AllowedHost("anything.example") {
		t.Error(`"*" must allow any name`)
	}
}

func TestAllowedOrigin(t *testing.T) {
	h := NewHosts("orion.example.com")
	local := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 8080}
	for _, c := range []struct {
		origin string
		want   bool
	}{
		{"", true},
		{"http://127.0.0.1:8080", true},
		{"http://localhost:5173", true},
		{"http://[::1]:3000", true},
		{"https://orion.example.com", true},
		{"http://10.0.0.5:8080", true},  // the address the connection arrived on
		{"http://10.0.0.5:9090", false}, // another port of that host is another origin
		{"http://10.0.0.6:8080", false},
		{"http://rebind.example:8080", false},
		{"null", false},
		{"file://", false},
		{"chrome-extension://abc", false},
		{"http://%zz", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://rebind.example:8080/api/v1/dags", nil)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := h.AllowedOrigin(r); got != c.want {
			t.Errorf("AllowedOrigin(%q) = %v, want %v", c.origin, got, c.want)
		}
	}
}

func TestClientKey(t *testing.T) {
	for _, c := range []struct {
		remote  string
		key     string
		limited bool
	}{
		{"127.0.0.1:80", "", false},
		{"127.1.2.3:80", "", false},
		{"[::1]:80", "", false},
		{"[::ffff:127.0.0.1]:80", "", false},
		{"203.0.113.9:1234", "203.0.113.9", true},
		{"[::ffff:203.0.113.9]:1", "203.0.113.9", true},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64", true},
		{"[2001:db8:1:2::9]:443", "2001:db8:1:2::/64", true},
		{"[fe80::1%eth0]:1", "fe80::/64", true},
		{"@", "?@", true},
	} {
		key, limited := ClientKey(c.remote)
		if key != c.key || limited != c.limited {
			t.Errorf("ClientKey(%q) = %q, %v; want %q, %v", c.remote, key, limited, c.key, c.limited)
		}
	}
}
