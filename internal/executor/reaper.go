package executor

// What happens to a shell attempt's processes when its worker dies.
//
// A shell attempt runs in its own process group (so that cancel and timeout
// can kill the whole of it), which also means that nothing ties it to the
// worker: kill -9 a worker and its tasks used to run on to completion while
// the leader re-ran them elsewhere, twice and concurrently. Three mechanisms,
// each covering what the previous one cannot:
//
//  1. The record. Each running group has a small file in the executor's
//     record dir, <LogDir>/%running/<pid>-<start>-<n>/<pgid> (the owner dir
//     names the executor's process by pid and start time, n tells apart two
//     executors in one process). It holds the group's pgid, session and the
//     start time of its leader from /proc/<pid>/stat: the guard against PID
//     reuse. It is written after the fork and removed once the group has been
//     killed and reaped. Cost: one small file written and removed per attempt.
//
//  2. The reaper. Each Local starts one helper process: this binary again
//     (/proc/self/exe, caught by this package's init before main runs), in
//     its own process group so a terminal's or a group kill's signals do not
//     take it with the worker. It reads a pipe whose only write end the
//     worker holds; the kernel closes that end when the worker dies, however
//     it dies, so the reaper reads EOF, kills every group recorded in its
//     owner dir, and exits. One process per worker rather than a supervisor
//     per task: re-executing the orion binary costs ~15 ms (measured: 50 runs
//     of `orion --help` took 0.73 s), fifteen times the 1 ms per step that
//     issue 11 allows, while the reaper costs nothing per attempt. A pipe's
//     EOF rather than a parent-death signal: it is tied to the process, not
//     to the OS thread that forked the reaper (golang/go#27505).
//
//  3. A parent-death signal on the shell itself (see spawnShell): SIGKILL
//     when the worker dies, in case the reaper is not there (killed along
//     with the worker, or not started) and for the microseconds between the
//     fork and the record.
//
// And when all of that missed (the reaper was killed too, a machine-wide
// kill), the next executor that starts with the same LogDir finds the owner
// dirs of processes that are no longer alive and kills what they recorded,
// reporting each group it kills in its log and in the attempt's log.
//
// What none of this covers: a process that left the group (setsid, or
// setpgid to a group of its own) is not found by a group kill; and a group
// whose leader is gone is recognised by its surviving members' pgid, session
// and start times, which a new group could only share after the pgid was
// reused, in the same session, by a leader that has died too.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// recordDirName is the record dir under LogDir. A '%' followed by letters
// that are not hex digits is a name pathSegment never produces, so no DAG's
// log dir can be it.
const recordDirName = "%running"

// reaperEnv carries the owner dir to a re-executed reaper.
const reaperEnv = "ORION_EXECUTOR_REAPER_DIR"

// ownerSeq numbers the executors of this process.
var ownerSeq atomic.Int64

func init() {
	// The reaper is this binary re-executed; it must run before main (and
	// before a test binary's flag parsing) and never return to them. Every
	// binary that can create a Local links this package, so every one of
	// them can be its own reaper.
	if dir := os.Getenv(reaperEnv); dir != "" {
		os.Exit(reaperMain(dir))
	}
}

// groupRecord is one running process group, as written in the record dir.
type groupRecord struct {
	PGID    int    `json:"pgid"`
	SID     int    `json:"sid"`
	Start   uint64 `json:"start"` // leader's start time, clock ticks since boot
	Attempt string `json:"attempt"`
	Log     string `json:"log"`
}

// procStat is what we read from /proc/<pid>/stat.
type procStat struct {
	state byte
	pgrp  int
	sid   int
	start uint64
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses "pid (comm) state ppid pgrp session ... starttime ...".
// comm may hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return procStat{}, errors.New("stat: short")
	}
	var s procStat
	var err1, err2, err3 error
	s.state = f[0][0]
	s.pgrp, err1 = strconv.Atoi(f[2])
	s.sid, err2 = strconv.Atoi(f[3])
	s.start, err3 = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("stat: %w", err)
	}
	return s, nil
}

// ownerName names the dir of this process's n-th executor.
func ownerName(n int64) (string, error) {
	st, err := readProcStat(os.Getpid())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d-%d", os.Getpid(), st.start, n), nil
}

// ownerAlive tells whether the process that named an owner dir still runs.
// A dir it cannot parse is treated as alive: it is not ours to judge.
func ownerAlive(name string) bool {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return true
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	st, err := readProcStat(pid)
	return err == nil && st.start == start && st.state != 'Z'
}

// recordGroup writes the record of a group just forked (its leader is our
// unreaped child, so /proc/<pgid> is still the one we started). The file is
// written with one write(2): a kill -9 cannot leave half of it, only an empty
// file when it lands between the create and the write, which reapOwner skips
// (the group was forked microseconds earlier and its leader had the parent
// death signal).
func (l *Local) recordGroup(pgid int, attempt, logPath string) (string, error) {
	st, err := readProcStat(pgid)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(groupRecord{PGID: pgid, SID: st.sid, Start: st.start, Attempt: attempt, Log: logPath})
	p := filepath.Join(l.ownerDir, strconv.Itoa(pgid))
	return p, os.WriteFile(p, b, 0o644)
}

// reaped is one group killed by reapOwner, for reporting.
type reaped struct {
	rec     groupRecord
	members int // live processes found in the group
}

// reapOwner kills every group recorded in an owner dir whose owner is gone,
// then removes the dir. A record whose group is gone, or whose pgid now
// belongs to another process (the leader's start time differs), is dropped
// without a signal.
func reapOwner(dir string) ([]reaped, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []reaped
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		var rec groupRecord
		if err == nil && len(b) > 0 {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("record %s: %w", p, err))
		} else if n := liveMembers(rec); n > 0 {
			if err := syscall.Kill(-rec.PGID, syscall.SIGKILL); err == nil {
				out = append(out, reaped{rec, n})
			} else if !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill group %d: %w", rec.PGID, err))
				continue // keep the record: the next start tries again
			}
		}
		os.Remove(p)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// liveMembers counts the live processes of the recorded group. When the
// leader is still there its start time decides (a different one means the
// pgid was reused). When it is gone (killed by its parent death signal, or
// exited leaving background children), the group is whatever live processes
// have its pgid, the recorded session and a start time no earlier than the
// leader's; while any of them lives the kernel does not hand the pgid out
// again.
func liveMembers(rec groupRecord) int {
	if rec.PGID <= 1 {
		return 0
	}
	if st, err := readProcStat(rec.PGID); err == nil {
		if st.start != rec.Start {
			return 0
		}
		// Our leader: count it and the rest of the group below.
	}
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		if st.pgrp == rec.PGID && st.sid == rec.SID && st.start >= rec.Start {
			n++
		}
	}
	return n
}

// noteInLog appends a line to an attempt's log, so that whoever reads it
// learns why its output stops.
func noteInLog(path, line string) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	fmt.Fprintln(f, line)
	f.Close()
}

// reapLeftovers runs when an executor starts: it kills the groups recorded by
// executors whose process is gone (a previous incarnation of this worker that
// was killed together with its reaper) and reports each one.
func reapLeftovers(logDir string, log *zap.Logger) {
	root := filepath.Join(logDir, recordDirName)
	owners, err := os.ReadDir(root)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot read the records of earlier executors", zap.Error(err))
		}
		return
	}
	for _, o := range owners {
		if !o.IsDir() || ownerAlive(o.Name()) {
			continue
		}
		killed, err := reapOwner(filepath.Join(root, o.Name()))
		for _, k := range killed {
			log.Warn("killed a task process group left behind by a worker that is gone",
				zap.String("previous_worker", o.Name()), zap.String("attempt", k.rec.Attempt),
				zap.Int("pgid", k.rec.PGID), zap.Int("processes", k.members))
			noteInLog(k.rec.Log, fmt.Sprintf("orion: the worker running this attempt died; a worker starting later killed process group %d (%d processes)", k.rec.PGID, k.members))
		}
		if err != nil {
			log.Warn("cleaning up after an earlier executor", zap.String("previous_worker", o.Name()), zap.Error(err))
		}
	}
}

// reaperMain is the reaper process: it waits for EOF on stdin (its worker is
// gone or closed its executor), kills the groups its worker recorded, and
// reports them on stderr, which it shares with the worker's.
func reaperMain(dir string) int {
	// Only the worker's end of the pipe matters: nothing is ever written.
	io.Copy(io.Discard, os.Stdin)
	killed, err := reapOwner(dir)
	w := bufio.NewWriter(os.Stderr)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, k := range killed {
		fmt.Fprintf(w, "%s\tWARN\torion reaper: the worker of %s is gone; killed its process group %d (%d processes)\n",
			now, k.rec.Attempt, k.rec.PGID, k.members)
		noteInLog(k.rec.Log, fmt.Sprintf("orion: the worker running this attempt died; its reaper killed process group %d (%d processes)", k.rec.PGID, k.members))
	}
	if err != nil {
		fmt.Fprintf(w, "%s\tWARN\torion reaper: %v\n", now, err)
	}
	w.Flush()
	return 0
}

// reaperRestartMin and reaperRestartMax bound the pause before a reaper that
// exited (or failed to start) while its executor runs is started again.
const (
	reaperRestartMin = time.Second
	reaperRestartMax = time.Minute
)

// startReaper starts a reaper for this executor's owner dir. The returned
// file is the pipe's write end: closing it (or dying) tells the reaper to
// reap. exec.Cmd passes the child only Stdin/Stdout/Stderr, and Go opens
// every other descriptor close-on-exec, so neither the reaper nor a task
// holds another copy of the write end that would keep the pipe open.
func (l *Local) startReaper() (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe", // works even if the binary was replaced on disk
		Args:        []string{"orion-reaper", l.id},
		Env:         append(os.Environ(), reaperEnv+"="+l.ownerDir),
		Stdin:       r,
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, nil, err
	}
	return cmd, w, nil
}

// superviseReaper keeps a reaper running (the first one, started by
// NewLocal, is given) until reaperStop is closed (Close, once every attempt
// has ended); then it closes the pipe, so that the reaper finds an empty
// record dir, and waits for it to exit.
func (l *Local) superviseReaper(cmd *exec.Cmd, w *os.File, err error) {
	defer close(l.reaperDone)
	pause := reaperRestartMin
	for {
		if err != nil {
			l.log.Warn("cannot start the reaper: if this worker is killed, its running tasks are killed only when an executor next starts with its log dir",
				zap.Error(err), zap.Duration("retry_in", pause))
		} else {
			started := time.Now()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-l.reaperStop:
				w.Close()
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
				return
			case err := <-exited:
				w.Close()
				if time.Since(started) > reaperRestartMax {
					pause = reaperRestartMin
				}
				l.log.Warn("the reaper exited; starting another", zap.Error(err), zap.Duration("in", pause))
			}
		}
		select {
		case <-l.reaperStop:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, reaperRestartMax)
		cmd, w, err = l.startReaper()
	}
}
