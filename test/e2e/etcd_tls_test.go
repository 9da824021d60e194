package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// A cluster whose etcd has TLS on every URL (client certificates required,
// certificates made here) and auth on, with Orion's user limited to the
// /orion/ prefix: replicas run DAGs through it; a wrong password and a
// missing CA are refused at start with an error that says so; the user
// cannot touch a key outside /orion/; and neither the etcd password nor the
// API token appears in any log.
func TestEtcdTLSAndAuth(t *testing.T) {
	const rootPW, orionPW, token = "root-pw-5b1e", "orion-pw-9c3d", "api-token-77f2"
	certs := cluster.MakeCerts(t)
	c := cluster.Define(t, cluster.Options{Secure: &cluster.Secure{Certs: certs, Username: "orion", Password: orionPW}, Token: token})
	c.StartEtcd()

	etcd := func(user, pass string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: c.ClientURLs, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: certs.ClientTLS(t), Username: user, Password: pass})
	}
	admin, err := etcd("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	etcdtest.EnableAuth(t, admin, rootPW, "orion", orionPW, "/orion/")

	user, err := etcd("orion", orionPW)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := user.Put(ctx, "/other/key", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("the orion user's put outside /orion/: %v, want permission denied", err)
	}
	if _, err := user.Get(ctx, "/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("the orion user's read of the whole key space: %v, want permission denied", err)
	}
	// With --client-cert-auth, a client that sends no password is the user
	// its certificate's common name names ("orion" here): no more rights.
	if _, err := admin.Put(ctx, "/other/key", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a client with the orion certificate and no password, outside /orion/: %v, want permission denied", err)
	}

	// The replicas: TLS files and the user in a config file.
	for _, s := range c.Servers {
		s.Args = append(s.Args, "--log-level", "debug")
	}
	c.StartOrion()
	var load cluster.TaskLoad
	c.SubmitTaskDAGs(&load, "tls", 3)
	c.CheckTaskLoad(&load, 2*time.Minute)

	// What a replica asks beyond its keys (member list, status, alarms)
	// answers under the prefix-limited user.
	var view struct {
		Etcd struct {
			Members []struct {
				Name     string `json:"name"`
				IsLeader bool   `json:"is_leader"`
			} `json:"members"`
		} `json:"etcd"`
	}
	if err := c.GetJSON(c.Servers[0].URL, "/api/v1/cluster", &view); err != nil {
		t.Fatal(err)
	}
	leaders := 0
	for _, m := range view.Etcd.Members {
		if m.IsLeader {
			leaders++
		}
	}
	if len(view.Etcd.Members) != 3 || leaders != 1 {
		t.Fatalf("etcd members in the cluster view: %+v, want 3 with one leader", view.Etcd.Members)
	}

	// Refused at start, each with an error that names the cause.
	for _, tc := range []struct {
		name, ca, password string
		want               []string
	}{
		{"wrong-password", certs.CA, "not-the-password", []string{`etcd authentication failed for user "orion": check etcd_username and etcd_password`}},
		{"no-ca", "", orionPW, []string{"TLS certificate is not signed by a CA this replica trusts: set etcd_ca", "certificate signed by unknown authority"}},
	} {
		args := []string{"server", "--name", tc.name, "--etcd-endpoints", c.Endpoints, "--listen", "127.0.0.1:0",
			"--data-dir", c.Dir + "/" + tc.name, "--slots", "0", "--log-format", "json",
			"--config", c.WriteEtcdConfig(tc.name, tc.ca, "orion", tc.password)}
		p := c.NewProc(tc.name, args...)
		p.Start()
		if !p.Wait(60 * time.Second) {
			t.Fatalf("%s: orion server still running 60s after start; want it refused\n%s", tc.name, p.LogTail(3000))
		}
		if p.ExitErr() == nil {
			t.Fatalf("%s: orion server exited 0\n%s", tc.name, p.LogTail(3000))
		}
		logs := p.LogTail(8000)
		for _, w := range tc.want {
			if !strings.Contains(logs, w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, logs)
			}
		}
	}

	// No secret in any log (the replicas log at debug); the harness's own
	// lines ("=== ...", the command lines it ran) aside.
	for _, p := range c.All() {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "=== ") {
				continue
			}
			// Nothing a replica or worker does needs more than the role.
			if strings.HasPrefix(p.Name, "n") || strings.HasPrefix(p.Name, "w") {
				if strings.Contains(line, "permission denied") || strings.Contains(line, "user name is empty") {
					t.Errorf("%s was refused something by etcd: %.300s", p.Name, line)
				}
			}
			for _, secret := range []string{orionPW, token, rootPW} {
				if strings.Contains(line, secret) {
					t.Errorf("%s's log contains a secret (%.4s…): %.200s", p.Name, secret, line)
				}
			}
		}
	}
}
