// Package store owns everything Orion keeps in etcd, and is the only package
// that reads or writes the scheduler's keys: the key layout, the record
// codec, fenced commits, paged loads, the watch, the replica registry, the
// leader's term record and the election.
//
// etcd is Orion's write-ahead log. Every entry the leader proposes becomes a
// put (or delete) of a readable JSON value under /orion/v1/, committed in a
// transaction fenced on the leader's election key, so the revision of each
// change is its position in the log and `etcdctl watch --prefix /orion/v1/`
// shows the log live.
package store

import (
	"strings"
)

// Key layout. Ids are validated upstream to contain no '/'.
const (
	Prefix         = "/orion/v1/"
	DAGPrefix      = Prefix + "dags/"
	TaskPrefix     = Prefix + "tasks/"
	ElectionPrefix = Prefix + "election"
	WorkerPrefix   = Prefix + "workers/"
)

// DAGKey is where a DAG record lives.
func DAGKey(dagID string) string { return DAGPrefix + dagID }

// TaskKey is where a task record lives.
func TaskKey(dagID, taskID string) string { return TaskPrefix + dagID + "/" + taskID }

// DAGTasksPrefix covers every task record of one DAG (and no other DAG's:
// the trailing slash keeps "d1" from matching "d10").
func DAGTasksPrefix(dagID string) string { return TaskPrefix + dagID + "/" }

// ParseKey splits a log key into its DAG and task ids; ok is false for keys
// outside the DAG and task prefixes.
func ParseKey(key string) (dagID, taskID string, ok bool) {
	switch {
	case strings.HasPrefix(key, DAGPrefix):
		id := key[len(DAGPrefix):]
		return id, "", id != "" && !strings.Contains(id, "/")
	case strings.HasPrefix(key, TaskPrefix):
		rest := key[len(TaskPrefix):]
		i := strings.IndexByte(rest, '/')
		if i <= 0 || i == len(rest)-1 || strings.Contains(rest[i+1:], "/") {
			return "", "", false
		}
		return rest[:i], rest[i+1:], true
	}
	return "", "", false
}
