package auth

import (
	"net/http"
	"strings"
)

// Required is the role a request needs, by its method and path (before
// routing: a request refused for its role is refused whether or not the
// route exists, which tells a guesser nothing).
//
// Reads need a viewer. The writes of day-to-day operation (submit, cancel,
// retry a DAG; trigger, pause, resume a schedule; the seed API's submit)
// need an operator. Everything else that writes needs an admin: deleting a
// DAG, creating, changing or deleting a schedule, the demo controls, and any
// write this table does not name, so that a route added later is closed
// until someone decides otherwise.
func Required(method, p string) Role {
	if p == WorkerStreamPath {
		return Worker
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return Viewer
	case http.MethodPost:
		if p == "/api/v1/dags" || p == "/api/v1/dag" {
			return Operator
		}
		if rest, ok := strings.CutPrefix(p, "/api/v1/dags/"); ok {
			if id, action, ok := strings.Cut(rest, "/"); ok && id != "" && (action == "cancel" || action == "retry") {
				return Operator
			}
		}
		if rest, ok := strings.CutPrefix(p, "/api/v1/schedules/"); ok {
			if id, action, ok := strings.Cut(rest, "/"); ok && id != "" && (action == "pause" || action == "resume" || action == "trigger") {
				return Operator
			}
		}
	}
	return Admin
}

// WorkerStreamPath is the worker stream's route (workerstream.Path; a test
// there keeps the two equal).
const WorkerStreamPath = "/internal/v1/worker"

// Permits says whether p may send a request with method and path, and the
// role it needs. The cluster token may do anything; a worker token may also
// ask who leads (GET /api/v1/leader), which its dialer does before it opens
// the stream.
func Permits(p Principal, method, path string) (need Role, ok bool) {
	need = Required(method, path)
	switch {
	case p.Cluster:
		return need, true
	case p.Role == Worker && method == http.MethodGet && path == "/api/v1/leader":
		return need, true
	}
	return need, p.Role.Allows(need)
}
