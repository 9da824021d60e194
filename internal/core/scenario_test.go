package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
)

// TestScenarios runs the scenario files in testdata/: each is a readable
// spec of one part of the core's behaviour, driven through a leader core, a
// simulated log and a manual clock. Regenerate the expectations with
//
//	go test ./internal/core/ -run TestScenarios -rewrite
//
// and then read the diff: a scenario is a spec, not a snapshot.
//
// The language (arguments in [brackets] are optional):
//
//	config [retry-base=1s] [retry-cap=30s] [orphan-grace=2s] [pool-limits=(gpu=2,...)] [max-output-bytes=N]
//	       [max-live-dags=N] [max-live-tasks=N]
//	    start over with an empty core using this policy (first command only)
//	worker id=w1 [slots=1] [labels=(pool=gpu,...)] [early] [before]
//	                                register (or resize, or relabel) a live worker;
//	                                early: its attempts go out with their
//	                                dispatch proposal (AllowEarly); before: the
//	                                term before admitted it to early attempts,
//	                                so it may claim some (AdmittedBefore)
//	remove-worker w1                the worker is gone
//	become-leader                   the core takes over as leader
//	restart                         the leader dies: its uncommitted proposals
//	                                and timers are lost; a new core (not yet
//	                                leader, no workers) is built by applying
//	                                the committed log
//	submit id=d1 [max-active=N] [params=(region=eu,n=3,...)]
//	                                propose a DAG; one task per input line:
//	    a                             id
//	    b deps=a,c prio=1 retries=2   dependencies, priority, max_retries
//	    c pool=gpu sel=(zone=a,...)   required labels
//	    d rule=one_failed cont        trigger rule, continue_on_failure
//	    e deps=a when: <expression>   a condition: the rest of the line
//	    on_exit [retries=N] [when: ...]  a handler (on_success, on_failure, on_exit)
//	    notify on=(failed,...) [retries=N]  a notification to http://hook.test/
//	                                   (its number is its order)
//	    f deps=a | echo {{ x }}       a shell task: its command after " | "
//	                                   (param values read as -p reads them)
//	commit [n=K]                    commit the oldest K proposals (all by
//	                                default) in one transaction (one
//	                                revision), JSON round-trip and apply them;
//	                                prints each applied entry with the
//	                                proposals and effects it caused, then the
//	                                ready tasks in dispatch order
//	seal [n=K]                      the oldest K proposals (all by default) are
//	                                taken into a transaction, not yet
//	                                committed: their records can no longer
//	                                change
//	schedule                        dispatch ready tasks onto free slots
//	report d1/a#1 worker=w1 outcome=succeeded|failed|timed_out|cancelled [exit=N] [error=text]
//	       [error-bytes=N] [tail-bytes=N]
//	                                a worker's result (exit defaults to 0 for
//	                                succeeded, 1 for failed, -1 otherwise);
//	                                error-bytes and tail-bytes give it an error
//	                                or output tail of N bytes (printed as
//	                                their length); input lines, if any, are
//	                                its outputs as a task writes them
//	                                (name=value lines or a JSON object)
//	poison                          the store refuses the oldest proposal alone
//	                                for its size (Poisoned): what the leader
//	                                does, and the entry it proposes in its
//	                                place, first in line
//	fire retry|orphan d1/a#1        a timer fires now (whether or not armed)
//	advance 2s                      move the clock, then fire every armed timer
//	                                that is due, earliest first
//	cancel d1 / retry d1 / delete d1 CancelDAG / RetryDAG / DeleteDAG
//	expire-oldest N                 ExpireOldest: delete the N finished DAGs that
//	                                finished first
//	adopt w1 d1/a#1                 a worker's hello lists an attempt (Adopt's
//	                                verdict is printed)
//	state                           Dump()
//	drive [fail=(a,b,...)]          run everything to its end, quietly:
//	                                every attempt succeeds but those of the
//	                                tasks listed, which fail; it prints the
//	                                dispatches of handlers and notifications
//	statuses d1 [d2 ...]            each DAG's status and its tasks' on one
//	                                line (a skipped one with its reason)
//	live                            the running DAGs and their tasks (Live), on
//	                                the leader and on the standby
//	workers                         each worker's slots and busy count
//	waiting                         each ready task's wait reason on the
//	                                leader, then on the standby, and the pools
//	stats                           leader-side counters
//	replay                          check that applying the committed log to a
//	                                fresh core, and restoring the latest value
//	                                of every key, both yield the leader's Dump
//
// Times print relative to the scenario's start (+0s). Every committed batch
// is also applied to a standby whose Dump must equal the leader's (I1, I4).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			t.Skip()
		}
		h := newHarness(t, Config{})
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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	t       *testing.T
	cfg     Config
	c       *Core
	standby *Core
	log     []Entry // committed entries as decoded, with their revisions
	rev     int64
	now     time.Time
	timers  []Effect // armed and not yet fired
	shown   int      // proposals in the outbox already printed
	out     strings.Builder
	started bool
	quiet   bool            // drive: print nothing
	sent    []model.Attempt // drive: attempts dispatched and not yet reported
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, cfg: cfg, now: t0}
	h.c = New(cfg)
	h.standby = New(cfg)
	return h
}

func (h *harness) printf(format string, args ...any) {
	if h.quiet {
		return
	}
	fmt.Fprintf(&h.out, format, args...)
}

func (h *harness) run(td *datadriven.TestData) string {
	h.out.Reset()
	if td.Cmd != "config" {
		h.started = true
	}
	switch td.Cmd {
	case "config":
		if h.started {
			td.Fatalf(h.t, "config must come first")
		}
		cfg := Config{}
		cfg.RetryBase = h.durArg(td, "retry-base")
		cfg.RetryCap = h.durArg(td, "retry-cap")
		cfg.OrphanGrace = h.durArg(td, "orphan-grace")
		td.MaybeScanArgs(h.t, "max-output-bytes", &cfg.MaxOutputBytes)
		if td.HasArg("pool-limits") {
			var pairs []string
			td.ScanArgs(h.t, "pool-limits", &pairs)
			cfg.PoolLimits = map[string]int{}
			for _, p := range pairs {
				k, v, _ := strings.Cut(p, "=")
				n, err := strconv.Atoi(v)
				if err != nil {
					td.Fatalf(h.t, "pool-limits %s: %v", p, err)
				}
				cfg.PoolLimits[k] = n
			}
		}
		td.MaybeScanArgs(h.t, "max-live-dags", &cfg.MaxLiveDAGs)
		td.MaybeScanArgs(h.t, "max-live-tasks", &cfg.MaxLiveTasks)
		td.MaybeScanArgs(h.t, "max-items", &cfg.MaxItems)
		*h = *newHarness(h.t, cfg)
		c := h.c.Config()
		h.printf("retry-base=%s retry-cap=%s orphan-grace=%s\n", c.RetryBase, c.RetryCap, c.OrphanGrace)
		if c.MaxLiveDAGs > 0 || c.MaxLiveTasks > 0 {
			h.printf("max-live-dags=%d max-live-tasks=%d\n", c.MaxLiveDAGs, c.MaxLiveTasks)
		}
		if len(c.PoolLimits) > 0 {
			h.printf("pool-limits=%s\n", model.FormatLabels(limitsText(c.PoolLimits)))
		}
		if c.MaxOutputBytes != model.DefaultMaxOutputBytes {
			h.printf("max-output-bytes=%d\n", c.MaxOutputBytes)
		}
	case "worker":
		var id string
		slots := 1
		td.ScanArgs(h.t, "id", &id)
		td.MaybeScanArgs(h.t, "slots", &slots)
		labels := h.labelsArg(td, "labels")
		if td.HasArg("pods") {
			// A worker that reaches Kubernetes: it runs pod tasks.
			if labels == nil {
				labels = model.Labels{}
			}
			labels[model.PodsLabel] = "true"
		}
		h.c.AddWorker(id, slots, labels)
		h.c.AllowEarly(id, td.HasArg("early"))
		h.c.AdmittedBefore(id, td.HasArg("before"))
	case "remove-worker":
		h.c.RemoveWorker(h.bare(td, 0), h.now)
	case "become-leader":
		h.c.BecomeLeader(h.now)
	case "restart":
		lost := len(h.c.outbox)
		h.c = h.replay()
		h.timers, h.shown = nil, 0
		h.printf("new core at rev %d; %d uncommitted proposals lost\n", h.c.Rev(), lost)
	case "submit":
		h.submit(td)
	case "commit":
		n := 0
		td.MaybeScanArgs(h.t, "n", &n)
		h.commit(n)
		return h.out.String() // commit prints its own proposals and effects
	case "seal":
		n := len(h.c.outbox)
		td.MaybeScanArgs(h.t, "n", &n)
		h.c.Seal(h.c.outbox[:min(n, len(h.c.outbox))])
	case "schedule":
		if h.c.Schedule(h.now) == 0 {
			h.printf("nothing dispatched\n")
		}
	case "report":
		h.report(td)
	case "poison":
		h.poison()
	case "fire":
		kind := map[string]TimerKind{"retry": TimerRetry, "orphan": TimerOrphan}[h.bare(td, 0)]
		if kind == 0 {
			td.Fatalf(h.t, "fire retry|orphan <attempt>")
		}
		id := h.attemptID(td, h.bare(td, 1))
		for i, tm := range h.timers {
			if tm.Timer == kind && tm.ID == id {
				h.timers = append(h.timers[:i], h.timers[i+1:]...)
				break
			}
		}
		h.c.Fire(kind, id, h.now)
	case "advance":
		d, err := time.ParseDuration(h.bare(td, 0))
		if err != nil {
			td.Fatalf(h.t, "%v", err)
		}
		h.now = h.now.Add(d)
		h.printf("now %s\n", rel(h.now))
		h.fireDue()
		return h.out.String()
	case "cancel":
		if err := h.c.CancelDAG(h.bare(td, 0), h.now); err != nil {
			h.printf("error: %s: %v\n", errCode(err), err)
		}
	case "retry":
		if err := h.c.RetryDAG(h.bare(td, 0), h.now); err != nil {
			h.printf("error: %s: %v\n", errCode(err), err)
		}
	case "delete":
		if err := h.c.DeleteDAG(h.bare(td, 0), h.now); err != nil {
			h.printf("error: %s: %v\n", errCode(err), err)
		}
	case "expire-oldest":
		n, err := strconv.Atoi(h.bare(td, 0))
		if err != nil {
			td.Fatalf(h.t, "expire-oldest N: %v", err)
		}
		h.printf("expired: %v\n", h.c.ExpireOldest(n))
	case "adopt":
		w, id := h.bare(td, 0), h.attemptID(td, h.bare(td, 1))
		if v := h.c.Adopt(w, id); v.Adopted() {
			h.printf("adopted: %s\n", v)
		} else {
			h.printf("refused: %s\n", v)
		}
	case "state":
		h.printf("%s", h.c.Dump())
	case "drive":
		h.drive(td)
	case "statuses":
		for _, a := range td.CmdArgs {
			h.statuses(a.Key)
		}
	case "live":
		d, n := h.c.Live()
		sd, sn := h.standby.Live()
		h.printf("leader: %d DAGs, %d tasks; standby: %d DAGs, %d tasks\n", d, n, sd, sn)
	case "workers":
		for _, w := range h.c.Workers() {
			h.printf("%s slots=%d busy=%d", w.ID, w.Slots, w.Busy)
			if len(w.Labels) > 0 {
				h.printf(" labels=%s", w.Labels)
			}
			h.printf("\n")
		}
	case "waiting":
		h.waiting()
	case "stats":
		s := h.c.Stats()
		h.printf("stale_results=%d unheld_results=%d orphans=%d\n", s.StaleResults, s.UnheldResults, s.Orphans)
		var refused []string
		for _, v := range Refusals() {
			if n := s.RefusedClaims[v]; n > 0 {
				refused = append(refused, fmt.Sprintf("%s=%d", v, n))
			}
		}
		if len(refused) > 0 {
			h.printf("refused_claims: %s\n", strings.Join(refused, " "))
		}
	case "replay":
		want := h.c.Dump()
		wd, wn := h.c.Live()
		if got := h.replay().Dump(); got != want {
			h.printf("replay differs:\n%s", got)
		} else if got := h.restore().Dump(); got != want {
			h.printf("restore differs:\n%s", got)
		} else if d, n := h.restore().Live(); d != wd || n != wn {
			h.printf("restore counts %d live DAGs and %d tasks, the leader %d and %d\n", d, n, wd, wn)
		} else if d, n := h.replay().Live(); d != wd || n != wn {
			h.printf("replay counts %d live DAGs and %d tasks, the leader %d and %d\n", d, n, wd, wn)
		} else {
			h.printf("ok\n")
		}
	default:
		td.Fatalf(h.t, "unknown command %q", td.Cmd)
	}
	h.flush("")
	return h.out.String()
}

// flush prints the proposals and effects produced since the last flush.
func (h *harness) flush(indent string) {
	// The outbox only grows at the end and shrinks at the front
	// (TakeProposals), and everything in it has been printed but its tail.
	for _, e := range h.c.outbox[min(h.shown, len(h.c.outbox)):] {
		h.printf("%sproposed: %s\n", indent, fmtEntry(&e))
	}
	h.shown = len(h.c.outbox)
	for _, ef := range h.c.TakeEffects() {
		h.printf("%seffect: %s\n", indent, fmtEffect(ef))
		switch ef.Kind {
		case EffectTimer:
			h.timers = append(h.timers, ef)
		case EffectDispatch:
			h.sent = append(h.sent, ef.Attempt)
		}
	}
}

// drive runs the DAGs to their end quietly: it dispatches, commits, and
// reports every attempt sent as succeeded, or failed for the tasks listed,
// until nothing is left to do.
func (h *harness) drive(td *datadriven.TestData) {
	var fail []string
	if td.HasArg("fail") {
		td.ScanArgs(h.t, "fail", &fail)
	}
	h.quiet = true
	var hooks []string // the dispatches of handlers and notifications, printed
	defer func() {
		h.quiet = false
		for _, l := range hooks {
			h.printf("%s\n", l)
		}
	}()
	h.sent = nil
	for round := 0; round < 1000; round++ {
		h.c.Schedule(h.now)
		h.flush("")
		if len(h.c.outbox) == 0 && len(h.sent) == 0 {
			return
		}
		h.commit(0)
		sent := h.sent
		h.sent = nil
		for _, a := range sent {
			if ef := (Effect{Kind: EffectDispatch, Worker: h.workerOf(a.AttemptID), Attempt: a}); a.Spec.Env[EnvDAGStatus] != "" || a.Spec.Body != "" {
				hooks = append(hooks, fmtEffect(ef))
			}
			out := model.Succeeded
			if slices.Contains(fail, a.Task) {
				out = model.Failed
			}
			h.c.Report(model.Result{AttemptID: a.AttemptID, Worker: h.workerOf(a.AttemptID), Outcome: out,
				StartedAt: h.now, FinishedAt: h.now}, h.now)
		}
		h.flush("")
	}
	td.Fatalf(h.t, "drive: still busy after 1000 rounds\n%s", h.c.Dump())
}

// workerOf is the worker an attempt was dispatched to.
func (h *harness) workerOf(id model.AttemptID) string {
	if t := h.c.lookup(id.DAG, id.Task); t != nil && t.rec != nil {
		return t.rec.Worker
	}
	return ""
}

// statuses prints a DAG's status and each task's, on one line.
func (h *harness) statuses(id string) {
	v, ok := h.c.DAG(id)
	if !ok {
		h.printf("no DAG %s\n", id)
		return
	}
	h.printf("%s %s:", id, v.Status)
	for _, t := range v.Tasks {
		h.printf(" %s=%s", t.ID, t.Status)
		if t.Status == Skipped {
			h.printf("(%s)", t.Event)
		}
	}
	h.printf("\n")
}

func (h *harness) durArg(td *datadriven.TestData, key string) time.Duration {
	var s string
	if !td.MaybeScanArgs(h.t, key, &s) {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		td.Fatalf(h.t, "%s: %v", key, err)
	}
	return d
}

// bare returns the i-th argument written without a value.
func (h *harness) bare(td *datadriven.TestData, i int) string {
	n := 0
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 {
			if n == i {
				return a.Key
			}
			n++
		}
	}
	td.Fatalf(h.t, "missing argument %d", i+1)
	return ""
}

// attemptID reads dag/task#attempt.
func (h *harness) attemptID(td *datadriven.TestData, s string) model.AttemptID {
	slash, hash := strings.Index(s, "/"), strings.LastIndex(s, "#")
	if slash < 0 || hash < slash {
		td.Fatalf(h.t, "want dag/task#attempt, got %q", s)
	}
	n, err := strconv.Atoi(s[hash+1:])
	if err != nil {
		td.Fatalf(h.t, "attempt in %q: %v", s, err)
	}
	return model.AttemptID{DAG: s[:slash], Task: s[slash+1 : hash], Attempt: n}
}

func (h *harness) submit(td *datadriven.TestData) {
	var id string
	td.ScanArgs(h.t, "id", &id)
	spec := &model.DAG{ID: id, Name: id}
	td.MaybeScanArgs(h.t, "max-active", &spec.MaxActiveTasks)
	if td.HasArg("params") {
		var pairs []string
		td.ScanArgs(h.t, "params", &pairs)
		spec.Params = model.Params{}
		for _, p := range pairs {
			k, v, _ := strings.Cut(p, "=")
			spec.Params[k] = model.ParamValue(nil, v)
		}
	}
	for _, line := range strings.Split(td.Input, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		line, command, shell := strings.Cut(line, " | ")
		line, when, _ := strings.Cut(line, " when: ")
		tid, args, err := datadriven.ParseLine(line)
		if err != nil {
			td.Fatalf(h.t, "%v", err)
		}
		if tid == "notify" {
			n := model.Notification{URL: "http://hook.test/", Timeout: model.Duration(time.Minute)}
			for _, a := range args {
				switch a.Key {
				case "on":
					n.On = a.Vals
				case "retries":
					n.MaxRetries, err = strconv.Atoi(a.Vals[0])
				default:
					td.Fatalf(h.t, "notify: unknown key %s", a.Key)
				}
				if err != nil {
					td.Fatalf(h.t, "notify: %s: %v", a.Key, err)
				}
			}
			spec.Notify = append(spec.Notify, n)
			continue
		}
		tk := model.Task{ID: tid, Kind: model.KindNoop, Timeout: model.Duration(time.Minute), When: when}
		if shell {
			tk.Kind, tk.Command = model.KindShell, command
		}
		for _, a := range args {
			switch a.Key {
			case "sel":
				tk.Selector = parseLabelVals(td, h.t, a.Vals)
				continue
			case "cont":
				tk.ContinueOnFailure = true
				continue
			}
			if len(a.Vals) != 1 {
				td.Fatalf(h.t, "task %s: %s needs one value", tid, a.Key)
			}
			v := a.Vals[0]
			switch a.Key {
			case "deps":
				tk.DependsOn = strings.Split(v, ",")
			case "prio":
				tk.Priority, err = strconv.Atoi(v)
			case "retries":
				tk.MaxRetries, err = strconv.Atoi(v)
			case "pool":
				tk.Pool = v
			case "kind":
				tk.Kind = model.Kind(v)
				if tk.Kind == model.KindPod {
					tk.Pod = []byte(`{"image":"busybox"}`)
				}
			case "rule":
				tk.TriggerRule = model.TriggerRule(v)
			case "items":
				// items=N: a literal of N strings, "x0", "x1", ...
				n, _ := strconv.Atoi(v)
				list := make([]string, n)
				for i := range list {
					list[i] = fmt.Sprintf("x%d", i)
				}
				b, _ := json.Marshal(list)
				tk.ForEach = model.ForEach(b)
			case "each":
				// each=EXPR: for_each: "{{ EXPR }}"
				b, _ := json.Marshal("{{ " + v + " }}")
				tk.ForEach = model.ForEach(b)
			case "max-active":
				tk.MaxActive, err = strconv.Atoi(v)
			default:
				td.Fatalf(h.t, "task %s: unknown key %s", tid, a.Key)
			}
			if err != nil {
				td.Fatalf(h.t, "task %s: %s: %v", tid, a.Key, err)
			}
		}
		if tk.Kind == model.KindPod && tk.Command != "" {
			// A pod task has no command: " | text" is its env ARG.
			tk.Env, tk.Command = map[string]string{"ARG": tk.Command}, ""
		}
		switch tid {
		case model.OnSuccessID:
			spec.OnSuccess = &tk
		case model.OnFailureID:
			spec.OnFailure = &tk
		case model.OnExitID:
			spec.OnExit = &tk
		default:
			spec.Tasks = append(spec.Tasks, tk)
		}
	}
	spec.Normalize()
	if err := dag.Validate(spec, dag.Limits{}); err != nil {
		td.Fatalf(h.t, "invalid DAG: %v", err)
	}
	out, err := h.c.Submit(spec, h.now)
	switch {
	case err != nil:
		h.printf("error: %s: %v\n", errCode(err), err)
	case out == SubmitProposed:
		h.printf("submitted: proposed\n")
	case out == SubmitPending:
		h.printf("submitted: pending (an identical DAG is being committed)\n")
	case out == SubmitDuplicate:
		h.printf("submitted: duplicate (an identical DAG was already accepted)\n")
	}
}

// commit plays etcd: one transaction, one revision, values round-tripped
// through JSON. The leader and the standby each apply their own copy.
func (h *harness) commit(n int) {
	batch := h.c.TakeProposals(n)
	h.shown = len(h.c.outbox)
	if len(batch) == 0 {
		h.printf("nothing to commit\n")
		return
	}
	h.c.Seal(batch)
	h.rev++
	for i := range batch {
		e := roundTrip(h.t, batch[i])
		e.Rev = h.rev
		h.log = append(h.log, e)
		sb := roundTrip(h.t, e)
		sb.Rev = h.rev
		if err := h.standby.Apply(&sb); err != nil {
			h.printf("standby: apply error: %v\n", err)
		}
		mine := roundTrip(h.t, e)
		mine.Rev = h.rev
		if err := h.c.Apply(&mine); err != nil {
			h.printf("apply error: %v\n", err)
			continue
		}
		h.printf("applied: %s\n", fmtEntry(&e))
		h.flush("  ")
	}
	if got, want := h.standby.Dump(), h.c.Dump(); got != want {
		h.t.Errorf("standby differs from leader\nleader:\n%s\nstandby:\n%s", want, got)
	}
	if sd, sn := h.standby.Live(); true {
		if d, n := h.c.Live(); d != sd || n != sn {
			h.t.Errorf("live counts: leader %d DAGs %d tasks, standby %d and %d", d, n, sd, sn)
		}
	}
	if r := h.readyList(); r != "" {
		h.printf("ready: %s\n", r)
	}
}

// readyList names the ready tasks in the order the leader would dispatch
// them (priority, then submission order).
func (h *harness) readyList() string {
	var ready []*task
	for _, d := range h.c.dags {
		for i := range d.tasks {
			if d.tasks[i].status == Ready {
				ready = append(ready, &d.tasks[i])
			}
		}
	}
	sort.Slice(ready, func(i, j int) bool {
		if less(ready[i], ready[j]) != less(ready[j], ready[i]) {
			return less(ready[i], ready[j])
		}
		return ready[i].dag.id < ready[j].dag.id
	})
	names := make([]string, len(ready))
	for i, t := range ready {
		names[i] = t.dag.id + "/" + t.id()
	}
	return strings.Join(names, " ")
}

func (h *harness) report(td *datadriven.TestData) {
	id := h.attemptID(td, h.bare(td, 0))
	r := model.Result{AttemptID: id, StartedAt: h.now, FinishedAt: h.now}
	var outcome string
	td.ScanArgs(h.t, "worker", &r.Worker)
	td.ScanArgs(h.t, "outcome", &outcome)
	r.Outcome = model.Outcome(outcome)
	switch r.Outcome {
	case model.Succeeded:
		r.ExitCode = 0
	case model.Failed:
		r.ExitCode = 1
	case model.TimedOut, model.Cancelled:
		r.ExitCode = -1
	default:
		td.Fatalf(h.t, "unknown outcome %q", outcome)
	}
	td.MaybeScanArgs(h.t, "exit", &r.ExitCode)
	td.MaybeScanArgs(h.t, "error", &r.Error)
	var n int
	if td.MaybeScanArgs(h.t, "error-bytes", &n) {
		r.Error = "E" + strings.Repeat("e", n-1)
	}
	if td.MaybeScanArgs(h.t, "tail-bytes", &n) {
		r.OutputTail = strings.Repeat("o", n-1) + "O"
	}
	if strings.TrimSpace(td.Input) != "" {
		// As a worker may send them: not checked (the leader checks). A
		// JSON object is taken as it is, lines as ParseOutputs reads them.
		var err error
		if in := strings.TrimSpace(td.Input); in[0] == '{' {
			err = json.Unmarshal([]byte(in), &r.Outputs)
		} else {
			r.Outputs, err = model.ParseOutputs([]byte(td.Input), model.MaxMaxOutputBytes)
		}
		if err != nil {
			td.Fatalf(h.t, "outputs: %v", err)
		}
	}
	switch h.c.Report(r, h.now) {
	case ReportStale:
		h.printf("stale result dropped\n")
	case ReportUnheld:
		h.printf("result dropped: the worker does not hold the attempt\n")
	}
	if t := h.c.lookup(id.DAG, id.Task); t != nil && t.stash != nil {
		h.printf("result held until the task's in-flight record is applied\n")
	}
}

// poison plays a store that refuses the oldest proposal alone for its size,
// and an engine that puts what the leader proposes in its place first in
// line and drops the entries it withdraws.
func (h *harness) poison() {
	if len(h.c.outbox) == 0 {
		h.printf("nothing to refuse\n")
		return
	}
	batch := h.c.TakeProposals(1)
	h.c.Seal(batch)
	repl, drop, out := h.c.Poisoned(batch[0], "etcdserver: request is too large", h.now)
	h.printf("refused: %s\n", fmtEntry(&batch[0]))
	h.printf("outcome: %s\n", out)
	for _, d := range drop {
		for i, e := range h.c.outbox {
			if e.DAG == d.DAG && e.Task == d.Task {
				h.printf("withdrawn: %s\n", fmtEntry(&e))
				h.c.outbox = append(h.c.outbox[:i], h.c.outbox[i+1:]...)
				break
			}
		}
	}
	if repl != nil {
		h.c.outbox = append([]Entry{*repl}, h.c.outbox...)
		h.printf("in its place: %s\n", fmtEntry(repl))
	}
	h.shown = len(h.c.outbox)
	for _, ef := range h.c.TakeEffects() {
		h.printf("effect: %s\n", fmtEffect(ef))
	}
}

func (h *harness) fireDue() {
	sort.SliceStable(h.timers, func(i, j int) bool { return h.timers[i].At.Before(h.timers[j].At) })
	for len(h.timers) > 0 && !h.timers[0].At.After(h.now) {
		tm := h.timers[0]
		h.timers = h.timers[1:]
		h.printf("fired: %s %s\n", timerName(tm.Timer), tm.ID)
		h.c.Fire(tm.Timer, tm.ID, h.now)
		h.flush("  ")
	}
}

func (h *harness) replay() *Core { return replayLog(h.t, h.cfg, h.log) }

// errCode is the code of an error the core returns.
func errCode(err error) string {
	switch e := err.(type) {
	case *Error:
		return e.Code.String()
	case *LimitError:
		return e.Code.String()
	}
	return "?"
}

func (h *harness) restore() *Core { return restoreLog(h.t, h.cfg, h.rev, h.log) }

func rel(t time.Time) string { return "+" + t.Sub(t0).String() }

func timerName(k TimerKind) string {
	switch k {
	case TimerRetry:
		return "retry"
	case TimerOrphan:
		return "orphan"
	}
	return fmt.Sprintf("timer(%d)", k)
}

func fmtEffect(ef Effect) string {
	switch ef.Kind {
	case EffectDispatch:
		s := fmt.Sprintf("dispatch %s to %s", ef.Attempt.AttemptID, ef.Worker)
		if ef.Attempt.Handover {
			s += " (hand-over: adopt its pod)"
		}
		if ef.Attempt.Stop {
			s += " (stop: delete its pod, create none)"
		}
		if v, ok := ef.Attempt.Spec.Env[EnvDAGStatus]; ok {
			s += fmt.Sprintf(" %s=%s %s=%s %s=%s", EnvDAGStatus, v, EnvFailedTasks, ef.Attempt.Spec.Env[EnvFailedTasks],
				EnvFailedCount, ef.Attempt.Spec.Env[EnvFailedCount])
		}
		if k := ef.Attempt.Spec.Headers["Idempotency-Key"]; k != "" {
			s += fmt.Sprintf(" key=%s body=%s", k, ef.Attempt.Spec.Body)
		}
		if ef.Attempt.Spec.Kind == model.KindShell {
			s += fmt.Sprintf(" command=%q", ef.Attempt.Spec.Command)
			if v, ok := ef.Attempt.Spec.Env[EnvItem]; ok {
				s += fmt.Sprintf(" %s=%s %s=%s", EnvItem, v, EnvIndex, ef.Attempt.Spec.Env[EnvIndex])
			}
		}
		if arg, ok := ef.Attempt.Spec.Env["ARG"]; ok && ef.Attempt.Spec.Kind == model.KindPod {
			s += fmt.Sprintf(" env.ARG=%q", arg)
		}
		if ef.Attempt.Spec.Kind == model.KindPod {
			// The pod it makes or adopts, in a fixed incarnation.
			a := ef.Attempt
			a.Incarnation = "INC"
			s += " pod=" + podspec.Name(a)
		}
		return s
	case EffectCancel:
		if ef.Release {
			return fmt.Sprintf("release %s on %s", ef.ID, ef.Worker)
		}
		return fmt.Sprintf("cancel %s on %s", ef.ID, ef.Worker)
	case EffectTimer:
		return fmt.Sprintf("timer %s %s at %s", timerName(ef.Timer), ef.ID, rel(ef.At))
	}
	return fmt.Sprintf("effect(%d)", ef.Kind)
}

// fmtEntry prints an entry on one line, leaving out what is empty.
func fmtEntry(e *Entry) string {
	var b strings.Builder
	switch {
	case e.Delete:
		fmt.Fprintf(&b, "delete dag %s", e.DAG)
	case e.D != nil:
		fmt.Fprintf(&b, "dag %s %s run=%d", e.DAG, e.D.Status, e.D.Run)
		if e.D.CancelRequested {
			b.WriteString(" cancel_requested")
		}
	case e.T != nil:
		r := e.T
		fmt.Fprintf(&b, "%s/%s %s", e.DAG, e.Task, r.Status)
		if r.Run != 1 {
			fmt.Fprintf(&b, " run=%d", r.Run)
		}
		fmt.Fprintf(&b, " attempt=%d", r.Attempt)
		if r.Retries > 0 {
			fmt.Fprintf(&b, " retries=%d", r.Retries)
		}
		if r.Worker != "" {
			fmt.Fprintf(&b, " worker=%s", r.Worker)
		}
		fmt.Fprintf(&b, " event=%s", r.Event)
		if r.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *r.ExitCode)
		}
		if r.RetryAt != nil {
			fmt.Fprintf(&b, " retry_at=%s", rel(*r.RetryAt))
		}
		if r.Cascade {
			fmt.Fprintf(&b, " cascade cause=%s", r.Cause)
		}
		switch {
		case len(r.Error) > 160 && !strings.HasPrefix(r.Error, "orion: ") && !strings.HasPrefix(r.Error, "cannot render"):
			// Long errors are the scenarios' own (error-bytes), or cut:
			// their size, and whether they were, say more.
			fmt.Fprintf(&b, " error=<%d bytes%s>", len(r.Error), cutMark(r.Error))
		case r.Error != "":
			fmt.Fprintf(&b, " error=%q", r.Error)
		}
		if len(r.Items) > 0 {
			fmt.Fprintf(&b, " items=%s", r.Items)
		}
		if r.OutputTail != "" {
			fmt.Fprintf(&b, " tail=<%d bytes%s>", len(r.OutputTail), cutMark(r.OutputTail))
		}
		if len(r.History) > 0 {
			var hs []string
			for _, a := range r.History {
				h := fmt.Sprintf("#%d:%s", a.Attempt, a.Outcome)
				if len(a.Error) > 160 {
					h += fmt.Sprintf("(error %d bytes%s)", len(a.Error), cutMark(a.Error))
				}
				hs = append(hs, h)
			}
			fmt.Fprintf(&b, " history=%s", strings.Join(hs, ","))
		}
		if r.HistoryOmitted > 0 {
			fmt.Fprintf(&b, " history_omitted=%d", r.HistoryOmitted)
		}
		if len(r.Outputs) > 0 {
			o, _ := json.Marshal(r.Outputs)
			fmt.Fprintf(&b, " outputs=%s", o)
		}
	default:
		fmt.Fprintf(&b, "%s/%s (no record)", e.DAG, e.Task)
	}
	return b.String()
}

// cutMark says whether a text was cut, and where the cut is.
func cutMark(s string) string {
	i := strings.Index(s, "[orion: ")
	switch {
	case i < 0:
		return ""
	case i == 0:
		return ", cut at the start"
	case strings.HasSuffix(s, " bytes cut]"):
		return ", cut at the end"
	}
	return ", cut in the middle"
}

func (h *harness) labelsArg(td *datadriven.TestData, key string) model.Labels {
	if !td.HasArg(key) {
		return nil
	}
	var vals []string
	td.ScanArgs(h.t, key, &vals)
	return parseLabelVals(td, h.t, vals)
}

func parseLabelVals(td *datadriven.TestData, t *testing.T, vals []string) model.Labels {
	l, err := model.ParseLabels(strings.Join(vals, ","))
	if err != nil {
		td.Fatalf(t, "labels: %v", err)
	}
	return l
}

func limitsText(m map[string]int) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = strconv.Itoa(v)
	}
	return out
}

// waiting prints each ready task's wait reason as the leader and the
// standby give it, and the pools' running counts on both (which must agree:
// they are replicated state).
func (h *harness) waiting() {
	for _, c := range []struct {
		name string
		c    *Core
	}{{"leader", h.c}, {"standby", h.standby}} {
		for _, id := range c.c.sortedDAGIDs() {
			v, _ := c.c.DAG(id)
			for _, tv := range v.Tasks {
				if tv.Status == Ready {
					reason := tv.Waiting
					if reason == "" {
						reason = "-"
					}
					h.printf("%s: %s/%s: %s\n", c.name, id, tv.ID, reason)
				}
			}
		}
	}
	lp, sp := fmt.Sprint(h.c.Pools()), fmt.Sprint(h.standby.Pools())
	if lp != sp {
		h.t.Errorf("pools differ: leader %s, standby %s", lp, sp)
	}
	h.printf("pools: %s\n", lp)
}
