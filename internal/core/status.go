package core

import "fmt"

// Status is a task's state. The values and their spelling are part of the
// API and of the etcd values operators read.
type Status uint8

const (
	Pending        Status = iota // waiting on dependencies
	Ready                        // every dependency succeeded; queued by priority
	Running                      // an attempt is dispatched to a worker
	Retrying                     // an attempt failed; backoff timer armed
	Succeeded                    // terminal
	Failed                       // terminal: retries exhausted
	UpstreamFailed               // terminal: a transitive dependency failed for good
	Cancelled                    // terminal: the DAG was cancelled
	Skipped                      // terminal: its trigger rule or condition said not to run (rules.go)
	numStatuses
)

var statusNames = [numStatuses]string{"pending", "ready", "running", "retrying", "succeeded", "failed", "upstream_failed", "cancelled", "skipped"}

func (s Status) String() string {
	if s < numStatuses {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Terminal reports whether no further attempt will run (until a DAG retry).
func (s Status) Terminal() bool { return s >= Succeeded && s < numStatuses }

func (s Status) MarshalText() ([]byte, error) {
	if s >= numStatuses {
		return nil, fmt.Errorf("invalid task status %d", uint8(s))
	}
	return []byte(statusNames[s]), nil
}

// UnmarshalText compares the bytes to each name before converting them:
// every record a standby decodes holds a status, and the comparison does
// not allocate where a conversion would.
func (s *Status) UnmarshalText(b []byte) error {
	for i, n := range statusNames {
		if string(b) == n {
			*s = Status(i)
			return nil
		}
	}
	v, err := ParseStatus(string(b))
	*s = v
	return err
}

// ParseStatus reads a task status name.
func ParseStatus(name string) (Status, error) {
	for i, n := range statusNames {
		if n == name {
			return Status(i), nil
		}
	}
	return 0, fmt.Errorf("unknown task status %q", name)
}

// transitionKind says how a task may move from one status to another.
type transitionKind uint8

const (
	never   transitionKind = iota
	written                // by a committed task record
	derived                // only while applying another entry, never by a record
)

// taskTransitions is the one table that says which task state may follow
// which, and how. Every change of a task's status goes through it: records
// through recordAllowed, derived changes through setStatus; anything else is
// a bug.
//
//	pending  → ready            derived: its trigger rule says run (all
//	                            dependencies succeeded, by default), or, for
//	                            a handler or a notification, the DAG's
//	                            other tasks ended as it waits for, or, for
//	                            a map group's instance, the group's
//	                            expansion applied (mapgroup.go)
//	pending  → skipped          written: its trigger rule says skip, or a
//	                            handler or notification is not needed for
//	                            the way the DAG ended (rules.go)
//	ready    → skipped          written: its `when:` condition is false, or
//	                            a map group's items are an empty array
//	ready    → running          written: the leader dispatched an attempt,
//	                            or expanded a map group (event expand)
//	ready    → succeeded        written: an attempt's dispatch and its success
//	                            in one record (the attempt was sent before its
//	                            dispatch record, and succeeded before that
//	                            record was sent: see Core.AllowEarly)
//	ready    → failed           written: the store refused every form of the
//	                            task's dispatch record, so it cannot run
//	                            (Core.Poisoned), or its `when:` condition
//	                            cannot be evaluated (it would fail again),
//	                            or a map group's items cannot be had or
//	                            are too many
//	running  → succeeded|failed|retrying   (a map group: once its instances
//	                            have all ended)
//	running  → ready            written: orphan or requeue; no retry consumed
//	running  → running          written: a pod task's attempt handed over to
//	                            another worker, same attempt (handover.go)
//	retrying → ready            written: the backoff timer fired
//	pending|ready|running|retrying → upstream_failed   written: its trigger rule says a
//	                                                   dependency's failure fails it
//	pending|ready|running|retrying → cancelled         written: the DAG was cancelled
//	failed|upstream_failed|cancelled|skipped → pending derived: the DAG was retried (a
//	                            map group's instance: its group expanded
//	                            again in the retry's run)
//	succeeded → pending         derived: the DAG was retried, for a handler or a
//	                            notification, which runs again at each end
var taskTransitions = func() (t [numStatuses][numStatuses]transitionKind) {
	allow := func(k transitionKind, from Status, to ...Status) {
		for _, s := range to {
			t[from][s] = k
		}
	}
	allow(derived, Pending, Ready)
	allow(written, Pending, UpstreamFailed, Cancelled, Skipped)
	allow(written, Ready, Running, Succeeded, Failed, UpstreamFailed, Cancelled, Skipped)
	allow(written, Running, Running, Succeeded, Failed, Retrying, Ready, UpstreamFailed, Cancelled)
	allow(written, Retrying, Ready, UpstreamFailed, Cancelled)
	allow(derived, Failed, Pending)
	allow(derived, UpstreamFailed, Pending)
	allow(derived, Cancelled, Pending)
	allow(derived, Skipped, Pending)
	allow(derived, Succeeded, Pending)
	return t
}()

// allowed reports whether a task may move from one status to another at all.
func allowed(from, to Status) bool {
	return from < numStatuses && to < numStatuses && taskTransitions[from][to] != never
}

// recordAllowed reports whether a committed record may move a task from one
// status to another. Derived transitions are not: a record saying "ready"
// for a task whose dependencies have not succeeded would dispatch it early.
func recordAllowed(from, to Status) bool {
	return from < numStatuses && to < numStatuses && taskTransitions[from][to] == written
}

// DAGStatus is a DAG's state.
type DAGStatus string

const (
	DAGRunning   DAGStatus = "running"
	DAGSucceeded DAGStatus = "succeeded"
	DAGFailed    DAGStatus = "failed"
	DAGCancelled DAGStatus = "cancelled"
)

// Terminal reports whether the DAG has finished.
func (s DAGStatus) Terminal() bool { return s != DAGRunning }

// dagTransitions: running ends in one of three ways; a failed or cancelled
// DAG may be retried, which starts a new run.
var dagTransitions = map[DAGStatus][]DAGStatus{
	DAGRunning:   {DAGSucceeded, DAGFailed, DAGCancelled},
	DAGFailed:    {DAGRunning},
	DAGCancelled: {DAGRunning},
}

func dagAllowed(from, to DAGStatus) bool {
	for _, s := range dagTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
