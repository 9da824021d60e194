package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// kill -9 of an `orion worker` leaves no task process behind: neither the
// shell it started nor what that shell started (in the task's process
// group, without the worker's parent-death signal). Before, both ran on
// while the leader ran the attempt again elsewhere.
func TestWorkerKill9LeavesNoTaskProcess(t *testing.T) {
	n := newNode(t, "--slots", "0") // every task runs on the worker
	n.start()
	work := t.TempDir()
	logf, err := os.Create(filepath.Join(work, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	w := exec.Command(cluster.Bin, "worker", "--server", n.url(), "--slots", "1", "--name", "doomed",
		"--log-dir", filepath.Join(work, "logs"), "--log-format", "json")
	w.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	w.Stdout, w.Stderr = logf, logf
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { w.Wait(); close(waited) }()
	t.Cleanup(func() { w.Process.Kill(); <-waited })

	n.submit(fmt.Sprintf("id: doomed\nname: doomed\ntasks:\n  - {id: t, command: \"sleep 300 & echo $! > %s/child; echo $$ > %s/shell; wait\"}\n", work, work))
	readPID := func(name string) int {
		var pid int
		testkit.WaitFor(t, time.Minute, "the task's "+name+" PID", func() bool {
			b, err := os.ReadFile(filepath.Join(work, name))
			if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		})
		return pid
	}
	shell, child := readPID("shell"), readPID("child")

	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-waited
	for what, pid := range map[string]int{"shell": shell, "grandchild": child} {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("the task's %s (%d) to be gone", what, pid), func() bool { return gone(pid) })
	}
	// The reaper says what it killed, in the log it shares with the worker:
	// the group, or, if the kill came before the worker recorded it, the
	// processes marked as the worker's.
	testkit.WaitFor(t, 10*time.Second, "the reaper's report", func() bool {
		b, _ := os.ReadFile(logf.Name())
		return bytes.Contains(b, []byte("orion reaper: the worker of doomed/t#1 is gone; killed "))
	})
}

// gone: no such process, or a zombie nobody reaped yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
