// Package dag defines the DAG a user submits: its schema (JSON and YAML share
// one), parsing, defaults and validation. Everything here runs before anything
// is written to etcd, so a DAG that reaches the scheduler is known to be
// well formed: ids are unique, dependencies exist and there is no cycle.
package dag

// DefaultMaxTasks bounds the tasks of a DAG when Limits.MaxTasks is zero
// (max_tasks_per_dag). A DAG too large for one etcd record is stored in
// chunks (internal/store), and parsing and validation are linear in its
// size (scale_test.go measures 100,000 tasks).
const DefaultMaxTasks = 100_000
