package engine

import (
	"context"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// Store is everything the engine needs of etcd: one narrow seam, so that the
// engine can be driven over a fake store with injected failures
// (store.Etcd is the production implementation).
type Store interface {
	// Load reads every record at one revision.
	Load(ctx context.Context) (*store.Snapshot, error)
	// Watch follows the log from revision from (see store.WatchEvent).
	Watch(ctx context.Context, from int64) <-chan store.WatchEvent
	// RequestProgress asks for a progress notification on the watch.
	RequestProgress(ctx context.Context) error
	// OpenSession opens a lease and registers the replica on it. ctx is the
	// session's life; the store bounds the opening itself.
	OpenSession(ctx context.Context, ttl time.Duration, reg store.ReplicaRecord) (store.Session, error)
	// Campaign blocks until this replica leads on session, or ctx ends.
	Campaign(ctx context.Context, session store.Session, name string) (store.Term, error)
	// Begin places a commit of entries, fenced on fence, after every
	// commit begun before it, without I/O; its Commit may then run while
	// earlier ones are in flight and still applies after them, or not at
	// all if one of them failed. term, when set, is written first (the
	// term's first write).
	Begin(fence store.Fence, entries []core.Entry, lim store.Limits, term *store.TermRecord) store.PendingCommit
	// CurrentLeader reads who leads.
	CurrentLeader(ctx context.Context) (store.Leader, bool, error)
	// Depose revokes the named leader's lease if it still leads.
	Depose(ctx context.Context, suspect string) (bool, error)
}

var _ Store = (*store.Etcd)(nil)

// Worker is a worker as the engine drives it: workerstream.RemoteWorker, for
// remote workers and a replica's own slots alike.
type Worker interface {
	Slots() int
	// Labels are the worker's labels (its latest hello's); only tasks
	// whose required labels it has are dispatched to it.
	Labels() model.Labels
	// Start dispatches an attempt; it never blocks.
	Start(a model.Attempt)
	// Cancel asks the worker to stop an attempt; it never blocks.
	Cancel(id model.AttemptID)
	// Ack tells the worker that its result for id is durable (committed,
	// or moot because the log had moved on), so it may forget it. Until
	// then the worker keeps the result and sends it again to every leader
	// it connects to: a result is never lost with a leader that took it
	// and died (or resynchronised) before committing it.
	Ack(id model.AttemptID)
}

// Clock is the engine's only source of time, so that a test can drive
// timeouts, retries and backoff deterministically.
type Clock interface {
	Now() time.Time
	// After delivers once, d from now.
	After(d time.Duration) <-chan time.Time
	// NewTimer returns a stopped-or-running timer that can be reset.
	NewTimer(d time.Duration) Timer
	// NewTicker delivers every d.
	NewTicker(d time.Duration) Ticker
}

// Timer is the part of *time.Timer the engine uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// Ticker is the part of *time.Ticker the engine uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (wallClock) NewTimer(d time.Duration) Timer         { return wallTimer{time.NewTimer(d)} }
func (wallClock) NewTicker(d time.Duration) Ticker       { return wallTicker{time.NewTicker(d)} }

type wallTimer struct{ *time.Timer }

func (t wallTimer) C() <-chan time.Time { return t.Timer.C }

type wallTicker struct{ *time.Ticker }

func (t wallTicker) C() <-chan time.Time { return t.Ticker.C }
