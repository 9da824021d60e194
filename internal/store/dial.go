package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// DialConfig is how a replica reaches etcd: its endpoints, credentials and
// TLS files (the etcd_* settings).
type DialConfig struct {
	Endpoints          []string
	Username, Password string
	// CA, Cert and Key are PEM files: the CA that signed etcd's
	// certificates, and this replica's client certificate and key.
	CA, Cert, Key string
	// Logger is the commit route's (nil: none).
	Logger *zap.Logger
}

// Dial opens the store on the etcd at cfg.Endpoints: a client with cfg's
// auth, TLS and keep-alives, and the commit route that takes the leader's
// transactions to etcd's raft leader (Route). The store owns both: Close
// closes them. A configuration etcd refuses fails here, with an error that
// names the setting to fix (see clientConfig).
func Dial(cfg DialConfig) (*Etcd, error) {
	cc, err := clientConfig(cfg)
	if err != nil {
		return nil, err
	}
	cli, err := newClient(cc, cfg.Username)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := NewEtcd(cli)
	s.owned, s.tls, s.dialMember = true, cc.TLS, memberDialer(cc)
	s.route = NewRoute(cli, cfg.Endpoints, s.dialMember, log)
	s.CommitThrough(s.route.KV())
	return s, nil
}

// Close closes what Dial opened: the commit route's connections, then the
// client. A store made with NewEtcd leaves its client to its caller.
func (s *Etcd) Close() error {
	if s.route != nil {
		s.route.Close()
	}
	if !s.owned {
		return nil
	}
	return s.cli.Close()
}

// TLS is the client's TLS configuration, nil without TLS: what reaches
// the members over HTTP (their node, leaderapart) needs it too.
func (s *Etcd) TLS() *tls.Config { return s.tls }

// tlsProbeTimeout bounds the TLS check of one endpoint at start.
const tlsProbeTimeout = 3 * time.Second

// clientConfig is the client configuration for cfg: auth, TLS and the
// keep-alives. With newClient, a configuration etcd refuses fails at start
// with an error that names the setting to fix: a password etcd rejects, a
// certificate the client does not trust (etcd_ca), a client certificate
// etcd does not accept (etcd_cert, etcd_key; checked here against every
// https endpoint). An endpoint that does not answer yet is not an error:
// etcd may be starting, and the engine waits for it.
func clientConfig(cfg DialConfig) (clientv3.Config, error) {
	endpoints := cfg.Endpoints
	cc := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Username:             cfg.Username,
		Password:             cfg.Password,
		Logger:               zap.NewNop(),
		DialOptions:          []grpc.DialOption{},
		MaxCallSendMsgSize:   4 << 20,
	}
	anyHTTPS := false
	for _, ep := range endpoints {
		if strings.HasPrefix(ep, "https://") {
			anyHTTPS = true
		}
	}
	if cfg.CA != "" || cfg.Cert != "" || cfg.Key != "" || anyHTTPS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CA != "" {
			pem, err := os.ReadFile(cfg.CA)
			if err != nil {
				return cc, fmt.Errorf("etcd_ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return cc, fmt.Errorf("etcd_ca %s: no certificate found", cfg.CA)
			}
			tc.RootCAs = pool
		}
		if cfg.Cert != "" || cfg.Key != "" {
			cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
			if err != nil {
				return cc, fmt.Errorf("etcd_cert/etcd_key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cc.TLS = tc
		if err := probeTLS(endpoints, tc); err != nil {
			return cc, err
		}
	}
	return cc, nil
}

func newClient(cc clientv3.Config, username string) (*clientv3.Client, error) {
	cli, err := clientv3.New(cc)
	if err != nil {
		if errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
			return nil, fmt.Errorf("etcd authentication failed for user %q: check etcd_username and etcd_password (env ORION_ETCD_USERNAME, ORION_ETCD_PASSWORD): %w",
				username, err)
		}
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(cc.Endpoints, ","), err)
	}
	return cli, nil
}

// memberDialer opens a client to one endpoint with cc's settings: the
// commit route's connection to etcd's raft leader (Route), and
// DialMember's. It gives up sooner than the replica's client: the route
// falls back to the balanced client meanwhile.
func memberDialer(cc clientv3.Config) func(endpoint string) (*clientv3.Client, error) {
	return func(endpoint string) (*clientv3.Client, error) {
		one := cc
		one.Endpoints = []string{endpoint}
		one.DialTimeout = time.Second
		return newClient(one, cc.Username)
	}
}

// probeTLS checks the TLS handshake with every https endpoint at once and
// returns the first refusal that is a configuration error: etcd's
// certificate not trusted, or ours refused. Endpoints that do not answer
// are left to the client.
func probeTLS(endpoints []string, tc *tls.Config) error {
	var wg sync.WaitGroup
	errs := make([]error, len(endpoints))
	for i, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probeOne(ep, u.Host, tc)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func probeOne(ep, host string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), tlsProbeTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: tc.Clone()}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		var uae x509.UnknownAuthorityError
		var hne x509.HostnameError
		var cie x509.CertificateInvalidError
		var ve *tls.CertificateVerificationError
		switch {
		case errors.As(err, &uae) || errors.As(err, &ve) && errors.As(ve.Err, &uae):
			return fmt.Errorf("etcd endpoint %s: its TLS certificate is not signed by a CA this replica trusts: set etcd_ca (env ORION_ETCD_CA) to the CA that signed it: %w", ep, err)
		case errors.As(err, &hne) || errors.As(err, &cie) || errors.As(err, &ve):
			return fmt.Errorf("etcd endpoint %s: its TLS certificate does not verify: %w", ep, err)
		case isTLSAlert(err):
			return fmt.Errorf("etcd endpoint %s refused this replica's TLS handshake (its client certificate: etcd_cert, etcd_key): %w", ep, err)
		}
		return nil // not answering (yet): the client retries
	}
	defer conn.Close()
	// With TLS 1.3 a server refuses a client certificate after the
	// handshake: the alert is the first thing to read.
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && isTLSAlert(err) {
		return fmt.Errorf("etcd endpoint %s refused this replica's client certificate: set etcd_cert and etcd_key (env ORION_ETCD_CERT, ORION_ETCD_KEY) to a certificate signed by the CA etcd trusts (its --trusted-ca-file): %w", ep, err)
	}
	return nil
}

func isTLSAlert(err error) bool {
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return true
	}
	// A remote alert is not always typed.
	return strings.Contains(err.Error(), "remote error: tls:")
}
