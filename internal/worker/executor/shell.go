package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor/reap"
)

// outputDrain bounds how long an attempt waits, after its process group is
// gone, for the rest of its output: only a process that left the group
// (setsid) can still hold the pipe, and it does not get to hang the attempt.
const outputDrain = time.Second

// createLog creates (truncating) the log file of an attempt and its dirs.
func (l *Local) createLog(id model.AttemptID) (*os.File, error) {
	return createLog(l.LogPath(id))
}

func createLog(p string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
}

// outputWriter tees an attempt's output to its log file and tail. The log
// file (and its directory) is created at the first byte of output, from the
// goroutine that copies it, so that it overlaps the running process rather
// than delaying its fork, and an attempt that prints nothing creates no file
// at all. A new file is the most expensive thing an attempt did besides the
// fork: an inode and, for a task's first attempt, a directory, 0.2-0.7 ms
// each on the ext4 without journal of our hosts (the kernel skips every inode
// freed in the last minute, so the cost grows with the files the machine has
// recently removed), against ~0.6 ms for the whole `sh -c true`. OpenLog
// gives such an attempt an empty log (Local.noteShell). A log that
// cannot be created or written (disk full) does not stop the tail nor the
// process.
type outputWriter struct {
	path   string
	f      *os.File // nil until the first output
	logErr error
	tail   tailBuffer
}

func (w *outputWriter) Write(p []byte) (int, error) {
	if w.f == nil && w.logErr == nil && len(p) > 0 {
		w.f, w.logErr = createLog(w.path)
	}
	if w.logErr == nil && w.f != nil {
		_, w.logErr = w.f.Write(p)
	}
	return w.tail.Write(p)
}

// close closes the log file, if there is one.
func (w *outputWriter) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// env is the server environment, then the task's Env (sorted, so repeated
// keys resolve the same way every time), then its secrets (secretEnv), then
// the ORION_* variables, which a task cannot override. exec keeps the last
// value of a repeated key.
func (l *Local) env(a model.Attempt, secrets []string) []string {
	env := make([]string, 0, len(l.baseEnv)+len(a.Spec.Env)+len(secrets)+5) // +1: the reap mark
	env = append(env, l.baseEnv...)
	keys := make([]string, 0, len(a.Spec.Env))
	for k := range a.Spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+a.Spec.Env[k])
	}
	env = append(env, secrets...)
	return append(env,
		"ORION_DAG_ID="+a.DAG,
		"ORION_TASK_ID="+a.Task,
		"ORION_ATTEMPT="+strconv.Itoa(a.Attempt),
		"ORION_LEADER_FENCE="+strconv.FormatInt(a.Fence, 10))
}

// runShell runs `/bin/sh -c Command` (or `Interpreter -c Command`) in its own
// process group. stdout and stderr share one pipe that we read ourselves
// (rather than letting exec copy it), so that once the main process has been
// reaped we can kill what is left of its group (background children holding
// the pipe) and never wait on their output.
func (l *Local) runShell(ctx context.Context, a model.Attempt, r *model.Result) {
	// The log is created at the first output (outputWriter). A log left at
	// this path by an earlier run of the same attempt id goes now, so that
	// it is never taken for this attempt's; ENOENT, the usual case, costs a
	// path lookup.
	logPath := l.LogPath(a.AttemptID)
	if err := syscall.Unlink(logPath); err != nil && err != syscall.ENOENT {
		r.Outcome, r.Error = model.Failed, "open log: remove "+logPath+": "+err.Error()
		return
	}
	// Until it prints, its log reads as empty, not missing.
	l.noteShell(a.AttemptID)
	out := &outputWriter{path: logPath}
	defer out.close()
	defer func() { r.OutputTail = out.tail.String() }()
	startFailed := func(err error) {
		r.Outcome, r.Error = model.Failed, "start: "+err.Error()
		fmt.Fprintf(out, "orion: %s\n", r.Error)
	}

	shell := "/bin/sh"
	if a.Spec.Interpreter != "" {
		shell = a.Spec.Interpreter
	}
	outputs, err := l.outputsPath()
	if err != nil {
		startFailed(fmt.Errorf("outputs file: %w", err))
		return
	}
	secretEnv, values, err := l.secretEnv(a.Spec.EnvFrom)
	if err != nil {
		os.Remove(outputs)
		startFailed(err)
		return
	}
	secrets := secretForms(values)
	cmd := exec.Command(shell, "-c", a.Spec.Command)
	cmd.Env = append(l.env(a, secretEnv), EnvOutputs+"="+outputs)
	cmd.Dir = a.Spec.Workdir
	// Pdeathsig: the shell dies with this process even when the reaper
	// cannot kill its group (see package reap). It fires when the forking
	// thread exits, so startPinned keeps this goroutine on that thread until
	// the shell is reaped.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		startFailed(err)
		return
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	// The journal (package reap) lets the reaper, or the next executor, kill
	// the attempt's processes if this one dies. The attempt enters it before
	// the fork, so that none of its processes exists unrecorded, and leaves
	// once its group is gone (deferred: after the last kill below). Without
	// it the attempt still runs; only the cleanup after a crash is lost, and
	// that is logged.
	var rec *reap.Pending
	if l.journal != nil {
		if rec, err = l.journal.Begin(a.AttemptID.String(), logPath); err == nil {
			defer rec.Done()
			cmd.Env = append(cmd.Env, reap.MarkEnv+"="+rec.Mark)
		} else {
			l.log.Warn("cannot record an attempt's processes; if this worker dies, its shell dies with it but not what the shell started",
				zap.Stringer("attempt", a.AttemptID), zap.Error(err))
		}
	}
	err = startPinned(cmd)
	pw.Close() // the children hold it now
	if err != nil {
		pr.Close()
		startFailed(explainStart(err, cmd))
		return
	}
	pgid := cmd.Process.Pid
	if rec != nil {
		if err := rec.Started(pgid); err != nil {
			l.log.Warn("cannot record an attempt's process group; if this worker dies, only its marked processes are killed",
				zap.Stringer("attempt", a.AttemptID), zap.Int("pgid", pgid), zap.Error(err))
		}
	}

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// A secret the task prints is masked in its log and tail.
		sink := newMaskingWriter(out, secrets)
		io.Copy(sink, pr)
		if m, ok := sink.(*maskingWriter); ok {
			m.Flush()
		}
	}()
	werr := l.waitShell(ctx, cmd, pgid)
	runtime.UnlockOSThread() // startPinned's: the shell is reaped

	// The leader is gone; whatever is left of its group goes too. (ESRCH
	// when the group is empty.)
	syscall.Kill(-pgid, syscall.SIGKILL)

	drain := time.NewTimer(outputDrain)
	select {
	case <-copied:
		drain.Stop()
	case <-drain.C:
		pr.Close() // unblocks the copy
		<-copied
	}
	pr.Close()

	if out.logErr != nil {
		fmt.Fprintf(&out.tail, "\norion: writing log: %v\n", out.logErr)
	}
	r.ExitCode = cmd.ProcessState.ExitCode()
	if classify(ctx, r) {
		os.Remove(outputs)
		return
	}
	if werr == nil {
		// Published only by a success, and never cut: outputs over the
		// bound fail the attempt, saying so.
		if r.Outputs, err = readOutputs(outputs, a.MaxOutputBytes); err == nil {
			err = outputsHoldNoSecret(r.Outputs, secrets)
		}
		if err != nil {
			r.Outputs = nil
			// A parse error quotes the file: never a secret of it.
			r.Outcome, r.Error = model.Failed, maskText(err.Error(), secrets)
			fmt.Fprintf(out, "\norion: %s\n", r.Error)
			return
		}
		r.Outcome = model.Succeeded
		return
	}
	os.Remove(outputs)
	r.Outcome = model.Failed
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		r.Error = ee.Error() // "exit status 3", "signal: killed"
	} else {
		r.Error = werr.Error()
	}
}

// explainStart names the working directory when it is why cmd did not
// start: the kernel's chdir error reaches Go as the exec's own
// ("fork/exec /bin/sh: no such file or directory"), which points at the
// shell. The stat runs only once the start has failed.
func explainStart(err error, cmd *exec.Cmd) error {
	if cmd.Dir == "" {
		return err
	}
	switch fi, serr := os.Stat(cmd.Dir); {
	case serr != nil:
		return fmt.Errorf("workdir %s: %w", cmd.Dir, serr)
	case !fi.IsDir():
		return fmt.Errorf("workdir %s is not a directory", cmd.Dir)
	}
	return err
}

// startPinned starts cmd from the calling goroutine's OS thread and, if it
// started, leaves the goroutine locked to that thread: the caller unlocks it
// (runtime.UnlockOSThread) once cmd has been reaped, and not before.
//
// A parent-death signal (Pdeathsig) fires when the thread that forked the
// child exits, not the process (golang/go#27505), and the Go runtime ends a
// thread whose locked goroutine exits, which any library may cause: a child
// forked by a goroutine free to move on dies whenever the thread it was
// forked from is later used that way. Locked from the fork until the child
// is reaped, the forking goroutine is the only one its thread runs, so
// nothing ends the thread while the child lives. (A goroutine locked for the
// life of the process, forking every shell for the others, does the same at
// the cost of two thread hand-offs per attempt: ~45 µs of CPU here.) Until
// it unlocks, the caller should block only in system calls (waitid), not on
// channels: a locked goroutine that parks costs a thread switch each way.
func startPinned(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// waitShell reaps the shell, the leader of process group pgid; if ctx ends
// first, the group gets SIGTERM, and SIGKILL after killGrace. It waits on the
// calling goroutine, which runShell needs (that goroutine keeps its thread
// until the shell is reaped), and reacts to ctx in a callback, which costs
// nothing unless ctx ends, where a goroutine selecting on ctx and on the
// wait would cost a goroutine and a wake-up per attempt. No signal goes to
// pgid from here once the shell has been reaped.
func (l *Local) waitShell(ctx context.Context, cmd *exec.Cmd, pgid int) error {
	var (
		mu     sync.Mutex
		reaped bool
		grace  *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if reaped {
			return
		}
		syscall.Kill(-pgid, syscall.SIGTERM)
		grace = time.AfterFunc(l.killGrace, func() {
			mu.Lock()
			defer mu.Unlock()
			if !reaped {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
		})
	})
	err := cmd.Wait()
	stop()
	mu.Lock()
	reaped = true
	if grace != nil {
		grace.Stop()
	}
	mu.Unlock()
	return err
}
