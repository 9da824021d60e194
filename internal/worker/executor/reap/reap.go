// Package reap kills the processes of shell attempts whose executor has
// died, and is the reaper process that does it as soon as the executor dies.
//
// A shell attempt runs in its own process group (so that cancel and timeout
// can kill the whole of it), which also means that nothing ties it to the
// worker: kill -9 a worker and its tasks used to run on to completion while
// the leader re-ran them elsewhere, twice and concurrently. Three mechanisms,
// each covering what the previous one cannot:
//
//  1. The record. Each executor appends to a journal in its owner dir,
//     <LogDir>/%running/<pid>-<start>-<n>/journal (the owner dir names the
//     executor's process by pid and start time, n tells apart two executors
//     in one process), one JSON line per event of a running attempt: before
//     its fork, the mark its processes carry in their environment (MarkEnv);
//     after the fork, its group's pgid, session and leader's start time from
//     /proc/<pid>/stat (the guard against PID reuse); once the group has
//     been killed and reaped, its end. Reaping the journal kills each group
//     of an attempt not ended (which catches a process that cleared its
//     environment) and every live process with its mark (which catches one
//     that left the group, and the children of a shell whose executor died
//     between the fork and the second line). A finished attempt is not
//     touched: a daemon it left behind on purpose (setsid) lives on. Cost
//     per attempt: three appends to an open file, ~2 µs here (a file created
//     and removed per attempt cost ~0.6 ms on this ext4); the journal is
//     rewritten with only the running attempts when it has grown.
//
//  2. The reaper. Each executor starts one helper process (Start): this
//     binary again (/proc/self/exe, caught by this package's init before
//     main runs), in its own process group so that a terminal's or a group
//     kill's signals do not take it along with the worker. It reads a pipe
//     whose only write end the worker holds; the kernel closes that end when
//     the worker dies, however it dies, so the reaper reads EOF, reaps every
//     record in its owner dir, and exits. One process per worker rather than
//     a supervisor per task: re-executing the orion binary costs ~15 ms (50
//     runs of `orion --help` took 0.73 s), fifteen times the 1 ms per step
//     that issue 11 allows, while the reaper costs nothing per attempt. A
//     pipe's EOF rather than a parent-death signal: it is tied to the
//     process, not to the OS thread that forked the reaper
//     (golang/go#27505). This package imports only the standard library, so
//     that its init runs as early as Go's init order allows: in the orion
//     binary, after 147 of its 288 package inits (GODEBUG=inittrace=1). An
//     idle reaper then holds ~1.6 MB of anonymous memory; the rest of its
//     ~15 MB RSS is the binary's pages, shared with the worker.
//
//  3. A parent-death signal on the shell itself (executor's startPinned):
//     SIGKILL when the worker dies, in case the reaper is not there (killed
//     along with the worker, or failing to start).
//
// And when all of that missed (the reaper was killed too), the next executor
// started with the same LogDir finds the owner dirs of processes that are no
// longer alive and reaps their records (Leftovers), reporting each in its
// log and in the attempt's log.
//
// What none of this covers: a process that both left the group (setsid, or
// setpgid to a group of its own) and cleared its environment, or that runs
// as another user. And a group whose leader is gone is recognised by its
// surviving members' pgid, session and start times, which a new group could
// only share after the pgid was reused, in the same session, by a leader
// that has died too.
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
	"sync"
	"syscall"
	"time"
)

// DirName is the records dir under an executor's LogDir. A '%' followed by
// letters that are not hex digits is a name the executor's log path escaping
// never produces, so no DAG's log dir can be it.
const DirName = "%running"

// env carries the owner dir to a re-executed reaper.
const env = "ORION_EXECUTOR_REAPER_DIR"

// MarkEnv, in a task's environment, names its attempt in its executor's
// journal: <owner dir>/<seq>.
const MarkEnv = "ORION_EXECUTOR_MARK"

func init() {
	// The reaper is this binary re-executed; it must run before main (and
	// before a test binary's flag parsing) and never return to them. Every
	// binary that can create an executor links this package, so every one of
	// them can be its own reaper.
	if dir := os.Getenv(env); dir != "" {
		os.Exit(reaper(dir))
	}
}

// Record is one running attempt. Each journal line holds Seq and some of
// the other fields; reading merges the lines of one Seq, and End drops it.
type Record struct {
	Seq     int64  `json:"seq"`
	Mark    string `json:"mark,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	Log     string `json:"log,omitempty"`
	PGID    int    `json:"pgid,omitempty"`
	SID     int    `json:"sid,omitempty"`
	Start   uint64 `json:"start,omitempty"` // leader's start time, clock ticks since boot
	End     bool   `json:"end,omitempty"`
}

// JournalName is the journal's file name in an owner dir.
const JournalName = "journal"

// compactAt: the journal is rewritten once it has this many lines and at
// least four per running attempt.
const compactAt = 4096

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

// Journal is an executor's record of its running attempts.
type Journal struct {
	dir   string
	mu    sync.Mutex
	f     *os.File
	seq   int64
	lines int
	live  map[int64]Record // merged, for compaction
}

// OpenJournal creates the journal of a new owner dir.
func OpenJournal(ownerDir string) (*Journal, error) {
	f, err := os.OpenFile(filepath.Join(ownerDir, JournalName), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Journal{dir: ownerDir, f: f, live: map[int64]Record{}}, nil
}

// Close closes the journal file; the reaper removes it with the owner dir.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.f.Close()
}

// appendLocked writes one line with one write(2), which a kill -9 cannot
// cut: a reader finds every line whole.
func (j *Journal) appendLocked(r Record) error {
	b, _ := json.Marshal(r)
	_, err := j.f.Write(append(b, '\n'))
	j.lines++
	return err
}

// Pending is an attempt in the journal, from before its fork until its
// group is gone.
type Pending struct {
	Mark string // MarkEnv's value, to put in the task's environment
	j    *Journal
	seq  int64
}

// Begin journals an attempt about to be forked.
func (j *Journal) Begin(attempt, logPath string) (*Pending, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	r := Record{Seq: j.seq, Mark: filepath.Base(j.dir) + "/" + strconv.FormatInt(j.seq, 10), Attempt: attempt, Log: logPath}
	if err := j.appendLocked(r); err != nil {
		return nil, err
	}
	j.live[r.Seq] = r
	return &Pending{Mark: r.Mark, j: j, seq: r.Seq}, nil
}

// Started journals the group of the process just forked: its leader is the
// caller's unreaped child, so /proc/<pgid> is still the process it started.
func (p *Pending) Started(pgid int) error {
	st, err := ReadStat(pgid)
	if err != nil {
		return err
	}
	j := p.j
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.live[p.seq]
	r.PGID, r.SID, r.Start = pgid, st.SID, st.Start
	j.live[p.seq] = r
	return j.appendLocked(Record{Seq: p.seq, PGID: pgid, SID: st.SID, Start: st.Start})
}

// Done journals the end of the attempt, once its group is gone.
func (p *Pending) Done() {
	j := p.j
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.live, p.seq)
	j.appendLocked(Record{Seq: p.seq, End: true})
	if j.lines >= compactAt && j.lines >= 4*len(j.live) {
		j.compactLocked()
	}
}

// compactLocked replaces the journal with one line per running attempt: a
// new file renamed over the old, so that a reader finds one or the other.
// On failure the journal goes on growing, and the next Done tries again.
func (j *Journal) compactLocked() {
	path := filepath.Join(j.dir, JournalName)
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	var b []byte
	for _, r := range j.live {
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	if _, err := f.Write(b); err != nil || os.Rename(tmp, path) != nil {
		f.Close()
		os.Remove(tmp)
		return
	}
	j.f.Close()
	j.f, j.lines = f, len(j.live)
}

// Running reads the journal of an owner dir: the attempts that have not
// ended, in the order they began.
func Running(ownerDir string) ([]Record, error) {
	return readJournal(filepath.Join(ownerDir, JournalName))
}

func readJournal(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	byseq := map[int64]*Record{}
	var order []int64
	var bad error
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var line Record
		if err := json.Unmarshal(l, &line); err != nil {
			bad = fmt.Errorf("journal %s: %w", path, err)
			continue
		}
		r, ok := byseq[line.Seq]
		if !ok {
			r = &Record{Seq: line.Seq}
			byseq[line.Seq] = r
			order = append(order, line.Seq)
		}
		if line.Mark != "" || line.Attempt != "" || line.Log != "" {
			r.Mark, r.Attempt, r.Log = line.Mark, line.Attempt, line.Log
		}
		if line.PGID != 0 {
			r.PGID, r.SID, r.Start = line.PGID, line.SID, line.Start
		}
		r.End = r.End || line.End
	}
	var out []Record
	for _, seq := range order {
		if r := byseq[seq]; !r.End {
			out = append(out, *r)
		}
	}
	return out, bad
}

// Killed is one attempt whose processes the reaping killed, for reporting.
type Killed struct {
	Record
	Processes int // live processes found: in its group, or marked
}

// Owner reaps the journal of an owner dir whose owner is gone, then removes
// the dir: for each attempt not ended, it kills the journalled group, unless
// its pgid now belongs to another process (the leader's start time differs),
// and every live process marked with the attempt's Mark.
func Owner(dir string) ([]Killed, error) {
	recs, err := readJournal(filepath.Join(dir, JournalName))
	errs := []error{err}

	// The groups first, each with one signal.
	counts := make([]int, len(recs))
	killedGroups := map[int]bool{}
	for i, rec := range recs {
		if rec.PGID == 0 {
			continue
		}
		if n := liveMembers(rec); n > 0 {
			if err := syscall.Kill(-rec.PGID, syscall.SIGKILL); err == nil {
				counts[i] = n
				killedGroups[rec.PGID] = true
			} else if !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill group %d of %s: %w", rec.PGID, rec.Attempt, err))
			}
		}
	}
	// Then the marked processes outside those groups.
	byMark := make(map[string]int, len(recs))
	for i, rec := range recs {
		if rec.Mark != "" {
			byMark[rec.Mark] = i
		}
	}
	if len(byMark) > 0 {
		for _, i := range killMarked(byMark, killedGroups) {
			counts[i]++
		}
	}

	var out []Killed
	for i, rec := range recs {
		if counts[i] > 0 {
			out = append(out, Killed{rec, counts[i]})
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// killMarked kills every live process whose MarkEnv is a key of byMark,
// apart from those in the groups just killed, and returns, for each, the
// value of its mark. A process is killed only if its start time is the same
// before and after its environment was read, so that a PID reused meanwhile
// is not.
func killMarked(byMark map[string]int, skipGroups map[int]bool) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	key := []byte("\x00" + MarkEnv + "=")
	var out []int
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
		if err != nil {
			continue
		}
		environ = append([]byte{0}, environ...)
		j := bytes.Index(environ, key)
		if j < 0 {
			continue
		}
		v := environ[j+len(key):]
		if k := bytes.IndexByte(v, 0); k >= 0 {
			v = v[:k]
		}
		i, ok := byMark[string(v)]
		if !ok {
			continue
		}
		if after, err := ReadStat(pid); err != nil || after.Start != before.Start {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			out = append(out, i)
		}
	}
	return out
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

// what says what was killed, for reports.
func (k Killed) what() string {
	if k.PGID != 0 {
		return fmt.Sprintf("its processes (%d, process group %d)", k.Processes, k.PGID)
	}
	return fmt.Sprintf("its processes (%d, before its process group was recorded)", k.Processes)
}

// NoteInLog appends a line to an attempt's log, so that whoever reads it
// learns why its output stops. It creates the log (and its dir) when the
// attempt had written nothing, for the executor creates a log at the
// attempt's first output.
func NoteInLog(path, line string) {
	if path == "" {
		return
	}
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintln(f, line)
	f.Close()
}

// Found is an attempt whose processes Leftovers killed, with the owner dir
// it was recorded in.
type Found struct {
	Killed
	Owner string
}

// Leftovers runs when an executor starts: it reaps the records left under
// logDir by executors whose process is gone (a previous incarnation of this
// worker, killed together with its reaper), notes it in the attempts' logs
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
			NoteInLog(k.Log, "orion: the worker running this attempt died; a worker starting later killed "+k.what())
			out = append(out, Found{k, o.Name()})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("owner %s: %w", o.Name(), err))
		}
	}
	return out, errors.Join(errs...)
}

// reaper is the reaper process: it waits for EOF on stdin (its worker is
// gone, or closed its executor), reaps its worker's records, and then
// reports them on stderr, which it shares with the worker's (after the
// kills: that stderr may be a pipe nobody reads any more).
func reaper(dir string) int {
	// Only the worker's end of the pipe matters: nothing is ever written.
	io.Copy(io.Discard, os.Stdin)
	killed, err := Owner(dir)
	for _, k := range killed {
		NoteInLog(k.Log, "orion: the worker running this attempt died; its reaper killed "+k.what())
	}
	w := bufio.NewWriter(os.Stderr)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, k := range killed {
		fmt.Fprintf(w, "%s\tWARN\torion reaper: the worker of %s is gone; killed %s\n", now, k.Attempt, k.what())
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
		Env:         append(WithoutOrionSettings(os.Environ()), env+"="+ownerDir),
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

// WithoutOrionSettings drops Orion's settings (ORION_*: the API token,
// etcd's password, the worker's configuration) from an environment: the
// reaper's, which needs none, and the base of every task's, which must not
// hand the worker's credentials to whoever reads its output (a task of the
// same user can also read a dumpable process's environment).
func WithoutOrionSettings(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "ORION_") {
			out = append(out, kv)
		}
	}
	return out
}
