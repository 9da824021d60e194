package etcdmember

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

const (
	// walSegmentBytes is what etcd preallocates for each WAL segment
	// (wal.SegmentSizeBytes): a new member needs one at once, and a
	// running member one more each time the log fills one.
	walSegmentBytes = 64 * 1000 * 1000
	// DefaultMinFreeDisk is Config.MinFreeDisk's default: room for a few
	// WAL segments and snapshots beyond the database.
	DefaultMinFreeDisk int64 = 256 << 20
	// bootstrapMinFree is what a new member needs to start: its first WAL
	// segment and room for its database to begin.
	bootstrapMinFree = walSegmentBytes + 16<<20
)

// diskFreeHook, when set, stands in for the file system: tests simulate a
// small or filling volume with it.
var diskFreeHook atomic.Pointer[func(dir string) (int64, error)]

// diskFree reports the bytes an unprivileged process may still write on
// the file system that holds dir.
func diskFree(dir string) (int64, error) {
	if h := diskFreeHook.Load(); h != nil {
		return (*h)(dir)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// checkBootstrapSpace refuses to bootstrap a new member on a volume too
// small for etcd's first WAL segment: etcd would panic ("failed to create
// WAL") and leave a half-made data directory behind.
func checkBootstrapSpace(c Config) error {
	if c.MinFreeDisk < 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "member", "wal")); err == nil {
		return nil // an existing member: its guard raises NOSPACE if the disk is short
	}
	dir := c.DataDir
	for {
		if _, err := os.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir) // DataDir is created by etcd: measure what holds it
	}
	free, err := diskFree(dir)
	if err != nil || free >= bootstrapMinFree {
		return nil // unknown: let etcd try
	}
	return fmt.Errorf("etcdserver: member %q cannot start in %s: its volume has %s free, and a new etcd member needs "+
		"at least %s (etcd preallocates a %s write-ahead log segment) plus room for its database and quota (%s): "+
		"give the data directory a larger volume", c.Name, c.DataDir, mib(free), mib(bootstrapMinFree), mib(walSegmentBytes), mib(c.QuotaBackendBytes))
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// bootstrapMarker exists in a data directory while its member bootstraps:
// from before etcd creates anything until the member is first ready.
const bootstrapMarker = ".orion-bootstrapping"

// prepareBootstrap deals with what a crash during a member's first start
// left, and marks a new bootstrap. A member that never became ready never
// acknowledged a write, so for a single-member cluster its half-made
// directory (a torn WAL, a database without one) holds nothing: it is
// moved aside, not deleted, and the member bootstraps afresh. A member of a
// larger cluster may have voted in raft already; its directory is left to
// etcd and to the operator. done removes the mark once the member is
// ready.
func prepareBootstrap(c Config, lg interface{ Warn(string, ...zap.Field) }) (done func(), err error) {
	marker := filepath.Join(c.DataDir, bootstrapMarker)
	member := filepath.Join(c.DataDir, "member")
	_, markErr := os.Stat(marker)
	_, memberErr := os.Stat(member)
	switch {
	case markErr == nil && memberErr == nil && !strings.Contains(c.InitialCluster, ",") && c.ClusterState == "new":
		aside := fmt.Sprintf("%s.incomplete-%d", member, time.Now().Unix())
		if err := os.Rename(member, aside); err != nil {
			return nil, fmt.Errorf("etcdserver: member %q: moving aside what an interrupted first start left in %s: %w", c.Name, member, err)
		}
		lg.Warn("the member's first start was interrupted before it was ready; its data (never used) is moved aside and it bootstraps again",
			zap.String("moved_to", aside))
	case markErr == nil && memberErr == nil:
		lg.Warn("the member's first start was interrupted before it was ready; if it does not start, remove it from the cluster "+
			"(etcdctl member remove), delete its data directory and add it again", zap.String("data_dir", c.DataDir))
	case memberErr == nil:
		return func() {}, nil // an existing member
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdserver: member %q: %w", c.Name, err)
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return nil, fmt.Errorf("etcdserver: member %q: %w", c.Name, err)
	}
	return func() { _ = os.Remove(marker) }, nil
}
