package store

// What a replica asks of etcd besides the log: its members, their status,
// alarms and space, the cluster view, and MoveLeader. Everything is in
// Orion's types, so that no package but this one speaks etcd's client.

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one member of the etcd cluster.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// MemberStatus is what one member says of itself.
type MemberStatus struct {
	// Leader is the member id of etcd's raft leader as this member knows
	// it; 0 when it knows none.
	Leader uint64
	// DBSize and Quota are its backend's size and quota (0 from an etcd
	// older than 3.6).
	DBSize, Quota int64
}

// Endpoints are the client's endpoints.
func (s *Etcd) Endpoints() []string { return s.cli.Endpoints() }

// Members lists etcd's members (MemberList), bounded by ctx.
func (s *Etcd) Members(ctx context.Context) ([]Member, error) {
	resp, err := s.cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	return out, nil
}

// Status asks the member at endpoint for its status, bounded by ctx.
func (s *Etcd) Status(ctx context.Context, endpoint string) (MemberStatus, error) {
	st, err := s.cli.Status(ctx, endpoint)
	if err != nil {
		return MemberStatus{}, err
	}
	return MemberStatus{Leader: st.Leader, DBSize: st.DbSize, Quota: st.DbSizeQuota}, nil
}

// Space is Space of this store's etcd.
func (s *Etcd) Space(ctx context.Context, timeout time.Duration) (dbSize, quota int64, ok bool) {
	return Space(ctx, s.cli, timeout)
}

// NewSpaceGauge is NewSpaceGauge of this store's etcd.
func (s *Etcd) NewSpaceGauge(every time.Duration) *SpaceGauge { return NewSpaceGauge(s.cli, every) }

// ReadCluster is ReadCluster of this store's etcd.
func (s *Etcd) ReadCluster(ctx context.Context) (ClusterView, error) { return ReadCluster(ctx, s.cli) }

// FollowCluster is FollowCluster of this store's etcd.
func (s *Etcd) FollowCluster(ctx context.Context, publish func(ClusterView)) error {
	return FollowCluster(ctx, s.cli, publish)
}

// MemberConn is a connection of its own to one member, for what must be
// asked of that member and no other (MoveLeader, of etcd's raft leader).
type MemberConn struct{ c *clientv3.Client }

// DialMember connects to the member at endpoint with the client's
// settings (TLS, credentials), giving up after a second.
func (s *Etcd) DialMember(endpoint string) (*MemberConn, error) {
	c, err := s.dialMember(endpoint)
	if err != nil {
		return nil, err
	}
	return &MemberConn{c: c}, nil
}

// MoveLeader asks the member, which must lead etcd's raft group, to hand
// its leadership to the member with id to.
func (m *MemberConn) MoveLeader(ctx context.Context, to uint64) error {
	_, err := m.c.MoveLeader(ctx, to)
	return err
}

// Close closes the connection.
func (m *MemberConn) Close() error { return m.c.Close() }
