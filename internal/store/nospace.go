package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoSpace means etcd refused a write because its backend reached its
// quota (--quota-backend-bytes) and it raised the NOSPACE alarm. The
// outcome is known: etcd refuses a transaction that puts anything before
// applying any of it, so nothing of it was written. Deletes and compaction
// are still accepted, which is how space comes back.
var ErrNoSpace = errors.New("etcd is out of space: its backend quota is reached (NOSPACE alarm)")

// NoSpaceError is ErrNoSpace with what etcd said and, when a member told
// it, the quota and database size (errors.Is(err, ErrNoSpace) holds).
type NoSpaceError struct {
	Quota  int64 // the member's --quota-backend-bytes; 0 when unknown
	DBSize int64 // the member's database file size; 0 when unknown
	Cause  error // etcd's own error
	// Guard marks a write Orion refused itself before etcd would have
	// (SpaceGauge.Check), so that etcd raises no alarm: InUse is then the
	// database in use, as estimated.
	Guard bool
	InUse int64
}

func (e *NoSpaceError) Error() string {
	msg := ErrNoSpace.Error()
	if e.Guard {
		msg = fmt.Sprintf("etcd's database (%s, %s of it in use) is within %s of its quota of %s: Orion holds its writes here, "+
			"short of etcd's NOSPACE alarm, so that leases and a new leader's first writes still fit", mib(e.DBSize), mib(e.InUse),
			mib(Reserve(e.Quota)), mib(e.Quota))
		if e.InUse < e.DBSize*3/4 {
			msg += "; much of the database is free pages: a defragmentation gives them back (Orion's own etcd members do it by themselves; " +
				"otherwise etcdctl defrag)"
		}
		return msg
	}
	if e.Quota > 0 {
		msg = fmt.Sprintf("etcd is out of space: its database (%s) reached the backend quota of %s "+
			"(quota-backend-bytes %d; NOSPACE alarm)", mib(e.DBSize), mib(e.Quota), e.Quota)
	}
	return msg
}

func (e *NoSpaceError) Is(target error) bool { return target == ErrNoSpace }
func (e *NoSpaceError) Unwrap() error        { return e.Cause }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// IsNoSpace reports etcd's NOSPACE refusal, as the client returns it
// (rpctypes.ErrNoSpace), as the gRPC status (rpctypes.ErrGRPCNoSpace), or
// already mapped (ErrNoSpace).
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		return true
	}
	// A status that went through another wrapping keeps etcd's sentence.
	return strings.Contains(err.Error(), rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace))
}

// mapNoSpace turns etcd's NOSPACE refusal into a *NoSpaceError and leaves
// every other error as it is.
func mapNoSpace(err error) error {
	if !IsNoSpace(err) {
		return err
	}
	var ns *NoSpaceError
	if errors.As(err, &ns) {
		return err
	}
	return &NoSpaceError{Cause: err}
}

// quotaTimeout bounds the status read that names the quota in a NOSPACE
// refusal: the refusal must reach the client within a second.
const quotaTimeout = 300 * time.Millisecond

// describeNoSpace fills in the quota and database size of a NOSPACE
// refusal from the first member that answers, within quotaTimeout.
func describeNoSpace(ctx context.Context, cli *clientv3.Client, err error) error {
	var ns *NoSpaceError
	if !errors.As(err, &ns) || cli == nil {
		return err
	}
	st, ok := firstStatus(ctx, cli, quotaTimeout)
	if ok {
		ns.Quota, ns.DBSize = st.DbSizeQuota, st.DbSize
	}
	return err
}

// firstStatus asks every endpoint for its status at once and returns the
// first answer, so no single member (a dead one, even the first endpoint)
// holds the caller up beyond timeout.
func firstStatus(ctx context.Context, cli *clientv3.Client, timeout time.Duration) (*clientv3.StatusResponse, bool) {
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return nil, false
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answers := make(chan *clientv3.StatusResponse, len(eps))
	for _, ep := range eps {
		go func() {
			st, err := cli.Status(sctx, ep)
			if err != nil {
				st = nil
			}
			answers <- st
		}()
	}
	for range eps {
		if st := <-answers; st != nil {
			return st, true
		}
	}
	return nil, false
}

// Alarm is one raised etcd alarm: which member, and what (NOSPACE,
// CORRUPT).
type Alarm struct {
	MemberID uint64
	Type     string
}

// Alarms lists etcd's raised alarms. The request goes through the client's
// balancer (any member answers; alarms are cluster state), bounded by ctx.
func Alarms(ctx context.Context, cli *clientv3.Client) ([]Alarm, error) {
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Alarm, 0, len(resp.Alarms))
	for _, a := range resp.Alarms {
		if a.Alarm == pb.AlarmType_NONE {
			continue
		}
		out = append(out, Alarm{MemberID: a.MemberID, Type: a.Alarm.String()})
	}
	return out, nil
}

// ExternalNoSpaceRecipe is what an operator runs to bring an etcd that
// Orion does not manage back from NOSPACE (Orion's own members do it by
// themselves): compact the history, defragment every member, disarm.
const ExternalNoSpaceRecipe = `rev=$(etcdctl endpoint status -w json | jq '.[0].Status.header.revision')
etcdctl compact "$rev"                        # drop the history (deletes are accepted under NOSPACE)
etcdctl defrag --cluster                      # give the freed pages back to the file system, member by member
etcdctl endpoint status -w table --cluster    # DB SIZE well under the quota?
etcdctl alarm disarm                          # then writes are accepted again`

// Space reports the database size and backend quota of the first member to
// answer within timeout (ok false when none did). The quota is 0 from an
// etcd older than 3.6, which does not report it.
func Space(ctx context.Context, cli *clientv3.Client, timeout time.Duration) (dbSize, quota int64, ok bool) {
	st, ok := firstStatus(ctx, cli, timeout)
	if !ok {
		return 0, 0, false
	}
	return st.DbSize, st.DbSizeQuota, true
}
