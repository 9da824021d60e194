// Package etcdmember runs an embedded etcd member inside the orion process.
//
// It is a thin wrapper over go.etcd.io/etcd/server/v3/embed with defaults
// chosen for orion, which uses etcd as its write-ahead log:
//
//   - `orion server` without an external etcd starts a single member whose
//     data lives in <data-dir>/etcd and whose client URL is on loopback.
//   - `orion etcd` starts one member of a (typically 3-member) cluster; all
//     members are given the same InitialCluster.
//
// The wrapper only ever binds the client URL and the peer URL: the metrics
// listener (ListenMetricsUrls), the separate HTTP-only client listener
// (ListenClientHttpUrls) and pprof are all disabled. Only plain http URLs are
// supported; TLS is not wired through.
//
// Durability: fsync is never disabled (embed.Config.UnsafeNoFsync stays false).
package etcdmember

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	etcdsrv "go.etcd.io/etcd/server/v3/etcdserver"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults applied by Start to zero-valued Config fields.
const (
	DefaultName         = "default"
	DefaultClientURL    = "http://127.0.0.1:2379"
	DefaultPeerURL      = "http://127.0.0.1:2380"
	DefaultClusterToken = "orion"

	// DefaultHeartbeatMs and DefaultElectionMs are much shorter than etcd's
	// own defaults (100 ms / 1000 ms). They target members on one host or a
	// low-latency LAN, and they keep the minimum lease TTL at 1 s so that a
	// 1 s session TTL is honoured; see MinLeaseTTL.
	DefaultHeartbeatMs = 50
	DefaultElectionMs  = 250

	DefaultAutoCompactionMode = "revision"
	// DefaultAutoCompactionRetention is the default for "revision" mode: keep
	// the last 100000 revisions.
	DefaultAutoCompactionRetention = "100000"
	// DefaultPeriodicCompactionRetention is the default for "periodic" mode:
	// keep one hour of history.
	DefaultPeriodicCompactionRetention = "1h"

	DefaultQuotaBackendBytes int64 = 4 << 30 // 4 GiB; etcd's own default is 2 GiB
	DefaultMaxTxnOps               = embed.DefaultMaxTxnOps
	DefaultMaxRequestBytes         = uint(embed.DefaultMaxRequestBytes) // 1.5 MiB
	DefaultLogLevel                = "warn"
	DefaultReadyTimeout            = 30 * time.Second
)

// Config describes one etcd member. The zero value of every field except
// DataDir selects the default documented on the field.
type Config struct {
	// Name is the member name, unique within the cluster. Default "default".
	Name string
	// DataDir is the member's data directory (WAL, snapshots, bbolt db). It
	// is created if missing. Required.
	DataDir string

	// ClientURL is both listened on and advertised for client (gRPC and
	// HTTP gateway) traffic. Default http://127.0.0.1:2379. Its host must be
	// a loopback address (or "localhost") unless AllowRemoteClients is set.
	ClientURL string
	// PeerURL is both listened on and advertised for raft traffic between
	// members. Default http://127.0.0.1:2380. For a cluster spanning hosts it
	// must be an address the other members can reach.
	PeerURL string
	// AdvertiseClientURL is the client URL published to clients and to the
	// cluster. Default: ClientURL. Required when ClientURL's host is a
	// wildcard (0.0.0.0 or [::]); it may be a host name.
	AdvertiseClientURL string
	// AdvertisePeerURL is the peer URL published to the other members; it
	// is the URL --initial-cluster lists for this member. Default: PeerURL.
	// Required when PeerURL's host is a wildcard; it may be a host name
	// (such as a StatefulSet pod's stable DNS name).
	AdvertisePeerURL string
	// AllowRemoteClients permits a non-loopback ClientURL host without
	// ClientTLS.ClientCertAuth: clients are then not authenticated by the
	// transport (etcd's own auth still can), so only set it on a trusted
	// network.
	AllowRemoteClients bool

	// ClientTLS serves the client URL over TLS (its scheme is then https);
	// PeerTLS does the same for raft traffic between members (every peer
	// URL, InitialCluster's included, is then https). The zero TLS is
	// plain http.
	ClientTLS TLS
	PeerTLS   TLS

	// InitialCluster lists all members of a new cluster as
	// "n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380,...". It must contain
	// Name=PeerURL. Empty means a single-member cluster "Name=PeerURL".
	// It is only read when DataDir holds no member yet; a restarted member
	// takes its membership from its WAL.
	InitialCluster string
	// ClusterState is "new" (default) when bootstrapping a cluster, or
	// "existing" when joining a member that was already added with the
	// MemberAdd API.
	ClusterState string
	// ClusterToken distinguishes clusters bootstrapped with the same
	// InitialCluster. Default "orion".
	ClusterToken string

	// HeartbeatMs is the raft heartbeat interval (etcd's TickMs). Default 50.
	HeartbeatMs int
	// ElectionMs is the raft election timeout. It must be at least
	// 5*HeartbeatMs (an etcd rule). Default 250.
	//
	// HeartbeatMs and ElectionMs together set the smallest lease TTL etcd
	// will grant; see MinLeaseTTL.
	ElectionMs int

	// AutoCompactionMode is "revision" (default) or "periodic".
	AutoCompactionMode string
	// AutoCompactionRetention is a revision count in "revision" mode
	// (default "100000") or a duration such as "1h" in "periodic" mode
	// (default "1h"; a bare integer means hours).
	AutoCompactionRetention string

	// QuotaBackendBytes is the backend size at which etcd raises a NOSPACE
	// alarm and refuses writes. Default 4 GiB.
	QuotaBackendBytes int64

	// MaintenanceInterval is how often the member's process checks the
	// member's NOSPACE alarm and compacts history by age (see
	// maintenance.go). Default 5 s; negative turns the loop off (etcd's own
	// behaviour, for tests of it).
	MaintenanceInterval time.Duration
	// HistoryRetention is the history the time-based compaction keeps,
	// beside AutoCompactionMode's own policy. Default 5 min; negative keeps
	// only etcd's.
	HistoryRetention time.Duration
	// NoSpaceRetry spaces the attempts to recover from NOSPACE while the
	// live data fills the quota. Default 10 s.
	NoSpaceRetry time.Duration
	// MinFreeDisk is the free space the member's data volume keeps. Below
	// it the member's process raises the NOSPACE alarm itself, so etcd
	// refuses writes (a state Orion handles: 507, held transitions) before
	// its WAL meets a full disk, which etcd answers with a fatal exit; the
	// alarm is disarmed once the volume has room again. Default 256 MiB
	// (four WAL segments); negative turns the guard off.
	MinFreeDisk int64
	// MaxTxnOps is the maximum number of operations in one transaction.
	// Default 128 (etcd's default).
	MaxTxnOps uint
	// MaxRequestBytes is the maximum size of one client request. Default
	// 1.5 MiB (etcd's default).
	MaxRequestBytes uint

	// Logger receives the member's logs, named "etcd" and tagged with the
	// member name. Nil means JSON logs on stderr.
	Logger *zap.Logger
	// LogLevel filters the member's logs: debug, info, warn (default),
	// error, dpanic, panic or fatal. It can only make Logger quieter; it
	// cannot enable levels that Logger itself drops.
	LogLevel string

	// ReadyTimeout bounds how long Start waits for the member to become
	// ready. Default 30 s.
	ReadyTimeout time.Duration

	// Node names the machine the member runs on (a Kubernetes node, a
	// host), served at NodePath on the client URL. Default: the host name
	// (DefaultNode).
	Node string
}

// TLS is one listener's TLS: the certificate it presents and, with
// ClientCertAuth, the CA its clients' certificates must be signed by.
type TLS struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies the other side's certificate: the clients' with
	// ClientCertAuth; for peers also the certificate a member presents when
	// it dials another.
	TrustedCAFile string
	// ClientCertAuth refuses any connection without a certificate signed by
	// TrustedCAFile. With etcd auth on, a client that sends no password is
	// then the user its certificate's common name names.
	ClientCertAuth bool
}

// Enabled reports whether t names a certificate (the URL is https).
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

func (t TLS) scheme() string {
	if t.Enabled() {
		return "https"
	}
	return "http"
}

// check names what is missing or unreadable, as "what (file): why".
func (t TLS) check(side string) error {
	var errs []error
	if t.Enabled() && (t.CertFile == "" || t.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s TLS needs both a certificate and its key (cert %q, key %q)", side, t.CertFile, t.KeyFile))
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" {
		errs = append(errs, fmt.Errorf("%s TLS: client certificate auth needs the trusted CA file that signed the certificates to accept", side))
	}
	if !t.Enabled() && (t.ClientCertAuth || t.TrustedCAFile != "") {
		errs = append(errs, fmt.Errorf("%s: a trusted CA or client certificate auth needs TLS: give a certificate and its key", side))
	}
	for _, f := range []struct{ what, path string }{{"certificate", t.CertFile}, {"key", t.KeyFile}, {"trusted CA", t.TrustedCAFile}} {
		if f.path == "" {
			continue
		}
		if b, err := os.ReadFile(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s TLS %s %s: %w", side, f.what, f.path, unwrapPathError(err)))
		} else if !strings.Contains(string(b), "-----BEGIN ") {
			errs = append(errs, fmt.Errorf("%s TLS %s %s: not a PEM file", side, f.what, f.path))
		}
	}
	if len(errs) == 0 && t.Enabled() {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			errs = append(errs, fmt.Errorf("%s TLS certificate %s and key %s: %w", side, t.CertFile, t.KeyFile, err))
		}
	}
	return errors.Join(errs...)
}

// unwrapPathError drops the path and operation a *PathError repeats.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (t TLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile, ClientCertAuth: t.ClientCertAuth}
}

// MinLeaseTTL returns the smallest lease TTL, in whole seconds, that a member
// started with c will grant; etcd silently raises any shorter requested TTL
// to this value (a Grant response then reports the raised TTL). Zero or
// negative HeartbeatMs/ElectionMs are treated as their defaults.
//
// The rule, from etcd v3.7.3:
//
//	electionTicks = ElectionMs / HeartbeatMs                  // integer division, embed/config.go:1220
//	minTTL        = ((3*electionTicks)/2) * HeartbeatMs ms    // integer division, etcdserver/server.go:340
//	MinLeaseTTL   = ceil(minTTL in seconds)                   // etcdserver/server.go:345
//
// and lease/lessor.go:301-302 (Grant) and :817-818 (recovery from the backend)
// raise a smaller TTL to MinLeaseTTL. In words: the minimum TTL is 1.5x the
// election timeout (rounded down to whole ticks), rounded up to whole seconds.
//
// With the defaults (50 ms / 250 ms: 5 ticks, 7 ticks = 350 ms) the minimum is
// 1 s, so a 1 s session TTL is granted as 1. With etcd's own defaults
// (100 ms / 1000 ms: 15 ticks = 1.5 s) it would be raised to 2 s. A 1 s TTL
// needs ((3*electionTicks)/2)*HeartbeatMs <= 1000, e.g. ElectionMs <= 650 at
// HeartbeatMs 50.
//
// Note that a newly elected leader (and a restarted single member) extends
// every lease by one election timeout, so after a leader change a lease can
// outlive its TTL by up to ElectionMs.
func (c Config) MinLeaseTTL() int64 {
	hb, el := c.HeartbeatMs, c.ElectionMs
	if hb <= 0 {
		hb = DefaultHeartbeatMs
	}
	if el <= 0 {
		el = DefaultElectionMs
	}
	electionTicks := el / hb
	minTTL := time.Duration((3*electionTicks)/2) * time.Duration(hb) * time.Millisecond
	return int64(math.Ceil(minTTL.Seconds()))
}

// Member is a running etcd member. Create it with Start and stop it with
// Close.
type Member struct {
	etcd      *embed.Etcd
	name      string
	clientURL string
	peerURL   string

	errc     chan error    // buffered(1); closed by Close
	stopping chan struct{} // closed when Close starts

	stopMaintain context.CancelFunc
	maintainDone chan struct{} // closed when the maintenance loop returns
	closing      *atomic.Bool  // set when Close starts: the logger drops close noise
	watchDone    chan struct{} // closed when watch returns
	closeOnce    sync.Once
}

// Start starts an etcd member and returns once it is ready to serve client
// requests: it has joined the cluster, a leader is known, and the member has
// published its client URL through raft. The member's client port is bound
// before that, but requests are only served once it is ready.
//
// Readiness needs a quorum, so when bootstrapping a multi-member cluster the
// members must be started concurrently (e.g. one Start per process, or one
// goroutine per member); a lone Start of a 3-member cluster waits until
// ReadyTimeout.
//
// ctx only bounds the start-up: cancelling it before Start returns aborts the
// start; cancelling it afterwards has no effect (use Close). On any failure
// Start releases everything it acquired (listeners, goroutines, the data-dir
// lock); it never deletes data.
//
// Note that etcd terminates the process (zap Fatal) on some unrecoverable
// conditions, such as a corrupt data directory.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	c, urls, lvl, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdserver: starting member %q: %w", c.Name, err)
	}

	if err := checkBootstrapSpace(c); err != nil {
		return nil, err
	}

	closing := new(atomic.Bool)
	lg := memberLogger(c.Logger, lvl, c.Name, closing)
	bootstrapped, err := prepareBootstrap(c, lg)
	if err != nil {
		return nil, err
	}

	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir

	ec.ListenClientUrls = []url.URL{*urls.client}
	ec.AdvertiseClientUrls = []url.URL{*urls.advClient}
	ec.ListenPeerUrls = []url.URL{*urls.peer}
	ec.AdvertisePeerUrls = []url.URL{*urls.advPeer}
	if c.ClientTLS.Enabled() {
		ec.ClientTLSInfo = c.ClientTLS.info()
	}
	if c.PeerTLS.Enabled() {
		ec.PeerTLSInfo = c.PeerTLS.info()
	}
	// Bind nothing but the two URLs above.
	ec.ListenClientHttpUrls = nil
	ec.ListenMetricsUrls = nil
	ec.EnablePprof = false

	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.ClusterState
	ec.InitialClusterToken = c.ClusterToken

	ec.TickMs = uint(c.HeartbeatMs)
	ec.ElectionMs = uint(c.ElectionMs)

	ec.AutoCompactionMode = c.AutoCompactionMode
	ec.AutoCompactionRetention = c.AutoCompactionRetention
	ec.QuotaBackendBytes = c.QuotaBackendBytes
	ec.MaxTxnOps = c.MaxTxnOps
	ec.MaxRequestBytes = c.MaxRequestBytes

	ec.UnsafeNoFsync = false // etcd is orion's WAL: never trade durability for speed.
	ec.UserHandlers = map[string]http.Handler{NodePath: nodeHandler(NodeInfo{Member: c.Name, Node: c.Node})}

	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// With ZapLoggerBuilder set, embed only uses LogLevel to decide whether
	// to register pprof and trace handlers on the client port, which it does
	// for "debug". Keep them off: our logger already carries the level.
	ec.LogLevel = lvl.String()
	if lvl < zapcore.InfoLevel {
		ec.LogLevel = zapcore.InfoLevel.String()
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		// StartEtcd closes whatever it opened before returning an error.
		return nil, startError(c, urls, err)
	}

	timer := time.NewTimer(c.ReadyTimeout)
	defer timer.Stop()
	var failure error
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		if err == nil {
			err = errors.New("a listener stopped serving")
		}
		failure = fmt.Errorf("etcdserver: member %q failed while starting: %w", c.Name, err)
	case <-e.Server.StopNotify():
		failure = fmt.Errorf("etcdserver: member %q stopped while starting (see the etcd log)", c.Name)
	case <-timer.C:
		failure = fmt.Errorf("etcdserver: member %q not ready after %v (is a quorum of %q reachable?)",
			c.Name, c.ReadyTimeout, c.InitialCluster)
	case <-ctx.Done():
		failure = fmt.Errorf("etcdserver: starting member %q: %w", c.Name, ctx.Err())
	}
	if failure != nil {
		select {
		case <-e.Server.ReadyNotify():
		default:
			// embed.Etcd.Close first waits for the client servers, which in
			// turn wait until the member is ready or its server is stopping;
			// a member that never became ready would make Close hang. Stop
			// the server first to release them.
			e.Server.HardStop()
		}
		e.Close()
		return nil, failure
	}

	bootstrapped()
	m := &Member{
		etcd:      e,
		name:      c.Name,
		clientURL: urls.advClient.String(),
		peerURL:   urls.advPeer.String(),
		errc:      make(chan error, 1),
		stopping:  make(chan struct{}),
		closing:   closing,
		watchDone: make(chan struct{}),
	}
	go m.watch()
	m.maintainDone = make(chan struct{})
	if c.MaintenanceInterval > 0 {
		mctx, cancel := context.WithCancel(context.Background())
		m.stopMaintain = cancel
		go m.maintain(mctx, c, lg)
	} else {
		close(m.maintainDone)
	}
	return m, nil
}

// watch reports the first fatal error after start: a listener that stopped
// serving, or the etcd server stopping on its own (for example because the
// member was removed from the cluster).
func (m *Member) watch() {
	defer close(m.watchDone)
	var err error
	select {
	case <-m.stopping:
		return
	case e, ok := <-m.etcd.Err():
		if !ok {
			return
		}
		if e == nil {
			e = errors.New("a listener stopped serving")
		}
		err = fmt.Errorf("etcdserver: member %q: %w", m.name, e)
	case <-m.etcd.Server.StopNotify():
		err = fmt.Errorf("etcdserver: member %q: etcd server stopped unexpectedly (see the etcd log)", m.name)
	}
	select {
	case <-m.stopping:
	default:
		m.errc <- err // buffered; watch sends at most once
	}
}

// ClientURL returns the URL this member serves clients on.
func (m *Member) ClientURL() string { return m.clientURL }

// PeerURL returns the URL this member serves raft peers on.
func (m *Member) PeerURL() string { return m.peerURL }

// Name returns the member name.
func (m *Member) Name() string { return m.name }

// Endpoints returns client endpoints for a clientv3.Config: this member's
// client URL first, followed by the client URLs the other members of its
// cluster have published so far.
func (m *Member) Endpoints() []string {
	eps := []string{m.clientURL}
	for _, u := range m.etcd.Server.Cluster().ClientURLs() {
		if u != m.clientURL {
			eps = append(eps, u)
		}
	}
	return eps
}

// Err returns a channel that delivers at most one fatal error that occurred
// after Start returned (the member then no longer serves; call Close). The
// channel is closed when Close returns.
func (m *Member) Err() <-chan error { return m.errc }

// Server exposes the underlying etcd server, e.g. for Leader() or
// LeaderChangedNotify(). Do not stop it directly; use Close.
func (m *Member) Server() *etcdsrv.EtcdServer { return m.etcd.Server }

// Close stops the member gracefully and waits until it has stopped: client
// requests in flight get up to etcd's request timeout, then the raft loop,
// listeners and backend are shut down. A leader of a multi-member cluster
// first hands leadership to a follower. It is safe to call more than once
// and from several goroutines; every call returns after the member has
// stopped. It currently always returns nil.
//
// A single member closes in milliseconds. A member of a multi-member cluster
// takes about 1 s, because etcd waits up to 1 s for open peer connections;
// and a leader whose followers are closing at the same time may wait up to
// etcd's request timeout (5 s + 2*ElectionMs) for the leadership transfer.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.closing.Store(true)
		close(m.stopping)
		if m.stopMaintain != nil {
			m.stopMaintain()
		}
		<-m.maintainDone
		m.etcd.Close()
		<-m.watchDone
		close(m.errc)
	})
	return nil
}

// memberURLs holds the parsed client and peer URLs.
type memberURLs struct {
	client, peer       *url.URL // listened on
	advClient, advPeer *url.URL // advertised
}

// normalize applies defaults and validates c.
func (c Config) normalize() (Config, memberURLs, zapcore.Level, error) {
	var urls memberURLs
	bad := func(format string, args ...any) (Config, memberURLs, zapcore.Level, error) {
		return c, urls, 0, fmt.Errorf("etcdserver: invalid config: "+format, args...)
	}

	if c.DataDir == "" {
		return bad("DataDir is required")
	}
	c.DataDir = filepath.Clean(c.DataDir)
	if c.Name == "" {
		c.Name = DefaultName
	}
	if strings.ContainsAny(c.Name, "=,") || strings.TrimSpace(c.Name) != c.Name {
		return bad("Name %q must not contain '=', ',' or surrounding spaces", c.Name)
	}
	if c.ClientURL == "" {
		c.ClientURL = DefaultClientURL
	}
	if c.Node == "" {
		c.Node = DefaultNode()
	}
	if c.PeerURL == "" {
		c.PeerURL = DefaultPeerURL
	}
	if c.ClusterState == "" {
		c.ClusterState = embed.ClusterStateFlagNew
	}
	if c.ClusterToken == "" {
		c.ClusterToken = DefaultClusterToken
	}
	if c.HeartbeatMs == 0 {
		c.HeartbeatMs = DefaultHeartbeatMs
	}
	if c.ElectionMs == 0 {
		c.ElectionMs = DefaultElectionMs
	}
	if c.AutoCompactionMode == "" {
		c.AutoCompactionMode = DefaultAutoCompactionMode
	}
	if c.AutoCompactionRetention == "" {
		if c.AutoCompactionMode == embed.CompactorModePeriodic {
			c.AutoCompactionRetention = DefaultPeriodicCompactionRetention
		} else {
			c.AutoCompactionRetention = DefaultAutoCompactionRetention
		}
	}
	if c.QuotaBackendBytes == 0 {
		c.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if c.HistoryRetention == 0 {
		c.HistoryRetention = DefaultHistoryRetention
	}
	if c.NoSpaceRetry <= 0 {
		c.NoSpaceRetry = DefaultNoSpaceRetry
	}
	if c.MinFreeDisk == 0 {
		c.MinFreeDisk = DefaultMinFreeDisk
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}

	if err := errors.Join(c.ClientTLS.check("client"), c.PeerTLS.check("peer")); err != nil {
		return c, urls, 0, fmt.Errorf("etcdserver: invalid config: %w", err)
	}
	cs, ps := c.ClientTLS.scheme(), c.PeerTLS.scheme()
	var err error
	if urls.client, err = parseListenURL("ClientURL", c.ClientURL, c.AdvertiseClientURL != "", cs); err != nil {
		return c, urls, 0, err
	}
	if urls.peer, err = parseListenURL("PeerURL", c.PeerURL, c.AdvertisePeerURL != "", ps); err != nil {
		return c, urls, 0, err
	}
	urls.advClient, urls.advPeer = urls.client, urls.peer
	if c.AdvertiseClientURL != "" {
		if urls.advClient, err = parseMemberURL("AdvertiseClientURL", c.AdvertiseClientURL, cs); err != nil {
			return c, urls, 0, err
		}
	}
	if c.AdvertisePeerURL != "" {
		if urls.advPeer, err = parseMemberURL("AdvertisePeerURL", c.AdvertisePeerURL, ps); err != nil {
			return c, urls, 0, err
		}
	}
	if !c.AllowRemoteClients && !c.ClientTLS.ClientCertAuth && !isLoopback(urls.client.Hostname()) {
		return bad("ClientURL %s is not a loopback address (set ClientTLS.ClientCertAuth or AllowRemoteClients to serve other hosts)", c.ClientURL)
	}
	if urls.client.Host == urls.peer.Host {
		return bad("ClientURL %s and PeerURL %s use the same address", c.ClientURL, c.PeerURL)
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + urls.advPeer.String()
	} else if err := checkInitialCluster(c.InitialCluster, c.Name, urls.advPeer, ps); err != nil {
		return c, urls, 0, err
	}

	if c.ClusterState != embed.ClusterStateFlagNew && c.ClusterState != embed.ClusterStateFlagExisting {
		return bad("ClusterState %q must be %q or %q", c.ClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	if c.HeartbeatMs < 0 || c.ElectionMs < 0 {
		return bad("HeartbeatMs (%d) and ElectionMs (%d) must be positive", c.HeartbeatMs, c.ElectionMs)
	}
	if c.ElectionMs < 5*c.HeartbeatMs {
		return bad("ElectionMs (%d) must be at least 5*HeartbeatMs (%d)", c.ElectionMs, 5*c.HeartbeatMs)
	}
	if c.ElectionMs > 50000 {
		return bad("ElectionMs (%d) must be at most 50000", c.ElectionMs)
	}
	switch c.AutoCompactionMode {
	case embed.CompactorModeRevision:
		if n, err := strconv.ParseInt(c.AutoCompactionRetention, 10, 64); err != nil || n < 0 {
			return bad("AutoCompactionRetention %q must be a revision count in %q mode", c.AutoCompactionRetention, c.AutoCompactionMode)
		}
	case embed.CompactorModePeriodic:
		if _, err := strconv.Atoi(c.AutoCompactionRetention); err != nil {
			if d, err := time.ParseDuration(c.AutoCompactionRetention); err != nil || d < 0 {
				return bad("AutoCompactionRetention %q must be a duration (e.g. \"1h\") in %q mode", c.AutoCompactionRetention, c.AutoCompactionMode)
			}
		}
	default:
		return bad("AutoCompactionMode %q must be %q or %q", c.AutoCompactionMode, embed.CompactorModeRevision, embed.CompactorModePeriodic)
	}
	if c.QuotaBackendBytes < 0 {
		return bad("QuotaBackendBytes (%d) must not be negative", c.QuotaBackendBytes)
	}
	if c.ReadyTimeout < 0 {
		return bad("ReadyTimeout (%v) must not be negative", c.ReadyTimeout)
	}
	lvl, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return bad("LogLevel %q: %v", c.LogLevel, err)
	}
	return c, urls, lvl, nil
}

// parseListenURL parses a URL to listen on: a member URL whose host is an
// IP address or localhost (etcd binds it), or a wildcard (0.0.0.0, [::])
// when an advertised URL is given too.
func parseListenURL(field, raw string, advertised bool, scheme string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil && u.Scheme == scheme {
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
			if !advertised {
				return nil, fmt.Errorf("etcdserver: invalid config: %s %q: a wildcard host needs the matching Advertise URL", field, raw)
			}
			if _, port, err := net.SplitHostPort(u.Host); err == nil {
				if p, err := strconv.Atoi(port); err == nil && p >= 1 && p <= 65535 {
					return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
				}
			}
		}
	}
	v, err := parseMemberURL(field, raw, scheme)
	if err != nil {
		return nil, err
	}
	if h := v.Hostname(); net.ParseIP(h) == nil && !strings.EqualFold(h, "localhost") {
		return nil, fmt.Errorf("etcdserver: invalid config: %s %q: etcd listens on IP addresses only; put the host name in the Advertise URL", field, raw)
	}
	return v, nil
}

// parseMemberURL parses a client or peer URL: scheme://host:port (scheme
// http, or https with TLS), where host is a name or IP that can be
// advertised to others (not 0.0.0.0 or ::).
func parseMemberURL(field, raw, scheme string) (*url.URL, error) {
	bad := func(why string) (*url.URL, error) {
		return nil, fmt.Errorf("etcdserver: invalid config: %s %q: %s", field, raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad(err.Error())
	}
	switch {
	case u.Scheme == scheme:
	case u.Scheme == "https":
		return bad("an https URL needs TLS: give its certificate and key")
	case u.Scheme == "http":
		return bad("TLS is on (a certificate is given): the URL must be https")
	default:
		return bad("scheme must be http, or https with TLS (unix sockets are not supported)")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return bad("must be of the form " + scheme + "://host:port")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return bad("must be of the form " + scheme + "://host:port")
	}
	if host == "" {
		return bad("host is missing")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return bad("host must be an address other members and clients can reach, not a wildcard")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return bad("port must be between 1 and 65535")
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkInitialCluster checks the "name=url,..." syntax and that it lists
// name=peer. etcd itself checks the rest when bootstrapping.
func checkInitialCluster(ic, name string, peer *url.URL, scheme string) error {
	found := false
	for entry := range strings.SplitSeq(ic, ",") {
		n, raw, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || n == "" {
			return fmt.Errorf("etcdserver: invalid config: InitialCluster %q: entry %q is not name=url", ic, entry)
		}
		u, err := parseMemberURL("InitialCluster peer URL of "+n, raw, scheme)
		if err != nil {
			return err
		}
		if n == name && u.String() == peer.String() {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("etcdserver: invalid config: InitialCluster %q does not contain this member %s=%s", ic, name, peer)
	}
	return nil
}

// memberLogger derives the member's logger from base (stderr JSON if nil),
// filtered to lvl.
func memberLogger(base *zap.Logger, lvl zapcore.Level, name string, closing *atomic.Bool) *zap.Logger {
	if base == nil {
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		base = zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), lvl), zap.AddCaller())
	} else {
		// NewIncreaseLevelCore refuses a level below the base core's; the
		// base is then already at least as quiet as lvl, so keep it as is.
		base = base.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
			if c, err := zapcore.NewIncreaseLevelCore(core, lvl); err == nil {
				return c
			}
			return core
		}))
	}
	base = base.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return dropBenign{core, closing}
	}))
	return base.Named("etcd").With(zap.String("member", name))
}

// benignWarnings are warnings etcd logs on every start that do not apply to
// orion's setup; they are dropped so that warn level stays meaningful.
var benignWarnings = map[string]bool{
	// orion serves gRPC and the HTTP gateway on the one client URL on
	// purpose: a separate HTTP-only listener would be one more port.
	"Running http and grpc server on single port. This is not recommended for production.": true,
	// Logged whenever the auth token type is "simple", even with auth off.
	"simple token is not cryptographically signed": true,
}

// closeNoise are the warnings and errors etcd's listeners log when a member
// is closed on purpose ("use of closed network connection", "server
// closed"); after a requested shutdown they would only alarm.
var closeNoise = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
	"stopping secure grpc server due to error":      true, // the same with TLS
	"stopped secure grpc server due to error":       true,
}

// dropBenign is a zapcore.Core that drops benignWarnings, and closeNoise
// once the member is being closed.
type dropBenign struct {
	zapcore.Core
	closing *atomic.Bool
}

func (d dropBenign) With(fields []zapcore.Field) zapcore.Core {
	return dropBenign{d.Core.With(fields), d.closing}
}

func (d dropBenign) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level == zapcore.WarnLevel && benignWarnings[e.Message] {
		return ce
	}
	if closeNoise[e.Message] && d.closing.Load() {
		return ce
	}
	return d.Core.Check(e, ce)
}

// startError turns an embed.StartEtcd error into one that names the URL
// that could not be bound, when that is the cause.
func startError(c Config, urls memberURLs, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "listen" {
		which, addr := "", ""
		if oe.Addr != nil {
			addr = oe.Addr.String()
		}
		switch {
		case addr == "":
		case addr == urls.client.Host:
			which = "client URL " + urls.client.String()
		case addr == urls.peer.Host:
			which = "peer URL " + urls.peer.String()
		case samePort(addr, urls.client.Host):
			which = "client URL " + urls.client.String()
		case samePort(addr, urls.peer.Host):
			which = "peer URL " + urls.peer.String()
		}
		if which != "" {
			return fmt.Errorf("etcdserver: member %q cannot listen on %s: %w", c.Name, which, err)
		}
	}
	return fmt.Errorf("etcdserver: starting member %q in %s: %w", c.Name, c.DataDir, err)
}

// samePort reports whether two host:port strings have the same port. A
// listen error may carry a resolved address ("127.0.0.1:2379" for
// "localhost:2379"), so this is the fallback when the hosts differ.
func samePort(a, b string) bool {
	_, p1, err1 := net.SplitHostPort(a)
	_, p2, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && p1 == p2
}
