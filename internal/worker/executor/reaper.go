package executor

// The executor's side of package reap (read its doc first): the reaper
// process kept alive beside the executor, and the cleanup after a dead
// predecessor when it starts. shell.go journals each attempt.

import (
	"os"
	"os/exec"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/worker/executor/reap"
)

// ownerSeq numbers the executors of this process.
var ownerSeq atomic.Int64

// reapLeftovers kills what executors that died with this LogDir left
// running, and reports each attempt.
func reapLeftovers(logDir string, log *zap.Logger) {
	found, err := reap.Leftovers(logDir)
	for _, f := range found {
		log.Warn("killed the processes of an attempt left running by a worker that is gone",
			zap.String("previous_worker", f.Owner), zap.String("attempt", f.Attempt),
			zap.Int("pgid", f.PGID), zap.Int("processes", f.Processes))
	}
	if err != nil {
		log.Warn("cleaning up after earlier executors", zap.Error(err))
	}
}

// reaperRestartMin and reaperRestartMax bound the pause before a reaper that
// exited (or failed to start) while its executor runs is started again.
const (
	reaperRestartMin = time.Second
	reaperRestartMax = time.Minute
)

// superviseReaper keeps a reaper running (the first one, started by
// NewLocal, is given) until reaperStop is closed (Close, once every attempt
// has ended); then it closes the pipe, so that the reaper finds no attempt
// running in the journal, and waits for it to exit.
func (l *Local) superviseReaper(cmd *exec.Cmd, w *os.File, err error) {
	defer close(l.reaperDone)
	pause := reaperRestartMin
	for {
		if err != nil {
			l.log.Warn("cannot start the reaper: if this worker is killed, its tasks' shells die with it, but what they started is killed only when an executor next starts on its log dir",
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
		cmd, w, err = reap.Start(l.ownerDir, l.id)
	}
}
