package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/store"
)

// fakeStore is an in-memory etcd for the engine: a log of committed
// entries with revisions, the current records, watches, one election, and
// hooks that inject the failures a real cluster produces.
type fakeStore struct {
	mu       sync.Mutex
	rev      int64
	compact  int64 // revisions up to this one are compacted away
	log      []core.Entry
	dags     map[string]core.Entry // latest DAG record, Rev = create revision
	tasks    map[string]core.Entry // "dag/task" → latest task record
	term     *store.TermRecord
	termRev  int64
	watches  []*fakeWatch
	fenceRev int64 // the live term's fence; 0: nobody leads
	leader   string
	holder   *fakeSession // the session the live term's election key is on
	tail     *fakePending // the commit begun last
	sessions []*fakeSession
	loads    int // Load calls, to see reloads
	// seen holds the DAGs of every Commit call so far, applied or not.
	seen    map[string]bool
	hooked  map[string]bool // DAGs of the commit calls that took the hook
	batches []int           // entries per Commit call, in order

	// commitHook, when set, decides a Commit's fate: apply it or not, and
	// what to return. It runs without the lock and may block.
	commitHook func(entries []core.Entry) (apply bool, err error)
	// loser names replicas whose Campaign never wins.
	loser map[string]bool
	// up is closed while etcd answers; while it is open (quorum lost),
	// Load, OpenSession, Commit, TermRecord and Campaign wait for it or
	// for their context, as requests to an etcd without quorum do.
	up chan struct{}
	// loadGate, when set, holds every Load until it is closed (`loads
	// hold|release`): a re-read that is slow, or waits for quorum, while
	// the rest of etcd answers.
	loadGate chan struct{}
	// wins records every Campaign that returned a term, as name@fence.
	wins []string
	// The next loseDeposes Depose requests are never answered (`depose
	// lose=N`), as requests etcd forwarded to a raft leader that died;
	// lostDeposes counts those, deposes those answered.
	deposes, loseDeposes, lostDeposes int
	// leaseErr, when set, refuses every new session, as etcd under its
	// NOSPACE alarm refuses every lease grant.
	leaseErr error
	// maxOps and maxRequest are etcd's --max-txn-ops and
	// --max-request-bytes: a commit over either is refused whole
	// (store.ErrTooManyOps, store.ErrRequestTooLarge). 0: no limit.
	maxOps, maxRequest int
}

// unavailable waits while etcd is down: nil once it is up, ctx's error if
// ctx ends first.
func (s *fakeStore) unavailable(ctx context.Context) error {
	s.mu.Lock()
	up := s.up
	s.mu.Unlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("etcdserver: request timed out (no quorum): %w", ctx.Err())
	}
}

// holdLoads makes every Load wait (hold) until the loads are released.
func (s *fakeStore) holdLoads(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case hold && s.loadGate == nil:
		s.loadGate = make(chan struct{})
	case !hold && s.loadGate != nil:
		close(s.loadGate)
		s.loadGate = nil
	}
}

// setUp makes etcd answer (true) or lose quorum (false).
func (s *fakeStore) setUp(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.up:
		if !up {
			s.up = make(chan struct{})
		}
	default:
		if up {
			close(s.up)
		}
	}
}

func newFakeStore() *fakeStore {
	up := make(chan struct{})
	close(up)
	return &fakeStore{dags: map[string]core.Entry{}, tasks: map[string]core.Entry{}, loser: map[string]bool{}, seen: map[string]bool{},
		hooked: map[string]bool{}, up: up, maxOps: store.DefaultLimits.MaxOps, maxRequest: store.DefaultLimits.MaxRequest}
}

type fakeWatch struct {
	ch     chan store.WatchEvent
	ctx    context.Context
	from   int64 // the revision it started from
	closed bool
}

func (s *fakeStore) Load(ctx context.Context) (*store.Snapshot, error) {
	if err := s.unavailable(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	gate := s.loadGate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	snap := &store.Snapshot{Rev: s.rev}
	if s.term != nil {
		t := *s.term
		snap.Term = &t
	}
	for _, e := range s.dags {
		snap.DAGs = append(snap.DAGs, e)
	}
	for _, e := range s.tasks {
		snap.Tasks = append(snap.Tasks, e)
	}
	sort.Slice(snap.DAGs, func(i, j int) bool { return snap.DAGs[i].DAG < snap.DAGs[j].DAG })
	sort.Slice(snap.Tasks, func(i, j int) bool {
		return snap.Tasks[i].DAG+"/"+snap.Tasks[i].Task < snap.Tasks[j].DAG+"/"+snap.Tasks[j].Task
	})
	return snap, nil
}

func (s *fakeStore) Watch(ctx context.Context, from int64) <-chan store.WatchEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &fakeWatch{ch: make(chan store.WatchEvent, 1024), ctx: ctx, from: from}
	// etcd keeps the compaction's own revision: a watch from it is an
	// ordinary one.
	if from < s.compact {
		w.ch <- store.WatchEvent{Compacted: true, CompactRev: s.compact}
		close(w.ch)
		return w.ch
	}
	var backlog []core.Entry
	for _, e := range s.log {
		if e.Rev >= from {
			backlog = append(backlog, e)
		}
	}
	if len(backlog) > 0 {
		w.ch <- store.WatchEvent{Entries: backlog, MaxRev: backlog[len(backlog)-1].Rev, HeaderRev: s.rev}
	}
	s.watches = append(s.watches, w)
	return w.ch
}

// deliverLocked sends ev to every open watch whose context is alive.
func (s *fakeStore) deliverLocked(ev store.WatchEvent) {
	for _, w := range s.watches {
		if w.closed || w.ctx.Err() != nil {
			continue
		}
		w.ch <- ev
	}
}

// closeWatches closes every watch channel without a word, as a client that
// ends does.
func (s *fakeStore) closeWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watches {
		if !w.closed {
			w.closed = true
			close(w.ch)
		}
	}
	s.watches = nil
}

// compactTo compacts the history through rev: a watch from a revision
// before it is told so. An open watch goes on, as a caught-up etcd watch
// does (every open watch here is: it is sent each commit as it happens);
// one that fell behind is a watch started again after close-watch.
func (s *fakeStore) compactTo(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compact = rev
}

// RequestProgress tells the open watches etcd's revision, as etcd does
// for a watch whose start revision it has reached; a watch from a revision
// still to come hears nothing.
func (s *fakeStore) RequestProgress(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watches {
		if w.closed || w.ctx.Err() != nil || w.from > s.rev {
			continue
		}
		w.ch <- store.WatchEvent{Progress: true, HeaderRev: s.rev}
	}
	return nil
}

// electedLocked is what a campaign that wins now reads with its decision,
// as store.Campaign does: the term record and the revision.
func (s *fakeStore) electedLocked() store.Elected {
	el := store.Elected{Rev: s.rev}
	if s.term != nil {
		prev := *s.term
		el.Prev = &prev
	}
	return el
}

type fakeSession struct {
	done chan struct{}
	once sync.Once
	s    *fakeStore
	ttl  time.Duration
}

func (f *fakeSession) Done() <-chan struct{} { return f.done }
func (f *fakeSession) end()                  { f.once.Do(func() { close(f.done) }) }

// Close revokes the lease: the election key on it goes at once.
func (f *fakeSession) Close() error {
	f.end()
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.revokeLocked(f)
	return nil
}

// Orphan stops the keep-alives, as a crash does: the session is over for
// its holder at once, and etcd lets the lease (and the election key on it)
// go after the TTL.
func (f *fakeSession) Orphan() {
	f.end()
	time.AfterFunc(f.ttl, func() {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		f.s.revokeLocked(f)
	})
}

// revokeLocked drops the election key on f's lease, if it holds it.
func (s *fakeStore) revokeLocked(f *fakeSession) {
	if s.holder == f {
		s.fenceRev, s.leader, s.holder = 0, "", nil
	}
}

// Release revokes the lease once etcd answers: a lingering election key on
// it goes (see loseLeaseLinger).
func (f *fakeSession) Release(ctx context.Context) error {
	if err := f.s.unavailable(ctx); err != nil {
		return err
	}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.s.revokeLocked(f)
	return nil
}

func (s *fakeStore) OpenSession(ctx context.Context, ttl time.Duration, reg store.ReplicaRecord) (store.Session, error) {
	// Bounded as the real store bounds the opening (ctx is the session's
	// life, not a deadline).
	octx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.unavailable(octx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaseErr != nil {
		return nil, s.leaseErr
	}
	fs := &fakeSession{done: make(chan struct{}), s: s, ttl: max(ttl, time.Second)}
	s.sessions = append(s.sessions, fs)
	return fs, nil
}

// loseLease ends every session, as an expired or revoked lease does: the
// live term's fence goes with it.
func (s *fakeStore) loseLease() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = nil
	s.fenceRev, s.leader, s.holder = 0, "", nil
	s.mu.Unlock()
	for _, fs := range sessions {
		fs.end()
	}
}

// loseLeaseLinger ends every session on the client's side only, as keep-
// alives that give up during a quorum loss do: etcd still holds the leases
// (it extends them when it elects a leader again), so the leader's election
// key lingers and no candidate wins until the lease is revoked (Release).
func (s *fakeStore) loseLeaseLinger() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	for _, fs := range sessions {
		fs.end()
	}
}

type fakeTerm struct {
	fence   store.Fence
	won     time.Time
	session *fakeSession
	s       *fakeStore
	elected store.Elected
}

func (t *fakeTerm) Elected() store.Elected { return t.elected }

func (t *fakeTerm) Fence() store.Fence    { return t.fence }
func (t *fakeTerm) Won() time.Time        { return t.won }
func (t *fakeTerm) Done() <-chan struct{} { return t.session.done }
func (t *fakeTerm) Resign(ctx context.Context) error {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.s.fenceRev == t.fence.Rev {
		t.s.fenceRev, t.s.leader, t.s.holder = 0, "", nil
	}
	return nil
}

// Campaign wins at once when nobody leads (unless the replica is a loser),
// otherwise waits for ctx, as a candidate behind a live leader does. A
// campaign on a session whose election key already leads wins again at
// once, with the same fence: etcd's election key is the lease's
// (concurrency.Election.Campaign finds it, keeps its create revision and
// has no older key to wait for).
func (s *fakeStore) Campaign(ctx context.Context, session store.Session, name string) (store.Term, error) {
	fs := session.(*fakeSession)
	for {
		select {
		case <-fs.done:
			// A lease that is gone cannot hold an election key.
			return nil, errors.New("session ended while campaigning")
		default:
		}
		s.mu.Lock()
		up := false
		select {
		case <-s.up:
			up = true
		default:
		}
		if up && s.fenceRev != 0 && s.holder == fs && s.leader == name {
			t := &fakeTerm{fence: store.Fence{Key: "/orion/v1/election/" + name, Rev: s.fenceRev}, won: time.Now(), session: fs, s: s, elected: s.electedLocked()}
			s.wins = append(s.wins, fmt.Sprintf("%s@%d", name, s.fenceRev))
			s.mu.Unlock()
			return t, nil
		}
		if up && s.fenceRev == 0 && !s.loser[name] {
			s.rev++
			s.fenceRev, s.leader, s.holder = s.rev, name, fs
			t := &fakeTerm{fence: store.Fence{Key: "/orion/v1/election/" + name, Rev: s.rev}, won: time.Now(), session: fs, s: s, elected: s.electedLocked()}
			s.wins = append(s.wins, fmt.Sprintf("%s@%d", name, s.rev))
			s.mu.Unlock()
			return t, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-fs.done:
			return nil, errors.New("session ended while campaigning")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Begin chains a commit after the ones begun before, as store.Writer does
// with its commit markers: it applies only after its predecessor did, and
// fails, unapplied, when its predecessor failed.
func (s *fakeStore) Begin(fence store.Fence, entries []core.Entry, lim store.Limits, term *store.TermRecord) store.PendingCommit {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.tail
	if prev != nil && prev.failed() {
		prev = nil
	}
	p := &fakePending{s: s, fence: fence, entries: entries, lim: lim, term: term, prev: prev, done: make(chan struct{})}
	s.tail = p
	for _, e := range entries {
		s.seen[e.DAG] = true // in a commit, or queued behind one
	}
	return p
}

type fakePending struct {
	s       *fakeStore
	fence   store.Fence
	entries []core.Entry
	lim     store.Limits
	term    *store.TermRecord
	prev    *fakePending
	done    chan struct{}
	err     error
}

func (p *fakePending) failed() bool {
	select {
	case <-p.done:
		return p.err != nil
	default:
		return false
	}
}

func (p *fakePending) Commit(ctx context.Context) (res store.Committed, err error) {
	defer func() {
		p.err, p.prev = err, nil
		close(p.done)
	}()
	if prev := p.prev; prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
			return store.Committed{}, ctx.Err()
		}
		if prev.err != nil {
			return store.Committed{}, &store.PredecessorError{Err: prev.err}
		}
	}
	return p.s.commit(ctx, p.fence, p.entries, p.lim, p.term)
}

func (s *fakeStore) commit(ctx context.Context, fence store.Fence, entries []core.Entry, lim store.Limits, term *store.TermRecord) (store.Committed, error) {
	if err := s.unavailable(ctx); err != nil {
		return store.Committed{}, err
	}
	apply, err := true, error(nil)
	s.mu.Lock()
	if err := s.refusedLocked(entries, term); err != nil {
		s.mu.Unlock()
		return store.Committed{}, err
	}
	s.batches = append(s.batches, len(entries))
	for _, e := range entries {
		s.seen[e.DAG] = true
		s.hooked[e.DAG] = true
	}
	hook := s.commitHook
	s.mu.Unlock()
	if hook != nil {
		apply, err = hook(entries)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence.Rev != s.fenceRev {
		return store.Committed{}, store.ErrFenced
	}
	out := store.Committed{}
	if apply {
		s.rev++
		if term != nil {
			rec := *term
			s.term, s.termRev = &rec, s.rev
		}
		var applied []core.Entry
		for _, e := range entries {
			e.Rev = s.rev
			s.applyLocked(e)
			applied = append(applied, e)
			if err == nil {
				out.Revs = append(out.Revs, s.rev)
			}
		}
		out.Txns = 1
		s.deliverLocked(store.WatchEvent{Entries: applied, MaxRev: s.rev, HeaderRev: s.rev})
	}
	return out, err
}

// refusedLocked is etcd's refusal of a transaction for its operations
// (the entries', the term record, the commit marker) or its bytes, before
// anything else: it applies nothing. A batch is one transaction here (the
// engine sizes them so).
func (s *fakeStore) refusedLocked(entries []core.Entry, term *store.TermRecord) error {
	ops, bytes := 1, 0 // the commit marker
	if term != nil {
		ops++
	}
	for i := range entries {
		eops, n, err := store.Ops(&entries[i])
		if err != nil {
			return err
		}
		ops, bytes = ops+len(eops), bytes+n
	}
	switch {
	case s.maxOps > 0 && ops > s.maxOps:
		return store.ErrTooManyOps
	case s.maxRequest > 0 && bytes > s.maxRequest:
		return store.ErrRequestTooLarge
	}
	return nil
}

func (s *fakeStore) setCommitHook(h func(entries []core.Entry) (bool, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitHook = h
}

func (s *fakeStore) applyLocked(e core.Entry) {
	s.log = append(s.log, e)
	switch {
	case e.Task != "":
		s.tasks[e.DAG+"/"+e.Task] = e
	case e.Delete:
		delete(s.dags, e.DAG)
		for k := range s.tasks {
			if len(k) > len(e.DAG) && k[:len(e.DAG)+1] == e.DAG+"/" {
				delete(s.tasks, k)
			}
		}
	default:
		if old, ok := s.dags[e.DAG]; ok {
			e.Rev = old.Rev // a DAG record keeps its create revision
		}
		s.dags[e.DAG] = e
	}
}

func (s *fakeStore) CurrentLeader(ctx context.Context) (store.Leader, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenceRev == 0 {
		return store.Leader{}, false, nil
	}
	return store.Leader{Name: s.leader, Key: "/orion/v1/election/" + s.leader, Rev: s.fenceRev}, true, nil
}

func (s *fakeStore) Depose(ctx context.Context, suspect string) (bool, error) {
	s.mu.Lock()
	if s.loseDeposes > 0 {
		// Forwarded to a raft leader that died: never answered.
		s.loseDeposes--
		s.lostDeposes++
		s.mu.Unlock()
		<-ctx.Done()
		return false, ctx.Err()
	}
	defer s.mu.Unlock()
	s.deposes++
	if s.leader != suspect {
		return false, nil
	}
	// The suspect's lease is revoked: its election key goes, and the
	// election is free for the candidates it kept waiting; its session
	// learns it at its next keep-alive.
	if s.holder != nil {
		s.holder.end()
	}
	s.fenceRev, s.leader, s.holder = 0, "", nil
	clear(s.loser)
	return true, nil
}

// otherLeaderWins moves the fence: replica "x" won the election, and n1
// loses every campaign until other-leader-gone.
func (s *fakeStore) otherLeaderWins() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	s.fenceRev, s.leader = s.rev, "x"
	s.loser["n1"] = true
}

// hookedCommitOf reports whether a commit call with an entry of the DAG
// has taken the commit hook in force then (Begin is earlier).
func (s *fakeStore) hookedCommitOf(dagID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hooked[dagID]
}

func (s *fakeStore) sawCommitOf(dagID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[dagID]
}

func (s *fakeStore) loadCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads
}

var _ Store = (*fakeStore)(nil)

// fakeWorker is a remote worker whose attempts finish when the test says.
// Like the real agent it keeps each result until the leader acknowledges it,
// and sends what it keeps again when it rejoins a leader.
type fakeWorker struct {
	id           string
	slots        int
	labels       model.Labels
	standalone   bool // a worker process of its own (early attempts)
	silent       bool // never joins a new leader (it died, or hangs)
	mu           sync.Mutex
	running      []model.AttemptID // started, not finished or cancelled
	sent         []model.Attempt   // every attempt started, as sent
	totalStarted int
	cancels      []model.AttemptID
	unacked      []model.Result
	acks         int
	hooks        []string // handlers' and notifications' attempts, as `hooks` prints them
}

func (w *fakeWorker) Release(id model.AttemptID) { w.Cancel(id) }

func (w *fakeWorker) Ack(id model.AttemptID, _ bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range w.unacked {
		if r.AttemptID == id {
			w.unacked = append(w.unacked[:i], w.unacked[i+1:]...)
			w.acks++
			return
		}
	}
}

// finished records results the worker now keeps until acknowledged.
func (w *fakeWorker) finished(rs []model.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unacked = append(w.unacked, rs...)
	// A worker that reports an attempt's end runs it no more: a later
	// hello lists it as a result, not as running.
	for _, r := range rs {
		w.running = slices.DeleteFunc(w.running, func(id model.AttemptID) bool { return id == r.AttemptID })
	}
}

// hello is what the worker reports on joining a leader: what it runs and
// what it has results for, then the results themselves.
func (w *fakeWorker) hello() ([]model.AttemptID, []model.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := append([]model.AttemptID(nil), w.running...)
	for _, r := range w.unacked {
		ids = append(ids, r.AttemptID)
	}
	return ids, append([]model.Result(nil), w.unacked...)
}

func (w *fakeWorker) ID() string           { return w.id }
func (w *fakeWorker) Slots() int           { return w.slots }
func (w *fakeWorker) Labels() model.Labels { return w.labels }
func (w *fakeWorker) Close() error         { return nil }
func (w *fakeWorker) Start(a model.Attempt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = append(w.running, a.AttemptID)
	w.sent = append(w.sent, a)
	w.totalStarted++
	if st, ok := a.Spec.Env[core.EnvDAGStatus]; ok {
		w.hooks = append(w.hooks, fmt.Sprintf("%s %s=%s %s=%s\n", a.AttemptID, core.EnvDAGStatus, st,
			core.EnvFailedTasks, a.Spec.Env[core.EnvFailedTasks]))
	}
	if k := a.Spec.Headers["Idempotency-Key"]; k != "" {
		w.hooks = append(w.hooks, fmt.Sprintf("%s key=%s\n", a.AttemptID, k))
	}
}
func (w *fakeWorker) Cancel(id model.AttemptID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancels = append(w.cancels, id)
	for i, r := range w.running {
		if r == id {
			w.running = append(w.running[:i], w.running[i+1:]...)
			break
		}
	}
}
func (w *fakeWorker) Results() <-chan model.Result { return nil }
func (w *fakeWorker) InFlight() []model.AttemptID  { return w.runningIDs() }
func (w *fakeWorker) OpenLog(model.AttemptID) (io.ReadCloser, error) {
	return nil, errors.New("no logs")
}

func (w *fakeWorker) startedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.totalStarted
}

func (w *fakeWorker) runningIDs() []model.AttemptID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]model.AttemptID(nil), w.running...)
}

// takeRunning returns what runs now and forgets it (the attempts finish).
func (w *fakeWorker) takeRunning() []model.AttemptID {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.running
	w.running = nil
	return out
}

// errTooLarge is etcd's refusal of a request over --max-request-bytes.
var errTooLarge = store.ErrRequestTooLarge

// fakeClock is a clock that moves only when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
}

type fakeTimer struct {
	clk    *fakeClock
	c      chan time.Time
	at     time.Time
	period time.Duration // tickers
	active bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d, period time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clk: c, c: make(chan time.Time, 1), at: c.now.Add(d), period: period, active: true}
	c.timers = append(c.timers, t)
	return t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time { return c.add(d, 0).c }
func (c *fakeClock) NewTimer(d time.Duration) Timer         { return c.add(d, 0) }
func (c *fakeClock) NewTicker(d time.Duration) Ticker       { return fakeTicker{c.add(d, d)} }

func (t *fakeTimer) C() <-chan time.Time { return t.c }

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }
func (k fakeTicker) Stop()               { k.t.Stop() }
func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := t.active
	t.active = false
	return was
}
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := t.active
	t.at, t.active = t.clk.now.Add(d), true
	return was
}

// Advance moves time on and fires every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		for t.active && !t.at.After(c.now) {
			select {
			case t.c <- t.at:
			default:
			}
			if t.period == 0 {
				t.active = false
				break
			}
			t.at = t.at.Add(t.period)
		}
	}
}
