package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// etcdProc is one `orion etcd` process.
type etcdProc struct {
	name, clientURL, peerURL, logPath string
	cmd                               *exec.Cmd
	done                              chan struct{} // closed when cmd.Wait returns
	err                               error         // cmd.Wait's result, once done
}

func (p *etcdProc) logs() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// Three `orion etcd` processes started as docs/operations.md and test/cluster.sh do
// form one cluster, grant orion's 1 s lease as 1 s, and exit 0 on SIGTERM.
func TestEtcdCommandThreeMemberCluster(t *testing.T) {
	if out, err := exec.Command(cluster.Bin, "etcd", "--help").CombinedOutput(); err != nil {
		t.Fatalf("%s etcd --help: %v (is the etcd command registered in cmd/orion/main.go?)\n%s", cluster.Bin, err, out)
	}
	dir := t.TempDir()
	procs := make([]*etcdProc, 3)
	var initial []string
	for i := range procs {
		p := &etcdProc{
			name:      fmt.Sprintf("e%d", i+1),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)),
		}
		p.logPath = filepath.Join(dir, p.name+".log")
		procs[i] = p
		initial = append(initial, p.name+"="+p.peerURL)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.done == nil {
				continue
			}
			select {
			case <-p.done:
			default:
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
			}
		}
	})
	for _, p := range procs {
		logf, err := os.Create(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(cluster.Bin, "etcd",
			"--name", p.name,
			"--data-dir", filepath.Join(dir, p.name),
			"--listen-client-url", p.clientURL,
			"--listen-peer-url", p.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", "e2e-"+filepath.Base(dir),
			"--log-level", "warn")
		p.cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		p.done = make(chan struct{})
		go func(p *etcdProc) { p.err = p.cmd.Wait(); close(p.done) }(p)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "\n--- %s log:\n%s", p.name, p.logs())
		}
		t.Fatalf(format+"%s", append(args, b.String())...)
	}

	// One client per member, so that a read on another member proves
	// replication rather than hitting the same one.
	clients := make([]*clientv3.Client, len(procs))
	for i, p := range procs {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = c
	}

	// All three publish their names (and so are ready) once a quorum forms.
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, p := range procs {
			select {
			case <-p.done:
				fail("%s exited while the cluster formed: %v", p.name, p.err)
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := clients[0].MemberList(ctx)
		cancel()
		if err == nil && len(resp.Members) == 3 {
			names := map[string]string{}
			for _, m := range resp.Members {
				if len(m.ClientURLs) == 1 {
					names[m.Name] = m.ClientURLs[0]
				}
			}
			ok := true
			for _, p := range procs {
				ok = ok && names[p.name] == p.clientURL
			}
			if ok {
				break
			}
		}
		if time.Now().After(deadline) {
			fail("no 3-member cluster after 60s: %v %+v", err, resp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// e1 can list a member a moment before that member's own Start returns
	// and logs that it is ready.
	for _, p := range procs {
		for !strings.Contains(p.logs(), "etcd member ready") {
			if time.Now().After(deadline) {
				fail("%s never logged that it is ready", p.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ids := map[uint64]bool{}
	for i, c := range clients {
		st, err := c.Status(ctx, procs[i].clientURL)
		if err != nil {
			fail("status of %s: %v", procs[i].name, err)
		}
		ids[st.Header.ClusterId] = true
	}
	if len(ids) != 1 {
		fail("members report %d different cluster ids: %v", len(ids), ids)
	}
	if _, err := clients[0].Put(ctx, "/e2e/k", "v1"); err != nil {
		fail("put on e1: %v", err)
	}
	for i := 1; i < len(clients); i++ {
		got, err := clients[i].Get(ctx, "/e2e/k") // linearizable: goes through the leader's read index
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
			fail("get on %s: %v %+v", procs[i].name, err, got)
		}
	}
	// orion's leadership session is a 1 s lease; etcd raises a TTL below its
	// minimum without an error, so the granted TTL is what matters.
	lease, err := clients[2].Grant(ctx, 1)
	if err != nil {
		fail("lease grant: %v", err)
	}
	if lease.TTL != 1 {
		fail("a 1 s lease was granted with TTL %d", lease.TTL)
	}
	for _, c := range clients {
		c.Close()
	}

	// SIGTERM: graceful close and exit 0.
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
			if p.err != nil {
				fail("%s exited with %v after SIGTERM", p.name, p.err)
			}
		case <-time.After(30 * time.Second):
			fail("%s still running 30s after SIGTERM", p.name)
		}
	}
	for _, p := range procs {
		if !strings.Contains(p.logs(), "etcd member stopped") {
			fail("%s did not log its graceful stop", p.name)
		}
	}
}
