package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/schedule"
)

// Schedules live beside the log, under prefixes of their own: the schedule
// as its user gave it (JSON, readable with etcdctl), and its cursor, the
// last tick the leader handled, which only the leader writes. Both are
// written fenced on the leader's election key, like every entry of the log
// (invariant I3), through the same route to etcd (CommitThrough), checked
// by the same space guard and refused in the same terms (mapRefused). The
// DAG runs a schedule creates are ordinary log entries (Begin).
//
// They are not sent through the log's Writer: a schedule write is a
// compare-and-swap on the schedule's own revision (API edits race each
// other and etcdctl), whose failed comparison is an answer of its own
// (ErrScheduleChanged), where a failed comparison in the Writer's chain
// means fenced; and nothing applies schedules to the core, so they need no
// place in the chain's order. In the chain, a schedule edit would wait
// behind a group commit, and one refused would fail every batch chained
// after it (PredecessorError). What order matters is kept by the caller:
// a tick's cursor is written after its run's submission committed.
const (
	SchedulePrefix = Prefix + "schedules/"
	CursorPrefix   = Prefix + "schedule-cursors/"
)

// ScheduleKey is where a schedule lives.
func ScheduleKey(id string) string { return SchedulePrefix + id }

// CursorKey is where a schedule's cursor lives.
func CursorKey(id string) string { return CursorPrefix + id }

// Cursor is a schedule's watermark: every tick at or before Tick has been
// handled (its run created, or dropped by a policy).
type Cursor struct {
	Tick time.Time `json:"tick"`
	// Run is the last run a tick created, if any.
	Run string `json:"run,omitempty"`
	// At is when the leader recorded it; Fence the revision of its term.
	At    time.Time `json:"at"`
	Fence int64     `json:"fence"`
}

// StoredSchedule is a schedule read back with its cursor.
type StoredSchedule struct {
	schedule.Schedule
	CreateRev int64   // the key's create revision: this incarnation of the id
	ModRev    int64   // its mod revision: updates compare it
	Cursor    *Cursor // nil until the first tick was handled
}

// ErrScheduleChanged means a conditional schedule write found the
// schedule changed (or gone) since it was read.
var ErrScheduleChanged = errors.New("store: the schedule changed since it was read")

// Schedules reads every schedule and cursor at one revision. Values that do
// not decode are returned in bad and skipped.
func (s *Etcd) Schedules(ctx context.Context) (out []StoredSchedule, bad []error, err error) {
	resp, err := s.cli.Get(ctx, SchedulePrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, err
	}
	curs, err := s.cli.Get(ctx, CursorPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, nil, err
	}
	cursors := make(map[string]*Cursor, len(curs.Kvs))
	for _, kv := range curs.Kvs {
		var c Cursor
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			bad = append(bad, &DecodeError{Key: string(kv.Key), Rev: kv.ModRevision, Err: err})
			continue
		}
		cursors[string(kv.Key[len(CursorPrefix):])] = &c
	}
	for _, kv := range resp.Kvs {
		id := string(kv.Key[len(SchedulePrefix):])
		var sc schedule.Schedule
		if err := json.Unmarshal(kv.Value, &sc); err != nil {
			bad = append(bad, &DecodeError{Key: string(kv.Key), Rev: kv.ModRevision, Err: err})
			continue
		}
		if sc.ID != id {
			bad = append(bad, &DecodeError{Key: string(kv.Key), Rev: kv.ModRevision, Err: fmt.Errorf("record id %q does not match its key", sc.ID)})
			continue
		}
		out = append(out, StoredSchedule{Schedule: sc, CreateRev: kv.CreateRevision, ModRev: kv.ModRevision, Cursor: cursors[id]})
	}
	return out, bad, nil
}

// CountSchedules counts the schedules, keys only.
func (s *Etcd) CountSchedules(ctx context.Context) (int, error) {
	resp, err := s.cli.Get(ctx, SchedulePrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// Schedule reads one schedule and its cursor; ok is false when there is
// none.
func (s *Etcd) Schedule(ctx context.Context, id string) (StoredSchedule, bool, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(ScheduleKey(id)), clientv3.OpGet(CursorKey(id))).Commit()
	if err != nil {
		return StoredSchedule{}, false, err
	}
	sk := resp.Responses[0].GetResponseRange().Kvs
	if len(sk) == 0 {
		return StoredSchedule{}, false, nil
	}
	out := StoredSchedule{CreateRev: sk[0].CreateRevision, ModRev: sk[0].ModRevision}
	if err := json.Unmarshal(sk[0].Value, &out.Schedule); err != nil {
		return StoredSchedule{}, false, &DecodeError{Key: string(sk[0].Key), Rev: sk[0].ModRevision, Err: err}
	}
	if ck := resp.Responses[1].GetResponseRange().Kvs; len(ck) == 1 {
		var c Cursor
		if json.Unmarshal(ck[0].Value, &c) == nil {
			out.Cursor = &c
		}
	}
	return out, true, nil
}

// PutSchedule writes a schedule, fenced: created when modRev is 0 (and the
// id is free), otherwise only if the schedule is still at modRev
// (ErrScheduleChanged if not). It returns the revision written.
func (s *Etcd) PutSchedule(ctx context.Context, f Fence, sc *schedule.Schedule, modRev int64) (int64, error) {
	v, err := marshal(sc)
	if err != nil {
		return 0, err
	}
	key := ScheduleKey(sc.ID)
	cond := clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
	return s.fencedTxn(ctx, f, []clientv3.Cmp{cond}, clientv3.OpPut(key, v))
}

// DeleteSchedule deletes a schedule and its cursor, fenced, if it is still
// at modRev. Its runs stay: they are DAGs like any other.
func (s *Etcd) DeleteSchedule(ctx context.Context, f Fence, id string, modRev int64) (int64, error) {
	cond := clientv3.Compare(clientv3.ModRevision(ScheduleKey(id)), "=", modRev)
	return s.fencedTxn(ctx, f, []clientv3.Cmp{cond}, clientv3.OpDelete(ScheduleKey(id)), clientv3.OpDelete(CursorKey(id)))
}

// PutCursor records a schedule's cursor, fenced, if the schedule is still
// the incarnation created at createRev (a schedule deleted and created
// again starts afresh).
func (s *Etcd) PutCursor(ctx context.Context, f Fence, id string, createRev int64, c Cursor) (int64, error) {
	v, err := marshal(c)
	if err != nil {
		return 0, err
	}
	cond := clientv3.Compare(clientv3.CreateRevision(ScheduleKey(id)), "=", createRev)
	return s.fencedTxn(ctx, f, []clientv3.Cmp{cond}, clientv3.OpPut(CursorKey(id), v))
}

// fencedTxn commits ops if the fence and conds hold: ErrFenced when the
// term is over, ErrScheduleChanged when a condition failed. A put is the
// same put sent again, so a caller may repeat one whose outcome is unknown.
func (s *Etcd) fencedTxn(ctx context.Context, f Fence, conds []clientv3.Cmp, ops ...clientv3.Op) (int64, error) {
	cost := opsCost(ops)
	if s.guard != nil {
		if err := s.guard.Check(cost); err != nil {
			return 0, err
		}
	}
	resp, err := s.commit.Txn(ctx).If(append([]clientv3.Cmp{f.cmp()}, conds...)...).Then(ops...).
		Else(clientv3.OpGet(f.Key)).Commit()
	if err != nil {
		return 0, describeNoSpace(ctx, s.cli, mapRefused(err))
	}
	if resp.Succeeded {
		if s.guard != nil {
			s.guard.Wrote(cost)
		}
		return resp.Header.Revision, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != f.Rev {
		return 0, ErrFenced
	}
	return 0, ErrScheduleChanged
}
