package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/internal/worker/executor/reap"
)

// helperWorkerEnv makes this test binary a worker-like process: see
// TestHelperKilledWorker.
const helperWorkerEnv = "ORION_TEST_HELPER_WORKER_DIR"

// TestHelperKilledWorker is not a test: TestWorkerKill9LeavesNoTaskProcess
// runs this binary with helperWorkerEnv set, and then this is a worker: a
// Local running one shell task that forks a grandchild, both writing their
// PIDs, until it is killed.
func TestHelperKilledWorker(t *testing.T) {
	dir := os.Getenv(helperWorkerEnv)
	if dir == "" {
		t.Skip("helper process for TestWorkerKill9LeavesNoTaskProcess")
	}
	l, err := NewLocal(LocalConfig{ID: "doomed", Slots: 1, LogDir: filepath.Join(dir, "logs")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l.Start(model.Attempt{AttemptID: model.AttemptID{DAG: "d", Task: "t", Attempt: 1}, Spec: model.Task{
		ID: "t", Kind: model.KindShell,
		Command: fmt.Sprintf("sleep 300 & echo $! > %s/child; echo $$ > %s/shell; wait", dir, dir),
	}})
	time.Sleep(time.Hour) // until kill -9
}

// The acceptance test of the issue: kill -9 of a worker leaves no task
// process behind, neither the shell nor what it forked.
func TestWorkerKill9LeavesNoTaskProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKilledWorker$")
	cmd.Env = append(os.Environ(), helperWorkerEnv+"="+dir)
	out, err := os.Create(filepath.Join(dir, "worker.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	// Should the test fail before its kill, the worker goes all the same
	// (and its reaper takes the task along).
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-waited
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("worker output:\n%s", b)
		}
	})
	shellPID, childPID := readPID(t, filepath.Join(dir, "shell")), readPID(t, filepath.Join(dir, "child"))
	if processGone(shellPID) || processGone(childPID) {
		t.Fatalf("task not running: shell %d, child %d", shellPID, childPID)
	}
	// The shell can write its PIDs before the worker has recorded its group
	// (its mark covers that window); the note checked below is the group
	// kill's.
	testkit.WaitFor(t, bound, "the group's record", func() bool {
		owners, _ := filepath.Glob(filepath.Join(dir, "logs", reap.DirName, "*"))
		for _, o := range owners {
			recs, _ := reap.Running(o)
			for _, r := range recs {
				if r.PGID == shellPID {
					return true
				}
			}
		}
		return false
	})

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-waited
	assertGone(t, shellPID)
	assertGone(t, childPID)

	// The grandchild was killed by the reaper (the shell's parent death
	// signal does not reach it), which says so in the attempt's log and
	// then removes its record dir.
	logPath := filepath.Join(dir, "logs", "d", "t", "1.log")
	testkit.WaitFor(t, bound, "the reaper's note in the attempt log", func() bool {
		b, _ := os.ReadFile(logPath)
		// The count is 1 or 2: the shell's parent-death signal and the
		// reaper race.
		return regexp.MustCompile(fmt.Sprintf(`its reaper killed its processes \([12], process group %d\)`, shellPID)).Match(b)
	})
	testkit.WaitFor(t, bound, "the record dir to be emptied", func() bool {
		owners, err := os.ReadDir(filepath.Join(dir, "logs", reap.DirName))
		return err == nil && len(owners) == 0
	})
}

// startGroup starts `sh -c script` in a process group of its own, as
// runShell does, and returns it with its record as runShell writes it.
func startGroup(t *testing.T, script string) (*exec.Cmd, reap.Record) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	st, err := reap.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, reap.Record{PGID: cmd.Process.Pid, SID: st.SID, Start: st.Start, Attempt: script}
}

// writeRecord journals rec as attempt n of ownerDir, in the lines that
// Journal.Begin and Pending.Started write (the first only, when rec has no
// PGID).
func writeRecord(t *testing.T, ownerDir string, n int64, rec reap.Record) {
	t.Helper()
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		t.Fatal(err)
	}
	first, _ := json.Marshal(reap.Record{Seq: n, Mark: rec.Mark, Attempt: rec.Attempt, Log: rec.Log})
	b := append(first, '\n')
	if rec.PGID != 0 {
		second, _ := json.Marshal(reap.Record{Seq: n, PGID: rec.PGID, SID: rec.SID, Start: rec.Start})
		b = append(append(b, second...), '\n')
	}
	f, err := os.OpenFile(filepath.Join(ownerDir, reap.JournalName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// startMarked starts `sleep 300` in a session of its own (as a task process
// that left its group) with mark in its environment.
func startMarked(t *testing.T, mark string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Env = append(os.Environ(), reap.MarkEnv+"="+mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // reaped at once, so that processGone sees it go
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd
}

// The restart path: an executor starting on a LogDir kills the groups that
// a dead executor recorded there, and touches nothing else: not a PID that
// now belongs to another process, nor the groups of an executor still alive.
func TestStartKillsWhatADeadWorkerLeft(t *testing.T) {
	t.Parallel()
	logDir, tmp := t.TempDir(), t.TempDir()
	self, err := reap.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The previous incarnation: our PID with another start time, as after a
	// restart that got the same PID (PID 1 in a container).
	dead := filepath.Join(logDir, reap.DirName, fmt.Sprintf("%d-%d-1", os.Getpid(), self.Start+1))
	alive := filepath.Join(logDir, reap.DirName, fmt.Sprintf("%d-%d-999", os.Getpid(), self.Start))

	deadMark := func(n int) string { return filepath.Base(dead) + "/" + fmt.Sprint(n) }

	// A running shell with a grandchild.
	_, running := startGroup(t, fmt.Sprintf("sleep 300 & echo $! > %s/a; wait", tmp))
	running.Log = filepath.Join(tmp, "a.log")
	os.WriteFile(running.Log, []byte("output so far\n"), 0o644)
	writeRecord(t, dead, 1, running)
	runningChild := readPID(t, filepath.Join(tmp, "a"))

	// A shell that has exited, leaving its background child in the group.
	exited, orphaned := startGroup(t, fmt.Sprintf("sleep 300 & echo $! > %s/b", tmp))
	writeRecord(t, dead, 2, orphaned)
	orphanedChild := readPID(t, filepath.Join(tmp, "b"))
	exited.Wait()

	// A process of a running attempt that left its group (setsid), found by
	// its mark; and one of an attempt recorded before its fork only (the
	// executor died in between).
	escapedLeader, escapedGroup := startGroup(t, "exec sleep 300")
	escapedGroup.Mark = deadMark(3)
	writeRecord(t, dead, 3, escapedGroup)
	escaped := startMarked(t, deadMark(3))
	unforked := startMarked(t, deadMark(4))
	writeRecord(t, dead, 4, reap.Record{Mark: deadMark(4), Attempt: "d/unforked#1"})

	// A daemon left on purpose by an attempt that finished (no record any
	// more): not the reaping's business.
	daemon := startMarked(t, deadMark(5))

	// A record whose PGID now belongs to an unrelated process: it started
	// after the recorded leader.
	unrelated, rec := startGroup(t, "exec sleep 300")
	rec.Start--
	writeRecord(t, dead, 6, rec)

	// A group recorded by an executor that is still alive (two workers
	// sharing a log dir).
	other, otherRec := startGroup(t, "exec sleep 300")
	writeRecord(t, alive, 1, otherRec)

	h := newHarness(t, 1, func(c *LocalConfig) { c.LogDir = logDir })
	assertGone(t, running.PGID)
	assertGone(t, runningChild)
	assertGone(t, orphanedChild)
	assertGone(t, escapedLeader.Process.Pid)
	assertGone(t, escaped.Process.Pid)
	assertGone(t, unforked.Process.Pid)
	if processGone(daemon.Process.Pid) {
		t.Error("killed a process of a finished attempt")
	}
	if processGone(unrelated.Process.Pid) {
		t.Error("killed the unrelated process that reuses a recorded PGID")
	}
	if processGone(other.Process.Pid) {
		t.Error("killed a group of an executor that is alive")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead executor's records are still there: %v", err)
	}
	if recs, err := reap.Running(alive); err != nil || len(recs) != 1 {
		t.Errorf("the live executor's record is gone: %v %v", recs, err)
	}
	if b, _ := os.ReadFile(running.Log); string(b) != fmt.Sprintf("output so far\norion: the worker running this attempt died; a worker starting later killed its processes (2, process group %d)\n", running.PGID) {
		t.Errorf("attempt log %q", b)
	}

	// And the new executor runs tasks as usual, leaving none running in its
	// journal.
	if r := h.run(shell("true")); r.Outcome != model.Succeeded {
		t.Fatalf("result %+v", r)
	}
	if recs, err := reap.Running(h.l.ownerDir); err != nil || len(recs) != 0 {
		t.Errorf("running after the attempt: %v %v", recs, err)
	}
}

// golang/go#27505: a parent-death signal fires when the thread that forked
// the child exits, and the Go runtime ends a thread whose locked goroutine
// exits (the control shows both). startPinned keeps the forking goroutine on
// the thread it forked from, so no other goroutine can end that thread while
// the child lives: here the goroutine parks again and again while threads
// end around it, and stays on its thread, and its child lives.
func TestShellSurvivesThreadsEnding(t *testing.T) {
	t.Parallel()
	sleeper := func() *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	// The control: forked by a goroutine that ends locked to its thread.
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("every goroutine ran on the main thread")
		}
		cmd := sleeper()
		errs := make(chan error, 1)
		onMain := false
		go func() {
			runtime.LockOSThread() // never unlocked: the runtime ends this thread with the goroutine
			// ... unless it is the main thread, which the runtime keeps
			// (wedged) instead: then nothing would fire; try again.
			if onMain = syscall.Gettid() == os.Getpid(); onMain {
				errs <- nil
				return
			}
			errs <- cmd.Start()
		}()
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if onMain {
			continue
		}
		waited := make(chan struct{})
		go func() { cmd.Wait(); close(waited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-waited })
		assertGone(t, cmd.Process.Pid)
		break
	}

	task := sleeper()
	ping, pong := make(chan struct{}), make(chan int)
	go func() {
		defer close(pong)
		if err := startPinned(task); err != nil {
			t.Error(err)
			return
		}
		defer runtime.UnlockOSThread()
		tid := syscall.Gettid()
		for range ping {
			pong <- syscall.Gettid() - tid
		}
		task.Process.Kill()
		task.Wait()
	}()
	for range 200 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			}()
		}
		wg.Wait()
		ping <- struct{}{}
		moved, ok := <-pong
		if !ok {
			return
		}
		if moved != 0 {
			t.Fatal("a goroutine left the thread startPinned forked from")
		}
	}
	if processGone(task.Process.Pid) {
		t.Error("a child forked by startPinned died with a thread")
	}
	close(ping)
	<-pong
}
