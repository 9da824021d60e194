// Package tlsfiles builds Orion's TLS configurations from PEM files: the
// server's certificate, re-read when its files change so that a renewed
// certificate is served without a restart, an optional client CA for
// mutual TLS, and the CA bundle clients verify servers with.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// recheck is how often, at most, a handshake looks whether the certificate
// files changed: a stat of two files, not one per handshake.
const recheck = 2 * time.Second

// Pair is a certificate and key kept up to date with their files.
type Pair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
	lastErr string // the reload error said last, so it is said once
	onError func(error)
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// LoadPair reads certFile and keyFile. onError, when set, hears of a later
// reload that failed (the pair loaded before stays in use).
func LoadPair(certFile, keyFile string, onError func(error)) (*Pair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs both a certificate file and a key file")
	}
	p := &Pair{certFile: certFile, keyFile: keyFile, onError: onError}
	if err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pair) load() error {
	var stamp [2]fileStamp
	for i, f := range []string{p.certFile, p.keyFile} {
		s, err := stampOf(f)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		stamp[i] = s
	}
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", p.certFile, p.keyFile, err)
	}
	p.cert, p.stamp, p.checked = &cert, stamp, time.Now()
	return nil
}

// current returns the pair, re-read first if its files changed since the
// last look (at most every recheck).
func (p *Pair) current() *tls.Certificate {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < recheck {
		return p.cert
	}
	p.checked = time.Now()
	var stamp [2]fileStamp
	for i, f := range []string{p.certFile, p.keyFile} {
		stamp[i], _ = stampOf(f)
	}
	if stamp == p.stamp {
		return p.cert
	}
	// A certificate and key written one after the other can be caught
	// between the two: that mismatch fails to load, and the next look
	// loads the pair once both are written.
	old := p.cert
	if err := p.load(); err != nil {
		p.cert = old
		if msg := err.Error(); msg != p.lastErr && p.onError != nil {
			p.lastErr = msg
			p.onError(err)
		}
	} else {
		p.lastErr = ""
	}
	return p.cert
}

// Server returns the configuration that serves pair, and, with
// clientCAFile, requires every client to present a certificate signed by
// one of its CAs (mutual TLS).
func Server(pair *Pair, clientCAFile string) (*tls.Config, error) {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// HTTP/1.1 only: the worker stream and the event streams are
		// long-lived HTTP/1.1 connections (websocket upgrade, hijack).
		NextProtos:     []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.current(), nil },
	}
	if clientCAFile != "" {
		pool, err := pool(clientCAFile)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Client returns the configuration a client verifies servers with: the CAs
// of caFile (empty: the system's), and, with pair, the certificate it
// presents to a server that asks for one.
func Client(caFile string, pair *Pair) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := pool(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if pair != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.current(), nil }
	}
	return c, nil
}

// ClientFiles is Client with the pair read from certFile and keyFile, when
// both are set.
func ClientFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	var pair *Pair
	if certFile != "" || keyFile != "" {
		var err error
		if pair, err = LoadPair(certFile, keyFile, nil); err != nil {
			return nil, err
		}
	}
	return Client(caFile, pair)
}

func pool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS CA: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("TLS CA %s: no PEM certificate in it", file)
	}
	return p, nil
}
