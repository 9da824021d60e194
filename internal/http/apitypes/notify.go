package apitypes

import "time"

// Notification is the JSON body a DAG's notify entry sends when the DAG
// ends (docs/dag-file.md#handlers-and-notifications). Its delivery key is
// also the request's Idempotency-Key header: "<dag>/<run>/<index>", the
// same for every delivery attempt of one DAG end, so a receiver that sees
// it twice (a worker died after sending it) can tell.
type Notification struct {
	DAG         string    `json:"dag"`
	Name        string    `json:"name"`
	Run         int       `json:"run"`
	Status      string    `json:"status"` // succeeded, failed or cancelled
	SubmittedAt time.Time `json:"submitted_at"`
	// EndedAt is when the last of the DAG's tasks and handlers ended.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Counts has the DAG's tasks and handlers by status.
	Counts map[string]int `json:"counts"`
	// FailedTasks lists the tasks that failed (their own attempts, not a
	// dependency's), at most MaxNotifiedFailures of the FailedCount.
	FailedTasks []string `json:"failed_tasks"`
	FailedCount int      `json:"failed_count"`
	Delivery    string   `json:"delivery"`
}

// MaxNotifiedFailures bounds the failed task ids a notification lists,
// and a handler's ORION_FAILED_TASKS.
const MaxNotifiedFailures = 100
