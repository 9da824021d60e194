package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// issue writes a self-signed certificate for 127.0.0.1 named cn, and its
// key, into dir; it returns their paths.
func issue(t *testing.T, dir, cn string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func handshake(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// A renewed certificate is served once its files change; a half-written
// pair (the certificate of one, the key of another) keeps the old one.
func TestPairReloads(t *testing.T) {
	dir := t.TempDir()
	cert, key := issue(t, dir, "first")
	var reloadErrs []error
	pair, err := LoadPair(cert, key, func(err error) { reloadErrs = append(reloadErrs, err) })
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Server(pair, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	trustAll := &tls.Config{InsecureSkipVerify: true}
	if cn, err := handshake(addr, trustAll); err != nil || cn != "first" {
		t.Fatalf("first: %q %v", cn, err)
	}
	secondCert, secondKey := issue(t, dir, "second")
	b, _ := os.ReadFile(secondCert)
	if err := os.WriteFile(cert, b, 0o600); err != nil { // the key not yet
		t.Fatal(err)
	}
	pair.mu.Lock()
	pair.checked = time.Time{} // the next handshake looks
	pair.mu.Unlock()
	if cn, err := handshake(addr, trustAll); err != nil || cn != "first" || len(reloadErrs) != 1 {
		t.Fatalf("half-written: %q %v; reload errors %v", cn, err, reloadErrs)
	}
	b, _ = os.ReadFile(secondKey)
	if err := os.WriteFile(key, b, 0o600); err != nil {
		t.Fatal(err)
	}
	pair.mu.Lock()
	pair.checked = time.Time{}
	pair.mu.Unlock()
	if cn, err := handshake(addr, trustAll); err != nil || cn != "second" {
		t.Fatalf("renewed: %q %v", cn, err)
	}
}

// With a client CA, a client must present a certificate it signed.
func TestClientCA(t *testing.T) {
	dir := t.TempDir()
	cert, key := issue(t, dir, "server")
	clientCert, clientKey := issue(t, dir, "client")
	strangerCert, strangerKey := issue(t, dir, "stranger")
	pair, err := LoadPair(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Server(pair, clientCert)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	for _, c := range []struct {
		name, cert, key string
		ok              bool
	}{{"its certificate", clientCert, clientKey, true}, {"none", "", "", false}, {"another", strangerCert, strangerKey, false}} {
		cfg, err := ClientFiles(cert, c.cert, c.key)
		if err != nil {
			t.Fatal(err)
		}
		// The server's verdict reaches a TLS 1.3 client with its first read.
		conn, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
			if err != nil && strings.Contains(err.Error(), "EOF") {
				err = nil // accepted, then closed by the test server
			}
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
	if _, err := Server(pair, filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("a missing client CA file accepted")
	}
	if _, err := ClientFiles(key, "", ""); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}
