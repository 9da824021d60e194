package client

import (
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// The types below mirror the API's JSON. They are the client's own rather
// than the server's core types so that decoding stays lenient: statuses are
// plain strings (a status added to the server later decodes fine) and
// unknown fields are ignored.

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

// SubmitResponse answers POST /api/v1/dags. Created is false when a DAG with
// the same id and the same content already existed (an idempotent retry).
type SubmitResponse struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
	Status  string `json:"status,omitempty"`
}

// DAGSummary is one entry of a DAG listing.
type DAGSummary struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`
	Status      string         `json:"status"`
	Run         int            `json:"run"`
	SubmittedAt time.Time      `json:"submitted_at"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`
	TaskCount   int            `json:"task_count"`
	Counts      map[string]int `json:"counts"`
}

// DAGList answers GET /api/v1/dags.
type DAGList struct {
	DAGs     []DAGSummary `json:"dags"`
	Revision int64        `json:"revision"`
	Node     string       `json:"node,omitempty"`
}

// DAG answers GET /api/v1/dags/{id}: the summary plus every task.
type DAG struct {
	DAGSummary
	Tasks    []Task `json:"tasks"`
	Revision int64  `json:"revision,omitempty"`
}

// Task is a task's spec and runtime state.
type Task struct {
	ID         string     `json:"id"`
	Kind       model.Kind `json:"kind"`
	Status     string     `json:"status"`
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
	History    []Attempt  `json:"history,omitempty"`
	Spec       model.Task `json:"spec"`
	Revision   int64      `json:"revision,omitempty"`
}

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

// ActionResponse answers POST .../cancel and .../retry.
type ActionResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// Cluster answers GET /api/v1/cluster.
type Cluster struct {
	Node            string    `json:"node"`
	Leader          string    `json:"leader"`
	LeaderURL       string    `json:"leader_url"`
	AppliedRevision int64     `json:"applied_revision"`
	Lag             int64     `json:"lag"`
	Replicas        []Replica `json:"replicas"`
	Workers         []Worker  `json:"workers"`
	Etcd            EtcdInfo  `json:"etcd"`
}

// Replica returns the replica named name, if the cluster lists it.
func (c *Cluster) Replica(name string) (Replica, bool) {
	for _, r := range c.Replicas {
		if r.Name == name {
			return r, true
		}
	}
	return Replica{}, false
}

// Replica is one scheduler node as the cluster endpoint reports it (and as
// GET /api/v1/cluster/self reports itself, without Reachable).
type Replica struct {
	Name            string     `json:"name"`
	Role            string     `json:"role"`
	APIURL          string     `json:"api_url"`
	AppliedRevision int64      `json:"applied_revision"`
	Lag             int64      `json:"lag"`
	LeaderSince     *time.Time `json:"leader_since"`
	FirstCommitAt   *time.Time `json:"first_commit_at"`
	PID             int        `json:"pid"`
	Reachable       bool       `json:"reachable"`
}

// Worker is one executor with its capacity.
type Worker struct {
	ID        string `json:"id"`
	Replica   string `json:"replica"`
	Slots     int    `json:"slots"`
	Busy      int    `json:"busy"`
	Running   int    `json:"running"`
	Connected bool   `json:"connected"`
}

// EtcdMember is one member of the etcd cluster.
type EtcdMember struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	ClientURLs []string `json:"client_urls"`
	IsLeader   bool     `json:"is_leader"`
}

// EtcdInfo describes the etcd cluster the scheduler uses.
type EtcdInfo struct {
	Endpoints []string     `json:"endpoints"`
	Members   []EtcdMember `json:"members"`
}
