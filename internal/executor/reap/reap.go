// Package reap kills the process groups of shell attempts whose executor has
// died, and is the reaper process that does it while the executor's death is
// fresh.
//
// A shell attempt runs in its own process group (so that cancel and timeout
// can kill the whole of it), which also means that nothing ties it to the
// worker: kill -9 a worker and its tasks used to run on to completion while
// the leader re-ran them elsewhere, twice and concurrently. Three mechanisms,
// each covering what the previous one cannot:
//
//  1. The record. Each running group has a small file in its executor's
//     owner dir, <LogDir>/%running/<pid>-<start>-<n>/<pgid> (the owner dir
//     names the executor's process by pid and start time, n tells apart two
//     executors in one process). It holds the group's pgid, session and the
//     start time of its leader from /proc/<pid>/stat: the guard against PID
//     reuse. It is written after the fork and removed once the group has been
//     killed and reaped. Cost: one small file written and removed per attempt.
//
//  2. The reaper. Each executor starts one helper process (Start): this
//     binary again (/proc/self/exe, caught by this package's init before
//     main runs), in its own process group so that a terminal's or a group
//     kill's signals do not take it along with the worker. It reads a pipe
//     whose only write end the worker holds; the kernel closes that end when
//     the worker dies, however it dies, so the reaper reads EOF, kills every
//     group recorded in its owner dir, and exits. One process per worker
//     rather than a supervisor per task: re-executing the orion binary costs
//     ~15 ms (50 runs of `orion --help` took 0.73 s), fifteen times the 1 ms
//     per step that issue 11 allows, while the reaper costs nothing per
//     attempt. A pipe's EOF rather than a parent-death signal: it is tied to
//     the process, not to the OS thread that forked the reaper
//     (golang/go#27505). This package imports only the standard library, so
//     that its init runs as early as Go's init order allows: in the orion
//     binary, after 147 of its 288 package inits (GODEBUG=inittrace=1). An
//     idle reaper then holds ~1.6 MB of anonymous memory; the rest of its
//     ~15 MB RSS is the binary's pages, shared with the worker.
//
//  3. A parent-death signal on the shell itself (executor's spawnShell):
//     SIGKILL when the worker dies, in case the reaper is not there (killed
//     along with the worker, or not started) and for the microseconds
//     between the fork and the record.
//
// Beside the record, every task's environment carries OwnerEnv=<owner dir
// name>, and the reaping also kills the live processes whose environment
// says so: those forked between the shell's fork and its record (a window of
// microseconds, wider on a loaded machine), and those that left the group
// without cleaning their environment.
//
// And when all of that missed (the reaper was killed too), the next executor
// started with the same LogDir finds the owner dirs of processes that are no
// longer alive and kills what they recorded (Leftovers), reporting each group
// in its log and in the attempt's log.
//
// What none of this covers: a process that both left the group (setsid, or
// setpgid to a group of its own) and dropped OwnerEnv (env -i), or runs as
// another user; and a group
// whose leader is gone is recognised by its surviving members' pgid, session
// and start times, which a new group could only share after the pgid was
// reused, in the same session, by a leader that has died too.
package reap

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
	"syscall"
	"time"
)

// DirName is the records dir under an executor's LogDir. A '%' followed by
// letters that are not hex digits is a name the executor's log path escaping
// never produces, so no DAG's log dir can be it.
const DirName = "%running"

// env carries the owner dir to a re-executed reaper.
const env = "ORION_EXECUTOR_REAPER_DIR"

// OwnerEnv is set, in every task's environment, to the name of its
// executor's owner dir.
const OwnerEnv = "ORION_EXECUTOR_OWNER"

func init() {
	// The reaper is this binary re-executed; it must run before main (and
	// before a test binary's flag parsing) and never return to them. Every
	// binary that can create an executor links this package, so every one of
	// them can be its own reaper.
	if dir := os.Getenv(env); dir != "" {
		os.Exit(reaper(dir))
	}
}

// Record is one running process group, as written in an owner dir.
type Record struct {
	PGID    int    `json:"pgid"`
	SID     int    `json:"sid"`
	Start   uint64 `json:"start"` // leader's start time, clock ticks since boot
	Attempt string `json:"attempt"`
	Log     string `json:"log"`
}

// Stat is what we read from /proc/<pid>/stat.
type Stat struct {
	State byte
	PGrp  int
	SID   int
	Start uint64 // clock ticks since boot
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp session ... starttime ...".
// comm may hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return Stat{}, errors.New("stat: short")
	}
	var s Stat
	var err1, err2, err3 error
	s.State = f[0][0]
	s.PGrp, err1 = strconv.Atoi(f[2])
	s.SID, err2 = strconv.Atoi(f[3])
	s.Start, err3 = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Stat{}, fmt.Errorf("stat: %w", err)
	}
	return s, nil
}

// OwnerName names the owner dir of this process's n-th executor.
func OwnerName(n int64) (string, error) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d-%d", os.Getpid(), st.Start, n), nil
}

// ownerAlive tells whether the process that named an owner dir still runs.
// A name it cannot parse is treated as alive: not ours to judge.
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
	st, err := ReadStat(pid)
	return err == nil && st.Start == start && st.State != 'Z'
}

// Write records a group just forked, whose leader is the caller's unreaped
// child (so /proc/<pgid> is still the process it started), and returns the
// record's path. The file is written with one write(2): a kill -9 cannot
// leave half of it, only an empty file when it lands between the create and
// the write, which the reaping skips (the group was forked microseconds
// earlier and its leader had the parent-death signal).
func Write(ownerDir string, pgid int, attempt, logPath string) (string, error) {
	st, err := ReadStat(pgid)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(Record{PGID: pgid, SID: st.SID, Start: st.Start, Attempt: attempt, Log: logPath})
	p := filepath.Join(ownerDir, strconv.Itoa(pgid))
	return p, os.WriteFile(p, b, 0o644)
}

// Killed is one group killed by the reaping, for reporting; or, with PGID 0
// and no Log, the processes of one attempt found by OwnerEnv outside any
// recorded group.
type Killed struct {
	Record
	Processes int // live processes found
}

// Owner kills every group recorded in an owner dir, whose owner is gone, and
// every process marked with the dir's name in OwnerEnv, then removes the
// dir. A record whose group is gone, or whose pgid now belongs to another
// process (the leader's start time differs), is dropped without a signal.
func Owner(dir string) ([]Killed, error) {
	out, err := groups(dir)
	killed := make(map[int]bool, len(out))
	for _, k := range out {
		killed[k.PGID] = true
	}
	return append(out, marked(filepath.Base(dir), killed)...), err
}

// groups kills the recorded groups of an owner dir.
func groups(dir string) ([]Killed, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []Killed
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		var rec Record
		if err == nil && len(b) > 0 {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("record %s: %w", p, err))
		} else if n := liveMembers(rec); n > 0 {
			if err := syscall.Kill(-rec.PGID, syscall.SIGKILL); err == nil {
				out = append(out, Killed{rec, n})
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
// pgid was reused). When it is gone (killed by its parent-death signal, or
// exited leaving background children), the group is whatever live processes
// have its pgid, the recorded session and a start time no earlier than the
// leader's; while any of them lives the kernel does not hand the pgid out
// again.
func liveMembers(rec Record) int {
	if rec.PGID <= 1 {
		return 0
	}
	if st, err := ReadStat(rec.PGID); err == nil && st.Start != rec.Start {
		return 0
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
		st, err := ReadStat(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		if st.PGrp == rec.PGID && st.SID == rec.SID && st.Start >= rec.Start {
			n++
		}
	}
	return n
}

// marked kills the live processes whose environment has OwnerEnv=owner,
// apart from those in the groups just killed, and returns them by attempt.
// A process is killed only if its start time is the same before and after
// its environment was read, so that a PID reused meanwhile is not.
func marked(owner string, skipGroups map[int]bool) []Killed {
	mark := []byte(OwnerEnv + "=" + owner + "\x00")
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	byAttempt := map[string]int{}
	var order []string
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == os.Getpid() {
			continue
		}
		before, err := ReadStat(pid)
		if err != nil || before.State == 'Z' || before.State == 'X' || skipGroups[before.PGrp] {
			continue
		}
		environ, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, environ...), append([]byte{0}, mark...)) {
			continue
		}
		if after, err := ReadStat(pid); err != nil || after.Start != before.Start {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) != nil {
			continue
		}
		a := attemptOf(environ)
		if byAttempt[a] == 0 {
			order = append(order, a)
		}
		byAttempt[a]++
	}
	out := make([]Killed, 0, len(order))
	for _, a := range order {
		out = append(out, Killed{Record: Record{Attempt: a}, Processes: byAttempt[a]})
	}
	return out
}

// attemptOf names a task process's attempt from its environment, as
// model.AttemptID prints it.
func attemptOf(environ []byte) string {
	var dag, task, attempt string
	for _, kv := range strings.Split(string(environ), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "ORION_DAG_ID":
			dag = v
		case "ORION_TASK_ID":
			task = v
		case "ORION_ATTEMPT":
			attempt = v
		}
	}
	return dag + "/" + task + "#" + attempt
}

// NoteInLog appends a line to an attempt's log, so that whoever reads it
// learns why its output stops.
func NoteInLog(path, line string) {
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

// Found is a group killed by Leftovers, with the owner dir it was found in.
type Found struct {
	Killed
	Owner string
}

// Leftovers runs when an executor starts: it kills the groups recorded under
// logDir by executors whose process is gone (a previous incarnation of this
// worker, killed together with its reaper), notes it in their attempts' logs
// and returns them for the executor to report. Owner dirs of live processes
// (another worker sharing the log dir) are left alone.
func Leftovers(logDir string) ([]Found, error) {
	root := filepath.Join(logDir, DirName)
	owners, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []Found
	var errs []error
	for _, o := range owners {
		if !o.IsDir() || ownerAlive(o.Name()) {
			continue
		}
		killed, err := Owner(filepath.Join(root, o.Name()))
		for _, k := range killed {
			NoteInLog(k.Log, fmt.Sprintf("orion: the worker running this attempt died; a worker starting later killed process group %d (%d processes)", k.PGID, k.Processes))
			out = append(out, Found{k, o.Name()})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("owner %s: %w", o.Name(), err))
		}
	}
	return out, errors.Join(errs...)
}

// reaper is the reaper process: it waits for EOF on stdin (its worker is
// gone, or closed its executor), kills the groups its worker recorded, and
// then reports them on stderr, which it shares with the worker's (after the
// kills: that stderr may be a pipe nobody reads any more).
func reaper(dir string) int {
	// Only the worker's end of the pipe matters: nothing is ever written.
	io.Copy(io.Discard, os.Stdin)
	killed, err := Owner(dir)
	for _, k := range killed {
		NoteInLog(k.Log, fmt.Sprintf("orion: the worker running this attempt died; its reaper killed process group %d (%d processes)", k.PGID, k.Processes))
	}
	w := bufio.NewWriter(os.Stderr)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, k := range killed {
		if k.PGID != 0 {
			fmt.Fprintf(w, "%s\tWARN\torion reaper: the worker of %s is gone; killed its process group %d (%d processes)\n",
				now, k.Attempt, k.PGID, k.Processes)
		} else {
			fmt.Fprintf(w, "%s\tWARN\torion reaper: the worker of %s is gone; killed %d of its processes outside its process group\n",
				now, k.Attempt, k.Processes)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "%s\tWARN\torion reaper: %v\n", now, err)
	}
	w.Flush()
	return 0
}

// Start starts a reaper for an owner dir; name shows in ps. The returned
// file is the pipe's write end: closing it (or dying) tells the reaper to
// reap. exec.Cmd passes the child only Stdin/Stdout/Stderr, and Go opens
// every other descriptor close-on-exec, so neither the reaper nor a task
// holds another copy of the write end that would keep the pipe open.
func Start(ownerDir, name string) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe", // works even if the binary was replaced on disk
		Args:        []string{"orion-reaper", name},
		Env:         append(os.Environ(), env+"="+ownerDir),
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
