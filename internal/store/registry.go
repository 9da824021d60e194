package store

import "time"

// ReplicaRecord is the value of /orion/v1/replicas/<name>, on the replica's
// session lease: it vanishes with the process.
type ReplicaRecord struct {
	Name      string    `json:"name"`
	APIURL    string    `json:"api_url"`
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	StartedAt time.Time `json:"started_at"`
}

// TermRecord is the value of /orion/v1/leader, the first write of a term,
// written again when Workers changes.
type TermRecord struct {
	Name   string    `json:"name"`
	APIURL string    `json:"api_url"`
	Fence  int64     `json:"fence_revision"`
	Since  time.Time `json:"since"`
	// Workers are the workers this term may send attempts to before their
	// dispatch records commit (core.AllowEarly), and those of the term
	// before that have not said hello yet. The next leader dispatches
	// nothing until each has said hello, listing what it runs, or the
	// orphan grace has passed.
	Workers []string `json:"workers,omitempty"`
	// Incarnation names this keyspace's history: random, chosen by the
	// first leader that finds no term record, and carried on by every term
	// after. Fence revisions compare only within one incarnation: a wiped
	// etcd (or an etcd restored from a snapshot, once its term record is
	// deleted) starts over, and workers must not refuse its leaders as
	// older than the ones they joined.
	Incarnation string `json:"incarnation,omitempty"`
}
