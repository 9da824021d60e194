package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/etcdmember"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/workerstream"
)

// bundle is one replica on a real embedded etcd member, wired as
// `orion server` wires one: its slots are an executor behind a worker agent
// that dials whichever replica's hub leads (through an in-process pipe, as
// a replica's own slots do), and the engine runs what joins its hub.
type bundle struct {
	t      *testing.T
	cli    *clientv3.Client
	exec   *executor.Local
	hub    *workerstream.Hub
	eng    *Engine
	cancel context.CancelFunc
	agent  context.CancelFunc // stops this replica's worker agent (its slots' stream)
}

// replicas are the bundles sharing one etcd: an agent dials the one whose
// hub leads, as replicaDialer in internal/server finds it through etcd.
var replicas sync.Map // *clientv3.Client → *[]*bundle (guarded by replicasMu)
var replicasMu sync.Mutex

func startEngine(t *testing.T, cli *clientv3.Client, slots int, mods ...func(*Config)) *bundle {
	t.Helper()
	b := startReplica(t, cli, "n1", slots, mods...)
	testkit.WaitFor(t, 10*time.Second, "leadership", func() bool { return b.eng.Status().Leader })
	return b
}

// startReplica starts an engine without waiting for it to lead.
func startReplica(t *testing.T, cli *clientv3.Client, name string, slots int, mods ...func(*Config)) *bundle {
	t.Helper()
	ex, err := executor.NewLocal(executor.LocalConfig{ID: fmt.Sprintf("%s/w-%d", name, time.Now().UnixNano()), Slots: slots, LogDir: t.TempDir(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	hub := workerstream.NewHub(workerstream.HubConfig{Leader: name, ReconnectGrace: 200 * time.Millisecond, Logger: log.Named("hub")})
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{
		Node:      name,
		Core:      core.Config{RetryBase: 5 * time.Millisecond, RetryCap: 40 * time.Millisecond, OrphanGrace: 100 * time.Millisecond},
		Logger:    log,
		Workers:   HubWorkers(ctx, hub.Events()),
		Results:   hub.Results(),
		OnLeading: func(leading bool, _ Leading) { hub.SetLeading(leading) },
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	eng := New(cfg, store.NewEtcd(cli))
	b := &bundle{t: t, cli: cli, exec: ex, hub: hub, eng: eng, cancel: cancel}
	replicasMu.Lock()
	peers, _ := replicas.LoadOrStore(cli, new([]*bundle))
	*peers.(*[]*bundle) = append(*peers.(*[]*bundle), b)
	replicasMu.Unlock()
	agent := workerstream.NewAgent(workerstream.AgentConfig{
		Exec:       ex,
		Replica:    name,
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
		Dial: func(context.Context) (workerstream.Conn, string, error) {
			replicasMu.Lock()
			all := slices.Clone(*peers.(*[]*bundle))
			replicasMu.Unlock()
			for _, p := range all {
				if p.hub.Leading() {
					return p.hub.DialSelf(p.eng.cfg.Node)
				}
			}
			return nil, "", errors.New("no leader yet")
		},
	})
	actx, acancel := context.WithCancel(context.Background())
	b.agent = acancel
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = agent.Run(actx) }()
	go eng.Run(ctx)
	t.Cleanup(func() { b.stop(); acancel(); <-agentDone; hub.Close() })
	return b
}

// crash stops the replica as kill -9 would: the engine without resigning,
// the worker's stream, and the executor with its processes.
func (b *bundle) crash() {
	b.eng.Crash()
	b.agent()
	b.exec.Close()
	_ = b.hub.Close()
}

func (b *bundle) stop() {
	b.cancel()
	if b.eng == nil {
		return
	}
	<-b.eng.Done()
	b.exec.Close()
}

func (b *bundle) dag(id string) *core.DAGView {
	v, _, err := b.eng.DAG(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

func (b *bundle) waitDAG(id string, want core.DAGStatus) *core.DAGView {
	b.t.Helper()
	var v *core.DAGView
	testkit.WaitFor(b.t, 30*time.Second, "DAG "+id+" "+string(want), func() bool {
		v = b.dag(id)
		return v != nil && v.Status.Terminal()
	})
	if v.Status != want {
		b.t.Fatalf("DAG %s ended %s, want %s: %+v", id, v.Status, want, v.Counts)
	}
	return v
}

func mustLoad(t *testing.T, src string) *model.DAG {
	t.Helper()
	d, err := dag.Load([]byte(src), "application/yaml", dag.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestMixedDAGRunsToCompletion(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 4)
	dir := t.TempDir()
	d := mustLoad(t, fmt.Sprintf(`
id: mixed
name: mixed
tasks:
  - {id: a, command: "echo a >> %[1]s/a"}
  - {id: b, command: "echo b", depends_on: [a]}
  - {id: c, kind: sleep, duration: 50ms, depends_on: [a]}
  - {id: d, kind: noop, depends_on: [b, c]}
  - {id: flaky, command: "n=$(cat %[1]s/n 2>/dev/null || echo 0); echo $((n+1)) > %[1]s/n; [ $n -ge 2 ]", max_retries: 3}
  - {id: bad, command: "echo boom >&2; exit 3", max_retries: 1}
  - {id: after-bad, kind: noop, depends_on: [bad]}
  - {id: after-after, kind: noop, depends_on: [after-bad, d]}
`, dir))
	res, err := b.eng.Submit(context.Background(), d)
	if err != nil || !res.Created {
		t.Fatalf("submit: %+v %v", res, err)
	}
	v := b.waitDAG("mixed", core.DAGFailed)
	want := map[string]struct {
		status   core.Status
		attempts int
	}{
		"a": {core.Succeeded, 1}, "b": {core.Succeeded, 1}, "c": {core.Succeeded, 1}, "d": {core.Succeeded, 1},
		"flaky": {core.Succeeded, 3}, "bad": {core.Failed, 2}, "after-bad": {core.UpstreamFailed, 0}, "after-after": {core.UpstreamFailed, 0},
	}
	for _, tv := range v.Tasks {
		w := want[tv.ID]
		if tv.Status != w.status || tv.Attempts != w.attempts {
			t.Errorf("task %s: %s after %d attempts, want %s after %d", tv.ID, tv.Status, tv.Attempts, w.status, w.attempts)
		}
	}
	bad := v.Tasks[5]
	if bad.ExitCode == nil || *bad.ExitCode != 3 || !strings.Contains(bad.OutputTail, "boom") {
		t.Errorf("bad task: exit %v tail %q", bad.ExitCode, bad.OutputTail)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a")); string(got) != "a\n" {
		t.Errorf("task a ran %q, want once", got)
	}

	// The same DAG again is idempotent; other content with the id conflicts.
	if res, err := b.eng.Submit(context.Background(), mustLoad(t, mustYAML(d))); err != nil || res.Created {
		t.Fatalf("resubmit: %+v %v", res, err)
	}
	d2 := *d
	d2.Name = "other"
	if _, err := b.eng.Submit(context.Background(), &d2); err == nil {
		t.Fatal("conflicting resubmit accepted")
	}

	// Retry runs only what did not succeed, with a fresh retry budget.
	if _, err := b.eng.Retry(context.Background(), "mixed", 0); err != nil {
		t.Fatal(err)
	}
	v = b.waitDAG("mixed", core.DAGFailed)
	if v.Run != 2 || v.Tasks[5].Attempts != 4 || v.Tasks[0].Attempts != 1 {
		t.Fatalf("after retry: run %d, bad attempts %d, a attempts %d", v.Run, v.Tasks[5].Attempts, v.Tasks[0].Attempts)
	}

	// A retry that names the run it retries is idempotent: sent again (a
	// standby re-sending it to a new leader), it is recognised from the
	// committed run and answered without a third run.
	if st, err := b.eng.Retry(context.Background(), "mixed", 1); err != nil || st != core.DAGFailed {
		t.Fatalf("retry of run 1 again: %s %v, want failed and no new run", st, err)
	}
	var ce *core.Error
	if _, err := b.eng.Retry(context.Background(), "mixed", 5); !errors.As(err, &ce) || ce.Code != core.CodeConflict {
		t.Fatalf("retry of a run the DAG has not reached: %v, want a conflict", err)
	}
	if v := b.dag("mixed"); v.Run != 2 {
		t.Fatalf("run %d after retries of other runs, want 2", v.Run)
	}
	if _, err := b.eng.Retry(context.Background(), "mixed", 2); err != nil {
		t.Fatalf("retry of the current run: %v", err)
	}
	if v := b.waitDAG("mixed", core.DAGFailed); v.Run != 3 {
		t.Fatalf("run %d after retrying run 2, want 3", v.Run)
	}
}

func mustYAML(d *model.DAG) string { return string(d.Canonical()) }

func TestCancelKillsRunningTasks(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 2)
	dir := t.TempDir()
	d := mustLoad(t, fmt.Sprintf(`
id: long
name: long
tasks:
  - {id: s, command: "touch %[1]s/started; sleep 30; touch %[1]s/finished"}
  - {id: next, kind: noop, depends_on: [s]}
`, dir))
	if _, err := b.eng.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "task start", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	var ce *core.Error
	if err := b.eng.Delete(context.Background(), "long"); !errors.As(err, &ce) || ce.Code != core.CodeConflict {
		t.Fatalf("delete of a running DAG: %v", err)
	}
	st, err := b.eng.Cancel(context.Background(), "long")
	if err != nil || st != core.DAGCancelled {
		t.Fatalf("cancel: %s %v", st, err)
	}
	v := b.waitDAG("long", core.DAGCancelled)
	testkit.WaitFor(t, 10*time.Second, "tasks cancelled", func() bool {
		v = b.dag("long")
		return v.Tasks[0].Status == core.Cancelled && v.Tasks[1].Status == core.Cancelled
	})
	testkit.WaitFor(t, 10*time.Second, "slot freed", func() bool { return len(b.exec.InFlight()) == 0 })
	if _, err := os.Stat(filepath.Join(dir, "finished")); err == nil {
		t.Fatal("cancelled task ran to the end")
	}
	// Cancelling is idempotent: a second cancel (a forwarded cancel sent
	// again after its first leader froze) is answered, and changes nothing.
	if st, err := b.eng.Cancel(context.Background(), "long"); err != nil || st != core.DAGCancelled {
		t.Fatalf("second cancel: %s %v, want cancelled", st, err)
	}

	// Cancelled, it can be deleted: gone from the state and from etcd.
	if err := b.eng.Delete(context.Background(), "long"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if v := b.dag("long"); v != nil {
		t.Fatalf("deleted DAG still there: %+v", v)
	}
	if req, ret := testutil.ToFloat64(b.eng.m.RequestedDeletes), testutil.ToFloat64(b.eng.m.RetentionDeletes); req != 1 || ret != 0 {
		t.Errorf("deletes counted: requested %v, retention %v", req, ret)
	}
	for _, prefix := range []string{store.DAGKey("long"), store.DAGTasksPrefix("long")} {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Fatalf("keys under %s after the delete: %v %v", prefix, resp, err)
		}
	}
	if err := b.eng.Delete(context.Background(), "long"); !errors.As(err, &ce) || ce.Code != core.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
}

// `orion cancel X && orion delete X`: the delete waits for the cancelled
// attempt to stop on its worker, then deletes; the id submitted again runs
// afresh (its attempt 1 is not taken for the one that was killed).
func TestDeleteRightAfterCancel(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 2)
	dir := t.TempDir()
	long := mustLoad(t, fmt.Sprintf(`
id: again
name: again
tasks:
  - {id: s, command: "touch %[1]s/started; sleep 30"}
`, dir))
	if _, err := b.eng.Submit(context.Background(), long); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "task start", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })
	if _, err := b.eng.Cancel(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.eng.Delete(ctx, "again"); err != nil {
		t.Fatalf("delete right after cancel: %v", err)
	}
	if n := len(b.exec.InFlight()); n != 0 {
		t.Fatalf("deleted while %d attempts still run", n)
	}
	short := mustLoad(t, fmt.Sprintf(`
id: again
name: again
tasks:
  - {id: s, command: "echo second > %s/second"}
`, dir))
	if res, err := b.eng.Submit(context.Background(), short); err != nil || !res.Created {
		t.Fatalf("submit again: %+v %v", res, err)
	}
	v := b.waitDAG("again", core.DAGSucceeded)
	if v.Tasks[0].Attempts != 1 {
		t.Errorf("the new DAG's task took %d attempts", v.Tasks[0].Attempts)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "second")); string(got) != "second\n" {
		t.Errorf("the new DAG's task wrote %q", got)
	}
}

// A new engine on the same etcd (as after kill -9) finishes what the first
// one left: finished tasks are not run again, orphaned ones are.
func TestRecoveryAfterCrash(t *testing.T) {
	_, cli := etcdtest.Start(t)
	dir := t.TempDir()
	b1 := startEngine(t, cli, 2)
	d := mustLoad(t, fmt.Sprintf(`
id: rec
name: rec
tasks:
  - {id: first, command: "echo x >> %[1]s/first"}
  - {id: slow, command: "echo x >> %[1]s/slow; while [ ! -e %[1]s/gate ]; do sleep 0.05; done", depends_on: [first]}
  - {id: last, command: "echo x >> %[1]s/last", depends_on: [slow]}
`, dir))
	if _, err := b1.eng.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	// Started: its mark written, not only the file created (the shell opens
	// the file before it writes, and a crash may fall in between).
	testkit.WaitFor(t, 10*time.Second, "slow started", func() bool {
		raw, _ := os.ReadFile(filepath.Join(dir, "slow"))
		return strings.Contains(string(raw), "x")
	})
	// Crash: the engine loop and executor stop; the session is abandoned
	// without resigning (its lease expires), as with kill -9.
	// slow waits for the gate, opened only after the crash: its first
	// attempt cannot finish (and commit) before it, however slow the
	// machine, so the new engine must find it orphaned and run it again.
	b1.crash()
	if err := os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b2 := startEngine(t, cli, 2)
	b2.waitDAG("rec", core.DAGSucceeded)
	count := func(name string) int {
		raw, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Count(string(raw), "x")
	}
	if count("first") != 1 || count("last") != 1 || count("slow") != 2 {
		t.Fatalf("runs: first=%d slow=%d last=%d; want 1, 2 (orphan re-run), 1", count("first"), count("slow"), count("last"))
	}
	// The records are readable JSON under the documented keys.
	resp, err := cli.Get(context.Background(), store.TaskKey("rec", "slow"))
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), `"status":"succeeded"`) {
		t.Fatalf("task key: %v %v", resp, err)
	}
}

// Finished DAGs are deleted from etcd (DAG key and task keys) once the
// retention has passed; running ones are kept.
func TestRetentionDeletesFinishedDAGs(t *testing.T) {
	_, cli := etcdtest.Start(t)
	b := startEngine(t, cli, 2, func(c *Config) { c.Retention = 300 * time.Millisecond })
	eng := b.eng
	if _, err := eng.Submit(context.Background(), mustLoad(t, "id: old\nname: old\ntasks: [{id: a, kind: noop}, {id: b, kind: noop, depends_on: [a]}]\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Submit(context.Background(), mustLoad(t, "id: busy\nname: busy\ntasks: [{id: s, command: 'sleep 30'}]\n")); err != nil {
		t.Fatal(err)
	}
	b.waitDAG("old", core.DAGSucceeded)
	testkit.WaitFor(t, 10*time.Second, "old deleted from etcd", func() bool {
		resp, err := cli.Get(context.Background(), "/orion/v1/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false
		}
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Key), "/old") {
				return false
			}
		}
		return true
	})
	// The delete is applied in memory once its commit returns, a moment
	// after etcd shows it.
	testkit.WaitFor(t, 5*time.Second, "old deleted from memory", func() bool { return b.dag("old") == nil })
	if v := b.dag("busy"); v == nil || v.Status != core.DAGRunning {
		t.Fatalf("running DAG touched by retention: %+v", v)
	}
}

// Values written by hand under /orion/v1/ that do not parse are reported
// and skipped, on a cold start and by a standby's watch; never a crash.
func TestHandWrittenGarbageIsSkipped(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	for k, v := range map[string]string{
		"/orion/v1/dags/junk":         "not json",
		"/orion/v1/dags/cyclic":       `{"id":"cyclic","name":"c","status":"running","run":1,"tasks":[{"id":"a","kind":"noop","depends_on":["b"],"max_retries":0,"timeout":"1s"},{"id":"b","kind":"noop","depends_on":["a"],"max_retries":0,"timeout":"1s"}]}`,
		"/orion/v1/tasks/nodag/x":     `{"status":"running"}`,
		"/orion/v1/tasks/junk/broken": "{",
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	a := startReplica(t, cli, "a", 1)
	testkit.WaitFor(t, 10*time.Second, "a leads", func() bool { return a.eng.Status().Leader })
	if got := testutil.ToFloat64(a.eng.m.BadValues) + testutil.ToFloat64(a.eng.m.ApplyErrors); got < 4 {
		t.Fatalf("reported %v bad values, want 4", got)
	}
	b := startReplica(t, cli, "b", 1)
	testkit.WaitFor(t, 5*time.Second, "b follows", func() bool { return b.eng.Status().Loaded })
	before := testutil.ToFloat64(b.eng.m.BadValues)
	if _, err := cli.Put(ctx, "/orion/v1/dags/late", "garbage"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the standby's watch reports the bad value", func() bool { return testutil.ToFloat64(b.eng.m.BadValues) == before+1 })
	if _, err := a.eng.Submit(ctx, mustLoad(t, "id: fine\nname: fine\ntasks: [{id: a, kind: noop}]\n")); err != nil {
		t.Fatal(err)
	}
	a.waitDAG("fine", core.DAGSucceeded)
	testkit.WaitFor(t, 5*time.Second, "standby sees it", func() bool { v := b.dag("fine"); return v != nil && v.Status == core.DAGSucceeded })
}

// A DAG etcd refuses for its size fails alone: submissions sent beside it
// (and possibly batched with it) all commit and run, and the leader stays.
// The engine is told a larger request limit than the member enforces (an
// operator's mismatch), so the refusal comes from etcd itself, not from the
// engine's own check.
func TestRecordRefusedByEtcdFailsAlone(t *testing.T) {
	_, cli := etcdtest.Start(t, func(c *etcdmember.Config) { c.MaxRequestBytes = 256 << 10 })
	// The engine believes etcd takes 4 MiB.
	// A long lease: on a loaded machine a 1 s lease can expire by itself,
	// and that is not what this test is about.
	b := startEngine(t, cli, 4, func(c *Config) {
		c.Limits = store.Limits{MaxOps: 128, MaxBytes: 1 << 20, MaxRequest: 4 << 20}
		c.SessionTTL = 10 * time.Second
	})
	term := b.eng.Status().LeaderSince

	big := mustLoad(t, fmt.Sprintf("id: big\nname: big\ntasks:\n  - {id: a, command: %q}\n", strings.Repeat("x", 60<<10)))
	for i := 1; i < 6; i++ { // 300 KB: under the engine's belief, over the member's limit
		big.Tasks = append(big.Tasks, big.Tasks[0])
		big.Tasks[i].ID = fmt.Sprintf("t%d", i)
	}
	type outcome struct {
		id  string
		err error
	}
	out := make(chan outcome, 41)
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := mustLoad(t, fmt.Sprintf("id: small-%d\nname: s\ntasks:\n  - {id: a, kind: noop}\n", i))
			_, err := b.eng.Submit(context.Background(), d)
			out <- outcome{d.ID, err}
		}(i)
		if i == 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.eng.Submit(context.Background(), big)
				out <- outcome{"big", err}
			}()
		}
	}
	wg.Wait()
	close(out)
	for o := range out {
		var ve *dag.ValidationError
		switch {
		case o.id == "big" && !(errors.As(o.err, &ve) && ve.Code == dag.CodeTooLarge):
			t.Errorf("big DAG: %v, want a dag_too_large refusal", o.err)
		case o.id != "big" && o.err != nil:
			t.Errorf("%s failed beside the big DAG: %v", o.id, o.err)
		case o.id != "big":
			b.waitDAG(o.id, core.DAGSucceeded)
		}
	}
	if st := b.eng.Status(); !st.Leader || !st.LeaderSince.Equal(term) {
		t.Fatalf("leadership moved: leader %v, since %s → %s", st.Leader, term, st.LeaderSince)
	}
	if r, _ := cli.Get(context.Background(), "/orion/v1/dags/big"); len(r.Kvs) != 0 {
		t.Fatal("the refused DAG is in etcd")
	}
	// The id is free again: a smaller DAG under it is accepted.
	if _, err := b.eng.Submit(context.Background(), mustLoad(t, "id: big\nname: big\ntasks:\n  - {id: a, kind: noop}\n")); err != nil {
		t.Fatalf("resubmitting under the refused id: %v", err)
	}
}
