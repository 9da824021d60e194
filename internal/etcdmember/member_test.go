package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/orion-sched/orion/internal/testutil/testkit"
)

func testConfig(t *testing.T, name string) Config {
	t.Helper()
	return Config{
		Name:      name,
		DataDir:   t.TempDir(),
		ClientURL: testkit.FreeURL(t),
		PeerURL:   testkit.FreeURL(t),
		Logger:    zap.NewNop(),
	}
}

func startMember(t *testing.T, cfg Config) *Member {
	t.Helper()
	begin := time.Now()
	m, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("member %s ready after %v", cfg.Name, time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() { m.Close() })
	return m
}

func newClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustGet(t *testing.T, cli *clientv3.Client, key string, opts ...clientv3.OpOption) string {
	t.Helper()
	resp, err := cli.Get(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %d kvs", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value)
}

func TestSingleMemberPutGet(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := testConfig(t, "solo")
	cfg.Logger = zap.New(core)
	m := startMember(t, cfg)

	if m.ClientURL() != cfg.ClientURL {
		t.Errorf("ClientURL = %q, want %q", m.ClientURL(), cfg.ClientURL)
	}
	if eps := m.Endpoints(); len(eps) != 1 || eps[0] != cfg.ClientURL {
		t.Errorf("Endpoints = %v, want [%s]", eps, cfg.ClientURL)
	}

	cli := newClient(t, m.Endpoints()...)
	if _, err := cli.Put(ctxT(t), "/orion/k", "v"); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, cli, "/orion/k"); got != "v" {
		t.Fatalf("got %q", got)
	}

	// Logs are filtered to warn by default.
	for _, e := range logs.All() {
		if e.Level < zapcore.WarnLevel {
			t.Fatalf("log entry below warn got through: %v %q", e.Level, e.Message)
		}
		if benignWarnings[e.Message] {
			t.Fatalf("benign warning not dropped: %q", e.Message)
		}
		if e.LoggerName != "etcd" {
			t.Fatalf("log entry from logger %q, want etcd", e.LoggerName)
		}
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	select {
	case err, ok := <-m.Err():
		if ok {
			t.Fatalf("unexpected error after Close: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Err channel not closed after Close")
	}
}

func TestMinLeaseTTLRule(t *testing.T) {
	for _, tc := range []struct {
		hb, el int
		want   int64
	}{
		{0, 0, 1},       // defaults 50/250: 7 ticks * 50ms = 350ms
		{50, 650, 1},    // 13 ticks -> 19 * 50 = 950ms
		{50, 700, 2},    // 14 ticks -> 21 * 50 = 1050ms
		{100, 1000, 2},  // etcd defaults: 15 * 100 = 1500ms
		{100, 700, 1},   // 7 ticks -> 10 * 100 = 1000ms, exactly 1s
		{100, 5000, 8},  // 50 ticks -> 75 * 100 = 7.5s
		{100, 599, 1},   // 5 ticks (integer division) -> 7 * 100 = 700ms
		{10, 50, 1},     // 5 ticks -> 7 * 10 = 70ms
		{500, 2500, 4},  // 5 ticks -> 7 * 500 = 3.5s
		{1000, 5000, 7}, // 5 ticks -> 7s
	} {
		got := Config{HeartbeatMs: tc.hb, ElectionMs: tc.el}.MinLeaseTTL()
		if got != tc.want {
			t.Errorf("MinLeaseTTL(%d, %d) = %d, want %d", tc.hb, tc.el, got, tc.want)
		}
	}
}

// TestLeaseTTLOneSecond checks that, with the default timing, a 1 s lease is
// granted as 1 s (not raised to a minimum) and actually expires after ~1 s.
func TestLeaseTTLOneSecond(t *testing.T) {
	t.Parallel()
	m := startMember(t, testConfig(t, "lease"))
	cli := newClient(t, m.ClientURL())
	ctx := ctxT(t)

	grant, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	if grant.TTL != 1 {
		t.Fatalf("Grant(1).TTL = %d, want 1", grant.TTL)
	}
	ttl, err := cli.TimeToLive(ctx, grant.ID)
	if err != nil {
		t.Fatal(err)
	}
	// TTL is the remaining time truncated to whole seconds, so 0 or 1.
	if ttl.GrantedTTL != 1 || ttl.TTL > 1 || ttl.TTL < 0 {
		t.Fatalf("TimeToLive = {TTL: %d, GrantedTTL: %d}, want {0|1, 1}", ttl.TTL, ttl.GrantedTTL)
	}
	if _, err := cli.Put(ctx, "/orion/session", "x", clientv3.WithLease(grant.ID)); err != nil {
		t.Fatal(err)
	}
	// etcd checks for expired leases every 500 ms, then revokes through raft.
	for {
		resp, err := cli.Get(ctx, "/orion/session")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Since(granted) > 3*time.Second {
			t.Fatal("key attached to a 1 s lease still present after 3 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("1 s lease revoked %v after grant", time.Since(granted).Round(time.Millisecond))
}

// TestLeaseTTLRaisedWithSlowTiming is the control for the rule above: with
// etcd's own timing defaults a 1 s lease is raised to 2 s.
func TestLeaseTTLRaisedWithSlowTiming(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "slow")
	cfg.HeartbeatMs, cfg.ElectionMs = 100, 1000
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	grant, err := cli.Grant(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if grant.TTL != 2 || grant.TTL != cfg.MinLeaseTTL() {
		t.Fatalf("Grant(1).TTL = %d, want 2 (MinLeaseTTL %d)", grant.TTL, cfg.MinLeaseTTL())
	}
}

func TestThreeMemberCluster(t *testing.T) {
	t.Parallel()
	cfgs := []Config{testConfig(t, "n1"), testConfig(t, "n2"), testConfig(t, "n3")}
	var ic []string
	for _, c := range cfgs {
		ic = append(ic, c.Name+"="+c.PeerURL)
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(ic, ",")
	}

	// Readiness needs a quorum, so the members must start concurrently.
	members := make([]*Member, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range cfgs {
		wg.Go(func() { members[i], errs[i] = Start(context.Background(), cfgs[i]) })
	}
	wg.Wait()
	t.Logf("3-member cluster ready after %v", time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		// Close the followers concurrently, then the leader. (Closing a
		// leader while its followers close too makes its leadership
		// transfer wait for etcd's request timeout, ~5.5 s; a member of a
		// multi-member cluster takes ~1 s to close because etcd waits up to
		// 1 s for open peer connections.)
		begin := time.Now()
		var wg sync.WaitGroup
		var leader *Member
		for _, m := range members {
			switch {
			case m == nil:
			case m.Server().Leader() == m.Server().MemberID():
				leader = m
			default:
				wg.Go(func() { m.Close() })
			}
		}
		wg.Wait()
		if leader != nil {
			leader.Close()
		}
		t.Logf("3 members closed after %v", time.Since(begin).Round(time.Millisecond))
	})
	for i := range members {
		if errs[i] != nil {
			t.Fatalf("Start %s: %v", cfgs[i].Name, errs[i])
		}
	}

	// Short election timings on a loaded machine may bring a new election
	// right after start: wait for the three to agree.
	testkit.WaitFor(t, 10*time.Second, "the members to agree on a leader", func() bool {
		leader := members[0].Server().Leader()
		for _, m := range members[1:] {
			if m.Server().Leader() != leader {
				return false
			}
		}
		return leader != 0
	})
	// Each member publishes its client URL through raft once it is ready,
	// so n1 may learn the last one's a moment after Start returns.
	var eps []string
	testkit.WaitFor(t, 10*time.Second, "n1 to know the 3 client URLs", func() bool {
		eps = members[0].Endpoints()
		return len(eps) == 3
	})
	if eps[0] != cfgs[0].ClientURL {
		t.Fatalf("Endpoints = %v, want n1's own %s first", eps, cfgs[0].ClientURL)
	}

	c0 := newClient(t, members[0].ClientURL())
	put, err := c0.Put(ctxT(t), "/orion/replicated", "yes")
	if err != nil {
		t.Fatal(err)
	}
	// A serializable read is served from the member's local store, so
	// seeing the value on n3 proves replication.
	c2 := newClient(t, members[2].ClientURL())
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c2.Get(ctxT(t), "/orion/replicated", clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "yes" && resp.Header.Revision >= put.Header.Revision {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("put not replicated to n3")
		}
		time.Sleep(10 * time.Millisecond)
	}

}

// TestErrAfterServerStops checks that an etcd server stopping on its own
// (as it does e.g. when its member is removed from the cluster) is reported
// on Err, and that Close still works afterwards.
func TestErrAfterServerStops(t *testing.T) {
	t.Parallel()
	m := startMember(t, testConfig(t, "stops"))
	m.Server().HardStop()
	select {
	case err := <-m.Err():
		if err == nil {
			t.Fatal("nil error on Err")
		}
		t.Logf("reported: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("stopped server not reported on Err")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-m.Err(); ok {
		t.Fatal("Err not closed after Close")
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "restart")
	m := startMember(t, cfg)
	cli := newClient(t, m.ClientURL())
	if _, err := cli.Put(ctxT(t), "/orion/durable", "1"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m = startMember(t, cfg)
	cli = newClient(t, m.ClientURL())
	if got := mustGet(t, cli, "/orion/durable"); got != "1" {
		t.Fatalf("after restart got %q, want 1", got)
	}
}

func TestBusyPort(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"client", "peer"} {
		t.Run(which, func(t *testing.T) {
			cfg := testConfig(t, "busy")
			busy := cfg.ClientURL
			if which == "peer" {
				busy = cfg.PeerURL
			}
			l, err := net.Listen("tcp", strings.TrimPrefix(busy, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()

			m, err := Start(context.Background(), cfg)
			if err == nil {
				m.Close()
				t.Fatal("Start succeeded on a busy port")
			}
			t.Logf("error: %v", err)
			want := which + " URL " + busy
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("error %q does not name %q and the cause", err, want)
			}
			// The other port must have been released.
			other := cfg.PeerURL
			if which == "peer" {
				other = cfg.ClientURL
			}
			l2, err := net.Listen("tcp", strings.TrimPrefix(other, "http://"))
			if err != nil {
				t.Fatalf("port of %s not released: %v", other, err)
			}
			l2.Close()
		})
	}
}

// TestStartCancelled starts one member of a 3-member cluster alone: it can
// never become ready, so Start must honour ctx and release its ports.
func TestStartCancelled(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "n1")
	cfg.InitialCluster = fmt.Sprintf("n1=%s,n2=%s,n3=%s", cfg.PeerURL, testkit.FreeURL(t), testkit.FreeURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	m, err := Start(ctx, cfg)
	if err == nil {
		m.Close()
		t.Fatal("Start without quorum succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap context.DeadlineExceeded", err)
	}
	for _, u := range []string{cfg.ClientURL, cfg.PeerURL} {
		l, err := net.Listen("tcp", strings.TrimPrefix(u, "http://"))
		if err != nil {
			t.Fatalf("port of %s not released: %v", u, err)
		}
		l.Close()
	}
}

func TestInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no data dir", Config{}, "DataDir is required"},
		{"remote client", Config{DataDir: dir, ClientURL: "http://10.1.2.3:2379"}, "not a loopback address"},
		{"wildcard", Config{DataDir: dir, ClientURL: "http://0.0.0.0:2379", AllowRemoteClients: true}, "wildcard"},
		{"https", Config{DataDir: dir, ClientURL: "https://127.0.0.1:2379"}, "an https URL needs TLS"},
		{"unix", Config{DataDir: dir, ClientURL: "unix:///tmp/x"}, "scheme must be http, or https with TLS"},
		{"tls http", Config{DataDir: dir, ClientTLS: TLS{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}}, "client TLS certificate /nonexistent/c.pem: no such file or directory"},
		{"tls no key", Config{DataDir: dir, PeerTLS: TLS{CertFile: "/nonexistent/c.pem"}}, "peer TLS needs both a certificate and its key"},
		{"client auth no ca", Config{DataDir: dir, ClientTLS: TLS{ClientCertAuth: true}}, "client TLS: client certificate auth needs the trusted CA file"},
		{"no port", Config{DataDir: dir, PeerURL: "http://127.0.0.1"}, "http://host:port"},
		{"path", Config{DataDir: dir, PeerURL: "http://127.0.0.1:2380/x"}, "http://host:port"},
		{"same addr", Config{DataDir: dir, ClientURL: "http://127.0.0.1:2380"}, "same address"},
		{"cluster without self", Config{DataDir: dir, Name: "a", InitialCluster: "b=http://127.0.0.1:2380"}, "does not contain this member a="},
		{"cluster syntax", Config{DataDir: dir, InitialCluster: "http://127.0.0.1:2380"}, "is not name=url"},
		{"state", Config{DataDir: dir, ClusterState: "old"}, "ClusterState"},
		{"election", Config{DataDir: dir, HeartbeatMs: 100, ElectionMs: 400}, "at least 5*HeartbeatMs"},
		{"compaction", Config{DataDir: dir, AutoCompactionMode: "size"}, "AutoCompactionMode"},
		{"retention", Config{DataDir: dir, AutoCompactionRetention: "1h"}, "revision count"},
		{"log level", Config{DataDir: dir, LogLevel: "loud"}, "LogLevel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Start(context.Background(), tc.cfg)
			if err == nil {
				m.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}

	// Accepted forms.
	for _, cfg := range []Config{
		{DataDir: dir, ClientURL: "http://localhost:2379"},
		{DataDir: dir, ClientURL: "http://[::1]:2379", PeerURL: "http://[::1]:2380"},
		{DataDir: dir, ClientURL: "http://10.1.2.3:2379", AllowRemoteClients: true},
		{DataDir: dir, AutoCompactionMode: "periodic"},
		{DataDir: dir, Name: "n2", PeerURL: "http://127.0.0.1:2390", InitialCluster: "n1=http://127.0.0.1:2380, n2=http://127.0.0.1:2390"},
	} {
		if _, _, _, err := cfg.normalize(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
