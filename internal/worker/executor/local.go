package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor/reap"
	"go.uber.org/zap"
)

// DefaultKillGrace is how long a cancelled or timed-out shell attempt's
// process group gets between SIGTERM and SIGKILL.
const DefaultKillGrace = 2 * time.Second

// LocalConfig configures a Local executor.
type LocalConfig struct {
	// ID names the worker in results (Result.Worker). Empty: the host name.
	ID string
	// Slots is how many attempts may run at once. <= 0: runtime.NumCPU().
	Slots int
	// LogDir holds the attempt logs, <LogDir>/<dag>/<task>/<attempt>.log.
	// Empty: <os.TempDir()>/orion-logs.
	LogDir string
	// Logger receives executor-level events (never one line per attempt at
	// info level). Nil: no logging.
	Logger *zap.Logger
	// HTTPClient runs http tasks. Nil: a client on a copy of
	// http.DefaultTransport that reads at most MaxResponseHeaderBytes of
	// a response's status line and headers, without a client-wide timeout
	// (each attempt has its own Spec.Timeout).
	HTTPClient *http.Client
	// KillGrace is the delay between SIGTERM and SIGKILL to a shell attempt's
	// process group on cancel/timeout. <= 0: DefaultKillGrace.
	KillGrace time.Duration
	// Pods runs pod tasks. Nil: this executor runs none (the leader never
	// sends it one: it does not announce model.PodsLabel).
	Pods PodRunner
	// SecretsDir holds the secrets shell tasks' env_from read, one
	// directory per secret and one file per key (a Kubernetes Secret
	// mounted as a volume). Empty: a task with env_from fails, saying so.
	SecretsDir string
}

// Local runs attempts on this machine. It implements Executor.
//
// Concurrency model: one goroutine per started attempt (shell, http, sleep),
// bounded by Slots through a counter, rather than Slots long-lived workers fed
// by a channel. Reasons: Start must never block, so a worker pool would need
// an unbounded queue in front of it anyway; an idle executor holds no
// goroutines; and a finished attempt can hand its slot straight to the next
// queued one under the same lock that reports its result. noop tasks (and
// attempts that fail validation, e.g. an unknown kind) never get a goroutine:
// Start builds their Result inline and enqueues it, so the noop path is a
// mutex, a time.Now and a channel send.
//
// Results: the channel returned by Results is buffered (max(1024, 4*Slots)).
// When it is full, results go to an unbounded FIFO that a single pump
// goroutine drains into the channel, so neither Start nor an attempt
// goroutine ever blocks on a slow consumer. Results are delivered in the
// order attempts finished (FIFO across the buffer and the overflow). The
// channel is never closed, not even by Close, so a select loop reading it
// cannot spin on a closed channel.
type Local struct {
	id         string
	slots      int
	logDir     string
	log        *zap.Logger
	http       *http.Client
	killGrace  time.Duration
	baseEnv    []string // os.Environ() at construction, without ORION_* (reap.WithoutOrionSettings)
	secretsDir string   // LocalConfig.SecretsDir
	pods       PodRunner

	// ownerDir holds journal, the record of this executor's running
	// attempts (package reap); journal is nil when it could not be created,
	// and then nothing is recorded.
	ownerDir   string
	journal    *reap.Journal
	reaperStop chan struct{} // closed by Close once every attempt has ended
	reaperDone chan struct{} // closed when superviseReaper has returned

	ctx  context.Context // cancelled by Close
	stop context.CancelFunc
	wg   sync.WaitGroup // attempt goroutines

	results chan model.Result
	wake    chan struct{} // pump: overflow is non-empty
	pumpWG  sync.WaitGroup

	// outDir holds the ORION_OUTPUTS files (outputs.go), made at the
	// first shell attempt; outTemp when it is a directory of its own.
	outMu   sync.Mutex
	outDir  string
	outErr  error
	outTemp bool

	mu        sync.Mutex
	shells    map[model.AttemptID]struct{} // shell attempts run here: a missing log is an empty one
	shellIDs  []model.AttemptID            // the same in order, to forget the oldest
	closing   bool                         // Close called: no new attempts
	draining  bool                         // StopTaking called: no new attempts but pod tasks'
	pumpDone  bool                         // pump exited: emit is best-effort
	active    int                          // attempt goroutines holding a slot
	runs      map[model.AttemptID]*entry   // queued and running attempts
	queue     []*entry                     // started beyond Slots (caller bug); FIFO
	queueHead int
	overflow  []model.Result // results waiting for room in the channel; FIFO
	ovHead    int
	inFlight  bool            // pump holds a result taken from overflow
	pumping   model.AttemptID // the attempt of that result, while inFlight
	dropped   int             // results lost after Close because nobody read them
}

// entry is a queued or running attempt.
type entry struct {
	a         model.Attempt
	ctx       context.Context
	cancel    context.CancelCauseFunc
	cancelled bool // Cancel (or Close) accepted; guarded by Local.mu
	queued    bool // waiting for a slot; guarded by Local.mu
	letGo     bool // a pod attempt let go (Close, Release): nothing to report; guarded by Local.mu
}

var (
	errCancelled = errors.New("cancelled")
	errClosed    = errors.New("executor closed")
)

// NewLocal returns a running Local executor.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if cfg.ID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "local"
		}
		cfg.ID = h
	}
	if cfg.Slots <= 0 {
		cfg.Slots = runtime.NumCPU()
	}
	if cfg.LogDir == "" {
		cfg.LogDir = filepath.Join(os.TempDir(), "orion-logs")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient()
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("executor: log dir: %w", err)
	}
	if cfg.SecretsDir != "" {
		// Said at start rather than by the first task that needs one.
		if fi, err := os.Stat(cfg.SecretsDir); err != nil {
			return nil, fmt.Errorf("executor: secrets dir: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("executor: secrets dir %s is not a directory", cfg.SecretsDir)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	l := &Local{
		id:         cfg.ID,
		slots:      cfg.Slots,
		logDir:     cfg.LogDir,
		log:        cfg.Logger.With(zap.String("worker", cfg.ID)),
		http:       cfg.HTTPClient,
		killGrace:  cfg.KillGrace,
		baseEnv:    reap.WithoutOrionSettings(os.Environ()),
		pods:       cfg.Pods,
		secretsDir: cfg.SecretsDir,
		ctx:        ctx,
		stop:       stop,
		results:    make(chan model.Result, max(1024, 4*cfg.Slots)),
		wake:       make(chan struct{}, 1),
		runs:       make(map[model.AttemptID]*entry, cfg.Slots),
	}
	l.startReaping()
	l.pumpWG.Add(1)
	go l.pump()
	return l, nil
}

// startReaping kills what executors that died with this LogDir left running,
// then creates this executor's owner dir and journal and starts its reaper
// (package reap).
// Failing that, the executor still runs tasks; what is lost is the cleanup
// after a crash, and that is logged.
func (l *Local) startReaping() {
	l.reaperStop, l.reaperDone = make(chan struct{}), make(chan struct{})
	reapLeftovers(l.logDir, l.log)
	name, err := reap.OwnerName(ownerSeq.Add(1))
	if err == nil {
		dir := filepath.Join(l.logDir, reap.DirName, name)
		if err = os.MkdirAll(dir, 0o755); err == nil {
			l.journal, err = reap.OpenJournal(dir)
		}
		if err == nil {
			l.ownerDir = dir
			// The first reaper is forked before NewLocal returns, so no task
			// ever runs without one.
			cmd, w, err := reap.Start(dir, l.id)
			go l.superviseReaper(cmd, w, err)
			return
		}
	}
	l.log.Warn("cannot record running attempts: if this worker is killed, its tasks' shells die with it, but not what they started", zap.Error(err))
	close(l.reaperDone)
}

var _ Executor = (*Local)(nil)

func (l *Local) ID() string                   { return l.id }
func (l *Local) Slots() int                   { return l.slots }
func (l *Local) Results() <-chan model.Result { return l.results }

// LogDir is the directory holding attempt logs.
func (l *Local) LogDir() string { return l.logDir }

// LogPath is where the log of id is (or would be) written.
func (l *Local) LogPath(id model.AttemptID) string {
	return filepath.Join(l.logDir, pathSegment(id.DAG), pathSegment(id.Task), fmt.Sprintf("%d.log", id.Attempt))
}

// Start begins an attempt; it never blocks. A noop (or an attempt of an
// unknown kind) is finished before Start returns. If the caller starts more
// than Slots attempts at once the extra ones are queued (and a warning is
// logged), never dropped. Starting an attempt whose id is already queued or
// running is a caller bug: it is logged and ignored (the first one's Result
// is the only one). After Close, Start only reports a Cancelled result.
func (l *Local) Start(a model.Attempt) {
	switch a.Spec.Kind {
	case model.KindNoop:
		l.mu.Lock()
		now := time.Now()
		r := model.Result{AttemptID: a.AttemptID, Worker: l.id, Outcome: model.Succeeded, ExitCode: -1, StartedAt: now, FinishedAt: now}
		if l.closing {
			r.Outcome, r.Error = model.Cancelled, errClosed.Error()
		}
		l.emitLocked(r)
		l.mu.Unlock()
		return
	case model.KindShell, model.KindHTTP, model.KindSleep:
	case model.KindPod:
		if l.pods == nil {
			l.mu.Lock()
			now := time.Now()
			l.emitLocked(model.Result{AttemptID: a.AttemptID, Worker: l.id, Outcome: model.Failed, ExitCode: -1,
				Error: "this worker runs no pod tasks: it has no Kubernetes API (orion worker --kube-namespace)", StartedAt: now, FinishedAt: now})
			l.mu.Unlock()
			return
		}
	default:
		l.mu.Lock()
		now := time.Now()
		l.emitLocked(model.Result{AttemptID: a.AttemptID, Worker: l.id, Outcome: model.Failed, ExitCode: -1,
			Error: fmt.Sprintf("unknown task kind %q", a.Spec.Kind), StartedAt: now, FinishedAt: now})
		l.mu.Unlock()
		return
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing || l.draining && a.Spec.Kind != model.KindPod {
		// Not started: the leader runs it elsewhere, without consuming a
		// retry (a pod attempt, without a second pod: core hands it over).
		now := time.Now()
		l.emitLocked(model.Result{AttemptID: a.AttemptID, Worker: l.id, Outcome: model.Cancelled, ExitCode: -1,
			Error: errClosed.Error(), StartedAt: now, FinishedAt: now})
		return
	}
	if _, dup := l.runs[a.AttemptID]; dup {
		l.log.Error("attempt started twice; ignoring the second Start", zap.Stringer("attempt", a.AttemptID))
		return
	}
	ctx, cancel := context.WithCancelCause(l.ctx)
	e := &entry{a: a, ctx: ctx, cancel: cancel}
	l.runs[a.AttemptID] = e
	if l.active >= l.slots {
		e.queued = true
		l.queue = append(l.queue, e)
		l.log.Warn("attempt started with no free slot; queued",
			zap.Stringer("attempt", a.AttemptID), zap.Int("slots", l.slots),
			zap.Int("queued", len(l.queue)-l.queueHead))
		return
	}
	l.active++
	l.launchLocked(e)
}

func (l *Local) launchLocked(e *entry) {
	l.wg.Add(1)
	go l.run(e)
}

// Cancel stops an attempt. A queued attempt never starts and reports
// Cancelled at once; a running one is stopped (shell: SIGTERM to its process
// group, SIGKILL after KillGrace) and reports Cancelled when it has ended.
// Once Cancel has accepted an attempt its Outcome is Cancelled even if it
// happened to finish on its own meanwhile. Unknown or finished ids: no-op.
func (l *Local) Cancel(id model.AttemptID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.runs[id]
	if !ok || e.cancelled {
		return
	}
	l.cancelLocked(e, errCancelled)
}

func (l *Local) cancelLocked(e *entry, cause error) {
	e.cancelled = true
	e.cancel(cause)
	if e.queued {
		// Leave it in l.queue; dequeueLocked skips cancelled entries.
		delete(l.runs, e.a.AttemptID)
		now := time.Now()
		l.emitLocked(model.Result{AttemptID: e.a.AttemptID, Worker: l.id, Outcome: model.Cancelled, ExitCode: -1,
			Error: "cancelled before start", StartedAt: now, FinishedAt: now})
	}
}

// run executes one attempt in its own goroutine and then frees its slot.
func (l *Local) run(e *entry) {
	defer l.wg.Done()
	r := model.Result{AttemptID: e.a.AttemptID, Worker: l.id, ExitCode: -1, StartedAt: time.Now()}
	ctx := e.ctx
	if e.a.Spec.Kind == model.KindPod {
		// The pod runner keeps the attempt's time itself (PodRunner).
		reported := l.runPod(ctx, e.a, &r)
		r.FinishedAt = time.Now()
		if !reported {
			l.mu.Lock()
			e.letGo = true
			l.mu.Unlock()
		}
		l.finish(e, r)
		return
	}
	if t := e.a.Spec.Timeout.D(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, timeoutError(t))
		defer cancel()
	}
	if ctx.Err() == nil { // cancelled between Start and now: never run it
		switch e.a.Spec.Kind {
		case model.KindShell:
			l.runShell(ctx, e.a, &r)
		case model.KindHTTP:
			l.runHTTP(ctx, e.a, &r)
		case model.KindSleep:
			l.runSleep(ctx, e.a, &r)
		}
	} else if classify(ctx, &r); r.Outcome == model.Cancelled {
		r.Error = "cancelled before start"
	}
	r.FinishedAt = time.Now()
	l.finish(e, r)
}

// classify sets the outcome of an attempt whose context ended.
func classify(ctx context.Context, r *model.Result) bool {
	if ctx.Err() == nil {
		return false
	}
	cause := context.Cause(ctx)
	var te timeoutError
	if errors.As(cause, &te) {
		r.Outcome, r.Error = model.TimedOut, te.Error()
	} else {
		r.Outcome, r.Error = model.Cancelled, errCancelled.Error()
	}
	return true
}

type timeoutError time.Duration

func (t timeoutError) Error() string { return fmt.Sprintf("timed out after %s", time.Duration(t)) }

func (l *Local) finish(e *entry, r model.Result) {
	e.cancel(nil) // release the context
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.runs, e.a.AttemptID)
	if e.letGo {
		// A pod attempt let go: its pod runs on, another worker follows
		// it, and this worker reports nothing of it.
		if next := l.dequeueLocked(); next != nil {
			l.launchLocked(next)
		} else {
			l.active--
		}
		return
	}
	if e.cancelled && r.Outcome != model.Cancelled {
		if r.Error == "" || r.Outcome == model.Succeeded {
			r.Error = errCancelled.Error()
		} else {
			r.Error = errCancelled.Error() + " (" + r.Error + ")"
		}
		r.Outcome = model.Cancelled
	}
	l.emitLocked(r)
	if next := l.dequeueLocked(); next != nil {
		l.launchLocked(next) // the slot passes on
		return
	}
	l.active--
}

func (l *Local) dequeueLocked() *entry {
	for l.queueHead < len(l.queue) {
		e := l.queue[l.queueHead]
		l.queue[l.queueHead] = nil
		l.queueHead++
		if l.queueHead == len(l.queue) {
			l.queue, l.queueHead = l.queue[:0], 0
		}
		if !e.cancelled {
			e.queued = false
			return e
		}
	}
	return nil
}

// emitLocked hands r to the consumer without blocking: straight into the
// channel when nothing is waiting in the overflow, else behind it. Every
// result passes here, cut to the bounds of the record it becomes.
func (l *Local) emitLocked(r model.Result) {
	r = r.Bounded()
	if !l.inFlight && l.ovHead == len(l.overflow) {
		select {
		case l.results <- r:
			return
		default:
		}
	}
	if l.pumpDone {
		l.dropped++
		return
	}
	l.overflow = append(l.overflow, r)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// pump moves overflowed results into the channel, one at a time and in order.
func (l *Local) pump() {
	defer l.pumpWG.Done()
	for {
		l.mu.Lock()
		if l.ovHead == len(l.overflow) {
			l.overflow, l.ovHead = l.overflow[:0], 0
			if cap(l.overflow) > 4096 {
				l.overflow = nil // don't pin a burst's worth of memory
			}
			l.inFlight = false
			l.mu.Unlock()
			select {
			case <-l.wake:
				continue
			case <-l.ctx.Done():
				l.drainOverflow()
				return
			}
		}
		r := l.overflow[l.ovHead]
		l.overflow[l.ovHead] = model.Result{}
		l.ovHead++
		l.inFlight, l.pumping = true, r.AttemptID
		l.mu.Unlock()
		select {
		case l.results <- r:
		case <-l.ctx.Done():
			l.mu.Lock()
			l.ovHead-- // put it back in front
			l.overflow[l.ovHead] = r
			l.mu.Unlock()
			l.drainOverflow()
			return
		}
	}
}

// drainOverflow runs after Close: it waits for the attempt goroutines (their
// Cancelled results land in the overflow), then moves what fits into the
// channel and drops the rest, since nobody may be reading any more.
func (l *Local) drainOverflow() {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; l.ovHead < len(l.overflow); l.ovHead++ {
		select {
		case l.results <- l.overflow[l.ovHead]:
		default:
			l.dropped++
		}
	}
	l.overflow, l.ovHead, l.inFlight, l.pumpDone = nil, 0, false, true
}

// OpenLog opens the full output of an attempt. A shell attempt that has
// printed nothing has no file, and reads as an empty log (noteShell). When
// this executor has no log for it (a noop task, an attempt that ran
// elsewhere, a silent attempt of an earlier process, or a log removed since)
// the error wraps os.ErrNotExist; callers should present that as "no
// output" rather than as a failure. The log of a running attempt can be
// read while it grows.
func (l *Local) OpenLog(id model.AttemptID) (io.ReadCloser, error) {
	f, err := os.Open(l.LogPath(id))
	if errors.Is(err, fs.ErrNotExist) && l.ranShell(id) {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if err != nil {
		return nil, fmt.Errorf("executor %s: log of %s: %w", l.id, id, err)
	}
	return f, nil
}

// shellMemory is how many shell attempts an executor remembers, so that the
// log of one that printed nothing reads as empty rather than missing (about
// a megabyte).
const shellMemory = 10000

// noteShell remembers a shell attempt run here: its log file is created at
// its first output (outputWriter), so until then, or if it prints nothing,
// its log is empty, not missing. The oldest is forgotten past shellMemory,
// and all with the process: a log without a file is then reported missing,
// as a removed one is.
func (l *Local) noteShell(id model.AttemptID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shells == nil {
		l.shells = make(map[model.AttemptID]struct{})
	}
	if _, ok := l.shells[id]; ok {
		return
	}
	if len(l.shellIDs) >= shellMemory {
		delete(l.shells, l.shellIDs[0])
		l.shellIDs = l.shellIDs[1:]
	}
	l.shells[id] = struct{}{}
	l.shellIDs = append(l.shellIDs, id)
}

func (l *Local) ranShell(id model.AttemptID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.shells[id]
	return ok
}

// Close cancels every queued and running attempt (each reports Cancelled),
// waits for them to stop, and returns. Results that do not fit in the
// channel's buffer by then are dropped (logged). Results is not closed.
// Close is idempotent.
func (l *Local) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		l.pumpWG.Wait()
		return nil
	}
	l.closing = true
	for _, e := range l.runs {
		switch {
		case e.cancelled:
		case e.a.Spec.Kind == model.KindPod && !e.queued:
			// Its pod outlives this process: the worker the leader
			// hands the attempt to next adopts it.
			e.letGo = true
			l.cancelLocked(e, ErrLetGo)
		default:
			l.cancelLocked(e, errClosed)
		}
	}
	l.mu.Unlock()
	l.stop()
	l.wg.Wait()
	// Every attempt has ended and journalled its end: the reaper, told now,
	// finds nothing to kill. Told earlier, it would SIGKILL groups that are
	// still in their KillGrace.
	if l.journal != nil {
		l.journal.Close()
	}
	close(l.reaperStop)
	<-l.reaperDone
	if l.ownerDir != "" {
		os.RemoveAll(l.ownerDir) // the reaper removes it; not if it was not running
	}
	if l.outTemp {
		os.RemoveAll(l.outDir)
	}
	l.pumpWG.Wait()
	l.mu.Lock()
	dropped := l.dropped
	l.mu.Unlock()
	if dropped > 0 {
		l.log.Warn("results dropped at close: channel full", zap.Int("dropped", dropped))
	}
	return nil
}

// InFlight lists the attempts queued or running, and those whose result
// waits for room in the channel (in the overflow, or in the pump's hands):
// an attempt that finished is in the channel or listed here, so a worker's
// hello, which reads this and then drains the channel, misses none. A new
// leader may not know an attempt it does not hear of (early attempts).
func (l *Local) InFlight() []model.AttemptID {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]model.AttemptID, 0, len(l.runs)+len(l.overflow)-l.ovHead+1)
	for id := range l.runs {
		out = append(out, id)
	}
	for _, r := range l.overflow[l.ovHead:] {
		out = append(out, r.AttemptID)
	}
	if l.inFlight {
		out = append(out, l.pumping)
	}
	return out
}
