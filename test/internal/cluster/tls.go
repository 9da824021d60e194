package cluster

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
	"testing"
	"time"
)

// Certs are PEM files made for one test by MakeCerts: a CA, the etcd
// members' certificate (for clients and peers, both ways) and a client
// certificate for the replicas, all for 127.0.0.1 and localhost.
type Certs struct {
	Dir                   string
	CA                    string
	Cert, Key             string // the members'
	ClientCert, ClientKey string // the replicas' (common name "orion")
}

// MakeCerts writes a fresh CA and certificates signed by it into a
// t.TempDir().
func MakeCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	c := Certs{Dir: dir, CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "member.pem"), Key: filepath.Join(dir, "member-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	now := time.Now()
	caKey := newKey(t)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orion test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, c.CA, "CERTIFICATE", caDER)
	issue := func(serial int64, cn string, usage []x509.ExtKeyUsage, certPath, keyPath string) {
		key := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: usage, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kb)
	}
	// Members present theirs as servers and, to each other, as clients.
	issue(2, "etcd member", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.Cert, c.Key)
	issue(3, "orion", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, c.ClientCert, c.ClientKey)
	return c
}

// ClientTLS is a client configuration that trusts the CA and presents the
// client certificate.
func (c Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SelfSigned writes a self-signed certificate for 127.0.0.1, valid from
// notBefore to notAfter (an expired one, for a test of the refusal), and
// its key.
func SelfSigned(t testing.TB, certPath, keyPath string, notBefore, notAfter time.Time) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "self-signed"}, NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", kb)
}
