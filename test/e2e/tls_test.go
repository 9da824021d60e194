package e2e

import (
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// TLS on the API and the worker stream, with client certificates required:
// the CLI and a worker verify the server by the CA and present their
// certificates; without a certificate, with another CA, or over plain HTTP
// they are refused; a renewed certificate is served without a restart.
func TestTLSListeners(t *testing.T) {
	certs, other := cluster.MakeCerts(t), cluster.MakeCerts(t)
	n := newNode(t, "--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key, "--tls-client-ca-file", certs.CA, "--slots", "0")
	n.clientTLS = certs.ClientTLS(t)
	n.cliArgs = []string{"--ca-file", certs.CA, "--cert-file", certs.ClientCert, "--key-file", certs.ClientKey}
	n.start()

	// A worker over wss://, with its certificate, runs a DAG.
	startWorker(t, n, "tls-worker", "--slots", "2", "--ca-file", certs.CA, "--cert-file", certs.ClientCert, "--key-file", certs.ClientKey)
	id := n.submit("id: over-tls\ntasks:\n  - {id: a, command: 'echo hi'}\n  - {id: b, command: 'echo there', depends_on: [a]}\n")
	if d := n.waitDAG(id, time.Minute); d.Status != "succeeded" || !strings.HasPrefix(d.Task("b").Worker, "tls-worker/") {
		t.Fatalf("over TLS: %+v", d)
	}
	if out, err := n.orion("get", "dag", id); err != nil || !strings.Contains(out, "succeeded") {
		t.Fatalf("orion get dag over TLS: %v\n%s", err, out)
	}

	// Refused: no client certificate, another CA, plain HTTP.
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no client certificate", []string{"--ca-file", certs.CA}, "certificate required"},
		{"another CA", []string{"--ca-file", other.CA, "--cert-file", certs.ClientCert, "--key-file", certs.ClientKey}, "certificate signed by unknown authority"},
	} {
		out, err := runOrion(t, append([]string{"get", "dags", "--server", n.url()}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %v, want an error with %q:\n%s", c.name, err, c.want, out)
		}
	}
	resp, err := http.Get(strings.Replace(n.url(), "https://", "http://", 1) + "/api/v1/dags")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d, want 400", resp.StatusCode)
		}
	}

	// Renewed: the files are replaced and the next handshake gets the new
	// certificate (from another CA here, to tell them apart).
	copyFile(t, other.Cert, certs.Cert)
	copyFile(t, other.Key, certs.Key)
	otherClient := other.ClientTLS(t)
	otherClient.Certificates = certs.ClientTLS(t).Certificates // the client CA is unchanged
	testkit.WaitFor(t, 30*time.Second, "the renewed certificate served", func() bool {
		c, err := tls.Dial("tcp", strings.TrimPrefix(n.url(), "https://"), otherClient)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// An expired certificate is refused by the CLI, saying so.
func TestTLSExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	cluster.SelfSigned(t, cert, key, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	n := newNode(t, "--tls-cert-file", cert, "--tls-key-file", key)
	n.clientTLS = &tls.Config{InsecureSkipVerify: true} // the harness's own polling only
	n.start()
	out, err := runOrion(t, "get", "dags", "--server", n.url(), "--ca-file", cert)
	if err == nil || !strings.Contains(out, "certificate has expired") {
		t.Fatalf("an expired certificate: %v\n%s", err, out)
	}
}

func runOrion(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(cluster.Bin, args...)
	cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}
