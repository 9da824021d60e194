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

// TermRecord is the value of /orion/v1/leader, the first write of a term.
type TermRecord struct {
	Name   string    `json:"name"`
	APIURL string    `json:"api_url"`
	Fence  int64     `json:"fence_revision"`
	Since  time.Time `json:"since"`
}
