package cluster

// TaskState is a task as GET /api/v1/dags/ID reports it.
type TaskState struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
	ExitCode   *int   `json:"exit_code"`
	Worker     string `json:"worker"`
	OutputTail string `json:"output_tail"`
	Cascade    bool   `json:"cascade"`
	// Waiting says why a ready task is held back (labels or a limit).
	Waiting string `json:"waiting"`
	// Role is task, handler or notification; Skipped says why a skipped
	// task was; Error is the latest attempt's.
	Role    string `json:"role"`
	Skipped string `json:"skipped"`
	Error   string `json:"error"`
	// Map is a map group's expansion (for_each): its instances' count and
	// their counts by status.
	Map *struct {
		Expanded bool           `json:"expanded"`
		Count    int            `json:"count"`
		Counts   map[string]int `json:"counts"`
	} `json:"map"`
	// History lists the task's earlier attempts.
	History []struct {
		Worker string `json:"worker"`
	} `json:"history"`
}

// DAGState is GET /api/v1/dags/ID.
type DAGState struct {
	ID     string         `json:"id"`
	Name   string         `json:"name"`
	Status string         `json:"status"`
	Run    int            `json:"run"`
	Counts map[string]int `json:"counts"`
	Tasks  []TaskState    `json:"tasks"`
	// Revision is the one the answering replica had applied.
	Revision int64 `json:"revision"`
}

// Task returns the task id of the DAG (its zero value when there is none).
func (d *DAGState) Task(id string) TaskState {
	for _, t := range d.Tasks {
		if t.ID == id {
			return t
		}
	}
	return TaskState{}
}
