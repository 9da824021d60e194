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

// startWorker starts an `orion worker` of the test's own, its output in
// the returned log file; it is killed at the end of the test.
func startWorker(t *testing.T, n *node, name string, args ...string) (*exec.Cmd, string, <-chan struct{}) {
	t.Helper()
	work := t.TempDir()
	logPath := filepath.Join(work, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	w := exec.Command(cluster.Bin, append([]string{"worker", "--server", n.url(), "--name", name,
		"--log-dir", filepath.Join(work, "logs"), "--log-format", "json"}, args...)...)
	w.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	w.Stdout, w.Stderr = logf, logf
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { w.Wait(); close(exited) }()
	t.Cleanup(func() { w.Process.Kill(); <-exited })
	return w, logPath, exited
}

// A worker told to stop (SIGTERM: a pod deletion, a rollout) drains: it
// takes no new attempts, and the shell task it runs finishes and succeeds
// once, not cancelled to run again elsewhere. Then it exits by itself.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	n := newNode(t, "--slots", "0") // every task runs on a worker
	n.start()
	ledger := filepath.Join(t.TempDir(), "ledger")
	w1, w1log, exited := startWorker(t, n, "drained", "--slots", "2", "--drain-timeout", "60s")

	long := n.submit(fmt.Sprintf("id: long\ntasks:\n  - {id: t, command: \"echo start $ORION_ATTEMPT >> %s; sleep 2; echo end >> %s\"}\n", ledger, ledger))
	testkit.WaitFor(t, time.Minute, "the long task to start", func() bool {
		b, _ := os.ReadFile(ledger)
		return bytes.Contains(b, []byte("start 1"))
	})
	if err := w1.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the worker to say it drains", func() bool {
		b, _ := os.ReadFile(w1log)
		return bytes.Contains(b, []byte("draining: taking no new attempts"))
	})
	// Submitted while it drains: not for it. It waits for another worker.
	after := n.submit("id: after\ntasks:\n  - {id: t, command: \"true\"}\n")

	d := n.waitDAG(long, time.Minute)
	if d.Status != "succeeded" || d.Task("t").Attempts != 1 {
		t.Fatalf("the drained worker's task: %+v", d)
	}
	if b, _ := os.ReadFile(ledger); string(b) != "start 1\nend\n" {
		t.Fatalf("the task ran %q; want once, to its end", b)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit once its task finished")
	}
	if st := w1.ProcessState; st == nil || !st.Success() {
		t.Fatalf("the worker exited with %v", st)
	}
	if d, _ := n.dag(after); d.Status != "running" || d.Task("t").Attempts != 0 {
		t.Fatalf("a task submitted during the drain was run: %+v", d)
	}
	startWorker(t, n, "next", "--slots", "1")
	if d := n.waitDAG(after, time.Minute); d.Status != "succeeded" || !strings.HasPrefix(d.Task("t").Worker, "next/") {
		t.Fatalf("after the drain: %+v", d)
	}
}

// A pod task is checked at submission like every other kind (a bad
// quantity is a 400 naming the field), and, with no worker that reaches
// Kubernetes, waits and says why instead of failing on a worker that
// cannot run it.
func TestPodTaskValidatedAndWaitsForAPodWorker(t *testing.T) {
	n := newNode(t)
	n.start()
	bad := `{"id":"pods-bad","tasks":[{"id":"train","pod":{"image":"busybox:1.36","resources":{"limits":{"memory":"2Gx"}}}}]}`
	code, out := n.do("POST", "/api/v1/dags", "application/json", []byte(bad))
	if code != 400 || !strings.Contains(string(out), `"invalid_dag"`) ||
		!strings.Contains(string(out), `pod.resources.limits.memory: \"2Gx\" is not a quantity`) {
		t.Fatalf("a bad quantity: %d %s", code, out)
	}
	id := n.submit("id: pods\ntasks:\n  - {id: train, pod: {image: busybox:1.36, command: [sh, -c, 'echo hi']}}\n  - {id: after, command: 'true', depends_on: [train]}\n")
	testkit.WaitFor(t, 10*time.Second, "the pod task to say why it waits", func() bool {
		d, code := n.dag(id)
		return code == 200 && strings.Contains(d.Task("train").Waiting, "no connected worker has labels orion.io/pods=true")
	})
	if d, _ := n.dag(id); d.Task("train").Attempts != 0 || d.Task("train").Status != "ready" {
		t.Fatalf("the pod task on a cluster without pod workers: %+v", d.Task("train"))
	}
}
