package core

// ErrCode says which kind of refusal an Error or a LimitError is. The core
// names its refusals in its own terms; the HTTP layer maps each code to the
// API's wire code and status in one place (internal/http/kit, CoreError).
type ErrCode uint8

const (
	CodeNotFound  ErrCode = iota + 1 // no such DAG, task or schedule
	CodeConflict                     // the DAG's (or schedule's) state or content does not allow it
	CodeNotLeader                    // a leader-only request on a replica that does not lead
	// The global limits (LimitError): each refusal's message names the
	// setting and its value.
	CodeTooManyLiveDAGs  // max_live_dags DAGs are running
	CodeTooManyLiveTasks // running DAGs hold max_live_tasks tasks
	CodeTooManySchedules // max_schedules schedules exist
)

var errCodeNames = [...]string{CodeNotFound: "not_found", CodeConflict: "conflict", CodeNotLeader: "not_leader",
	CodeTooManyLiveDAGs: "too_many_live_dags", CodeTooManyLiveTasks: "too_many_live_tasks",
	CodeTooManySchedules: "too_many_schedules"}

// String names the code (for logs and tests).
func (c ErrCode) String() string {
	if int(c) < len(errCodeNames) && errCodeNames[c] != "" {
		return errCodeNames[c]
	}
	return "unknown"
}

// Error is a request the core refuses; Code is CodeNotFound, CodeConflict or
// CodeNotLeader.
type Error struct {
	Code ErrCode
	Msg  string
	// Stopping marks a refusal that lasts only until the DAG's tasks have
	// stopped (cancelled attempts still on their workers): the same
	// request, made again shortly, can succeed.
	Stopping bool
}

func (e *Error) Error() string { return e.Msg }

// ErrNotLeader refuses a leader-only request on a replica that is not. It is
// the only not-leader error: the scheduler returns it too (as
// engine.ErrNotLeader) when it loses leadership under a request.
var ErrNotLeader = &Error{Code: CodeNotLeader, Msg: "this replica is not the leader"}
