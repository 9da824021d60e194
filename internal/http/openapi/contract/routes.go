package contract

import (
	"net/http"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/http/openapi"
	"github.com/orion-sched/orion/internal/http/seedapi"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
	"github.com/orion-sched/orion/internal/workerstream"
)

// Shape is the error body a route's handler answers with.
type Shape int

const (
	// API: {"error": {"code", "message", "details"}} (apitypes.ErrorBody).
	API Shape = iota
	// Seed: the seed's flat {"error": "message", "code"} (seedapi.ErrorBody).
	// The API's middleware in front of the seed routes still answers its
	// own refusals (401, 403 cross_origin, 421, 429 rate_limited) in the
	// API's shape.
	Seed
)

// Route is one operation as the document describes it: the contract its
// handler keeps. Its error statuses list every code the route may answer;
// the ones the API's middleware adds to every route (see middleware) are
// added by the generator.
type Route struct {
	Method, Path string
	ID           string // operationId
	Tag          string
	Summary      string
	Description  string
	Params       []Param
	Body         *Body
	Replies      []Reply   // answers other than errors
	Errors       []Failure // error statuses and their codes
	Open         bool      // /healthz and /readyz: no token, no rate limit
	Shape        Shape
}

// Param is a path, query or header parameter; Type is a Go value of its
// type.
type Param struct {
	In, Name, Description string
	Required              bool
	Type                  any
}

// Body is a request body: Type is a Go value of its JSON form (read in
// input mode: nothing required, defaults filled by the server).
type Body struct {
	Type        any
	Media       []string
	Description string
}

// Reply is an answer that is not an error. Type nil with Media set: a body
// that is not JSON (a log, an event stream, metrics).
type Reply struct {
	Status      int
	Type        any
	Media       string
	Description string
	Headers     []string
}

// Failure is an error status with the codes it comes with.
type Failure struct {
	Status int
	Codes  []apitypes.Code
}

func fail(status int, codes ...apitypes.Code) Failure { return Failure{Status: status, Codes: codes} }

func ok(status int, v any, desc string, headers ...string) Reply {
	return Reply{Status: status, Type: v, Media: "application/json", Description: desc, Headers: headers}
}

func path(name, desc string) Param {
	return Param{In: "path", Name: name, Description: desc, Required: true, Type: ""}
}

func query(name string, v any, desc string) Param {
	return Param{In: "query", Name: name, Description: desc, Type: v}
}

// Response headers.
const (
	hdrRevision = "X-Orion-Revision"
	hdrLocation = "Location"
)

// Wire types as the server encodes them: the typed statuses of the core,
// which the document turns into enums.
type (
	dagList      = apitypes.DAGList[core.DAGStatus]
	dagView      = apitypes.DAG[core.DAGStatus, core.Status]
	taskView     = apitypes.Task[core.Status]
	instanceList = apitypes.InstanceList[core.Status]
	taskPage     = apitypes.TaskPage[core.Status]
)

// scheduleFile is the body of POST /api/v1/schedules: a DAG file with a
// schedule block beside its name and tasks (internal/schedule reads it).
type scheduleFile struct {
	model.DAG
	Schedule schedule.Spec `json:"schedule"`
}

// Error sets shared by routes, by what the handler does.
var (
	// reading the replica's state (a query on the scheduler's loop)
	reads = []Failure{
		fail(503, apitypes.CodeNotLeader, apitypes.CodeUnavailable),
		fail(504, apitypes.CodeTimeout),
	}
	// a write: forwarded to the leader by a standby, committed by the leader
	writes = append([]Failure{
		fail(413, apitypes.CodeBodyTooLarge),
		fail(507, apitypes.CodeStorageFull),
	}, reads...)
	// a DAG document in the body, parsed and validated before anything is written
	document = []Failure{
		fail(400, apitypes.CodeBadRequest, apitypes.CodeParseError, apitypes.CodeInvalidDAG, apitypes.CodeCycle,
			apitypes.CodeTooManyTasks, apitypes.CodeInvalidSchedule),
		fail(413, apitypes.CodeBodyTooLarge, apitypes.CodeDAGTooLarge),
		fail(415, apitypes.CodeUnsupportedMedia),
	}
	// an event stream past max_event_subscribers_per_client (429) or
	// max_event_subscribers (503), with Retry-After
	streamLimits = []Failure{
		fail(429, apitypes.CodeTooManyStreams),
		fail(503, apitypes.CodeTooManyStreams),
	}
	notFound = fail(404, apitypes.CodeNotFound)
	// new running work, bounded by max_live_dags and max_live_tasks
	liveWork = fail(429, apitypes.CodeTooManyLiveDAGs, apitypes.CodeTooManyLiveTasks)
	conflict = fail(409, apitypes.CodeConflict)
	// the demo controls, in either error shape
	demoControl = []Failure{
		fail(403, apitypes.CodeDemoDisabled, apitypes.CodeForbidden),
		fail(404, apitypes.CodeNotFound), // ?target= names no registered replica
		fail(409, apitypes.CodeConflict),
		fail(500, apitypes.CodeInternal),
		fail(502, apitypes.CodeUnreachable),
		fail(503, apitypes.CodeUnavailable),
	}
	documentMedia = []string{"application/json", "application/yaml"}
)

func join(sets ...[]Failure) []Failure {
	var out []Failure
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

var (
	dagID   = path("id", "the DAG's id")
	taskID  = path("task", "the task's id within its DAG")
	schedID = path("id", "the schedule's id (the id of its DAG file)")
	target  = query("target", "", "the name of another replica: the control is relayed to it, so a page stays on one origin")
)

// Routes is the API as the document describes it, in the document's order.
var Routes = []Route{
	// --- DAGs ---------------------------------------------------------------
	{
		Method: "POST", Path: "/api/v1/dags", ID: "submitDAG", Tag: "dags", Summary: "Submit a DAG",
		Description: "Validates the DAG before anything is written, commits it to etcd and answers once it is committed. " +
			"A DAG with an id (or an Idempotency-Key header) is idempotent: the same request again answers 200 with created false; " +
			"the same id with other content answers 409. Without an id in the body, the Idempotency-Key names the DAG: the key itself " +
			"when it is a valid id, otherwise `k-` and 20 hex digits of its SHA-256. A file with a `schedule:` block is refused (create it " +
			"with POST /api/v1/schedules).",
		Params: []Param{{In: "header", Name: "Idempotency-Key", Type: "", Description: "names the DAG when the body gives no id"}},
		Body:   &Body{Type: model.DAG{}, Media: documentMedia, Description: "a DAG file, JSON or YAML (docs/dag-file.md)"},
		Replies: []Reply{
			ok(201, apitypes.SubmitResponse{}, "created", hdrLocation, hdrRevision),
			ok(200, apitypes.SubmitResponse{}, "a DAG with this id and the same content exists already (created is false)", hdrLocation, hdrRevision),
		},
		Errors: join(document, writes, []Failure{conflict, liveWork}),
	},
	{
		Method: "GET", Path: "/api/v1/dags", ID: "listDAGs", Tag: "dags", Summary: "List DAGs, newest first",
		Params: []Param{
			query("status", core.DAGStatus(""), "only DAGs in this status"),
			query("limit", 0, "at most this many (default 100, at most 1000)"),
		},
		Replies: []Reply{ok(200, dagList{}, "the DAGs, with the revision the answer reflects")},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest)}, reads),
	},
	{
		Method: "GET", Path: "/api/v1/dags/{id}", ID: "getDAG", Tag: "dags", Summary: "One DAG with its tasks' live state",
		Description: "Lists the DAG's tasks in submission order, at most task_limit (default and at most 1000; a map group's " +
			"instances are not listed, see .../instances). A DAG with more says tasks_truncated and gives its shape: the DAG " +
			"drawn in at most 150 nodes (a task, a map group, or tasks collapsed) with their counts by status; " +
			"GET .../tasks pages all its tasks, or a node's (?group=).",
		Params:  []Param{dagID, query("task_limit", 0, "list at most this many tasks (default and at most 1000)")},
		Replies: []Reply{ok(200, dagView{}, "the DAG")},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest), notFound}, reads),
	},
	{
		Method: "GET", Path: "/api/v1/dags/{id}/tasks", ID: "listTasks", Tag: "dags", Summary: "A page of a DAG's tasks",
		Description: "Tasks in submission order, each map group followed by its instances, from cursor (the next of the page " +
			"before), at most limit (default 100, at most 1000). status selects statuses (repeated or comma-separated); group " +
			"selects a map group's instances, or the tasks of a node of the DAG's shape (its id, ~N). A page examines at most " +
			"20,000 tasks (a map group without an instance in the statuses asked counts as one), so a filtered page may hold " +
			"fewer than limit, even none, and have a next: the walk is over when next is absent.",
		Params: []Param{dagID,
			query("status", "", "only tasks in these statuses: status=failed&status=running or status=failed,running"),
			query("group", "", "a map group's id (its instances) or a shape node's id (its tasks)"),
			query("limit", 0, "how many (default 100, at most 1000)"),
			query("cursor", "", "where to start: the next of the page before"),
		},
		Replies: []Reply{ok(200, taskPage{}, "the page")},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest), notFound}, reads),
	},
	{
		Method: "GET", Path: "/api/v1/dags/{id}/tasks/{task}", ID: "getTask", Tag: "dags", Summary: "One task with its attempt history",
		Description: "The history lists the last 5 earlier attempts; history_omitted counts those before them.",
		Params:      []Param{dagID, taskID},
		Replies:     []Reply{ok(200, taskView{}, "the task")},
		Errors:      join([]Failure{notFound}, reads),
	},
	{
		Method: "GET", Path: "/api/v1/dags/{id}/tasks/{task}/instances", ID: "listInstances", Tag: "dags",
		Summary: "A page of a map group's instances",
		Description: "A task with for_each expands at run time into instances, {task}[0], {task}[1], ...; this lists them in " +
			"index order from offset, at most limit (default 100, at most 1000). Each is also GET .../tasks/{task}[{i}].",
		Params: []Param{dagID, taskID, query("offset", 0, "the first instance's index"),
			query("limit", 0, "how many (default 100, at most 1000)")},
		Replies: []Reply{ok(200, instanceList{}, "the page")},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest), notFound}, reads),
	},
	{
		Method: "GET", Path: "/api/v1/dags/{id}/tasks/{task}/log", ID: "getTaskLog", Tag: "dags", Summary: "An attempt's full log",
		Description: "The log is kept by the worker that ran the attempt; a standby asks the leader, which reaches every worker.",
		Params:      []Param{dagID, taskID, query("attempt", 0, "the attempt (default: the latest)")},
		Replies:     []Reply{{Status: 200, Media: "text/plain", Description: "stdout and stderr of the attempt"}},
		Errors:      join([]Failure{fail(400, apitypes.CodeBadRequest), notFound}, reads),
	},
	{
		Method: "POST", Path: "/api/v1/dags/{id}/cancel", ID: "cancelDAG", Tag: "dags", Summary: "Cancel a running DAG",
		Description: "Idempotent: a DAG already cancelled is answered 200 with its status, so that a second send of the same " +
			"cancellation (a client's, or a standby's after a leader fault) is not an error.",
		Params:  []Param{dagID},
		Replies: []Reply{ok(200, apitypes.ActionResponse{}, "the DAG's status once the change is committed", hdrRevision)},
		Errors:  join([]Failure{notFound, conflict}, writes),
	},
	{
		Method: "POST", Path: "/api/v1/dags/{id}/retry", ID: "retryDAG", Tag: "dags", Summary: "Retry a DAG's failed and upstream-failed tasks",
		Description: "With ?run=N the retry is of run N only, which makes it idempotent: if the DAG is already in run N+1 " +
			"the retry was applied and is answered with its status; any other run is a 409.",
		Params:  []Param{dagID, query("run", 0, "the run to retry (the DAG view's run); default: the current one")},
		Replies: []Reply{ok(200, apitypes.ActionResponse{}, "the DAG's status once the change is committed", hdrRevision)},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest), notFound, conflict, liveWork}, writes),
	},
	{
		Method: "DELETE", Path: "/api/v1/dags/{id}", ID: "deleteDAG", Tag: "dags", Summary: "Delete a finished DAG with its tasks",
		Description: "Answers once the deletion is committed; 409 while the DAG runs (cancel it first). A DAG just cancelled is " +
			"deleted once its attempts have stopped on their workers.",
		Params:  []Param{dagID},
		Replies: []Reply{ok(200, apitypes.ActionResponse{}, `status "deleted"`, hdrRevision)},
		Errors:  join([]Failure{notFound, conflict}, writes),
	},

	// --- schedules ----------------------------------------------------------
	{
		Method: "POST", Path: "/api/v1/schedules", ID: "putSchedule", Tag: "schedules", Summary: "Create or update a schedule",
		Body: &Body{Type: scheduleFile{}, Media: documentMedia, Description: "a DAG file with a schedule: block (docs/schedules.md)"},
		Replies: []Reply{
			ok(201, apitypes.SchedulePutResponse{}, "created", hdrLocation, hdrRevision),
			ok(200, apitypes.SchedulePutResponse{}, "updated, or unchanged", hdrLocation, hdrRevision),
		},
		Errors: join(document, writes, []Failure{conflict,
			fail(400, apitypes.CodeScheduleTooFrequent), fail(429, apitypes.CodeTooManySchedules)}),
	},
	{
		Method: "GET", Path: "/api/v1/schedules", ID: "listSchedules", Tag: "schedules", Summary: "List schedules",
		Replies: []Reply{ok(200, apitypes.ScheduleList{}, "every schedule, with its next fire times and active runs")},
		Errors:  reads,
	},
	{
		Method: "GET", Path: "/api/v1/schedules/{id}", ID: "getSchedule", Tag: "schedules", Summary: "One schedule with its DAG",
		Params:  []Param{schedID},
		Replies: []Reply{ok(200, apitypes.Schedule{}, "the schedule")},
		Errors:  join([]Failure{notFound}, reads),
	},
	{
		Method: "DELETE", Path: "/api/v1/schedules/{id}", ID: "deleteSchedule", Tag: "schedules", Summary: "Delete a schedule",
		Description: "Its runs stay: they are DAGs of their own.",
		Params:      []Param{schedID},
		Replies:     []Reply{ok(200, apitypes.ActionResponse{}, `status "deleted"`, hdrRevision)},
		Errors:      join([]Failure{notFound, conflict}, writes),
	},
	{
		Method: "POST", Path: "/api/v1/schedules/{id}/pause", ID: "pauseSchedule", Tag: "schedules", Summary: "Pause a schedule",
		Params:  []Param{schedID},
		Replies: []Reply{ok(200, apitypes.ActionResponse{}, `status "paused"`, hdrRevision)},
		Errors:  join([]Failure{notFound, conflict}, writes),
	},
	{
		Method: "POST", Path: "/api/v1/schedules/{id}/resume", ID: "resumeSchedule", Tag: "schedules", Summary: "Resume a paused schedule",
		Params:  []Param{schedID},
		Replies: []Reply{ok(200, apitypes.ActionResponse{}, `status "active"`, hdrRevision)},
		Errors:  join([]Failure{notFound, conflict}, writes),
	},
	{
		Method: "POST", Path: "/api/v1/schedules/{id}/trigger", ID: "triggerSchedule", Tag: "schedules", Summary: "Run a schedule now",
		Params: []Param{schedID},
		Replies: []Reply{
			ok(201, apitypes.TriggerResponse{}, "a run was submitted", hdrLocation, hdrRevision),
			ok(200, apitypes.TriggerResponse{}, "the run of this tick exists already", hdrLocation, hdrRevision),
		},
		Errors: join([]Failure{notFound, conflict, liveWork}, writes),
	},
	{
		Method: "GET", Path: "/api/v1/schedules/{id}/runs", ID: "listScheduleRuns", Tag: "schedules", Summary: "A schedule's runs, newest tick first",
		Params:  []Param{schedID},
		Replies: []Reply{ok(200, apitypes.ScheduleRuns{}, "the runs this replica holds")},
		Errors:  join([]Failure{notFound}, reads),
	},

	// --- cluster ------------------------------------------------------------
	{
		Method: "GET", Path: "/api/v1/cluster", ID: "getCluster", Tag: "cluster", Summary: "The cluster",
		Description: "This node, the leader, every replica with its role, applied revision and lag (each asked briefly), " +
			"the workers, the etcd members and etcd's alarms.",
		Replies: []Reply{ok(200, apitypes.Cluster{}, "the cluster as this replica sees it")},
	},
	{
		Method: "GET", Path: "/api/v1/cluster/self", ID: "getClusterSelf", Tag: "cluster", Summary: "This replica",
		Replies: []Reply{ok(200, apitypes.Self{}, "role, applied revision, lag, leader since, first commit of its term, pid")},
	},
	{
		Method: "GET", Path: "/api/v1/leader", ID: "getLeader", Tag: "cluster", Summary: "Who leads, from the replica's memory",
		Description: "No etcd read and no call to other replicas. With suspect and wait, the answer waits for a leader other " +
			"than the suspect. Workers use it to find the leader.",
		Params: []Param{
			query("suspect", "", "a replica believed gone: wait for another leader"),
			query("wait", "", "how long to wait for that, a Go duration (at most 5s)"),
		},
		Replies: []Reply{ok(200, apitypes.Leader{}, "the leader and the registered replicas")},
		Errors:  []Failure{fail(400, apitypes.CodeBadRequest), fail(503, apitypes.CodeNotLeader)},
	},

	// --- events -------------------------------------------------------------
	{
		Method: "GET", Path: events.SSEPath, ID: "streamEvents", Tag: "events", Summary: "The live event stream (Server-Sent Events)",
		Description: "Every message is one JSON object, an Event (components/schemas/Event); events of the log carry their cursor " +
			"as the SSE id. A comment line every 15 s is the heartbeat. Clients must ignore unknown event types and fields. " +
			"See internal/http/events/events.go.",
		Params: []Param{
			query("since", "", `resume after this cursor: a revision ("1234", e.g. a REST answer's revision) or an event id ("1234:2")`),
			{In: "header", Name: "Last-Event-ID", Type: "", Description: "the browser's resume; wins over since"},
		},
		Replies: []Reply{{Status: 200, Media: "text/event-stream", Description: "events, one JSON Event per data line"}},
		Errors:  join([]Failure{fail(400, apitypes.CodeBadRequest), fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)}, streamLimits),
	},
	{
		Method: "GET", Path: events.WSPath, ID: "streamEventsWebSocket", Tag: "events", Summary: "The live event stream (WebSocket)",
		Description: "A WebSocket upgrade; then one JSON Event per text message, the same events as the SSE stream.",
		Params:      []Param{query("since", "", "as for the SSE stream")},
		Replies:     []Reply{{Status: 101, Description: "switching to the WebSocket protocol"}},
		Errors:      join([]Failure{fail(400, apitypes.CodeBadRequest), fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)}, streamLimits),
	},

	// --- demo mode ----------------------------------------------------------
	{
		Method: "GET", Path: "/api/v1/demo/status", ID: "getDemoStatus", Tag: "demo", Summary: "Demo mode and the scheduler's state",
		Description: "Answers on every server; demo is false outside demo mode.",
		Replies:     []Reply{ok(200, apitypes.DemoStatus{}, "the state")},
	},
	{
		Method: "POST", Path: "/api/v1/demo/crash", ID: "demoCrash", Tag: "demo", Summary: "Crash the scheduler as kill -9 would (demo mode)",
		Params:  []Param{target},
		Replies: []Reply{ok(200, apitypes.DemoCrash{}, "crashed")},
		Errors:  demoControl,
	},
	{
		Method: "POST", Path: "/api/v1/demo/recover", ID: "demoRecover", Tag: "demo", Summary: "Start a new scheduler from etcd (demo mode)",
		Params:  []Param{target},
		Replies: []Reply{ok(200, apitypes.DemoRecover{}, "recovered")},
		Errors:  demoControl,
	},

	// --- the document, probes, metrics --------------------------------------
	{
		Method: "GET", Path: openapi.Path, ID: "getOpenAPI", Tag: "meta", Summary: "This document",
		Replies: []Reply{
			{Status: 200, Media: "application/json", Description: "the OpenAPI 3.1 document of the API the server runs", Headers: []string{"ETag"}},
			{Status: 304, Description: "not modified (If-None-Match named the document's ETag)"},
		},
	},
	{
		Method: "GET", Path: "/healthz", ID: "healthz", Tag: "probes", Summary: "Liveness", Open: true,
		Description: "The process serves; not tied to leadership.",
		Replies:     []Reply{ok(200, apitypes.Health{}, "alive")},
	},
	{
		Method: "GET", Path: "/readyz", ID: "readyz", Tag: "probes", Summary: "Readiness", Open: true,
		Replies: []Reply{
			ok(200, apitypes.Ready{}, "state loaded, connected to etcd"),
			ok(503, apitypes.Ready{}, "not ready: loading, or cut off from etcd (problem says why)"),
		},
	},
	{
		Method: "GET", Path: "/metrics", ID: "metrics", Tag: "probes", Summary: "Prometheus metrics",
		Description: "Without a token when the server runs with metrics_no_auth.",
		Replies:     []Reply{{Status: 200, Media: "text/plain", Description: "the Prometheus text format (docs/operations.md#metrics)"}},
	},

	// --- the seed-compatible API --------------------------------------------
	{
		Method: "POST", Path: seedapi.PathSubmit, ID: "seedSubmit", Tag: "seed", Shape: Seed,
		Summary:     "Submit the seed's array format",
		Description: "Each submission becomes one Orion DAG of sleep tasks, named by the Idempotency-Key.",
		Params:      []Param{{In: "header", Name: "Idempotency-Key", Type: "", Required: true, Description: "names the DAG"}},
		Body:        &Body{Type: []seedapi.Task{}, Media: []string{"application/json"}, Description: "the seed's task array"},
		Replies: []Reply{
			ok(201, seedapi.SubmitResponse{}, "accepted", hdrLocation, hdrRevision),
			ok(200, seedapi.SubmitResponse{}, "accepted before under this Idempotency-Key", hdrLocation, hdrRevision),
		},
		Errors: []Failure{
			fail(400, apitypes.CodeBadRequest, apitypes.CodeParseError, apitypes.CodeInvalidDAG, apitypes.CodeCycle, apitypes.CodeTooManyTasks),
			fail(403, apitypes.CodeForbidden),
			conflict,
			fail(413, apitypes.CodeBodyTooLarge, apitypes.CodeDAGTooLarge),
			fail(429, apitypes.CodeOverloaded, apitypes.CodeTooManyLiveDAGs, apitypes.CodeTooManyLiveTasks),
			fail(500, apitypes.CodeInternal),
			fail(503, apitypes.CodeUnavailable, apitypes.CodeNotLeader),
			fail(504, apitypes.CodeTimeout),
			fail(507, apitypes.CodeStorageFull),
		},
	},
	{
		Method: "GET", Path: seedapi.PathStatus, ID: "seedStatus", Tag: "seed", Shape: Seed, Summary: "The seed's task counters",
		Replies: []Reply{ok(200, seedapi.Counts{}, "the counters")},
		Errors:  []Failure{fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)},
	},
	{
		Method: "GET", Path: seedapi.PathLive, ID: "seedLiveMetrics", Tag: "seed", Shape: Seed, Summary: "The seed console's status bar",
		Replies: []Reply{ok(200, seedapi.LiveMetrics{}, "the metrics")},
		Errors:  []Failure{fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)},
	},
	{
		Method: "GET", Path: seedapi.PathState, ID: "seedDAGState", Tag: "seed", Shape: Seed, Summary: "Recent tasks keyed by task id",
		Description: "The tasks of the running DAGs and of the most recent others; where two DAGs have a task of the same id, the newer DAG's wins.",
		Replies:     []Reply{ok(200, seedapi.StateResponse{}, "the state (scheduler_running false while the scheduler is down)")},
		Errors:      []Failure{fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)},
	},
	{
		Method: "GET", Path: seedapi.PathWS, ID: "seedEvents", Tag: "seed", Shape: Seed, Summary: "The seed's TaskEvent stream (WebSocket)",
		Description: "A WebSocket upgrade; then one JSON SeedTaskEvent per text message.",
		Replies:     []Reply{{Status: 101, Description: "switching to the WebSocket protocol"}},
		Errors:      join([]Failure{fail(403, apitypes.CodeForbidden), fail(503, apitypes.CodeUnavailable)}, streamLimits),
	},
	{
		Method: "POST", Path: seedapi.PathCrash, ID: "seedCrash", Tag: "seed", Shape: Seed, Summary: "Alias of POST /api/v1/demo/crash",
		Params: []Param{target}, Replies: []Reply{ok(200, apitypes.DemoCrash{}, "crashed")}, Errors: demoControl,
	},
	{
		Method: "POST", Path: seedapi.PathRecover, ID: "seedRecover", Tag: "seed", Shape: Seed, Summary: "Alias of POST /api/v1/demo/recover",
		Params: []Param{target}, Replies: []Reply{ok(200, apitypes.DemoRecover{}, "recovered")}, Errors: demoControl,
	},
	{
		Method: "GET", Path: seedapi.PathAdminSts, ID: "seedDemoStatus", Tag: "seed", Shape: Seed, Summary: "Alias of GET /api/v1/demo/status",
		Replies: []Reply{ok(200, apitypes.DemoStatus{}, "the state")},
		Errors:  []Failure{fail(403, apitypes.CodeForbidden)},
	},
}

// Undocumented are the server's routes the document leaves out, by
// ServeMux pattern, with the reason. Any other route the server serves must
// be in Routes.
var Undocumented = map[string]string{
	"GET /{$}":                 "the console's page (internal/http/console)",
	"GET /index.html":          "the console's page",
	"GET /assets/":             "the console's scripts and styles",
	"GET " + workerstream.Path: "the stream between orion processes (internal/workerstream), not a client API",
}

// Extra are types the document declares as components though no route's
// JSON body names them: the messages of the event streams, and the error
// bodies (which responses narrow to their codes).
var Extra = []any{events.Event{}, seedapi.TaskEvent{}, apitypes.ErrorBody{}, seedapi.ErrorBody{}}

// middleware returns the failures the API's middleware adds to a route
// (internal/http/api/middleware.go): the Host allow-list on every route;
// the rate limit, the bearer token and its role on all but the probes; the
// cross-origin check on writes; panic recovery.
func middleware(r *Route) []Failure {
	out := []Failure{fail(http.StatusMisdirectedRequest, apitypes.CodeHostNotAllowed), fail(500, apitypes.CodeInternal)}
	if !r.Open {
		out = append(out, fail(401, apitypes.CodeUnauthorized), fail(403, apitypes.CodeForbidden), fail(429, apitypes.CodeRateLimited))
	}
	if r.Method != "GET" && r.Method != "HEAD" {
		out = append(out, fail(403, apitypes.CodeCrossOrigin))
	}
	return out
}
