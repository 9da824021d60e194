package apitypes

// Code is an error's machine-readable code: stable for clients to switch
// on. The API sends it in ErrorInfo.Code; the seed compatibility API in its
// flat {"error", "code"} body.
type Code string

// The DAG validation codes. internal/dag spells them in its
// ValidationError.Code (a test keeps the two in step).
const (
	CodeParseError       Code = "parse_error"            // not JSON/YAML, or not the schema
	CodeUnsupportedMedia Code = "unsupported_media_type" // a Content-Type the API does not read
	CodeInvalidDAG       Code = "invalid_dag"            // a DAG rule other than the two below
	CodeCycle            Code = "cycle"                  // the only problems are cycles
	CodeTooManyTasks     Code = "too_many_tasks"         // more tasks than max_tasks_per_dag
	CodeDAGTooLarge      Code = "dag_too_large"          // over the decoded-size budget, or larger than etcd stores
	// CodeInvalidSchedule is a schedule file's problem (internal/schedule
	// spells it in its CodeInvalid).
	CodeInvalidSchedule Code = "invalid_schedule"
)

// The other codes, by the status they come with.
const (
	CodeBadRequest       Code = "bad_request"        // 400: a query parameter or header is wrong
	CodeUnauthorized     Code = "unauthorized"       // 401: missing or invalid bearer token
	CodeForbidden        Code = "forbidden"          // 403: a token whose role does not allow the request (the message names the role it needs), an origin the CORS policy refuses, or a demo control beyond loopback
	CodeCrossOrigin      Code = "cross_origin"       // 403: a write a browser sent for another site
	CodeDemoDisabled     Code = "demo_disabled"      // 403: demo controls without --demo
	CodeNotFound         Code = "not_found"          // 404: no such DAG, task, log or route
	CodeMethodNotAllowed Code = "method_not_allowed" // 405
	CodeConflict         Code = "conflict"           // 409: the DAG's state or content does not allow it
	CodeHostNotAllowed   Code = "host_not_allowed"   // 421: a Host outside the allow-list (DNS rebinding)
	CodeBodyTooLarge     Code = "body_too_large"     // 413: the request body is over the byte limit
	CodeRateLimited      Code = "rate_limited"       // 429, with Retry-After
	CodeOverloaded       Code = "overloaded"         // 429 from the seed API: too many tasks wait for a slot
	CodeTooManyStreams   Code = "too_many_streams"   // 429 (this client's share) or 503 (the replica's), with Retry-After: an event-stream limit, named in details
	CodeInternal         Code = "internal"           // 500
	CodeUnreachable      Code = "unreachable"        // 502: a replica a demo control names did not answer
	CodeNotLeader        Code = "not_leader"         // 503, with Retry-After: no leader, or it did not answer
	CodeUnavailable      Code = "unavailable"        // 503, with Retry-After: stopping, offline, or the request was cancelled
	CodeTimeout          Code = "timeout"            // 504: the scheduler did not answer in time
	CodeStorageFull      Code = "storage_full"       // 507, with Retry-After: etcd reached its backend quota (NOSPACE); nothing was written
)

// The global limits' codes: each refusal's message names the setting and its
// value.
const (
	CodeTooManyLiveDAGs     Code = "too_many_live_dags"    // 429, with Retry-After: max_live_dags DAGs are running
	CodeTooManyLiveTasks    Code = "too_many_live_tasks"   // 429, with Retry-After: running DAGs hold max_live_tasks tasks
	CodeTooManySchedules    Code = "too_many_schedules"    // 429: max_schedules schedules exist
	CodeScheduleTooFrequent Code = "schedule_too_frequent" // 400: ticks closer together than min_schedule_interval
)

// ErrorBody is the JSON of every error response of /api/v1:
// {"error": {"code": "...", "message": "...", "details": [...]}}.
type ErrorBody struct {
	Error ErrorInfo `json:"error"`
}

// ErrorInfo says what went wrong. Message is a sentence for people; Details
// lists the problems one per line (the server never sends null).
type ErrorInfo struct {
	Code    Code     `json:"code"`
	Message string   `json:"message"`
	Details []string `json:"details"`
}
