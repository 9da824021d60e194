package server

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// advertisedURL is the API URL this replica registers for other replicas
// and workers: advertise_url when set; otherwise its listen address, and
// for an unspecified one (0.0.0.0, ::, or no host), which names no host a
// peer could dial, the machine's one address of the family it names,
// private rather than global, as Consul and Nomad choose theirs. Several private addresses, or none, leave the choice to
// advertise_url rather than guess: a wrong guess sends every forwarded
// write and worker connection to an address that does not answer.
//
// listen is the configured address, bound the one the listener got (its
// port is the real one when listen asked for port 0; its host is "::" for
// a dual-stack wildcard, so the family comes from listen).
func advertisedURL(scheme, advertise, listen, bound string, interfaceAddrs func() ([]net.Addr, error)) (url string, derived bool, err error) {
	if advertise != "" {
		return advertise, false, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", false, err
	}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return "", false, err
	}
	ip, perr := netip.ParseAddr(host)
	if host != "" && (perr != nil || !ip.IsUnspecified()) {
		return scheme + "://" + bound, false, nil
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return "", false, fmt.Errorf("listening on every address (%s) and cannot list this host's: %w; set advertise_url", listen, err)
	}
	// Candidates by preference: the family the listen address names
	// first (0.0.0.0 and no host: IPv4; "::": IPv6), private before
	// global within a family. The first class that has any decides.
	v4First := host != "::"
	var classes [4][]string // [v4 private, v4 global, v6 private, v6 global], reordered below
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := p.Addr().Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || !ip.IsGlobalUnicast() {
			continue
		}
		i := 0
		if ip.Is6() {
			i = 2
		}
		if !ip.IsPrivate() {
			i++
		}
		classes[i] = append(classes[i], ip.String())
	}
	order := []int{0, 1, 2, 3}
	if !v4First {
		order = []int{2, 3, 0, 1}
	}
	var pick []string
	for _, i := range order {
		if len(classes[i]) > 0 {
			pick = classes[i]
			break
		}
	}
	switch len(pick) {
	case 1:
		return scheme + "://" + net.JoinHostPort(pick[0], port), true, nil
	case 0:
		return "", false, fmt.Errorf("listening on every address (%s), and this host has no address other replicas and workers could reach: set advertise_url", listen)
	default:
		return "", false, fmt.Errorf("listening on every address (%s), and this host has several (%s): set advertise_url to the one other replicas and workers reach it by",
			listen, strings.Join(pick, ", "))
	}
}
