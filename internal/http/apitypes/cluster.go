package apitypes

import "time"

// Cluster answers GET /api/v1/cluster: the leader, every replica with its
// role and applied revision, the workers, and the etcd members.
type Cluster struct {
	Node            string    `json:"node"`
	Leader          string    `json:"leader"`
	LeaderURL       string    `json:"leader_url,omitempty"`
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

// Replica is one scheduler replica as the cluster endpoint shows it. A
// Self decodes into it too (without Reachable).
type Replica struct {
	Name            string     `json:"name"`
	Role            string     `json:"role"` // "leader", "standby", or "unknown" when unreachable
	APIURL          string     `json:"api_url,omitempty"`
	AppliedRevision int64      `json:"applied_revision"`
	Lag             int64      `json:"lag"`
	LeaderSince     *time.Time `json:"leader_since,omitempty"`
	FirstCommitAt   *time.Time `json:"first_commit_at,omitempty"`
	PID             int        `json:"pid,omitempty"`
	Reachable       bool       `json:"reachable"`
	// Problem says what keeps the replica from etcd, when something does
	// ("no etcd session ..."); empty when it is healthy.
	Problem string `json:"problem,omitempty"`
}

// Self answers GET /api/v1/cluster/self: this replica alone, with the
// workers when it leads.
type Self struct {
	Name            string     `json:"name"`
	Role            string     `json:"role"`
	APIURL          string     `json:"api_url,omitempty"`
	AppliedRevision int64      `json:"applied_revision"`
	Lag             int64      `json:"lag"`
	LeaderSince     *time.Time `json:"leader_since,omitempty"`
	FirstCommitAt   *time.Time `json:"first_commit_at,omitempty"`
	PID             int        `json:"pid"`
	Problem         string     `json:"problem,omitempty"`
	Workers         []Worker   `json:"workers,omitempty"`
}

// Worker is an executor with its capacity, as the leader's hub sees it.
type Worker struct {
	ID        string            `json:"id"`
	Replica   string            `json:"replica,omitempty"` // set for a replica's own slots
	Slots     int               `json:"slots"`
	Labels    map[string]string `json:"labels,omitempty"` // --labels: what tasks' pool and selector match
	Busy      int               `json:"busy"`
	Running   int               `json:"running"` // attempts the worker reports in flight
	Connected bool              `json:"connected"`
	Since     time.Time         `json:"since"`
	// Host and PID are where the worker runs (its hostname and process id),
	// as it said when it connected; absent for a worker of an earlier version.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
}

// EtcdInfo is the etcd cluster a replica talks to.
type EtcdInfo struct {
	Endpoints []string     `json:"endpoints"`
	Members   []EtcdMember `json:"members,omitempty"`
	// Alarms lists etcd's raised alarms; absent when none is.
	Alarms []EtcdAlarm `json:"alarms,omitempty"`
	// Storage is etcd's space as the answering replica measures it;
	// absent before a first measurement.
	Storage *Storage `json:"storage,omitempty"`
}

// EtcdAlarm is one raised etcd alarm. NOSPACE means a member's backend
// reached its quota: etcd refuses writes (the API answers 507
// storage_full) until space is reclaimed and the alarm disarmed.
type EtcdAlarm struct {
	MemberID string `json:"member_id"`
	Alarm    string `json:"alarm"` // NOSPACE, CORRUPT
	Message  string `json:"message,omitempty"`
}

// EtcdMember is one etcd cluster member.
type EtcdMember struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	ClientURLs []string `json:"client_urls"`
	PeerURLs   []string `json:"peer_urls"`
	IsLeader   bool     `json:"is_leader"`
}

// ReplicaAddr is a replica's registration: its name and API URL.
type ReplicaAddr struct {
	Name   string `json:"name"`
	APIURL string `json:"api_url"`
}

// Leader answers GET /api/v1/leader: who leads and where, and the
// registered replicas, as one replica's watched view had them at Revision.
// The replica answers from memory, without asking etcd or its peers, so a
// worker looking for the leader after a failover costs one cheap request.
type Leader struct {
	Node      string        `json:"node"`       // the replica that answered
	Leader    string        `json:"leader"`     // "" when nobody leads
	LeaderURL string        `json:"leader_url"` // the leader's API URL ("" when unknown)
	Replicas  []ReplicaAddr `json:"replicas"`
	Revision  int64         `json:"revision"` // the etcd revision the view reflects
}
