package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/server"
	"github.com/orion-sched/orion/internal/server/servertest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/internal/worker/agent"
	"github.com/orion-sched/orion/internal/workerstream"
)

const waitFor = 20 * time.Second // upper bound of every wait; conditions are polled

// replica starts a real single-node server without slots of its own, so
// that every attempt runs on the worker under test.
func replica(t *testing.T, mods ...func(*config.Server)) (*server.Server, *client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd")
	}
	s, base := servertest.Start(t, append([]func(*config.Server){func(c *config.Server) { c.Slots = 0 }}, mods...)...)
	return s, client.New([]string{base}, ""), base
}

// slotsOnHub is what the leader's hub counts of the worker's slots: 0 once
// it said it drains (-1: it never connected).
func slotsOnHub(s *server.Server, id string) int {
	if w := s.Hub.Worker(id); w != nil {
		return w.Slots()
	}
	return -1
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func startWorker(t *testing.T, base string, drain time.Duration) *agent.Agent {
	t.Helper()
	cfg := config.Worker{Servers: []string{base}, Slots: 2, Name: "w1", LogDir: t.TempDir(), DrainTimeout: drain}
	a, err := agent.StartWorker(cfg, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// submit submits a DAG of one shell task t and waits until it runs.
func submit(t *testing.T, c *client.Client, id, cmd string) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"tasks":[{"id":"t","kind":"shell","command":%q,"max_retries":0}]}`, id, cmd)
	if _, err := c.Submit(context.Background(), []byte(body), "application/json"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitFor, id+" running", func() bool { return task(t, c, id).Status == apitypes.StatusRunning })
}

func task(t *testing.T, c *client.Client, dag string) *client.Task {
	t.Helper()
	tk, err := c.GetTask(context.Background(), dag, "t")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// stop runs a.Stop and reports when it returned.
func stop(t *testing.T, a *agent.Agent) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		a.Stop()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("Stop did not return")
		}
	})
	return done
}

// A worker told to stop lets the attempt it runs finish and hands its
// result to the leader before Stop returns; what is submitted meanwhile is
// not given to it.
func TestStopLetsTheRunningAttemptFinish(t *testing.T) {
	s, c, base := replica(t)
	a := startWorker(t, base, waitFor)
	gate := t.TempDir() + "/go"
	submit(t, c, "before", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.01; done; echo finished", gate))

	stopped := stop(t, a)
	testkit.WaitFor(t, waitFor, "the worker draining", func() bool { return slotsOnHub(s, a.ID()) == 0 })
	if _, err := c.Submit(context.Background(), []byte(`{"id":"after","tasks":[{"id":"t","kind":"noop"}]}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	touch(t, gate)
	select {
	case <-stopped:
	case <-time.After(waitFor):
		t.Fatal("Stop did not return after the attempt finished")
	}
	// Stop returned after the leader acknowledged the result.
	if tk := task(t, c, "before"); tk.Status != apitypes.StatusSucceeded || tk.Attempts != 1 {
		t.Fatalf("before: %s after %d attempts, want succeeded after 1", tk.Status, tk.Attempts)
	}
	if tk := task(t, c, "after"); tk.Attempts != 0 {
		t.Fatalf("after: %s, %d attempts: a draining worker was given it", tk.Status, tk.Attempts)
	}
	if a.Err() != nil {
		t.Fatalf("Err after Stop: %v", a.Err())
	}
}

// What outlasts the drain is cancelled, and the leader re-queues it
// without consuming a retry.
func TestStopCancelsWhatOutlastsTheDrain(t *testing.T) {
	_, c, base := replica(t)
	a := startWorker(t, base, 200*time.Millisecond)
	submit(t, c, "long", "sleep 60")
	<-stop(t, a)
	testkit.WaitFor(t, waitFor, "long re-queued", func() bool {
		tk := task(t, c, "long")
		return tk.Status == apitypes.StatusReady && tk.Retries == 0
	})
}

// A worker the leader refuses (here: more slots than it accepts) stops
// with the leader's reason instead of dialling again.
func TestRefusedWorkerStopsWithTheReason(t *testing.T) {
	_, _, base := replica(t, func(c *config.Server) { c.WorkerMaxSlots = 1 })
	a := startWorker(t, base, time.Second)
	select {
	case <-a.Done():
	case <-time.After(waitFor):
		t.Fatal("a refused worker kept running")
	}
	var refused *workerstream.RefusedError
	if !errors.As(a.Err(), &refused) {
		t.Fatalf("Err = %v, want the leader's refusal", a.Err())
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
