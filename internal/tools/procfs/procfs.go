// Package procfs reads what Orion's tools need of a local process from
// /proc: its command line, its state, CPU time and start time. The drill
// uses it to prove a process is the one it means to signal, the benchmark to
// read the CPU of the workers on its host.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is where the proc filesystem is mounted.
const Root = "/proc"

// UserHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports; the Prometheus process collector
// assumes the same).
const UserHZ = 100

// Path is a file under /proc/PID.
func Path(pid int, parts ...string) string {
	return filepath.Join(append([]string{Root, strconv.Itoa(pid)}, parts...)...)
}

// Stat is what Orion reads of /proc/PID/stat.
type Stat struct {
	State byte // R, S, Z…
	// CPUTicks is utime+stime: the process's own CPU, its children's
	// excluded, in UserHZ ticks.
	CPUTicks uint64
	// StartTime (field 22) is the start in clock ticks since boot, which
	// tells a process from a later one that reuses its pid.
	StartTime uint64
	// RSSPages (field 24) is the resident set in pages (os.Getpagesize).
	RSSPages uint64
}

// CPUSeconds is CPUTicks in seconds.
func (s Stat) CPUSeconds() float64 { return float64(s.CPUTicks) / UserHZ }

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(Path(pid, "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// ParseStat reads "pid (comm) state ppid … utime stime … starttime …". comm
// may hold spaces and parentheses, so the fields are counted from the last
// ')'.
func ParseStat(s string) (Stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15, starttime 22,
	// rss 24.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, errors.New("malformed /proc stat line")
	}
	var n [3]uint64
	for k, j := range []int{11, 12, 19} {
		v, err := strconv.ParseUint(f[j], 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("malformed /proc stat field %d: %q", j+3, f[j])
		}
		n[k] = v
	}
	st := Stat{State: f[0][0], CPUTicks: n[0] + n[1], StartTime: n[2]}
	if len(f) > 21 { // rss, field 24
		st.RSSPages, _ = strconv.ParseUint(f[21], 10, 64)
	}
	return st, nil
}

// Argv reads a process's command line.
func Argv(pid int) ([]string, error) {
	raw, err := os.ReadFile(Path(pid, "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	return SplitNUL(raw), nil
}

// SplitNUL splits a NUL-separated /proc list; a trailing NUL ends the last
// element rather than starting an empty one.
func SplitNUL(b []byte) []string {
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

// IsOrionCommand reports whether argv looks like `orion … command …`: some
// argument names orion and a later one is the word command.
func IsOrionCommand(argv []string, command string) bool {
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
		if a == command {
			return true
		}
	}
	return false
}

// Memory is a process's resident set, from /proc/PID/status, in bytes.
type Memory struct {
	RSS  int64 // VmRSS
	Anon int64 // RssAnon: the heap, stacks and the runtime's own
	File int64 // RssFile: pages of mapped files (an embedded etcd's db)
}

// ReadMemory reads /proc/PID/status.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(Path(pid, "status"))
	if err != nil {
		return Memory{}, err
	}
	return ParseStatusMemory(string(b))
}

// ParseStatusMemory reads the VmRSS, RssAnon and RssFile lines ("VmRSS:
// 1234 kB") of a /proc status file.
func ParseStatusMemory(s string) (Memory, error) {
	var m Memory
	found := false
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst, found = &m.RSS, true
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("malformed /proc status line %q", line)
		}
		*dst = kb * 1024
	}
	if !found {
		return Memory{}, errors.New("no VmRSS in /proc status")
	}
	return m, nil
}
