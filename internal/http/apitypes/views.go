package apitypes

import (
	"encoding/json"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// Task statuses as the API spells them.
const (
	StatusPending        = "pending"
	StatusReady          = "ready"
	StatusRunning        = "running"
	StatusRetrying       = "retrying"
	StatusSucceeded      = "succeeded"
	StatusFailed         = "failed"
	StatusUpstreamFailed = "upstream_failed"
	StatusCancelled      = "cancelled"
	StatusSkipped        = "skipped"
)

// DAG statuses: a DAG is running until it ends in one of the other three.
const (
	DAGRunning   = "running"
	DAGSucceeded = "succeeded"
	DAGFailed    = "failed"
	DAGCancelled = "cancelled"
)

// DAGTerminal reports whether a DAG status is final (until a retry).
func DAGTerminal(status string) bool { return status != "" && status != DAGRunning }

// DAGSummary is a DAG as lists show it. S is the type of its status (see the
// package comment).
type DAGSummary[S any] struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`
	Status      S              `json:"status"`
	Run         int            `json:"run"`
	SubmittedAt time.Time      `json:"submitted_at"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`
	TaskCount   int            `json:"task_count"`
	Counts      map[string]int `json:"counts"`
	// CancelRequested: a cancel was asked for a running DAG with handlers
	// or notifications; its tasks are cancelled, then those run.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// DAG is one DAG with its tasks' live state: GET /api/v1/dags/{id}. D is
// the type of the DAG's status, T of its tasks'. A DAG of more tasks than
// the view lists (MaxViewTasks, or the request's task_limit) lists its
// first ones, says so in TasksTruncated and gives its Shape: its counts by
// status are in Counts, and GET /api/v1/dags/{id}/tasks pages the rest.
type DAG[D, T any] struct {
	DAGSummary[D]
	// Params are the values the DAG's runs use: its defaults and the
	// submission's overrides.
	Params model.Params `json:"params,omitempty"`
	// Scheduled is set on a schedule's run: its tick and data interval.
	Scheduled *model.ScheduledRun `json:"scheduled,omitempty"`
	Tasks     []Task[T]           `json:"tasks"`
	// TasksTruncated: Tasks lists the first tasks only (a map group's
	// instances are never listed here: GET .../tasks/{task}/instances).
	TasksTruncated bool `json:"tasks_truncated,omitempty"`
	// Shape is set when TasksTruncated: the DAG drawn small.
	Shape *Shape `json:"shape,omitempty"`
	// Revision is the etcd revision the answering replica had applied.
	Revision int64 `json:"revision"`
}

// MaxViewTasks is the most tasks GET /api/v1/dags/{id} lists: the
// max_tasks_per_dag of the releases before big DAGs, so that their
// clients see every task of the DAGs they know.
const MaxViewTasks = 1000

// Shape is a big DAG drawn small: at most MaxShapeNodes nodes, each one
// task, one map group, or tasks collapsed into one (siblings with the same
// dependencies; if still too many, every task of a level; then bands of
// levels), with the edges between them.
type Shape struct {
	Nodes []ShapeNode `json:"nodes"`
	// Edges go from node to node, by their index in Nodes.
	Edges [][2]int32 `json:"edges"`
	// Depth counts the DAG's levels.
	Depth int `json:"depth"`
}

// MaxShapeNodes bounds a Shape's nodes.
const MaxShapeNodes = 150

// Shape node kinds.
const (
	ShapeTask  = "task"  // one task: ID is its id
	ShapeMap   = "map"   // one map group: ID is its id, Counts its instances'
	ShapeTasks = "tasks" // tasks collapsed: ID is "~" and a number
)

// ShapeNode is one node of a Shape. Its tasks are listed by GET
// /api/v1/dags/{id}/tasks?group={ID} (a map group's: its instances).
type ShapeNode struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Role is task, handler or notification ("" for a band of levels).
	Role string `json:"role,omitempty"`
	// Level is its first level (the longest path from a task without
	// dependencies), Levels how many it spans.
	Level  int `json:"level"`
	Levels int `json:"levels"`
	// Tasks counts its tasks (a map group is one), Sample names the first
	// few, Counts has its tasks by status (a map group's instances, once
	// expanded).
	Tasks  int            `json:"tasks"`
	Sample []string       `json:"sample"`
	Counts map[string]int `json:"counts"`
}

// TaskPage answers GET /api/v1/dags/{id}/tasks: tasks in submission order,
// each map group followed by its instances. Next, when set, is the cursor
// of the next page. A filtered page examines a bounded number of tasks
// (TaskPageScan), so it may list fewer than its limit, even none, and
// still have a Next: the walk is over only when Next is empty.
type TaskPage[S any] struct {
	Tasks    []Task[S] `json:"tasks"`
	Next     string    `json:"next,omitempty"`
	Revision int64     `json:"revision"`
}

// Task pages: the default and the most one page lists, and the most
// tasks one page examines.
const (
	DefaultTaskPage = 100
	MaxTaskPage     = 1000
	TaskPageScan    = 20000
)

// Task is a task's spec and runtime state together: GET
// /api/v1/dags/{id}/tasks/{task}, and each task of a DAG. S is the type of
// its status.
type Task[S any] struct {
	ID         string     `json:"id"`
	Kind       model.Kind `json:"kind"`
	Status     S          `json:"status"`
	Attempts   int        `json:"attempts"`
	Retries    int        `json:"retries"`
	MaxRetries int        `json:"max_retries"`
	Priority   int        `json:"priority"`
	DependsOn  []string   `json:"depends_on"`
	Worker     string     `json:"worker,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	RetryAt    *time.Time `json:"retry_at,omitempty"`
	DurationMs *int64     `json:"duration_ms,omitempty"`
	ExitCode   *int       `json:"exit_code"`
	Error      string     `json:"error,omitempty"`
	OutputTail string     `json:"output_tail"`
	Event      string     `json:"event,omitempty"`
	Cascade    bool       `json:"cascade,omitempty"`
	Cause      string     `json:"cause,omitempty"`
	// Outputs are what the task published with its success.
	Outputs model.Outputs `json:"outputs,omitempty"`
	History []Attempt     `json:"history,omitempty"`
	// HistoryOmitted counts the earlier attempts not listed in History: a
	// record keeps the last few in full and counts the rest.
	HistoryOmitted int `json:"history_omitted,omitempty"`
	// Waiting says why a ready task is not running yet, when something
	// other than its turn holds it: a DAG or pool limit, or no connected
	// worker with the labels it requires.
	Waiting string `json:"waiting,omitempty"`
	// TriggerRule is the rule the task runs by (all_success when its spec
	// gives none) and When its condition; Role says what the task is:
	// "task", or a DAG's "handler" or "notification".
	TriggerRule model.TriggerRule `json:"trigger_rule"`
	When        string            `json:"when,omitempty"`
	Role        string            `json:"role"`
	// Skipped says why a skipped task was: condition, trigger_rule or
	// not_needed.
	Skipped string `json:"skipped,omitempty"`
	// Map is set on a map group (a task with for_each): how many
	// instances it expanded to and how many are in each status; its
	// instances are listed by GET .../tasks/{task}/instances. Instance
	// is set on one of them (GET .../tasks/{group}[{i}]).
	Map      *MapGroup    `json:"map,omitempty"`
	Instance *MapInstance `json:"instance,omitempty"`
	Spec     model.Task   `json:"spec"`
	// Revision is set on a task answered alone (the etcd revision the
	// replica had applied, always at least the one that created the DAG);
	// the tasks of a DAG leave it out.
	Revision int64 `json:"revision,omitempty"`
}

// MapGroup is a map group's expansion: Expanded once its items are
// committed, Count instances, Counts by status (only statuses some have).
type MapGroup struct {
	Expanded bool           `json:"expanded"`
	Count    int            `json:"count"`
	Counts   map[string]int `json:"counts"`
}

// MapInstance says which instance of which group a task is, and its item.
type MapInstance struct {
	Group string          `json:"group"`
	Index int             `json:"index"`
	Item  json.RawMessage `json:"item"`
}

// InstanceList answers GET /api/v1/dags/{id}/tasks/{task}/instances: one
// page of a map group's instances, in index order, from Offset; Total is
// the group's count.
type InstanceList[S any] struct {
	Instances []Task[S] `json:"instances"`
	Offset    int       `json:"offset"`
	Limit     int       `json:"limit"`
	Total     int       `json:"total"`
	Revision  int64     `json:"revision"`
}

// Instance pages: the default and the most one page lists.
const (
	DefaultInstancePage = 100
	MaxInstancePage     = 1000
)

// Attempt is one finished attempt in a task's history.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	Worker     string     `json:"worker,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Outcome    string     `json:"outcome"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// DAGList answers GET /api/v1/dags: DAGs newest first.
type DAGList[S any] struct {
	DAGs     []DAGSummary[S] `json:"dags"`
	Revision int64           `json:"revision"`
	Node     string          `json:"node"`
}

// SubmitResponse answers POST /api/v1/dags (201 when the request created
// the DAG; 200 with Created false when a DAG with the same id and content
// already existed, an idempotent retry). Status is set only on 201.
type SubmitResponse struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
	Status  string `json:"status,omitempty"`
}

// ActionResponse answers POST /api/v1/dags/{id}/cancel and .../retry with
// the DAG's status, and DELETE /api/v1/dags/{id} with StatusDeleted.
type ActionResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// CancelRequested answers a cancel of a DAG with handlers or
	// notifications: still running, its tasks being cancelled, it is
	// cancelled once what runs at its end has run. A second cancel
	// cancels that too.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// StatusDeleted is the status DELETE /api/v1/dags/{id} answers: the DAG and
// its tasks are gone.
const StatusDeleted = "deleted"

// Ready answers /readyz.
type Ready struct {
	Status  string `json:"status"` // "ready" or "not_ready"
	Leader  bool   `json:"leader"`
	Problem string `json:"problem,omitempty"` // why not ready, once loaded
	// Term is true while the replica holds the leadership term: leading,
	// or re-reading etcd to lead on in the same term. Standbys ask it
	// before deposing a leader whose stream dropped.
	Term bool `json:"term"`
	// Storage is etcd's space, once measured: a replica stays ready
	// while it is limited or full (it serves reads, cancellations and
	// deletions), and says so here.
	Storage *Storage `json:"storage,omitempty"`
}
