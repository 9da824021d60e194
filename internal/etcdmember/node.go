package etcdmember

import (
	"encoding/json"
	"net/http"
	"os"
)

// NodePath is where a member says, on its client URL, which node (machine)
// it runs on: GET answers a NodeInfo. Orion's leader reads it to keep
// etcd's raft leader off its own node (package leaderapart): a node lost
// with both leaders on it costs etcd's election before the takeover can
// begin. etcd's own paths are /v3/, /health, /version, /metrics and the
// like; this one is Orion's.
const NodePath = "/orion/node"

// NodeInfo is NodePath's answer.
type NodeInfo struct {
	Member string `json:"member"`
	Node   string `json:"node"`
}

// DefaultNode is a member's node unless told otherwise: the host name.
func DefaultNode() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

func nodeHandler(info NodeInfo) http.Handler {
	body, _ := json.Marshal(info)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}
