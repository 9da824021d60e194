package store

import (
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/encoding/json"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/jsonguard"
)

// Ops turns one entry into the etcd operations that commit it, and returns
// the number of value bytes they carry. A chunked submission's chunks come
// first, its record last (chunks.go).
func Ops(e *core.Entry) ([]clientv3.Op, int, error) {
	ps, err := pieces(e)
	if err != nil {
		return nil, 0, err
	}
	if len(ps) == 1 {
		return ps[0].ops, ps[0].bytes, nil
	}
	var ops []clientv3.Op
	n := 0
	for _, p := range ps {
		ops = append(ops, p.ops...)
		n += p.bytes
	}
	return ops, n, nil
}

// piece is part of an entry's operations that a transaction carries whole:
// an entry is one piece, or, for a chunked submission, a piece per chunk
// (each alone in its transaction) and the record last.
type piece struct {
	ops   []clientv3.Op
	bytes int
	alone bool
}

func pieces(e *core.Entry) ([]piece, error) {
	switch {
	case e.Task != "":
		v, err := marshal(e.T)
		if err != nil {
			return nil, err
		}
		return []piece{{ops: []clientv3.Op{clientv3.OpPut(TaskKey(e.DAG, e.Task), v)}, bytes: len(v)}}, nil
	case e.Delete:
		return deletePieces(e), nil
	default:
		rec := e.D
		if rec.Spec != nil {
			rec = headOf(rec)
		}
		v, err := marshal(rec)
		if err != nil {
			return nil, err
		}
		head := piece{ops: []clientv3.Op{clientv3.OpPut(DAGKey(e.DAG), v)}, bytes: len(v)}
		if len(e.Chunks) == 0 {
			return []piece{head}, nil
		}
		return append(chunkOps(e), head), nil
	}
}

// MaxDeletedKeys bounds the keys one transaction deletes. etcd applies a
// transaction whole, at about 10 µs a deleted key on these machines (8 to
// 11 µs measured, 100,000 keys in 0.8 s, and 3 s under load), and renews
// no lease until it has: deleting a DAG of 100,000 task records in one
// transaction cost every replica its session. 5000 keys are about 50 ms.
const MaxDeletedKeys = 5000

// deletePieces are the operations that delete a DAG: its record, its
// chunks and its task records. A DAG with up to MaxDeletedKeys records is
// one piece, the DAG key first: a follower that sees it drops the DAG and
// can then ignore the deletions of its chunks and task keys. A larger one
// first deletes its task records in ranges of at most MaxDeletedKeys of
// them (e.Records, sorted as etcd sorts keys), each in a transaction of
// its own, and its record last: until then it is the DAG it was, whole in
// every replica's state (followers take no entry from a task key's
// deletion), so its id cannot be taken by a new DAG while records of the
// old one remain. A leader that dies in between leaves a finished DAG with
// some of its records gone from etcd: a replica that loads it then sees
// those tasks pending until it is deleted again (retention, or the user).
func deletePieces(e *core.Entry) []piece {
	final := []clientv3.Op{
		clientv3.OpDelete(DAGKey(e.DAG)),
		clientv3.OpDelete(DAGSubkeysPrefix(e.DAG), clientv3.WithPrefix()),
	}
	tasks := DAGTasksPrefix(e.DAG)
	if len(e.Records) <= MaxDeletedKeys {
		return []piece{{ops: append(final, clientv3.OpDelete(tasks, clientv3.WithPrefix()))}}
	}
	var out []piece
	from := tasks
	for i := MaxDeletedKeys; i < len(e.Records); i += MaxDeletedKeys {
		to := TaskKey(e.DAG, e.Records[i])
		out = append(out, piece{ops: []clientv3.Op{clientv3.OpDelete(from, clientv3.WithRange(to))}, alone: true})
		from = to
	}
	last := clientv3.OpDelete(from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(tasks)))
	return append(out, piece{ops: append(final, last)})
}

// DeletedKeys is how many keys deleting e (a DAG) may delete in one
// transaction, for the leader's budget of MaxDeletedKeys: its records, or
// the bound when the store splits them.
func DeletedKeys(e *core.Entry) int { return min(len(e.Records), MaxDeletedKeys) + 1 }

// marshal is json.Marshal without HTML escaping: a record is read by Orion
// and etcdctl, never embedded in a page, and escaping turns each of <, >
// and & into six bytes, so a body that fits the API's limit could encode
// past etcd's.
//
// Records are encoded and decoded with segmentio/encoding/json, a drop-in
// for encoding/json that caches a codec per type instead of walking the
// type by reflection on each call: every record is encoded once by the
// leader and decoded once by every standby, and encoding/json was most of
// a standby's CPU under load (docs/benchmarks.md says what bounds it now).
//
// The two libraries differ where it does not matter for records Orion
// writes: segmentio's decoder folds the case of keys in ASCII only, and it
// refuses a comma before fractional seconds; both only reach values
// written by hand. One difference is checked here: a time outside years
// 0–9999 (a clock gone wrong), which encoding/json refuses to encode and
// segmentio encodes in a form no decoder reads back, so that such a
// record is refused before it is committed, not skipped by every replica.
//
// The record is encoded into a pooled buffer and returned as a string, the
// form etcd's OpPut takes: one allocation of the record's size, where
// encoding into a fresh slice grew it step by step and the conversion
// copied it again (the leader's largest allocations after its effects).
func marshal(v any) (string, error) {
	if err := checkYears(v); err != nil {
		return "", err
	}
	bp := encodeBuffers.Get().(*[]byte)
	b, err := json.Append((*bp)[:0], v, json.SortMapKeys)
	if err != nil {
		return "", err
	}
	out := string(b)
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		encodeBuffers.Put(bp)
	}
	return out, nil
}

// encodeBuffers hold marshal's buffers. One that grew past maxPooledBuffer
// (a large DAG record) is left to the GC rather than kept.
var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledBuffer = 256 << 10

// checkYears refuses a record holding a time that RFC 3339 cannot write.
func checkYears(v any) error {
	var ts []*time.Time
	switch r := v.(type) {
	case *core.TaskRecord:
		ts = append(ts, r.StartedAt, r.FinishedAt, r.RetryAt)
		for i := range r.History {
			ts = append(ts, r.History[i].StartedAt, r.History[i].FinishedAt)
		}
	case *core.DAGRecord:
		ts = append(ts, &r.SubmittedAt, r.FinishedAt)
	}
	for _, t := range ts {
		if t != nil && (t.Year() < 0 || t.Year() > 9999) {
			return fmt.Errorf("time %s is outside years 0-9999: the record cannot be encoded", t)
		}
	}
	return nil
}

// DecodeError is a value under the log prefix that is not a valid record,
// typically one written by hand. It is reported and skipped, never fatal.
type DecodeError struct {
	Key string
	Rev int64
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s@%d: %v", e.Key, e.Rev, e.Err)
}

// DecodeKV reads a record from a key-value pair. ok is false for keys outside
// the DAG and task prefixes. Rev is the key's create revision for DAGs (its
// submission order) and its mod revision for tasks.
func DecodeKV(kv *mvccpb.KeyValue) (e core.Entry, ok bool, err error) {
	return decodeKVWith(kv, decodeDAGRecord)
}

// decodeKVWith is DecodeKV with DAG records decoded by decodeDAG.
func decodeKVWith(kv *mvccpb.KeyValue, decodeDAG func(*core.Entry, []byte) error) (e core.Entry, ok bool, err error) {
	dagID, taskID, ok := ParseKey(string(kv.Key))
	if !ok {
		return e, false, nil
	}
	e = core.Entry{DAG: dagID, Task: taskID, Rev: kv.ModRevision}
	if taskID == "" {
		e.Rev = kv.CreateRevision
	}
	err = decodeValueWith(&e, kv.Value, decodeDAG)
	if err != nil {
		err = &DecodeError{Key: string(kv.Key), Rev: kv.ModRevision, Err: err}
	}
	return e, true, err
}

// DecodeEvent reads a watch event as a log entry, with the event's revision.
// Deletions of task keys are not entries (only whole DAGs are deleted), so
// they return ok=false.
func DecodeEvent(ev *clientv3.Event) (e core.Entry, ok bool, err error) {
	return decodeEventWith(ev, decodeDAGRecord)
}

// decodeEventWith is DecodeEvent with DAG records decoded by decodeDAG.
func decodeEventWith(ev *clientv3.Event, decodeDAG func(*core.Entry, []byte) error) (e core.Entry, ok bool, err error) {
	dagID, taskID, ok := ParseKey(string(ev.Kv.Key))
	if !ok {
		return e, false, nil
	}
	e = core.Entry{DAG: dagID, Task: taskID, Rev: ev.Kv.ModRevision}
	if ev.Type == clientv3.EventTypeDelete {
		if taskID != "" {
			return e, false, nil
		}
		e.Delete = true
		return e, true, nil
	}
	if err := decodeValueWith(&e, ev.Kv.Value, decodeDAG); err != nil {
		return e, true, &DecodeError{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision, Err: err}
	}
	return e, true, nil
}

func decodeValue(e *core.Entry, v []byte) error { return decodeValueWith(e, v, decodeDAGRecord) }

// decodeValueWith is decodeValue with DAG records decoded by decodeDAG.
func decodeValueWith(e *core.Entry, v []byte, decodeDAG func(*core.Entry, []byte) error) error {
	if e.Task != "" {
		return decodeTaskRecord(e, v)
	}
	return decodeDAG(e, v)
}

// unmarshal decodes a record, refusing one nested more deeply than any
// record Orion writes: the decoder recurses without a limit, and a value
// of a few MiB of '[' put by hand would crash every replica that read it.
func unmarshal(v []byte, rec any) error {
	if !jsonguard.Shallow(v, jsonguard.MaxDepth) {
		return fmt.Errorf("record nests more than %d levels deep", jsonguard.MaxDepth)
	}
	return json.Unmarshal(v, rec)
}

func decodeTaskRecord(e *core.Entry, v []byte) error {
	var rec core.TaskRecord
	if err := unmarshal(v, &rec); err != nil {
		return err
	}
	e.T = &rec
	return nil
}

func decodeDAGRecord(e *core.Entry, v []byte) error {
	rec, err := decodeHead(e.DAG, v)
	if err != nil {
		return err
	}
	if rec.Spec != nil {
		return errChunksNeeded
	}
	e.D = rec
	return nil
}
