package drill

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/orion-sched/orion/internal/tools/procfs"
)

// deletedSuffix is what the kernel appends to a /proc/PID/{exe,cwd,fd/N}
// link whose target was removed.
const deletedSuffix = " (deleted)"

// ProcInfo is what the drill saves of a replica before killing it: enough to
// start it again the same way (argv, working directory, environment, the
// file its stdout went to) and to recognise it (start time).
type ProcInfo struct {
	PID  int
	Argv []string
	Cwd  string
	Env  []string
	// Exe is the target of /proc/PID/exe; it ends in " (deleted)" when the
	// binary was replaced after the process started.
	Exe string
	// Stdout is the target of /proc/PID/fd/1 ("" if unreadable) and
	// StdoutRegular whether that is a regular file (not a pipe, a socket, a
	// terminal or /dev/null).
	Stdout        string
	StdoutRegular bool
	// State is the one-letter state of /proc/PID/stat (R, S, Z…) and
	// StartTime its field 22: the start time in clock ticks since boot, which
	// tells a process from a later one that reuses its pid.
	State     byte
	StartTime uint64
}

func procPath(pid int, parts ...string) string { return procfs.Path(pid, parts...) }

// ReadProc reads a process's command line, working directory, environment,
// executable, stdout target and start time from /proc. The command line and
// the stat line are required; the rest is best effort only where the kernel
// may legitimately refuse (an unreadable environ is an error: a restart
// without it would not be the same process).
func ReadProc(pid int) (*ProcInfo, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d is not a process id", pid)
	}
	p := &ProcInfo{PID: pid}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return nil, err
	}
	p.State, p.StartTime = st.State, st.StartTime
	if p.Argv, err = procfs.Argv(pid); err != nil {
		return nil, err
	}
	if p.Cwd, err = os.Readlink(procPath(pid, "cwd")); err != nil {
		return nil, fmt.Errorf("reading the working directory of pid %d: %w", pid, err)
	}
	env, err := os.ReadFile(procPath(pid, "environ"))
	if err != nil {
		return nil, fmt.Errorf("reading the environment of pid %d: %w", pid, err)
	}
	p.Env = procfs.SplitNUL(env)
	if p.Env == nil {
		p.Env = []string{}
	}
	p.Exe, _ = os.Readlink(procPath(pid, "exe"))
	if out, err := os.Readlink(procPath(pid, "fd", "1")); err == nil {
		p.Stdout = out
		if fi, err := os.Stat(procPath(pid, "fd", "1")); err == nil {
			p.StdoutRegular = fi.Mode().IsRegular()
		}
	}
	return p, nil
}

// gone reports whether the process that had pid and start time is no longer
// running: /proc/PID is absent, is a zombie, or belongs to a newer process.
func gone(pid int, startTime uint64) bool {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return true
	}
	return st.State == 'Z' || st.State == 'X' || st.StartTime != startTime
}

// IsOrionServer reports whether argv looks like `orion … server …`: some
// argument names orion and a later one is the word server.
func IsOrionServer(argv []string) bool { return procfs.IsOrionCommand(argv, "server") }

// listenInodes parses a /proc/net/tcp or tcp6 table and adds the socket
// inodes listening on port.
func listenInodes(r io.Reader, port int, into map[uint64]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		j := strings.LastIndexByte(f[1], ':')
		if j < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[1][j+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err == nil && ino != 0 {
			into[ino] = true
		}
	}
	return sc.Err()
}

// OwnsListener reports whether process pid holds a TCP socket listening on
// port (in this network namespace). It proves that the pid the cluster
// endpoint reported is the process serving that replica's API here, and not
// an unrelated process elsewhere that happens to share the number.
func OwnsListener(pid, port int) (bool, error) {
	inodes := map[uint64]bool{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(procfs.Root, "net", name))
		if err != nil {
			continue // no IPv6, say
		}
		err = listenInodes(f, port, inodes)
		f.Close()
		if err != nil {
			return false, err
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	dir := procPath(pid, "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("listing the open files of pid %d: %w", pid, err)
	}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") || !strings.HasSuffix(link, "]") {
			continue
		}
		ino, err := strconv.ParseUint(link[len("socket:["):len(link)-1], 10, 64)
		if err == nil && inodes[ino] {
			return true, nil
		}
	}
	return false, nil
}

// isLocalHost reports whether host (an IP or name from a URL) is this
// machine: a loopback or unspecified address, or one of its interfaces'.
func isLocalHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		return false // names other than localhost are not trusted
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
