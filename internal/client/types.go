package client

import "github.com/orion-sched/orion/internal/http/apitypes"

// The API's JSON types are declared once, in internal/http/apitypes, for the
// server and this client alike. The names below are that package's types as
// the client decodes them: the views instantiated with string statuses, so
// decoding stays lenient (a status a newer server adds decodes fine; unknown
// fields are ignored). They are aliases, not copies.
type (
	// SubmitResponse answers POST /api/v1/dags.
	SubmitResponse = apitypes.SubmitResponse
	// DAGSummary is one entry of a DAG listing.
	DAGSummary = apitypes.DAGSummary[string]
	// DAGList answers GET /api/v1/dags.
	DAGList = apitypes.DAGList[string]
	// DAG answers GET /api/v1/dags/{id}: the summary plus its tasks
	// (every one, or the first ones and the shape of a big DAG).
	DAG = apitypes.DAG[string, string]
	// Task answers GET /api/v1/dags/{id}/tasks/{task}.
	Task = apitypes.Task[string]
	// InstanceList answers GET /api/v1/dags/{id}/tasks/{task}/instances.
	InstanceList = apitypes.InstanceList[string]
	// TaskPage answers GET /api/v1/dags/{id}/tasks.
	TaskPage = apitypes.TaskPage[string]
	// Shape is a big DAG drawn small.
	Shape = apitypes.Shape
	// Attempt is one finished attempt in a task's history.
	Attempt = apitypes.Attempt
	// ActionResponse answers POST .../cancel and .../retry.
	ActionResponse = apitypes.ActionResponse
	// Cluster answers GET /api/v1/cluster.
	Cluster = apitypes.Cluster
	// Leader answers GET /api/v1/leader.
	Leader = apitypes.Leader
	// ReplicaAddr is a replica's name and API URL.
	ReplicaAddr = apitypes.ReplicaAddr
	// Replica is one scheduler node as the cluster endpoint reports it (and
	// as GET /api/v1/cluster/self reports itself, without Reachable).
	Replica = apitypes.Replica
	// Worker is one executor with its capacity.
	Worker = apitypes.Worker
	// EtcdInfo describes the etcd cluster the scheduler uses.
	EtcdInfo = apitypes.EtcdInfo
	// EtcdMember is one member of the etcd cluster.
	EtcdMember = apitypes.EtcdMember
)

// Task statuses as the API spells them.
const (
	StatusPending        = apitypes.StatusPending
	StatusReady          = apitypes.StatusReady
	StatusRunning        = apitypes.StatusRunning
	StatusRetrying       = apitypes.StatusRetrying
	StatusSucceeded      = apitypes.StatusSucceeded
	StatusFailed         = apitypes.StatusFailed
	StatusUpstreamFailed = apitypes.StatusUpstreamFailed
	StatusCancelled      = apitypes.StatusCancelled
	StatusSkipped        = apitypes.StatusSkipped
)

// DAG statuses: a DAG is running until it ends in one of the other three.
const (
	DAGRunning   = apitypes.DAGRunning
	DAGSucceeded = apitypes.DAGSucceeded
	DAGFailed    = apitypes.DAGFailed
	DAGCancelled = apitypes.DAGCancelled
)

// DAGTerminal reports whether a DAG status is final (until a retry).
func DAGTerminal(status string) bool { return apitypes.DAGTerminal(status) }
