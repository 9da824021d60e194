package kube

// The TLS variant of the install (issue 32): the same chart and values as
// TestKube's, with tls.enabled (the CA and certificate the chart makes) and
// a Secret the workers mount (workers.secrets), in place of the plain
// release. It checks what a user of such an install relies on: the API and
// orion-active answer over HTTPS with the chart's CA (and only with it),
// plain HTTP on the port is refused, the probes use HTTPS, the replicas
// reach one another, the workers connect over TLS with the worker token the
// chart made them, helm test passes, and the leader kill -9 drill, whose
// figures print beside the plain install's. A task reads the Secret through
// env_from; its value is then in neither etcd, the API nor any log. Last,
// helm upgrade moves the release to tls.existingSecret, a certificate of
// another CA, under a client submitting all along.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	tlsSecret  = "orion-tls"              // the chart's generated Secret: <fullname>-tls
	dbSecret   = "orion-kube-db"          // the Secret the workers mount
	workerTok  = "orion-worker-token"     // the chart's worker token: <fullname>-worker-token
	activeHost = "orion-active.orion.svc" // a name in the certificate and in allowed_hosts
)

// tlsInstall replaces the plain release with a TLS one and drills it.
func (e *env) tlsInstall(t *testing.T) {
	// The plain release goes, with its etcd's claims (a fresh keyspace;
	// the volumes are retained, and the new claims bind others), and the
	// pod tasks' pods its drills left (failed ones are kept 10 minutes).
	if _, err := e.run(e.helm, "-n", namespace, "status", release); err == nil {
		start := time.Now()
		e.helmCmd("uninstall", release, "--wait", "--timeout", "3m")
		e.k("delete", "pvc", "--all", "--wait=true", "--timeout=2m")
		e.k("delete", "pods", "--all", "--wait=true", "--timeout=2m")
		figure(t, "plain release uninstalled", "%.1f s (helm uninstall --wait, its PVCs and leftover pods deleted)", time.Since(start).Seconds())
	} else {
		e.run(e.kubectl, "create", "namespace", namespace)
	}

	// The secret a task reads: random, so that finding it anywhere is a leak.
	raw := make([]byte, 16)
	rand.Read(raw)
	secretValue := "kube-db-" + hex.EncodeToString(raw)
	e.run(e.kubectl, "-n", namespace, "delete", "secret", dbSecret, "--ignore-not-found")
	e.k("create", "secret", "generic", dbSecret, "--from-literal=password="+secretValue)

	vf := filepath.Join(t.TempDir(), "values-tls.yaml")
	os.WriteFile(vf, []byte(`# test/kube: TLS from the chart's own CA, and a Secret for env_from.
tls: {enabled: true}
workers:
  secrets: [`+dbSecret+`]
`), 0o644)
	args := []string{"install", release, e.chart, "--create-namespace"}
	for _, f := range append(append([]string(nil), e.values...), vf) {
		args = append(args, "-f", f)
	}
	start := time.Now()
	e.helmCmd(append(args, "--wait", "--timeout", "5m")...)
	figure(t, "TLS install to Ready", "%.1f s (helm install --wait, values-small.yaml, tls.enabled with the chart's CA)", time.Since(start).Seconds())

	// The CA, as a user takes it from the Secret.
	b64 := e.k("get", "secret", tlsSecret, "-o", `jsonpath={.data.ca\.crt}`)
	caPEM, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		t.Fatalf("ca.crt of %s: %v", tlsSecret, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt of %s holds no certificate", tlsSecret)
	}
	plain := e.http
	e.http = tlsClient(pool, apiHost)
	ip := strings.TrimSpace(e.k("get", "svc", apiSvc, "-o", "jsonpath={.spec.clusterIP}"))
	e.apiURL = "https://" + ip + ":8080"
	e.variant = " (TLS)"

	t.Run("live", func(t *testing.T) { e.t = t; e.tlsLive(pool, plain) })
	t.Run("helm test", func(t *testing.T) {
		e.t = t
		start := time.Now()
		e.helmCmd("test", release, "--timeout", "3m")
		figure(t, "helm test (TLS)", "passed in %.1f s (the test pod verifies the API by ca.crt)", time.Since(start).Seconds())
	})
	t.Run("leader kill -9", func(t *testing.T) {
		for i := 0; i < kills(); i++ {
			e.t = t
			e.drillKill9()
		}
	})
	t.Run("secret", func(t *testing.T) { e.t = t; e.tlsSecretTask(secretValue) })
	// Not in CI's reduced set: the move rolls every pod (about 35 s).
	if e.mode != "ci" {
		t.Run("existing secret", func(t *testing.T) { e.t = t; e.tlsExistingSecret(pool) })
	}
}

// tlsClient verifies the server by pool, for the name serverName (the
// Service's, as the certificate and allowed_hosts know it: the URL holds a
// ClusterIP).
func tlsClient(pool *x509.CertPool, serverName string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
	}}
}

// tlsLive checks the TLS install as a user and the cluster see it.
func (e *env) tlsLive(pool *x509.CertPool, plain *http.Client) {
	t := e.t
	leader := e.waitActive("", 30*time.Second)

	// Probes: HTTPS, and passing (Ready, and no restart from liveness).
	out := e.k("get", "pods", "-l", "app.kubernetes.io/component=scheduler", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].readinessProbe.httpGet.scheme} {.spec.containers[0].livenessProbe.httpGet.scheme} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount}{"\n"}{end}`)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) != 5 || f[1] != "HTTPS" || f[2] != "HTTPS" || f[3] != "true" || f[4] != "0" {
			t.Errorf("scheduler pod (name, readiness and liveness scheme, ready, restarts): %q", l)
		}
	}

	// Every replica reached over TLS by the one answering (their DNS names
	// verified by the CA), and advertised as https.
	c, err := e.clusterFull()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Replicas {
		if !r.Reachable || !strings.HasPrefix(r.APIURL, "https://"+r.Name+".") {
			t.Errorf("replica %s: reachable %v, api_url %q (want https://%s.<headless>...)", r.Name, r.Reachable, r.APIURL, r.Name)
		}
	}
	if len(c.Replicas) != 3 {
		t.Errorf("%d replicas in the cluster view, want 3", len(c.Replicas))
	}

	// orion-active over HTTPS, verified by its own name: the leader answers.
	aip := strings.TrimSpace(e.k("get", "svc", activeSvc, "-o", "jsonpath={.spec.clusterIP}"))
	var self struct {
		Name string `json:"name"`
		Role string `json:"role"`
	}
	code, body, err := get(tlsClient(pool, activeHost), "https://"+aip+":8080/api/v1/cluster/self", activeHost, token)
	if err != nil || code != 200 || json.Unmarshal(body, &self) != nil || self.Name != leader || self.Role != "leader" {
		t.Errorf("orion-active over HTTPS: %d %s %v (want the leader %s)", code, body, err, leader)
	}

	// Plain HTTP on the TLS port: refused, and nothing of the API answered.
	code, body, err = get(plain, strings.Replace(e.apiURL, "https://", "http://", 1)+"/api/v1/cluster", apiHost, token)
	if err == nil && (code != 400 || strings.Contains(string(body), "leader")) {
		t.Errorf("plain HTTP on the TLS port: %d %q (want 400, Client sent an HTTP request to an HTTPS server)", code, body)
	}
	plainAnswer := fmt.Sprintf("%d %q", code, strings.TrimSpace(string(body)))
	if err != nil {
		plainAnswer = err.Error()
	}
	// A client that does not trust the chart's CA: the handshake fails.
	_, _, err = get(tlsClient(x509.NewCertPool(), apiHost), e.apiURL+"/api/v1/cluster", apiHost, token)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("a client without the chart's CA: %v (want an unknown authority)", err)
	}
	// Nor a name the certificate does not hold.
	_, _, err = get(tlsClient(pool, "orion.example.com"), e.apiURL+"/api/v1/cluster", apiHost, token)
	var badName x509.HostnameError
	if !errors.As(err, &badName) {
		t.Errorf("a client verifying another name: %v (want a hostname error)", err)
	}

	// The workers: connected over TLS (their only way in), each with the
	// chart's worker token, which is not the cluster token and opens
	// nothing but the worker stream.
	workers := 0
	for _, w := range c.Workers {
		if w.Connected && strings.HasPrefix(w.ID, "orion-worker-") {
			workers++
		}
	}
	if workers != 2 {
		t.Errorf("%d worker pods connected, want 2: %+v", workers, c.Workers)
	}
	ref := e.k("get", "deployment", "orion-worker", "-o",
		`jsonpath={.spec.template.spec.containers[0].env[?(@.name=="ORION_AUTH_TOKEN")].valueFrom.secretKeyRef.name} {.spec.template.spec.containers[0].args}`)
	if !strings.HasPrefix(ref, workerTok+" ") || !strings.Contains(ref, "--ca-file=") || !strings.Contains(ref, "--server=https://") {
		t.Errorf("worker deployment: token Secret and args %q (want %s, --ca-file, an https server)", ref, workerTok)
	}
	wb64 := e.k("get", "secret", workerTok, "-o", "jsonpath={.data.token}")
	wt, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(wb64))
	if len(wt) < 32 || string(wt) == token {
		t.Fatalf("the worker token is %d bytes (or the cluster token)", len(wt))
	}
	req, _ := http.NewRequest("POST", e.apiURL+"/api/v1/dags", strings.NewReader(`{"id":"tls-by-worker-token","tasks":[{"id":"a","kind":"noop"}]}`))
	req.Host = apiHost
	req.Header.Set("Authorization", "Bearer "+string(wt))
	req.Header.Set("Content-Type", "application/json")
	refused := ""
	if resp, err := e.http.Do(req); err != nil {
		t.Errorf("submit with the worker token: %v", err)
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "%d ", resp.StatusCode)
		buf := make([]byte, 300)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		refused = strings.TrimSpace(b.String())
		if resp.StatusCode != 403 {
			t.Errorf("submit with the worker token: %s (want 403)", refused)
		}
	}

	// A DAG runs on them, through the Service over HTTPS.
	id := "tls-run-" + runID
	if err := e.submit(shellDAG(id, 4, "0", false), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitDAGs([]string{id}, time.Minute)
	e.checkOnce(map[string]int{id: 4}, nil)
	figure(t, "TLS live", "orion-active (HTTPS, %s) answers as %s, the leader; probes HTTPS, 3 replicas reachable at https:// DNS names; %d worker pods connected with the worker token, which a submission is refused with (%s); plain HTTP on the port: %s; a client without the CA or with another name refused",
		activeHost, leader, workers, refused, plainAnswer)
}

// clusterFull is GET /api/v1/cluster with the replicas' reachability and the
// workers.
type clusterView struct {
	Leader   string `json:"leader"`
	Replicas []struct {
		Name      string `json:"name"`
		Role      string `json:"role"`
		APIURL    string `json:"api_url"`
		Reachable bool   `json:"reachable"`
	} `json:"replicas"`
	Workers []struct {
		ID        string `json:"id"`
		Connected bool   `json:"connected"`
	} `json:"workers"`
}

func (e *env) clusterFull() (clusterView, error) {
	var c clusterView
	code, b, err := e.do("GET", "/api/v1/cluster", nil, 5*time.Second)
	if err != nil {
		return c, err
	}
	if code != 200 {
		return c, fmt.Errorf("cluster: %d %s", code, b)
	}
	return c, json.Unmarshal(b, &c)
}

// get sends one GET with a Host and a token.
func get(c *http.Client, url, host, tok string) (int, []byte, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Host = host
	req.Header.Set("Authorization", "Bearer "+tok)
	c.Timeout = 5 * time.Second
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String()), nil
}

// tlsSecretTask: a shell task reads the Secret through env_from on a worker
// that mounts it (workers.secrets). It writes the value's SHA-256 to the
// ledger (the test compares it) and prints the value (masked in its log).
// Then the value must be in neither etcd (etcdctl get --prefix /orion/), the
// API (the DAG, the task, its log) nor the pods' logs; the reference is.
func (e *env) tlsSecretTask(value string) {
	t := e.t
	id := "tls-secret-" + runID
	hashFile := "secret-" + runID
	dag := map[string]any{"id": id, "name": id, "tasks": []map[string]any{{
		"id":   "t0",
		"kind": "shell",
		"command": `echo "$ORION_DAG_ID/$ORION_TASK_ID $ORION_ATTEMPT $(hostname)" >> /ledger/runs.log; ` +
			`printf %s "$DB_PASSWORD" | sha256sum | cut -d' ' -f1 > /ledger/` + hashFile + `; echo "password: $DB_PASSWORD"`,
		"env_from":    []map[string]string{{"secret": dbSecret, "key": "password", "as": "DB_PASSWORD"}},
		"max_retries": 0,
		"timeout":     "1m",
	}}}
	if err := e.submit(dag, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitDAGs([]string{id}, time.Minute)
	e.checkOnce(map[string]int{id: 1}, nil)
	got, err := os.ReadFile(filepath.Join(e.ledger, hashFile))
	sum := sha256.Sum256([]byte(value))
	if err != nil || strings.TrimSpace(string(got)) != hex.EncodeToString(sum[:]) {
		t.Fatalf("the task did not see the Secret's value: its SHA-256 %q (%v), want %x", got, err, sum)
	}

	// The API: the DAG, the task record and its log hold the reference and
	// the masked output, never the value.
	var api strings.Builder
	for _, p := range []string{"/api/v1/dags/" + id, "/api/v1/dags/" + id + "/tasks/t0", "/api/v1/dags/" + id + "/tasks/t0/log"} {
		code, b, err := e.do("GET", p, nil, 5*time.Second)
		if err != nil || code != 200 {
			t.Fatalf("GET %s: %d %s %v", p, code, b, err)
		}
		api.Write(b)
	}
	if strings.Contains(api.String(), value) {
		t.Errorf("the Secret's value is in the API's answers")
	}
	if !strings.Contains(api.String(), dbSecret) || !strings.Contains(api.String(), "password: ***") {
		t.Errorf("the API shows neither the reference %s nor the masked output: %.2000s", dbSecret, api.String())
	}

	// etcd, read as an operator would, from the node.
	ip := strings.TrimSpace(e.k("get", "pod", "orion-etcd-0", "-o", "jsonpath={.status.podIP}"))
	kv, err := e.run("etcdctl", "--endpoints", "http://"+ip+":2379", "get", "--prefix", "/orion/")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(kv, value) {
		t.Errorf("the Secret's value is in etcd (etcdctl get --prefix /orion/)")
	}
	if !strings.Contains(kv, id) || !strings.Contains(kv, dbSecret) {
		t.Errorf("etcdctl get --prefix /orion/ (%d bytes) holds neither the DAG %s nor the reference %s", len(kv), id, dbSecret)
	}

	// The pods' logs (replicas and workers).
	logs := 0
	for _, sel := range []string{"app.kubernetes.io/component=scheduler", "app.kubernetes.io/component=worker"} {
		for _, pod := range strings.Fields(e.k("get", "pods", "-l", sel, "-o", "jsonpath={.items[*].metadata.name}")) {
			out := e.k("logs", pod, "--all-containers")
			logs++
			if strings.Contains(out, value) {
				t.Errorf("the Secret's value is in %s's log", pod)
			}
		}
	}
	figure(t, "secret (TLS install)", "a task read %s through env_from on a worker that mounts it (its SHA-256 matched); the value is in none of etcdctl get --prefix /orion/ (%d bytes, the reference there), the API's DAG, task and log (output masked: password: ***), %d pods' logs",
		dbSecret, len(kv), logs)
}

// tlsExistingSecret moves the release to a certificate of the user's own
// (tls.existingSecret, signed by another CA, as cert-manager would make it)
// with helm upgrade, while a client submits through the Service trusting
// both CAs. The replicas and workers roll onto it; afterwards the API is
// verified by the new CA only, helm test passes and the workers are back.
func (e *env) tlsExistingSecret(oldCA *x509.CertPool) {
	t := e.t
	const name = "orion-kube-tls"
	caPEM, crtPEM, keyPEM := makeCert(t, []string{
		"localhost",
		apiSvc, apiSvc + "." + namespace, apiHost, apiHost + ".cluster.local",
		activeSvc, activeSvc + "." + namespace, activeHost, activeHost + ".cluster.local",
		"*." + scheduler + "-headless." + namespace + ".svc.cluster.local",
	})
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n  ca.crt: %s\n",
		name, namespace, base64.StdEncoding.EncodeToString(crtPEM), base64.StdEncoding.EncodeToString(keyPEM), base64.StdEncoding.EncodeToString(caPEM))
	mf := filepath.Join(t.TempDir(), "tls-secret.yaml")
	os.WriteFile(mf, []byte(manifest), 0o600)
	e.k("apply", "-f", mf)

	newCA := x509.NewCertPool()
	newCA.AppendCertsFromPEM(caPEM)
	both := oldCA.Clone()
	both.AppendCertsFromPEM(caPEM)
	e.http = tlsClient(both, apiHost)
	s := e.startSubmitter("tlsca", 100*time.Millisecond)
	time.Sleep(time.Second)
	t0 := time.Now()
	e.helmCmd("upgrade", release, e.chart, "--reuse-values", "--set", "tls.existingSecret="+name, "--wait", "--timeout", "5m")
	e.rolloutWait("deployment/orion-worker")
	took := time.Since(t0)
	leader := e.waitActive("", 30*time.Second)
	time.Sleep(time.Second)
	ok, failures, gap := s.finish()
	refused, firstRefusal := s.refused()
	if refused > 0 {
		t.Logf("first refusal: %s", firstRefusal)
	}
	for _, f := range failures {
		t.Logf("failed submission (never acknowledged): %s", f)
	}

	// From now on the new CA alone.
	e.http = tlsClient(newCA, apiHost)
	if _, _, err := get(tlsClient(oldCA, apiHost), e.apiURL+"/api/v1/cluster", apiHost, token); err == nil {
		t.Errorf("the chart's old CA still verifies the API after the move to %s", name)
	}
	e.settle(ok, 1)
	c, err := e.clusterFull()
	if err != nil {
		t.Fatal(err)
	}
	workers := 0
	for _, w := range c.Workers {
		if w.Connected && strings.HasPrefix(w.ID, "orion-worker-") {
			workers++
		}
	}
	for _, r := range c.Replicas {
		if !r.Reachable {
			t.Errorf("replica %s unreachable after the move to %s", r.Name, name)
		}
	}
	if workers != 2 {
		t.Errorf("%d worker pods connected after the move, want 2: %+v", workers, c.Workers)
	}
	start := time.Now()
	e.helmCmd("test", release, "--timeout", "3m")
	figure(t, "TLS existingSecret", "helm upgrade to tls.existingSecret (another CA) rolled replicas and workers in %.0f s; a client trusting both CAs: %d submissions, %d never acknowledged, %d attempts refused and retried, longest gap %.0f ms; every acknowledged DAG ran once; then only the new CA verifies, %d workers connected, orion-active -> %s, helm test passed in %.1f s",
		took.Seconds(), len(ok)+len(failures), len(failures), refused, ms(gap), workers, leader, time.Since(start).Seconds())
}

// makeCert makes a CA and a server certificate it signs for names and
// 127.0.0.1, as PEM: the CA's certificate, the server's, the server's key.
func makeCert(t *testing.T, names []string) (caPEM, crtPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orion kube-test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: apiSvc},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: names, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
