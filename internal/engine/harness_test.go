package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// TestEngineScenarios runs the scenario files in testdata/: each drives one
// Engine — its real loop, goroutines and recovery code — over a fake store
// (in-memory log, watches, election) and a fake clock, and injects the
// failures a real etcd produces at chosen steps. Every command that starts
// something asynchronous is followed by a wait for an observable condition,
// never by a sleep. Regenerate expectations with
//
//	go test ./internal/engine -run TestEngineScenarios -rewrite
//
// and read the diff: each file is the spec of one recovery path.
//
// The language:
//
//	start [standby]             start the engine (standby: its campaign never
//	                            wins while another leader holds the election)
//	other-leader                another replica ("x") holds the election
//	other-leader-gone           it resigned: the election is free
//	external-submit id=d1       "x" commits a DAG (task ids, one per line)
//	worker id=w1 [slots=1] [labels=(pool=gpu,...)] [inflight=d1/a#1,...] [standalone]
//	                            a worker connects, reporting attempts it runs;
//	                            standalone: a worker process (it may get early
//	                            attempts), which confirms the leader's term
//	worker-silent w1            w1 joins no later leader (dead, or hung)
//	rejoin w1 [results-first]   a silent w1 joins the leader and sends its
//	                            unacknowledged results (results-first: the
//	                            loop takes them before the join)
//	term-record                 the term record in the store: who leads, and
//	                            the workers it lists
//	submit id=d1 [max-active=N] Submit (async): one task per line, "b deps=a",
//	                            "g pool=gpu retries=0" (max_retries; 1 by
//	                            default), "c rule=all_done cont" (a trigger
//	                            rule, continue_on_failure), "d when: <expr>" (a
//	                            condition: the rest of the line); "on_exit"
//	                            (a handler), "notify [on=(failed,...)]";
//	                            "c deps=b | echo {{ x }}" (a shell task: its
//	                            command after " | ")
//	cancel d1                   Cancel (async)
//	hooks w1                    the attempts of handlers and notifications
//	                            w1 was sent: the DAG's outcome in a handler's
//	                            environment, a notification's delivery key
//	claim w1 d1/a#1 ...         w1 now runs these attempts, as if a leader
//	                            before had sent them early: its next hello
//	                            lists them
//	result w1 d1/a#1 [outcome=failed]
//	                            w1 sends a result for an attempt, held or not
//	                            (and keeps it until acknowledged)
//	claims                      the metrics of refused claims (by reason)
//	                            and of stale and unheld results
//	hook fail-after-apply|fail|fenced|too-large|block
//	                            the next commit: applied and then an error;
//	                            not applied, with an error; rejected by the
//	                            fence (another leader took over); refused for
//	                            its size; or held until `release`
//	hook block-task-fence-success
//	                            the first commit with a task record is held
//	                            until release; the first with a success is
//	                            rejected by the fence
//	hook nospace|clear          every commit that puts anything is refused
//	                            for etcd's quota (deletes commit), until
//	                            `hook clear`
//	hook too-large-over=N       every commit holding a task record that
//	                            encodes to more than N bytes is refused for
//	                            its size, until `hook clear`
//	hook too-large-task=D/T [status=S]
//	                            every commit holding a record of task D/T
//	                            (with status S) is refused for its size,
//	                            whatever the record holds, until `hook clear`
//	release                     let a held commit go
//	lose-lease                  the engine's lease ends (expired or revoked)
//	space in-use=N quota=N      etcd's space as measured (bytes): the storage
//	                            admission (half the quota) applies from then on
//	compactions                 the revisions the leader compacted through
//	leases refused|granted      etcd refuses new sessions' leases (as under its
//	                            NOSPACE alarm), or grants them again
//	etcd down|up                quorum lost (every request waits for it or
//	                            its deadline) or back
//	loads hold|release          every read of the whole state (Load) waits
//	                            until released; the rest of etcd answers
//	leader-answers yes|no       whether a suspected leader answers when asked
//	suspect x [async]           the stream to leader x dropped (SuspectLeader);
//	                            waits until the depose attempt has ended
//	                            (async: does not wait)
//	depose [lose=N]             the next N requests to depose a leader are
//	                            never answered (forwarded to an etcd raft
//	                            leader that died); without lose=: how many
//	                            were lost, and whether one was answered
//	election                    who holds the election
//	campaigns                   every campaign that won, as name@fence
//	problem                     the problem the replica reports (readyz)
//	compact                     compact the store's history through its head
//	close-watch                 every watch channel closes without a word
//	advance 100ms               move the fake clock; due timers fire
//	advance-until-leader 200ms  advance step by step until the engine leads
//	finish w1 [outcome=failed] [tail-bytes=N] [error-bytes=N] [outputs=(k=v,...)]
//	                            w1 reports every attempt it runs (and keeps
//	                            each result until acknowledged; it sends them
//	                            again when it rejoins a new leader), with an
//	                            output tail or error of N bytes, and outputs
//	sent w1                     every attempt w1 was sent, in order, with a
//	                            shell task's command as rendered
//	task D/T                    the store's record of a task: its status,
//	                            attempt, error, and the sizes of its tail and
//	                            history
//	poison                      the poison entries counted, by outcome
//	load-count                  how many times the engine read etcd whole
//	wait leader|standby|answer NAME|dag D STATUS|task D/T STATUS|started W N|acked W N|early W|committing D|loads N|dags N|gone D|session-refused|elected|poison OUTCOME N
//	                            wait (bounded) until it holds (elected: the
//	                            loop took its campaign's win, and may still
//	                            wait for a re-read before it leads)
//	answers                     the answers of the async calls so far
//	state                       the engine's DAGs and tasks
//	dag d1                      one DAG's line of state
//	store                       the store's records
//	records                     the same, without the store's revision
//	stats                       loads, fenced writes, starts and cancels
//	workers                     each worker's starts, cancels and acks
//	commits first=N             the entries of the first N commit calls
func TestEngineScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			t.Skip()
		}
		h := &engineHarness{t: t, st: newFakeStore(), clk: newFakeClock(), ws: map[string]*fakeWorker{},
			answers: map[string]string{}, space: &fakeSpace{}}
		t.Cleanup(h.stop)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			h.t = t
			out := h.run(td)
			if out == "" {
				return "ok\n"
			}
			return out
		})
	})
}

type engineHarness struct {
	t       *testing.T
	st      *fakeStore
	clk     *fakeClock
	eng     *Engine
	cancel  context.CancelFunc
	workers chan WorkerEvent
	results chan model.Result
	release chan struct{}

	mu            sync.Mutex
	ws            map[string]*fakeWorker
	answers       map[string]string
	leaderAnswers bool // what the suspected leader says when asked
	calls         sync.WaitGroup
	maxOps        int // the engine's max_txn_ops (start max-ops=N; 0: the default)
	opsMu         sync.Mutex
	opsRefused    int    // transactions refused by hook members-max-ops
	opsLargest    int    // the most entries of one it accepted
	incarnation   string // the first term record's incarnation (term-record)
	space         *fakeSpace
}

// fakeSpace is etcd's space as a scenario sets it (`space`), and the
// compactions the leader asks for. Unset, the storage admission is off.
type fakeSpace struct {
	mu          sync.Mutex
	u           store.Usage
	compactions []int64
}

func (s *fakeSpace) Usage() store.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.u
}

func (s *fakeSpace) Compact(_ context.Context, rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactions = append(s.compactions, rev)
	return nil
}

const harnessWait = 10 * time.Second

// harnessLogLevel is the engine's log level in scenarios: errors only,
// unless ORION_HARNESS_LOG names another (debug, info, warn) to read a
// failing scenario's story.
func harnessLogLevel() zapcore.Level {
	l, err := zapcore.ParseLevel(os.Getenv("ORION_HARNESS_LOG"))
	if err != nil || os.Getenv("ORION_HARNESS_LOG") == "" {
		return zapcore.ErrorLevel
	}
	return l
}

func (h *engineHarness) stop() {
	if h.cancel != nil {
		if h.release != nil {
			close(h.release)
			h.release = nil
		}
		h.cancel()
		<-h.eng.Done()
		h.calls.Wait()
	}
}

func (h *engineHarness) run(td *datadriven.TestData) string {
	arg := func(key, def string) string {
		for _, a := range td.CmdArgs {
			if a.Key == key && len(a.Vals) > 0 {
				return a.Vals[0]
			}
		}
		return def
	}
	has := func(key string) bool { return td.HasArg(key) }
	switch td.Cmd {
	case "start":
		if has("standby") {
			h.st.loser["n1"] = true
		}
		h.maxOps, _ = strconv.Atoi(arg("max-ops", "0"))
		h.start()
		if has("standby") {
			h.waitFor("loaded", func() bool { return h.eng.Status().Loaded })
			return ""
		}
		// Leading, and the term's first write (its term record) committed:
		// a hook set next applies to the commands that follow, not to it.
		h.waitFor("leader", func() bool { st := h.eng.Status(); return st.Leader && !st.FirstCommitAt.IsZero() })
	case "other-leader":
		h.st.mu.Lock()
		h.st.rev++
		h.st.fenceRev, h.st.leader = h.st.rev, "x"
		h.st.mu.Unlock()
	case "other-leader-gone":
		delete(h.st.loser, "n1")
		h.st.mu.Lock()
		h.st.fenceRev, h.st.leader = 0, ""
		h.st.mu.Unlock()
	case "external-submit":
		d := h.spec(arg("id", ""), td.Input)
		h.st.mu.Lock()
		fence := store.Fence{Rev: h.st.fenceRev}
		h.st.mu.Unlock()
		en := core.Entry{DAG: d.ID, D: &core.DAGRecord{DAG: *d, Status: core.DAGRunning, Run: 1, SubmittedAt: h.clk.Now()}}
		if _, err := h.st.Begin(fence, []core.Entry{en}, store.DefaultLimits, nil).Commit(context.Background()); err != nil {
			h.t.Fatalf("external commit: %v", err)
		}
	case "worker":
		slots, _ := strconv.Atoi(arg("slots", "1"))
		w := &fakeWorker{id: arg("id", "w1"), slots: slots, standalone: has("standalone")}
		for _, a := range td.CmdArgs {
			if a.Key == "inflight" {
				for _, v := range a.Vals {
					w.running = append(w.running, parseAttempt(h.t, v))
				}
			}
			if a.Key == "labels" {
				l, err := model.ParseLabels(strings.Join(a.Vals, ","))
				if err != nil {
					h.t.Fatal(err)
				}
				w.labels = l
			}
		}
		h.mu.Lock()
		h.ws[w.id] = w
		h.mu.Unlock()
		h.join(w, w.runningIDs())
		h.barrier()
	case "rejoin":
		// A silent worker comes back: its hello and its results. With
		// results-first the loop takes the results before the hello, as
		// when the hub's relay of events lags behind its results.
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		w.silent = false
		h.mu.Unlock()
		if has("results-first") {
			inflight, results := w.hello()
			for _, r := range results {
				h.results <- r
			}
			h.barrier()
			h.join(w, inflight)
		} else {
			h.rejoin(w)
		}
		h.barrier()
	case "worker-silent":
		h.mu.Lock()
		h.ws[td.CmdArgs[0].Key].silent = true
		h.mu.Unlock()
	case "term-record":
		h.barrier()
		h.st.mu.Lock()
		defer h.st.mu.Unlock()
		if h.st.term == nil {
			return "none\n"
		}
		// The incarnation is random: say whether it is the first one seen.
		inc := "first"
		if h.incarnation == "" {
			h.incarnation = h.st.term.Incarnation
		}
		if h.st.term.Incarnation != h.incarnation || h.incarnation == "" {
			inc = "other"
		}
		return fmt.Sprintf("leader=%s workers=[%s] incarnation=%s\n", h.st.term.Name, strings.Join(h.st.term.Workers, " "), inc)
	case "submit":
		d := h.spec(arg("id", ""), td.Input)
		d.MaxActiveTasks, _ = strconv.Atoi(arg("max-active", "0"))
		name := "submit " + d.ID
		h.async(name, func(ctx context.Context) string {
			res, err := h.eng.Submit(ctx, d)
			if err != nil {
				return "error: " + err.Error()
			}
			return fmt.Sprintf("created=%v", res.Created)
		})
		// Proposed: answered, in a commit call, or queued behind one.
		h.waitFor(name+" to be proposed", func() bool {
			if h.answered(name) || h.st.sawCommitOf(d.ID) {
				return true
			}
			queued := false
			_ = h.eng.query(context.Background(), func(*core.Core) {
				for _, en := range h.eng.pending {
					queued = queued || (en.DAG == d.ID && en.D != nil)
				}
			})
			return queued
		})
	case "hook":
		if td.CmdArgs[0].Key == "too-large-over" || td.CmdArgs[0].Key == "too-large-task" {
			h.sizeHook(td)
			break
		}
		h.hook(td.CmdArgs[0].Key)
	case "release":
		if h.release != nil {
			close(h.release)
			h.release = nil
		}
	case "lose-lease":
		// lose-lease linger: the client gives the lease up, etcd keeps it.
		if len(td.CmdArgs) > 0 && td.CmdArgs[0].Key == "linger" {
			h.st.loseLeaseLinger()
		} else {
			h.st.loseLease()
		}
	case "space":
		// etcd's space as measured: in-use and quota in bytes.
		inUse, _ := strconv.ParseInt(arg("in-use", "0"), 10, 64)
		quota, _ := strconv.ParseInt(arg("quota", "0"), 10, 64)
		h.space.mu.Lock()
		h.space.u = store.Usage{Known: true, Quota: quota, Size: inUse, InUse: inUse}
		h.space.mu.Unlock()
	case "compactions":
		// The revisions the leader compacted etcd's history through, once
		// the compaction asked for, if any, has ended.
		h.waitFor("no compaction under way", func() bool {
			busy := true
			_ = h.query(func(*core.Core) { busy = h.eng.press.compacting })
			return !busy
		})
		h.space.mu.Lock()
		defer h.space.mu.Unlock()
		return fmt.Sprintf("%v\n", h.space.compactions)
	case "leases":
		h.st.mu.Lock()
		h.st.leaseErr = nil
		if td.CmdArgs[0].Key == "refused" {
			h.st.leaseErr = fmt.Errorf("leadership: session: %w", store.ErrNoSpace)
		}
		h.st.mu.Unlock()
	case "etcd":
		// down: quorum lost (requests wait); up: it is back.
		h.st.setUp(td.CmdArgs[0].Key == "up")
	case "loads":
		h.st.holdLoads(td.CmdArgs[0].Key == "hold")
	case "leader-answers":
		h.mu.Lock()
		h.leaderAnswers = td.CmdArgs[0].Key == "yes"
		h.mu.Unlock()
	case "depose":
		// depose lose=N: the next N requests to depose a leader are never
		// answered; depose: how many requests were sent so far.
		if len(td.CmdArgs) == 0 {
			h.st.mu.Lock()
			defer h.st.mu.Unlock()
			return fmt.Sprintf("%d lost, answered: %v\n", h.st.lostDeposes, h.st.deposes > 0)
		}
		n, err := strconv.Atoi(arg("lose", "0"))
		if err != nil {
			h.t.Fatal(err)
		}
		h.st.mu.Lock()
		h.st.loseDeposes = n
		h.st.mu.Unlock()
	case "suspect":
		// What the replica's worker agent reports when its stream to the
		// leader drops; done once the depose attempt has ended (async: at
		// once, for a depose that waits for the clock).
		h.eng.SuspectLeader(td.CmdArgs[0].Key)
		h.barrier()
		if len(td.CmdArgs) > 1 && td.CmdArgs[1].Key == "async" {
			break
		}
		h.waitFor("the depose attempt to end", func() bool {
			deposing := true
			_ = h.eng.query(context.Background(), func(*core.Core) { deposing = h.eng.deposing })
			return !deposing
		})
	case "problem":
		// What /readyz and the cluster endpoint report, once the loop has
		// published it.
		h.barrier()
		_ = h.query(func(*core.Core) { h.eng.publishStatus() })
		if p := h.eng.Status().Problem; p != "" {
			return p + "\n"
		}
		return "none\n"
	case "election":
		h.st.mu.Lock()
		defer h.st.mu.Unlock()
		if h.st.leader == "" {
			return "nobody leads\n"
		}
		return "leader=" + h.st.leader + "\n"
	case "campaigns":
		h.barrier()
		h.st.mu.Lock()
		defer h.st.mu.Unlock()
		return "won: " + strings.Join(h.st.wins, " ") + "\n"
	case "compact":
		h.st.mu.Lock()
		head := h.st.rev
		h.st.mu.Unlock()
		h.st.compactTo(head)
	case "close-watch":
		h.st.closeWatches()
		// The standby has seen it once it armed its restart (on the fake
		// clock, so `advance` decides when it fires).
		h.waitFor("the watch restart to be armed", func() bool {
			armed := false
			_ = h.eng.query(context.Background(), func(*core.Core) { armed = h.eng.watchRetry != nil })
			return armed
		})
	case "advance-until-leader":
		// Retries in the background arm their timers on the fake clock at
		// a moment the scenario cannot see: advance step by step until
		// the engine leads (bounded), whichever step it takes.
		d, err := time.ParseDuration(td.CmdArgs[0].Key)
		if err != nil {
			h.t.Fatal(err)
		}
		for i := 0; ; i++ {
			if i == 100 {
				h.t.Fatalf("not leading after advancing %s 100 times", d)
			}
			h.clk.Advance(d)
			leads := func() bool { st := h.eng.Status(); return st.Leader && !st.FirstCommitAt.IsZero() }
			deadline := time.Now().Add(50 * time.Millisecond)
			for time.Now().Before(deadline) && !leads() {
				time.Sleep(2 * time.Millisecond)
			}
			if leads() {
				break
			}
		}
		h.barrier()
	case "advance":
		d, err := time.ParseDuration(td.CmdArgs[0].Key)
		if err != nil {
			h.t.Fatal(err)
		}
		h.clk.Advance(d)
	case "finish":
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		h.mu.Unlock()
		outcome := model.Outcome(arg("outcome", string(model.Succeeded)))
		tail, _ := strconv.Atoi(arg("tail-bytes", "0"))
		errBytes, _ := strconv.Atoi(arg("error-bytes", "0"))
		var outputs model.Outputs
		if td.HasArg("outputs") {
			var pairs []string
			td.ScanArgs(h.t, "outputs", &pairs)
			outputs = model.Outputs{}
			for _, p := range pairs {
				k, v, _ := strings.Cut(p, "=")
				outputs[k] = model.ParamValue(nil, v)
			}
		}
		var rs []model.Result
		for _, a := range w.takeRunning() {
			r := model.Result{AttemptID: a, Worker: w.id, Outcome: outcome, ExitCode: 0, StartedAt: h.clk.Now(), FinishedAt: h.clk.Now(),
				OutputTail: strings.Repeat("o", tail), Error: strings.Repeat("e", errBytes), Outputs: outputs}
			if outcome != model.Succeeded {
				r.ExitCode = 1
			}
			rs = append(rs, r)
		}
		w.finished(rs)
		for _, r := range rs {
			h.results <- r
		}
		h.barrier()
	case "cancel":
		id := td.CmdArgs[0].Key
		h.async("cancel "+id, func(ctx context.Context) string {
			st, err := h.eng.Cancel(ctx, id)
			if err != nil {
				return "error: " + err.Error()
			}
			return string(st)
		})
		h.barrier()
	case "hooks":
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		h.mu.Unlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		return strings.Join(w.hooks, "")
	case "claim":
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		h.mu.Unlock()
		w.mu.Lock()
		for _, a := range td.CmdArgs[1:] {
			w.running = append(w.running, parseAttempt(h.t, a.Key))
		}
		w.mu.Unlock()
	case "result":
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		h.mu.Unlock()
		r := model.Result{AttemptID: parseAttempt(h.t, td.CmdArgs[1].Key), Worker: w.id,
			Outcome: model.Outcome(arg("outcome", string(model.Succeeded))), StartedAt: h.clk.Now(), FinishedAt: h.clk.Now()}
		w.finished([]model.Result{r})
		h.results <- r
		h.barrier()
	case "claims":
		h.barrier()
		var b strings.Builder
		b.WriteString("refused claims:")
		for _, v := range core.Refusals() {
			if n := testutil.ToFloat64(h.eng.m.RefusedClaims.WithLabelValues(v.String())); n > 0 {
				fmt.Fprintf(&b, " %s=%.0f", v, n)
			}
		}
		fmt.Fprintf(&b, "\nstale results=%.0f unheld results=%.0f\n", testutil.ToFloat64(h.eng.m.StaleResults),
			testutil.ToFloat64(h.eng.m.UnheldResults))
		return b.String()
	case "wait":
		h.wait(td)
	case "retire":
		if err := h.eng.Retire(context.Background()); err != nil {
			return "error: " + err.Error()
		}
	case "ops-refusals":
		h.opsMu.Lock()
		defer h.opsMu.Unlock()
		return fmt.Sprintf("refused=%d largest_accepted=%d", h.opsRefused, h.opsLargest)
	case "answers":
		h.calls.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		var keys []string
		for k := range h.answers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s: %s\n", k, h.answers[k])
		}
		h.answers = map[string]string{}
		return b.String()
	case "task":
		h.st.mu.Lock()
		defer h.st.mu.Unlock()
		e, ok := h.st.tasks[td.CmdArgs[0].Key]
		if !ok {
			return "no record\n"
		}
		r := e.T
		line := fmt.Sprintf("%s attempt=%d event=%s error=%q tail=%d history=%d history_omitted=%d",
			r.Status, r.Attempt, r.Event, r.Error, len(r.OutputTail), len(r.History), r.HistoryOmitted)
		if len(r.Outputs) > 0 {
			o, _ := model.OutputValue(r.Outputs)
			line += " outputs=" + string(o)
		}
		return line + "\n"
	case "sent":
		h.barrier()
		h.mu.Lock()
		w := h.ws[td.CmdArgs[0].Key]
		h.mu.Unlock()
		w.mu.Lock()
		defer w.mu.Unlock()
		var b strings.Builder
		for _, a := range w.sent {
			fmt.Fprintf(&b, "%s", a.AttemptID)
			if a.Spec.Kind == model.KindShell {
				fmt.Fprintf(&b, " command=%q", a.Spec.Command)
			}
			b.WriteByte('\n')
		}
		return b.String()
	case "poison":
		h.barrier()
		var b strings.Builder
		for _, o := range []core.PoisonOutcome{core.PoisonShrunk, core.PoisonFailed, core.PoisonParked} {
			fmt.Fprintf(&b, "%s=%.0f ", o, testutil.ToFloat64(h.eng.m.PoisonEntries.WithLabelValues(o.String())))
		}
		return strings.TrimSpace(b.String()) + "\n"
	case "state":
		return h.state()
	case "dag":
		// One DAG's line of state.
		for _, line := range strings.Split(h.state(), "\n") {
			if strings.HasPrefix(line, "dag "+td.CmdArgs[0].Key+" ") {
				return line + "\n"
			}
		}
		return "no DAG " + td.CmdArgs[0].Key + "\n"
	case "store":
		return h.storeState()
	case "records":
		// The store's records without its revision, which batching
		// decides.
		s := h.storeState()
		return s[strings.IndexByte(s, '\n')+1:]
	case "stats":
		return h.stats()
	case "workers":
		h.barrier()
		return h.workerStats()
	case "load-count":
		// How often the engine read etcd whole: what a scenario claims
		// about resyncs, without the batching that timing decides.
		h.barrier()
		return fmt.Sprintf("loads=%d\n", h.st.loadCount())
	case "commits":
		// The first N commit calls' entry counts: what a scenario claims
		// about batching, without the later batches that timing decides.
		n, _ := strconv.Atoi(arg("first", "0"))
		h.barrier()
		h.st.mu.Lock()
		defer h.st.mu.Unlock()
		return fmt.Sprintf("commit calls (entries each), the first %d: %v\n", n, h.st.batches[:min(n, len(h.st.batches))])
	default:
		h.t.Fatalf("unknown command %q", td.Cmd)
	}
	return ""
}

func (h *engineHarness) start() {
	h.workers = make(chan WorkerEvent, 64)
	h.results = make(chan model.Result, 1024)
	cfg := Config{
		CommitPipeline: 2, // the scenarios cover two transactions in flight
		Limits:         store.Limits{MaxOps: h.maxOps},
		Node:           "n1",
		Clock:          h.clk,
		Core:           core.Config{RetryBase: 50 * time.Millisecond, RetryCap: 400 * time.Millisecond, OrphanGrace: 2 * time.Second},
		Logger:         zaptest.NewLogger(h.t, zaptest.Level(harnessLogLevel())),
		Workers:        h.workers,
		Results:        h.results,
		LeaderAnswers: func(context.Context, string) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.leaderAnswers
		},
		// A worker reconnects to a new leader, reports what it runs and
		// sends the results it has not had acknowledged, as the hub lets
		// it once this replica leads.
		OnLeading: func(leading bool, _ Leading) {
			if !leading {
				return
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, id := range sortedWorkerIDs(h.ws) {
				w := h.ws[id]
				if w.silent {
					continue
				}
				h.rejoin(w)
			}
		},
	}
	// The storage admission at half the quota, the default: in effect
	// once a scenario sets the space.
	cfg.Storage, cfg.StorageAdmission = h.space, 0.5
	h.eng = New(cfg, h.st)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { _ = h.eng.Run(ctx) }()
}

// rejoin sends what a worker sends a leader it reaches: its hello (and
// confirmation), then the results it has not had acknowledged.
func (h *engineHarness) rejoin(w *fakeWorker) {
	inflight, results := w.hello()
	h.join(w, inflight)
	for _, r := range results {
		h.results <- r
	}
}

// join sends a worker's hello and, for a standalone worker, its
// confirmation of the term (joined), as the hub reports them.
func (h *engineHarness) join(w *fakeWorker, inflight []model.AttemptID) {
	h.workers <- WorkerEvent{Kind: WorkerJoined, ID: w.id, Exec: w, InFlight: inflight, Standalone: w.standalone}
	if w.standalone {
		h.workers <- WorkerEvent{Kind: WorkerConfirmed, ID: w.id, Exec: w, Standalone: true}
	}
}

func sortedWorkerIDs(ws map[string]*fakeWorker) []string {
	ids := make([]string, 0, len(ws))
	for id := range ws {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// barrier lets the loop take what was sent to it: select picks among ready
// channels at random, so one query is no proof that earlier events were
// handled; three, with the worker and result channels empty, make it likely.
// Scenario steps that depend on an effect wait for it as a condition
// (`wait ...`), never on the barrier alone.
// query runs fn on the loop, failing when the loop does not take it within
// harnessWait: the loop must never block, whatever etcd does.
func (h *engineHarness) query(fn func(*core.Core)) error {
	ctx, cancel := context.WithTimeout(context.Background(), harnessWait)
	defer cancel()
	if err := h.eng.query(ctx, fn); err != nil {
		return fmt.Errorf("the loop did not answer a read within %s (blocked?): %w", harnessWait, err)
	}
	return nil
}

func (h *engineHarness) barrier() {
	for i := 0; i < 3; i++ {
		if err := h.query(func(*core.Core) {}); err != nil {
			h.t.Fatal(err)
		}
		for len(h.workers) > 0 || len(h.results) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

func (h *engineHarness) async(name string, fn func(ctx context.Context) string) {
	h.calls.Add(1)
	go func() {
		defer h.calls.Done()
		ctx, cancel := context.WithTimeout(context.Background(), harnessWait)
		defer cancel()
		out := fn(ctx)
		h.mu.Lock()
		h.answers[name] = out
		h.mu.Unlock()
	}()
	// Let the call reach the loop before the next command.
	h.barrier()
}

func (h *engineHarness) answered(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.answers[name]
	return ok
}

func (h *engineHarness) hook(kind string) {
	once := func(fn func([]core.Entry) (bool, error)) {
		var used sync.Once
		h.st.setCommitHook(func(entries []core.Entry) (apply bool, err error) {
			apply = true
			used.Do(func() { apply, err = fn(entries) })
			return apply, err
		})
	}
	switch kind {
	case "fail-after-apply":
		once(func([]core.Entry) (bool, error) { return true, context.DeadlineExceeded })
	case "fail":
		once(func([]core.Entry) (bool, error) { return false, errors.New("etcdserver: request timed out") })
	case "too-large":
		once(func([]core.Entry) (bool, error) { return false, errTooLarge })
	case "too-large-batch":
		// The first transaction of two entries or more is refused.
		var used sync.Once
		h.st.setCommitHook(func(entries []core.Entry) (apply bool, err error) {
			apply = true
			if len(entries) >= 2 {
				used.Do(func() { apply, err = false, errTooLarge })
			}
			return apply, err
		})
	case "members-max-ops":
		// The members' --max-txn-ops is 4, below the engine's: a
		// transaction of more than 3 entries (and its marker) is refused
		// whole, from now on.
		h.st.setCommitHook(func(entries []core.Entry) (bool, error) {
			h.opsMu.Lock()
			defer h.opsMu.Unlock()
			if len(entries) > 3 {
				h.opsRefused++
				return false, store.ErrTooManyOps
			}
			h.opsLargest = max(h.opsLargest, len(entries))
			return true, nil
		})
	case "fenced":
		// Another replica won meanwhile: the fence moved.
		once(func([]core.Entry) (bool, error) {
			h.st.otherLeaderWins()
			return true, nil
		})
	case "nospace":
		// etcd at its quota, until `hook clear`: a transaction that puts
		// anything is refused whole, as the store reports it; deletes
		// commit.
		h.st.setCommitHook(func(entries []core.Entry) (bool, error) {
			for _, en := range entries {
				if !en.Delete {
					return false, &store.NoSpaceError{Quota: 64 << 20, DBSize: 64 << 20}
				}
			}
			return true, nil
		})
	case "block-task-fence-success":
		// The first commit with a task record is held until release; the
		// first commit with a succeeded task record finds the fence moved
		// (another leader won meanwhile).
		release := make(chan struct{})
		h.release = release
		var blocked, fenced sync.Once
		h.st.setCommitHook(func(entries []core.Entry) (bool, error) {
			task, succ := false, false
			for _, en := range entries {
				if en.T != nil {
					task = true
					succ = succ || en.T.Status == core.Succeeded
				}
			}
			if succ {
				fenced.Do(h.st.otherLeaderWins)
				return true, nil
			}
			if task {
				blocked.Do(func() { <-release })
			}
			return true, nil
		})
	case "clear":
		h.st.setCommitHook(nil)
	case "block":
		release := make(chan struct{})
		h.release = release
		once(func([]core.Entry) (bool, error) { <-release; return true, nil })
	case "block-fail":
		// Held until release, then not applied, its outcome unknown.
		release := make(chan struct{})
		h.release = release
		once(func([]core.Entry) (bool, error) { <-release; return false, errors.New("etcdserver: request timed out") })
	case "block-nospace":
		// Held until release, then refused for a full etcd.
		release := make(chan struct{})
		h.release = release
		once(func([]core.Entry) (bool, error) {
			<-release
			return false, &store.NoSpaceError{Cause: errors.New("etcdserver: mvcc: database space exceeded")}
		})
	default:
		h.t.Fatalf("unknown hook %q", kind)
	}
}

// sizeHook refuses, until `hook clear`, every commit that holds a task
// record over a size, or any record of one task: etcd refusing a record
// as too large, again and again, however often it is sent.
func (h *engineHarness) sizeHook(td *datadriven.TestData) {
	a := td.CmdArgs[0]
	if len(a.Vals) != 1 {
		h.t.Fatalf("hook %s needs a value", a.Key)
	}
	var status string
	for _, x := range td.CmdArgs[1:] {
		if x.Key == "status" && len(x.Vals) == 1 {
			status = x.Vals[0]
		}
	}
	over, _ := strconv.Atoi(a.Vals[0])
	refuse := func(en core.Entry) bool {
		if en.T == nil {
			return false
		}
		if a.Key == "too-large-task" {
			return en.DAG+"/"+en.Task == a.Vals[0] && (status == "" || en.T.Status.String() == status)
		}
		_, n, err := store.Ops(&en)
		return err == nil && n > over
	}
	h.st.setCommitHook(func(entries []core.Entry) (bool, error) {
		for _, en := range entries {
			if refuse(en) {
				return false, errTooLarge
			}
		}
		return true, nil
	})
}

func (h *engineHarness) wait(td *datadriven.TestData) {
	args := make([]string, 0, len(td.CmdArgs))
	for _, a := range td.CmdArgs {
		args = append(args, a.String())
	}
	what := strings.Join(args, " ")
	switch args[0] {
	case "leader":
		// Leading, with the term's first write committed.
		h.waitFor(what, func() bool { st := h.eng.Status(); return st.Leader && !st.FirstCommitAt.IsZero() })
	case "standby":
		h.waitFor(what, func() bool { return !h.eng.Status().Leader })
	case "answer":
		name := strings.Join(args[1:], " ")
		h.waitFor(what, func() bool { return h.answered(name) })
	case "dag":
		h.waitFor(what, func() bool {
			var st core.DAGStatus
			_ = h.eng.query(context.Background(), func(c *core.Core) {
				if v, ok := c.DAG(args[1]); ok {
					st = v.Status
				}
			})
			return string(st) == args[2]
		})
	case "task":
		// wait task d1/a running: the task's committed status.
		dagID, taskID, _ := strings.Cut(args[1], "/")
		h.waitFor(what, func() bool {
			var st core.Status
			_ = h.eng.query(context.Background(), func(c *core.Core) {
				if v, ok := c.DAG(dagID); ok {
					for _, t := range v.Tasks {
						if t.ID == taskID {
							st = t.Status
						}
					}
				}
			})
			return st.String() == args[2]
		})
	case "started":
		n, _ := strconv.Atoi(args[2])
		h.waitFor(what, func() bool {
			h.mu.Lock()
			w := h.ws[args[1]]
			h.mu.Unlock()
			return w.startedCount() >= n
		})
	case "acked":
		n, _ := strconv.Atoi(args[2])
		h.waitFor(what, func() bool {
			h.mu.Lock()
			w := h.ws[args[1]]
			h.mu.Unlock()
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.acks >= n
		})
	case "inflight", "pending":
		// At least N transactions in flight, or N proposals waiting for a
		// transaction (the submissions before it reached the loop).
		n, _ := strconv.Atoi(args[1])
		h.waitFor(what, func() bool {
			got := 0
			_ = h.eng.query(context.Background(), func(*core.Core) {
				if args[0] == "inflight" {
					got = len(h.eng.inflight)
				} else {
					got = len(h.eng.pending)
				}
			})
			return got >= n
		})
	case "early":
		// The worker gets attempts before their dispatch commits: a term
		// record listing it has committed.
		h.waitFor(what, func() bool {
			early := false
			_ = h.eng.query(context.Background(), func(c *core.Core) { early = c.EarlyAllowed(args[1]) })
			return early
		})
	case "committing":
		// A commit call with an entry of DAG D has taken the store's hook
		// (a hook set next applies to the commits after it).
		h.waitFor(what, func() bool { return h.st.hookedCommitOf(args[1]) })
	case "loads":
		n, _ := strconv.Atoi(args[1])
		h.waitFor(what, func() bool { return h.st.loadCount() >= n })
	case "elected":
		// The store's election is n1's, and the loop took the result: no
		// campaign runs (the loop clears campaignStop when it takes a
		// win) and none waits in the channel.
		h.waitFor(what, func() bool {
			h.st.mu.Lock()
			won := h.st.leader == "n1"
			h.st.mu.Unlock()
			if !won {
				return false
			}
			taken := false
			_ = h.eng.query(context.Background(), func(*core.Core) {
				taken = h.eng.session != nil && h.eng.campaignStop == nil && len(h.eng.elected) == 0
			})
			return taken
		})
	case "session-refused":
		// An attempt to open a session failed.
		h.waitFor(what, func() bool { return h.eng.sessionErr.Load() != nil })
	case "gone":
		h.waitFor(what, func() bool {
			known := true
			_ = h.eng.query(context.Background(), func(c *core.Core) { _, known = c.Summary(args[1]) })
			return !known
		})
	case "poison":
		// wait poison OUTCOME N: at least N poison entries ended so.
		n, _ := strconv.Atoi(args[2])
		h.waitFor(what, func() bool {
			return testutil.ToFloat64(h.eng.m.PoisonEntries.WithLabelValues(args[1])) >= float64(n)
		})
	case "dags":
		n, _ := strconv.Atoi(args[1])
		h.waitFor(what, func() bool {
			count := 0
			_ = h.eng.query(context.Background(), func(c *core.Core) { count = c.DAGCount() })
			return count >= n
		})
	default:
		h.t.Fatalf("unknown wait %q", what)
	}
	h.barrier()
}

func (h *engineHarness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	testkit.WaitFor(h.t, harnessWait, what, cond)
}

// spec builds a DAG from task lines: "a", "b deps=a".
func (h *engineHarness) spec(id, input string) *model.DAG {
	d := &model.DAG{ID: id, Name: id}
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		line, command, shell := strings.Cut(line, " | ")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		line, when, _ := strings.Cut(line, " when: ")
		f = strings.Fields(line)
		if f[0] == "notify" {
			n := model.Notification{URL: "http://hook.test/", MaxRetries: 1}
			for _, kv := range f[1:] {
				if v, ok := strings.CutPrefix(kv, "on=("); ok {
					n.On = strings.Split(strings.TrimSuffix(v, ")"), ",")
				}
			}
			d.Notify = append(d.Notify, n)
			continue
		}
		t := model.Task{ID: f[0], Kind: model.KindNoop, MaxRetries: 1, When: when}
		if shell {
			t.Kind, t.Command = model.KindShell, command
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "deps="); ok {
				t.DependsOn = strings.Split(v, ",")
			}
			if v, ok := strings.CutPrefix(kv, "pool="); ok {
				t.Pool = v
			}
			if v, ok := strings.CutPrefix(kv, "rule="); ok {
				t.TriggerRule = model.TriggerRule(v)
			}
			if kv == "cont" {
				t.ContinueOnFailure = true
			}
			if v, ok := strings.CutPrefix(kv, "retries="); ok {
				t.MaxRetries, _ = strconv.Atoi(v)
			}
		}
		switch t.ID {
		case model.OnSuccessID:
			d.OnSuccess = &t
		case model.OnFailureID:
			d.OnFailure = &t
		case model.OnExitID:
			d.OnExit = &t
		default:
			d.Tasks = append(d.Tasks, t)
		}
	}
	d.Normalize()
	if err := dag.Validate(d, dag.Limits{}); err != nil {
		h.t.Fatal(err)
	}
	return d
}

func (h *engineHarness) state() string {
	var out string
	if err := h.query(func(c *core.Core) {
		var b strings.Builder
		fmt.Fprintf(&b, "leader=%v rev=%d\n", c.IsLeader(), c.Rev())
		for _, s := range c.DAGs(core.DAGQuery{}) {
			v, _ := c.DAG(s.ID)
			fmt.Fprintf(&b, "dag %s %s:", v.ID, v.Status)
			for _, t := range v.Tasks {
				fmt.Fprintf(&b, " %s=%s", t.ID, t.Status)
				if t.Attempts > 0 {
					fmt.Fprintf(&b, "#%d", t.Attempts)
				}
				if t.Waiting != "" {
					fmt.Fprintf(&b, "(%s)", t.Waiting)
				}
			}
			b.WriteByte('\n')
		}
		out = b.String()
	}); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *engineHarness) storeState() string {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	var lines []string
	for _, e := range h.st.dags {
		lines = append(lines, fmt.Sprintf("dag %s %s run=%d", e.DAG, e.D.Status, e.D.Run))
	}
	for _, e := range h.st.tasks {
		lines = append(lines, fmt.Sprintf("task %s/%s %s attempt=%d worker=%s", e.DAG, e.Task, e.T.Status, e.T.Attempt, e.T.Worker))
	}
	sort.Strings(lines)
	return fmt.Sprintf("rev=%d\n", h.st.rev) + strings.Join(lines, "\n") + "\n"
}

func (h *engineHarness) stats() string {
	var b strings.Builder
	h.st.mu.Lock()
	fmt.Fprintf(&b, "commit calls (entries each): %v\n", h.st.batches)
	h.st.mu.Unlock()
	txns, entries := h.eng.CommitStats()
	fmt.Fprintf(&b, "loads=%d fenced_writes=%.0f leader=%v commits=%d entries=%d\n", h.st.loadCount(),
		testutil.ToFloat64(h.eng.m.FencedWrites), h.eng.Status().Leader, txns, entries)
	b.WriteString(h.workerStats())
	return b.String()
}

// workerStats is what each worker started, was told to cancel, and has
// had acknowledged.
func (h *engineHarness) workerStats() string {
	h.mu.Lock()
	names := sortedWorkerIDs(h.ws)
	h.mu.Unlock()
	var b strings.Builder
	for _, n := range names {
		h.mu.Lock()
		w := h.ws[n]
		h.mu.Unlock()
		w.mu.Lock()
		var cancels []string
		for _, c := range w.cancels {
			cancels = append(cancels, c.String())
		}
		fmt.Fprintf(&b, "%s: started=%d cancelled=[%s] acked=%d unacked=%d\n", n, w.totalStarted, strings.Join(cancels, " "), w.acks, len(w.unacked))
		w.mu.Unlock()
	}
	return b.String()
}

func parseAttempt(t *testing.T, s string) model.AttemptID {
	slash, hash := strings.IndexByte(s, '/'), strings.IndexByte(s, '#')
	if slash < 0 || hash < slash {
		t.Fatalf("attempt %q: want dag/task#n", s)
	}
	n, err := strconv.Atoi(s[hash+1:])
	if err != nil {
		t.Fatal(err)
	}
	return model.AttemptID{DAG: s[:slash], Task: s[slash+1 : hash], Attempt: n}
}
