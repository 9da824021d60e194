package kit

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/url"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// ClusterInfo is what a replica knows of the cluster beyond its own state.
// Nil means a lone process: the cluster endpoint describes only this node
// and writes are never forwarded.
type ClusterInfo interface {
	// Replicas lists the registered replicas (name and API URL).
	Replicas(ctx context.Context) ([]apitypes.ReplicaAddr, error)
	// LeaderAddr names the leader and its API URL; ok is false when there is
	// no leader.
	LeaderAddr(ctx context.Context) (addr apitypes.ReplicaAddr, ok bool, err error)
	// Members lists the etcd cluster's members.
	Members(ctx context.Context) ([]apitypes.EtcdMember, error)
	// Workers describes the workers connected to this replica's hub (the
	// leader's view; empty elsewhere).
	Workers() []apitypes.Worker
}

// DefaultMaxBodyBytes bounds a submitted DAG when no limit is configured:
// 32 MiB holds dag.DefaultMaxTasks (100,000) tasks of about 330 bytes
// each in JSON, several times an ordinary task (a noop task with one
// dependency is about 60). The per-field limits (a command's 64 KiB...)
// still bound each task.
const DefaultMaxBodyBytes = 32 << 20

// LeaderTimeout bounds the etcd read that finds the leader.
const LeaderTimeout = 3 * time.Second

// LeaderWatch is a ClusterInfo that says when its view of the leader
// changes (the server's follows etcd with a watch). A Forwarder uses it to
// abandon a write sent to a leader that has been deposed, and to learn the
// successor the moment it is elected; without it, a forwarded write waits
// for the leader it was sent to, however long it is frozen.
type LeaderWatch interface {
	// WatchLeader returns the leader as the view has it (ok false: none)
	// and a channel closed when the view next changes.
	WatchLeader() (addr apitypes.ReplicaAddr, ok bool, changed <-chan struct{})
}

// Forwarder sends a write a standby received to the leader and relays the
// leader's answer: the API's and the seed API's writes share it.
type Forwarder struct {
	Cluster ClusterInfo  // nil: never forward
	Node    string       // this replica's name
	Client  *http.Client // nil: http.DefaultClient
	Token   string       // the cluster's bearer token ("" for none)
	// Timeout bounds each send to a leader that goes on leading (the
	// leader's own write timeout, for its commit).
	Timeout time.Duration
	// FailoverWait bounds how long a write waits for a leader to answer
	// once the one it was sent to is deposed or stops answering, and for
	// a leader to be elected when none is (default DefaultFailoverWait).
	FailoverWait time.Duration
	// AwaitRev: see Relay.AwaitRev.
	AwaitRev func(ctx context.Context, rev int64) error
}

// DefaultFailoverWait is Forwarder.FailoverWait's default. A standby
// deposes a frozen or cut-off leader within about 400 ms and a successor
// leads within milliseconds of that, so a second more covers a takeover
// with room to spare, and bounds what a client waits when none happens.
const DefaultFailoverWait = time.Second

// maxSends bounds the sends of one write: the first, a re-send to each
// successor, and re-sends to a successor that answered it was not leading
// yet.
const maxSends = 4

// resendPause is the pause before a write is sent again to a replica that
// answered 503 (not leading yet, or its commit's outcome unknown).
const resendPause = 50 * time.Millisecond

// Write is one write as a Forwarder sends it.
type Write struct {
	Body    []byte   // the request body already read (nil: none)
	Headers []string // request headers copied to the leader
	// Set are headers sent with every send: the write's identity, which
	// makes a second send of it idempotent (an id the standby chose).
	Set map[string]string
	// ResendSet and ResendQuery are added to re-sends only: what the
	// leader needs to recognise a write already applied (the run a retry
	// retries, whether the DAG existed before the first send).
	ResendSet   map[string]string
	ResendQuery url.Values
}

// Outcome says what Forward did.
type Outcome int

const (
	// NotForwarded: there is nothing to forward to (no cluster, or the
	// request was forwarded to this replica already); nothing was written.
	NotForwarded Outcome = iota
	// Answered: a leader's answer was written to w.
	Answered
	// NoLeader: no leader was known within FailoverWait; nothing was
	// written (the caller answers 503 with Retry-After).
	NoLeader
	// Unanswered: the leader did not answer and no successor did within
	// FailoverWait; nothing was written (503 with Retry-After: the write
	// may have been applied, and a retry of it with its id is safe).
	Unanswered
)

// Forwarded describes a forward: its outcome, the last leader it was sent
// to, how many times it was sent, and the last transport error.
type Forwarded struct {
	Outcome Outcome
	Leader  string
	Sends   int
	Err     error
}

// Forward relays the write r to the leader and copies the leader's answer
// to w, riding out a leader change: when the leader it was sent to is
// deposed (its standbys depose a frozen or cut-off leader within about
// 400 ms), does not answer, or answers 503, the write is abandoned there
// and sent again to the successor, at most FailoverWait after the fault,
// with its identity (wr.Set, wr.ResendSet, wr.ResendQuery), so that the
// committed state recognises a write the first leader already applied.
// The successor may be this replica: the write is then sent to its own
// API like any other leader's.
func (f Forwarder) Forward(w http.ResponseWriter, r *http.Request, wr Write) Forwarded {
	if f.Cluster == nil || r.Header.Get(ForwardedHeader) != "" {
		return Forwarded{Outcome: NotForwarded}
	}
	wait := f.FailoverWait
	if wait <= 0 {
		wait = DefaultFailoverWait
	}
	ctx := r.Context()
	target, ok := f.awaitLeader(ctx, "", time.Now().Add(wait))
	if !ok {
		return Forwarded{Outcome: NoLeader}
	}
	fw := Forwarded{Outcome: Unanswered}
	var deadline time.Time // FailoverWait after the first fault
	for ctx.Err() == nil {
		fw.Sends++
		fw.Leader = target.Name
		rl := Relay{Client: f.Client, To: target.APIURL, From: f.Node, Token: f.Token, Headers: wr.Headers,
			Set: map[string]string{LeaderHeader: target.Name}, AwaitRev: f.AwaitRev}
		resp, err := f.send(ctx, rl, r, wr, target.Name, fw.Sends > 1)
		if err == nil && resp.StatusCode != http.StatusServiceUnavailable {
			rl.answer(w, r, resp)
			fw.Outcome, fw.Err = Answered, nil
			return fw
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		// Deposed or silent: wait for another leader. It answered 503 (not
		// leading yet, or unsure whether it committed): after a pause,
		// send to whoever leads then, which may be the same replica.
		exclude := target.Name
		if err != nil {
			fw.Err = err
		} else {
			exclude = ""
			sleepCtx(ctx, resendPause)
		}
		next, ok := f.awaitLeader(ctx, exclude, deadline)
		if !ok || fw.Sends == maxSends {
			if resp != nil {
				// The last answer, a 503 with Retry-After, says why.
				rl.answer(w, r, resp)
				fw.Outcome = Answered
			}
			return fw
		}
		target = next
	}
	return fw
}

// Read relays a read r (a task log that only the leader can reach) to the
// leader and streams its answer to w, once: a read needs no failover. It
// reports NotForwarded, NoLeader, Answered, or Unanswered with Err.
func (f Forwarder) Read(w http.ResponseWriter, r *http.Request, headers []string) Forwarded {
	if f.Cluster == nil || r.Header.Get(ForwardedHeader) != "" {
		return Forwarded{Outcome: NotForwarded}
	}
	wait := f.FailoverWait
	if wait <= 0 {
		wait = DefaultFailoverWait
	}
	target, ok := f.awaitLeader(r.Context(), "", time.Now().Add(wait))
	if !ok {
		return Forwarded{Outcome: NoLeader}
	}
	err := Relay{Client: f.Client, To: target.APIURL, From: f.Node, Token: f.Token, Timeout: f.Timeout,
		Headers: headers, Set: map[string]string{LeaderHeader: target.Name}}.Do(w, r, nil)
	if err != nil {
		return Forwarded{Outcome: Unanswered, Leader: target.Name, Sends: 1, Err: err}
	}
	return Forwarded{Outcome: Answered, Leader: target.Name, Sends: 1}
}

// send sends wr to the leader named leader (at rl.To) and reads its answer
// whole. It abandons the send if the view names another leader, or none,
// before the answer came: a deposed leader is frozen or cut off, or its
// writes are fenced.
func (f Forwarder) send(ctx context.Context, rl Relay, r *http.Request, wr Write, leader string, resend bool) (*http.Response, error) {
	var (
		sctx   context.Context
		cancel context.CancelFunc
	)
	if f.Timeout > 0 {
		sctx, cancel = context.WithTimeout(ctx, f.Timeout)
	} else {
		sctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	if lw, ok := f.Cluster.(LeaderWatch); ok {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				addr, ok, changed := lw.WatchLeader()
				if !ok || addr.Name != leader {
					cancel()
					return
				}
				select {
				case <-changed:
				case <-stop:
					return
				}
			}
		}()
	}
	set := wr.Set
	var query url.Values
	if resend {
		set = maps.Clone(wr.Set)
		if set == nil {
			set = map[string]string{}
		}
		maps.Copy(set, wr.ResendSet)
		query = wr.ResendQuery
	}
	resp, err := rl.send(sctx, r, wr.Body, set, query)
	if err != nil {
		return nil, err
	}
	// Whole, before the watch may cancel it: an answer that came is
	// passed on even if the leader changes now.
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// maxAnswer bounds a leader's answer to a write that a standby holds before
// it passes it on (write answers are small JSON documents).
const maxAnswer = 1 << 20

// awaitLeader returns the leader the view names, other than exclude ("":
// any), waiting for one until deadline. ok is false when there is none by
// then, or none at all without a LeaderWatch.
func (f Forwarder) awaitLeader(ctx context.Context, exclude string, deadline time.Time) (apitypes.ReplicaAddr, bool) {
	lw, watch := f.Cluster.(LeaderWatch)
	for {
		var (
			addr    apitypes.ReplicaAddr
			ok      bool
			changed <-chan struct{}
		)
		if watch {
			addr, ok, changed = lw.WatchLeader()
		} else {
			lctx, cancel := context.WithTimeout(ctx, LeaderTimeout)
			var err error
			addr, ok, err = f.Cluster.LeaderAddr(lctx)
			cancel()
			ok = ok && err == nil
		}
		if ok && addr.APIURL != "" && addr.Name != exclude {
			return addr, true
		}
		wait := time.Until(deadline)
		if !watch || wait <= 0 {
			return apitypes.ReplicaAddr{}, false
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
			t.Stop()
		case <-t.C:
			return apitypes.ReplicaAddr{}, false
		case <-ctx.Done():
			t.Stop()
			return apitypes.ReplicaAddr{}, false
		}
	}
}

// sleepCtx pauses for d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
