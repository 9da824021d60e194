package core

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// The core's cost per event must not grow with the size of the DAG (issue
// 31): these benchmarks run DAGs of N noop tasks (a wide fan-out, a fan-in,
// then a chain) through dispatch and success on a leader, and on a standby
// applying the same log, and report ns per applied entry. Run them with
//
//	go test ./internal/core -run '^$' -bench 'Scale' -benchtime 1x
//
// and compare the figures across sizes: they should stay flat.

// scaleDAG builds a DAG of n noop tasks: a root, a fan-out of n-2-chain
// tasks under it, a fan-in over all of them, then a chain.
func scaleDAG(id string, n int) *model.DAG {
	chain := n / 10
	if chain > 100 {
		chain = 100
	}
	wide := n - 2 - chain
	if wide < 1 {
		panic("scaleDAG: n too small")
	}
	tasks := make([]model.Task, 0, n)
	noop := func(id string, deps ...string) model.Task {
		return model.Task{ID: id, Kind: model.KindNoop, DependsOn: deps}
	}
	tasks = append(tasks, noop("root"))
	fanIn := make([]string, 0, wide)
	for i := 0; i < wide; i++ {
		id := fmt.Sprintf("w%06d", i)
		tasks = append(tasks, noop(id, "root"))
		fanIn = append(fanIn, id)
	}
	tasks = append(tasks, noop("join", fanIn...))
	prev := "join"
	for i := 0; i < chain; i++ {
		id := fmt.Sprintf("c%04d", i)
		tasks = append(tasks, noop(id, prev))
		prev = id
	}
	return &model.DAG{ID: id, Tasks: tasks}
}

// scaleRun drives a leader core (and optionally a standby) through its DAGs
// to the end, as the engine would: proposals committed in batches of up
// to 128 entries, each applied on the leader (and the standby), every
// dispatch answered by a success. It returns the entries applied.
type scaleRun struct {
	c, standby *Core
	rev        int64
	now        time.Time
	applied    int
}

func newScaleRun(standby bool) *scaleRun {
	r := &scaleRun{c: New(Config{}), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.c.AddWorker("w1", 256, nil)
	r.c.BecomeLeader(r.now)
	if standby {
		r.standby = New(Config{})
	}
	return r
}

func (r *scaleRun) submit(tb testing.TB, spec *model.DAG) {
	if _, err := r.c.Submit(spec, r.now); err != nil {
		tb.Fatal(err)
	}
}

// drain commits and answers until nothing is left to do.
func (r *scaleRun) drain(tb testing.TB) {
	var effects []Effect
	for {
		r.c.Schedule(r.now)
		batch := r.c.TakeProposals(128)
		if len(batch) == 0 {
			return
		}
		r.c.Seal(batch)
		r.rev++
		for i := range batch {
			e := &batch[i]
			e.Rev = r.rev
			if r.standby != nil {
				se := *e
				if err := r.standby.Apply(&se); err != nil {
					tb.Fatal(err)
				}
			}
			if err := r.c.Apply(e); err != nil {
				tb.Fatal(err)
			}
		}
		r.applied += len(batch)
		effects = r.c.AppendEffects(effects[:0])
		for _, ef := range effects {
			if ef.Kind == EffectDispatch {
				r.c.Report(model.Result{AttemptID: ef.Attempt.AttemptID, Worker: ef.Worker, Outcome: model.Succeeded,
					FinishedAt: r.now, ExitCode: 0}, r.now)
			}
		}
	}
}

func BenchmarkScaleOneDAG(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		for _, standby := range []bool{false, true} {
			name := fmt.Sprintf("n=%d", n)
			if standby {
				name += "/standby"
			}
			b.Run(name, func(b *testing.B) {
				spec := scaleDAG("big", n)
				var ns float64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					r := newScaleRun(standby)
					s := *spec
					s.ID = fmt.Sprintf("big-%d", i)
					b.StartTimer()
					start := time.Now()
					r.submit(b, &s)
					r.drain(b)
					el := time.Since(start)
					b.StopTimer()
					if st := r.c.dags[s.ID].rec.Status; st != DAGSucceeded {
						b.Fatalf("DAG ended %s", st)
					}
					ns += float64(el.Nanoseconds()) / float64(r.applied)
				}
				b.ReportMetric(ns/float64(b.N), "ns/entry")
			})
		}
	}
}

// TestScaleOneDAGRuns runs the benchmark's shape once at a small size, so
// that `go test` keeps the driver honest.
func TestScaleOneDAGRuns(t *testing.T) {
	r := newScaleRun(true)
	spec := scaleDAG("big", 500)
	r.submit(t, spec)
	r.drain(t)
	for _, c := range []*Core{r.c, r.standby} {
		if st := c.dags["big"].rec.Status; st != DAGSucceeded {
			t.Fatalf("DAG ended %s", st)
		}
	}
	// One DAG record, then per task its dispatch and its success, and the
	// DAG's end.
	if want := 1 + 2*500 + 1; r.applied != want {
		t.Fatalf("applied %d entries, want %d", r.applied, want)
	}
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// roundTripped decodes an entry from its JSON as a standby's store does.
func roundTripped(tb testing.TB, e *Entry) Entry {
	out := Entry{Rev: e.Rev, DAG: e.DAG, Task: e.Task}
	var err error
	switch {
	case e.T != nil:
		var b []byte
		if b, err = json.Marshal(e.T); err == nil {
			out.T = new(TaskRecord)
			err = json.Unmarshal(b, out.T)
		}
	case e.D != nil:
		var b []byte
		if b, err = json.Marshal(e.D); err == nil {
			out.D = new(DAGRecord)
			err = json.Unmarshal(b, out.D)
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkScaleMemory holds a million tasks in live DAGs on a leader and
// on a standby that applies the same log decoded from JSON, and reports the
// heap each core takes per task: with the DAGs just submitted (pending,
// no task record yet), and once every task has run (a record each; the
// DAGs stay, as until retention deletes them). Run it with
//
//	go test ./internal/core -run '^$' -bench ScaleMemory -benchtime 1x
func BenchmarkScaleMemory(b *testing.B) {
	for _, shape := range scaleShapes {
		b.Run(fmt.Sprintf("dags=%dx%d", shape.dags, shape.size), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				scaleMemory(b, shape.dags, shape.size)
			}
		})
	}
}

func scaleMemory(b *testing.B, dags, size int) {
	tasks := float64(dags * size)
	base := heapInUse()
	r := newScaleRun(false)
	standby := &roundTripStandby{c: New(Config{})}
	// Submitted: every DAG record applied, no task record yet. The
	// leader holds the specs it was given, as the API decoded them.
	for i := 0; i < dags; i++ {
		r.submit(b, scaleDAG(fmt.Sprintf("dag-%04d", i), size))
	}
	batch := r.c.TakeProposals(0)
	r.rev++
	for i := range batch {
		batch[i].Rev = r.rev
		standby.apply(b, &batch[i])
		if err := r.c.Apply(&batch[i]); err != nil {
			b.Fatal(err)
		}
	}
	batch = nil
	submitted := heapInUse() - base

	r.standby = nil
	for {
		r.c.Schedule(r.now)
		batch := r.c.TakeProposals(128)
		if len(batch) == 0 {
			break
		}
		r.c.Seal(batch)
		r.rev++
		for i := range batch {
			batch[i].Rev = r.rev
			standby.apply(b, &batch[i])
			if err := r.c.Apply(&batch[i]); err != nil {
				b.Fatal(err)
			}
		}
		for _, ef := range r.c.TakeEffects() {
			if ef.Kind == EffectDispatch {
				r.c.Report(model.Result{AttemptID: ef.Attempt.AttemptID, Worker: ef.Worker, Outcome: model.Succeeded,
					FinishedAt: r.now}, r.now)
			}
		}
	}
	ran := heapInUse() - base
	writeHeapProfile(b, "ran")
	for _, d := range r.c.dags {
		if d.rec.Status != DAGSucceeded {
			b.Fatalf("DAG %s ended %s", d.id, d.rec.Status)
		}
	}
	r.c = nil // the leader goes; the standby stays
	onlyStandby := heapInUse() - base
	writeHeapProfile(b, "standby")
	if n := len(standby.c.dags); n != dags {
		b.Fatalf("%d DAGs", n)
	}
	b.StopTimer()
	el, cpu := timeTakeover(b, standby.c, 0)
	b.ReportMetric(float64(el.Microseconds())/1000, "ms/takeover-finished")
	b.ReportMetric(float64(cpu.Microseconds())/1000, "cpu-ms/takeover-finished")
	b.ReportMetric(float64(submitted)/tasks/2, "B/task-submitted")
	b.ReportMetric(float64(onlyStandby)/tasks, "B/task-ran-standby")
	b.ReportMetric(float64(ran-onlyStandby)/tasks, "B/task-ran-leader")
	runtime.KeepAlive(standby)
}

type roundTripStandby struct{ c *Core }

func (s *roundTripStandby) apply(tb testing.TB, e *Entry) {
	se := roundTripped(tb, e)
	if err := s.c.Apply(&se); err != nil {
		tb.Fatal(err)
	}
}

// scaleShapes are the shapes of a million live tasks measured.
var scaleShapes = []struct{ dags, size int }{{1000, 1000}, {10, 100_000}, {100, 1000}}

// writeHeapProfile writes a heap profile of the state held now to
// $ORION_SCALE_HEAPPROFILE.<what>, when that is set: where the bytes go.
func writeHeapProfile(tb testing.TB, what string) {
	path := os.Getenv("ORION_SCALE_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path + "." + what)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkScaleTakeover times a standby's BecomeLeader and its first
// Schedule over a million live tasks: the work a takeover does in the core
// before its first dispatch. In state "ready" each DAG's root has
// succeeded, so all of its fan-out is ready and waits for a slot (the
// worst case: every ready task is queued); in "submitted" nothing has run
// yet. (BenchmarkScaleMemory times it over finished DAGs.) Run it with
//
//	go test ./internal/core -run '^$' -bench ScaleTakeover -benchtime 5x
func BenchmarkScaleTakeover(b *testing.B) {
	for _, shape := range scaleShapes[:2] {
		for _, rootDone := range []bool{true, false} {
			state := "submitted"
			if rootDone {
				state = "ready"
			}
			b.Run(fmt.Sprintf("dags=%dx%d/%s", shape.dags, shape.size, state), func(b *testing.B) {
				b.StopTimer()
				standby, log := readyStandby(b, shape.dags, shape.size, rootDone)
				want := 256
				if !rootDone && shape.dags < want {
					want = shape.dags
				}
				var total, cpu time.Duration
				for i := 0; i < b.N; i++ {
					if i > 0 {
						standby.StepDown()
					}
					el, c := timeTakeover(b, standby, want)
					total += el
					cpu += c
				}
				b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/takeover")
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/takeover")
				runtime.KeepAlive(log)
			})
		}
	}
}

// timeTakeover makes standby the leader, with one worker of 256 slots, and
// times BecomeLeader and the first Schedule, which must dispatch want
// tasks: the time elapsed, and the CPU time of the thread that ran them
// (on a machine shared with other work, the steadier figure).
func timeTakeover(b *testing.B, standby *Core, want int) (elapsed, cpu time.Duration) {
	b.Helper()
	standby.AddWorker("w1", 256, nil)
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.StartTimer()
	start, cpu0 := time.Now(), threadCPU()
	standby.BecomeLeader(now)
	n := standby.Schedule(now)
	elapsed, cpu = time.Since(start), threadCPU()-cpu0
	b.StopTimer()
	if n != want {
		b.Fatalf("first schedule dispatched %d, want %d", n, want)
	}
	standby.TakeProposals(0)
	standby.TakeEffects()
	return elapsed, cpu
}

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readyStandby returns a standby core holding dags DAGs of size tasks,
// whose roots have succeeded (rootDone), so that the rest of each fan-out
// is ready, or just submitted.
func readyStandby(tb testing.TB, dags, size int, rootDone bool) (*Core, []Entry) {
	standby := New(Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var rev int64
	var log []Entry
	for i := 0; i < dags; i++ {
		rev++
		spec := scaleDAG(fmt.Sprintf("dag-%04d", i), size)
		log = append(log, Entry{Rev: rev, DAG: spec.ID, D: &DAGRecord{DAG: *spec, Status: DAGRunning, Run: 1, SubmittedAt: now}})
		if !rootDone {
			continue
		}
		log = append(log,
			Entry{Rev: rev, DAG: spec.ID, Task: "root", T: &TaskRecord{Status: Running, Run: 1, Attempt: 1, Worker: "w1", Event: "dispatch", StartedAt: &now}},
			Entry{Rev: rev, DAG: spec.ID, Task: "root", T: &TaskRecord{Status: Succeeded, Run: 1, Attempt: 1, Worker: "w1", Event: "succeed", Outcome: "succeed", StartedAt: &now, FinishedAt: &now}})
	}
	for i := range log {
		if err := standby.Apply(&log[i]); err != nil {
			tb.Fatal(err)
		}
	}
	if _, tasks := standby.Live(); tasks != dags*size {
		tb.Fatalf("%d live tasks", tasks)
	}
	return standby, log
}
