package drill

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procRoot is where the proc filesystem is mounted; tests never change it,
// but keeping it in one place documents every path the drill reads.
const procRoot = "/proc"

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

func procPath(pid int, parts ...string) string {
	return filepath.Join(append([]string{procRoot, strconv.Itoa(pid)}, parts...)...)
}

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
	state, start, err := readStat(pid)
	if err != nil {
		return nil, err
	}
	p.State, p.StartTime = state, start
	raw, err := os.ReadFile(procPath(pid, "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	p.Argv = splitNUL(raw)
	if p.Cwd, err = os.Readlink(procPath(pid, "cwd")); err != nil {
		return nil, fmt.Errorf("reading the working directory of pid %d: %w", pid, err)
	}
	env, err := os.ReadFile(procPath(pid, "environ"))
	if err != nil {
		return nil, fmt.Errorf("reading the environment of pid %d: %w", pid, err)
	}
	p.Env = splitNUL(env)
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

// splitNUL splits a NUL-separated /proc list; a trailing NUL ends the last
// element rather than starting an empty one.
func splitNUL(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// readStat returns the state and start time from /proc/PID/stat.
func readStat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, 0, err
	}
	return parseStat(string(b))
}

// parseStat reads "pid (comm) state ppid … starttime …". comm may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func parseStat(s string) (byte, uint64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22, so f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("malformed /proc stat line")
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc stat start time %q", f[19])
	}
	return f[0][0], start, nil
}

// gone reports whether the process that had pid and start time is no longer
// running: /proc/PID is absent, is a zombie, or belongs to a newer process.
func gone(pid int, startTime uint64) bool {
	state, start, err := readStat(pid)
	if err != nil {
		return true
	}
	return state == 'Z' || state == 'X' || start != startTime
}

// IsOrionServer reports whether argv looks like `orion … server …`: some
// argument names orion and a later one is the word server.
func IsOrionServer(argv []string) bool {
	orion := -1
	for i, a := range argv {
		if strings.Contains(filepath.Base(a), "orion") {
			orion = i
			break
		}
	}
	if orion < 0 {
		return false
	}
	for _, a := range argv[orion+1:] {
		if a == "server" {
			return true
		}
	}
	return false
}

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
		f, err := os.Open(filepath.Join(procRoot, "net", name))
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
