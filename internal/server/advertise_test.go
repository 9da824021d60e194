package server

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func addrs(cidrs ...string) func() ([]net.Addr, error) {
	return func() ([]net.Addr, error) {
		var out []net.Addr
		for _, c := range cidrs {
			ip, n, err := net.ParseCIDR(c)
			if err != nil {
				panic(err)
			}
			n.IP = ip
			out = append(out, n)
		}
		return out, nil
	}
}

// A replica listening on every address advertises the host's one private
// address, never "[::]" or "0.0.0.0", which no peer can dial; when the
// choice is not obvious it asks for advertise_url.
func TestAdvertisedURL(t *testing.T) {
	host := addrs("127.0.0.1/8", "::1/128", "fe80::1/64", "10.1.2.3/16", "2001:db8::5/64")
	for _, c := range []struct {
		advertise, addr string
		ifaces          func() ([]net.Addr, error)
		want, err       string
		derived         bool
	}{
		{"https://orion.example:443", "[::]:8080", host, "https://orion.example:443", "", false},
		{"", "127.0.0.1:8080", host, "http://127.0.0.1:8080", "", false},
		{"", "10.1.2.3:8080", host, "http://10.1.2.3:8080", "", false},
		{"", "[::]:8080", host, "http://[2001:db8::5]:8080", "", true},
		{"", "[::]:8080", addrs("10.1.2.3/16", "fd00::2/64", "2001:db8::5/64"), "http://[fd00::2]:8080", "", true},
		// This machine's: a TEST-NET IPv4 address and an IPv6 ULA.
		{"", "0.0.0.0:8080", addrs("127.0.0.1/8", "192.0.2.2/24", "fd00::2/64"), "http://192.0.2.2:8080", "", true},
		{"", "0.0.0.0:8080", host, "http://10.1.2.3:8080", "", true},
		{"", ":8080", host, "http://10.1.2.3:8080", "", true},
		{"", "0.0.0.0:8080", addrs("127.0.0.1/8", "2001:db8::5/64"), "http://[2001:db8::5]:8080", "", true},
		{"", "0.0.0.0:8080", addrs("127.0.0.1/8", "10.0.0.1/8", "192.168.1.2/24"), "", "several (10.0.0.1, 192.168.1.2): set advertise_url", false},
		{"", "[::]:8080", addrs("127.0.0.1/8", "fe80::1/64"), "", "no address other replicas and workers could reach", false},
		{"", "[::]:8080", func() ([]net.Addr, error) { return nil, errors.New("no netlink") }, "", "cannot list this host's: no netlink", false},
	} {
		bound := c.addr
		if strings.HasPrefix(bound, "0.0.0.0:") || strings.HasPrefix(bound, ":") {
			bound = "[::]:" + bound[strings.LastIndexByte(bound, ':')+1:] // Go's dual-stack wildcard
		}
		got, derived, err := advertisedURL("http", c.advertise, c.addr, bound, c.ifaces)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %q: got %q, %v; want error %q", c.advertise, c.addr, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || derived != c.derived {
			t.Errorf("%q %q: got %q (derived %v), %v; want %q (derived %v)", c.advertise, c.addr, got, derived, err, c.want, c.derived)
		}
	}
}
