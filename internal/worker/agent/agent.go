// Package agent is the composition root of a worker: its slots (the local
// executor with its reaper, pod tasks through Kubernetes), the stream to the
// leader that feeds them, and the order in which it stops. `orion worker`
// runs one (StartWorker); so does every replica, for its own slots, dialling
// the leader through its own view of the cluster (internal/server).
//
// Read it as New (everything built, nothing running), Start (the stream and
// the pods' sweep run), then Stop (a drain: nothing new taken, what runs
// finishes or is cancelled, every result handed over) or Close (at once).
package agent

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/worker/executor"
	"github.com/orion-sched/orion/internal/worker/executor/pod"
	"github.com/orion-sched/orion/internal/workerstream"
)

// HandOverTimeout bounds how long a stopping worker tries to hand its last
// results (those of attempts that finished while it drained, and the
// Cancelled ones of those it then stopped) to the leader.
const HandOverTimeout = 3 * time.Second

// Config is what one worker is made of. A standalone worker's comes from
// its settings (WorkerConfig); a replica fills in its own.
type Config struct {
	// ID names this process's slots in results. A restarted worker is a new
	// worker (its id changes), so that the attempts of the one that died
	// become orphans rather than being adopted.
	ID string
	// Slots is how many attempts run at once. 0 (a replica started with
	// --slots 0) runs nothing but keeps the stream, which tells its owner
	// at once when the leader dies.
	Slots int
	// LogDir holds the attempts' logs and the reaper's journal.
	LogDir string
	// SecretsDir holds the secrets shell tasks' env_from read
	// (executor.LocalConfig.SecretsDir).
	SecretsDir string
	// Labels go in every hello; the pods label is added when Pods is set.
	Labels model.Labels
	// Pods runs pod tasks (nil: none), swept every PodSweepEvery.
	Pods          *pod.Runner
	PodSweepEvery time.Duration
	// DrainTimeout is how long Stop lets running attempts finish.
	DrainTimeout time.Duration

	// The stream to the leader (workerstream.AgentConfig).
	Dial         func(ctx context.Context) (workerstream.Conn, string, error)
	OnPeers      func([]workerstream.Peer)
	Replica      string // set for a replica's own slots: its name
	StaleAfter   time.Duration
	OnLeaderLost func(leader string)
	MinBackoff   time.Duration
	MaxBackoff   time.Duration

	// Logger is the parent of the executor's ("executor") and the
	// stream's (StreamLog, "stream" when empty) loggers.
	Logger    *zap.Logger
	StreamLog string
}

// Agent is one worker: its slots and its stream to the leader.
type Agent struct {
	cfg    Config
	log    *zap.Logger
	exec   executor.Executor
	local  *executor.Local // nil with no slots
	stream *workerstream.Agent

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// New builds the worker's slots (starting the reaper that makes their
// processes die with this one) and its stream client. Nothing runs yet.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StreamLog == "" {
		cfg.StreamLog = "stream"
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, done: make(chan struct{})}
	labels := cfg.Labels
	if cfg.Slots > 0 {
		lc := executor.LocalConfig{ID: cfg.ID, Slots: cfg.Slots, LogDir: cfg.LogDir, Logger: cfg.Logger.Named("executor"), SecretsDir: cfg.SecretsDir}
		if cfg.Pods != nil {
			lc.Pods = cfg.Pods
			// It runs pod tasks: the leader sends them only to workers
			// that say so (every pod task requires the label).
			labels = maps.Clone(labels)
			if labels == nil {
				labels = model.Labels{}
			}
			labels[model.PodsLabel] = "true"
		}
		local, err := executor.NewLocal(lc)
		if err != nil {
			return nil, err
		}
		a.exec, a.local = local, local
	} else {
		a.exec = newIdleExecutor(cfg.ID)
	}
	a.cfg.Labels = labels
	a.stream = workerstream.NewAgent(workerstream.AgentConfig{
		Exec:         a.exec,
		Dial:         cfg.Dial,
		Replica:      cfg.Replica,
		Labels:       labels,
		StaleAfter:   cfg.StaleAfter,
		OnLeaderLost: cfg.OnLeaderLost,
		OnPeers:      cfg.OnPeers,
		MinBackoff:   cfg.MinBackoff,
		MaxBackoff:   cfg.MaxBackoff,
		Logger:       cfg.Logger.Named(cfg.StreamLog),
	})
	return a, nil
}

// Start keeps the stream to the leader (and sweeps finished pods) until ctx
// ends, Stop or Close is called, or the leader refuses this worker (Err).
func (a *Agent) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	go func() {
		err := a.stream.Run(ctx)
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		close(a.done)
	}()
	if a.cfg.Pods != nil {
		go a.cfg.Pods.Sweep(ctx, a.cfg.PodSweepEvery)
	}
}

// Done is closed when the stream stops: by Stop, Close or Start's context,
// or early when the leader refuses this worker.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err is why the stream stopped early: a configuration error, or the
// leader's refusal of this worker (its id, slots or labels), which the same
// hello would meet again. Nil while it runs and after a stop.
func (a *Agent) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// ID is the worker's id, Labels what its hello says, Local its executor
// (nil with no slots).
func (a *Agent) ID() string             { return a.cfg.ID }
func (a *Agent) Labels() model.Labels   { return a.cfg.Labels }
func (a *Agent) Local() *executor.Local { return a.local }

// Stop drains the worker: no new attempts (the leader hears it at once),
// and those running get DrainTimeout to finish, so that a rolling update
// of workers runs nothing twice that could finish in time. What still runs
// then reports Cancelled and is re-queued (pod tasks' pods are left
// running, for the worker the leader hands them to); every result goes to
// the leader before the stream ends. Call it once, after Start.
func (a *Agent) Stop() {
	a.stream.StopTaking()
	if a.local != nil {
		a.local.StopTaking()
		others, podAttempts := a.local.Running()
		a.log.Info("draining: taking no new attempts, letting the running ones finish",
			zap.Int("running", others), zap.Int("pod_tasks", podAttempts), zap.Duration("drain_timeout", a.cfg.DrainTimeout))
		dctx, cancel := context.WithTimeout(context.Background(), a.cfg.DrainTimeout)
		if err := a.local.WaitIdle(dctx); err != nil {
			others, _ = a.local.Running()
			a.log.Warn("drain timeout: cancelling the attempts still running (the leader re-queues them)", zap.Int("running", others))
		}
		cancel()
	}
	_ = a.exec.Close()
	hctx, cancel := context.WithTimeout(context.Background(), HandOverTimeout)
	if err := a.stream.Drain(hctx); err != nil {
		a.log.Warn("could not hand every result to the leader before exiting; it will re-queue those attempts when the worker is gone",
			zap.Error(err))
	}
	cancel()
	a.cancel()
	<-a.done
}

// Close stops at once: the stream ends and what runs reports Cancelled to
// nobody (the leader re-queues it as an orphan). It does not wait for the
// stream's goroutine.
func (a *Agent) Close() error {
	if a.cancel != nil {
		a.cancel()
	}
	return a.exec.Close()
}

// idleExecutor stands in for the slots of a replica started with --slots 0:
// it runs nothing, but its stream to the leader still tells the replica at
// once when the leader dies.
type idleExecutor struct {
	id      string
	results chan model.Result
}

func newIdleExecutor(id string) *idleExecutor {
	return &idleExecutor{id: id, results: make(chan model.Result, 16)}
}

func (x *idleExecutor) ID() string                   { return x.id }
func (x *idleExecutor) Slots() int                   { return 0 }
func (x *idleExecutor) Close() error                 { return nil }
func (x *idleExecutor) Cancel(model.AttemptID)       {}
func (x *idleExecutor) InFlight() []model.AttemptID  { return nil }
func (x *idleExecutor) Results() <-chan model.Result { return x.results }
func (x *idleExecutor) OpenLog(model.AttemptID) (io.ReadCloser, error) {
	return nil, fmt.Errorf("replica has no slots: %w", os.ErrNotExist)
}

// Start is never called (the leader dispatches nothing to zero slots); if it
// were, the attempt is handed back at once without consuming a retry.
func (x *idleExecutor) Start(a model.Attempt) {
	select {
	case x.results <- model.Result{AttemptID: a.AttemptID, Worker: x.id, Outcome: model.Cancelled, ExitCode: -1, Error: "replica has no slots"}:
	default:
	}
}
