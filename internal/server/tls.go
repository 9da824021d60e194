package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/tlsfiles"
)

// transportSecurity is how this replica's listener serves, and how it
// reaches the other replicas' APIs (forwarded writes, relays, probes, its
// own slots' stream to the leader).
type transportSecurity struct {
	serve *tls.Config  // nil: plain HTTP
	peers *tls.Config  // nil: the transport's default
	http  *http.Client // requests to other replicas, one pool for all; nil without TLS settings
}

// loadTLS reads the certificate and CA files the settings name. With a
// client CA, replicas require each other's certificates too: each presents
// its own serving pair, re-read with it.
func loadTLS(cfg config.Server, log *zap.Logger) (transportSecurity, error) {
	var ts transportSecurity
	var pair *tlsfiles.Pair
	if cfg.TLSCertFile != "" {
		var err error
		pair, err = tlsfiles.LoadPair(cfg.TLSCertFile, cfg.TLSKeyFile, func(err error) {
			log.Error("TLS certificate not reloaded: the one loaded before is served", zap.Error(err))
		})
		if err != nil {
			return ts, err
		}
		if ts.serve, err = tlsfiles.Server(pair, cfg.TLSClientCAFile); err != nil {
			return ts, err
		}
	}
	if cfg.TLSCertFile != "" || cfg.TLSCAFile != "" {
		var present *tlsfiles.Pair
		if cfg.TLSClientCAFile != "" {
			present = pair
		}
		var err error
		if ts.peers, err = tlsfiles.Client(cfg.TLSCAFile, present); err != nil {
			return ts, err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = ts.peers
		ts.http = &http.Client{Transport: t}
	}
	return ts, nil
}

// scheme is the API's URL scheme.
func (ts transportSecurity) scheme() string {
	if ts.serve != nil {
		return "https"
	}
	return "http"
}

// listen wraps ln in TLS when it is on.
func (ts transportSecurity) listen(ln net.Listener) net.Listener {
	if ts.serve == nil {
		return ln
	}
	return tls.NewListener(ln, ts.serve)
}

// client is the HTTP client for requests to other replicas (the API's
// forwarding, the seed API's and the demo's relays share its connections);
// nil (the packages' default) without TLS settings.
func (ts transportSecurity) client() *http.Client { return ts.http }

// probe is the client of the standbys' "does the leader still lead" probe:
// no keep-alive, so no probe reuses a connection to a process that died.
func (ts transportSecurity) probe() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, TLSClientConfig: ts.peers}}
}

// wsDialer is the dialer of this replica's own slots' stream to a leader
// on another replica.
func (ts transportSecurity) wsDialer() *websocket.Dialer {
	return &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 5 * time.Second, TLSClientConfig: ts.peers}
}
