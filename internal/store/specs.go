package store

import (
	"bytes"
	"context"
	"hash/maphash"
	"time"

	"github.com/segmentio/encoding/json"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/jsonguard"
	"github.com/orion-sched/orion/internal/model"
)

// knownSpecs lets one watch decode a DAG record whose spec it has already
// decoded by the record's tail alone.
//
// A DAG's record is written when it is submitted and again when it ends (or
// is cancelled, or retried). The spec, every task of the DAG, is the same
// in each; only the tail (status, run, times) moves. A standby used to
// decode the whole record each time, validate it again and compare it with
// the spec it held: for a DAG of 1000 noop tasks that was 74 KB of JSON,
// and a fifth of a standby's CPU under load.
//
// Orion encodes a record as the spec's fields, then the tail, so the spec
// is the bytes before the last `,"status":`. When those bytes hash the
// same as the spec this watch decoded last under the same key, and the
// tail decodes strictly (only the tail's fields, spelled exactly), the new
// record is the held spec with the new tail: the same value a full decode
// gives, sharing the held task list, which the core then recognises
// without comparing it task by task. Anything else (a record written by
// hand in another order, an unknown field, a changed spec) is decoded in
// full, as before.
//
// The hash is seeded at random per process, so no record written to etcd
// can be crafted to collide with another; an accidental collision of 64
// bits is not a concern. The map holds one entry per live DAG whose record
// this watch has decoded, sharing the spec with the core; a deletion drops
// it.
type knownSpecs struct {
	// read reads a chunked head's chunks (chunks.go); nil: such a head
	// does not decode.
	read    func(ctx context.Context, id string, rev int64, ref *core.SpecRef) ([][]byte, error)
	ctx     context.Context
	seed    maphash.Seed
	byDAG   map[string]knownSpec
	scratch []byte // "{" + a tail, decoded strictly
}

type knownSpec struct {
	prefixLen int
	sum       uint64
	dag       model.DAG
	// spec names a chunked DAG's chunks: it is in the hashed prefix, so a
	// record that matches has the same, and a record built without it
	// would be written back by a leader with every task inline.
	spec *core.SpecRef
}

// recordTail is what follows the spec in a DAG record: core.DAGRecord's
// own fields (a test keeps the two in step).
type recordTail struct {
	Status      core.DAGStatus `json:"status"`
	Run         int            `json:"run"`
	SubmittedAt time.Time      `json:"submitted_at"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`

	CancelRequested bool `json:"cancel_requested,omitempty"`
}

var tailStart = []byte(`,"status":`)

func newKnownSpecs() *knownSpecs {
	return &knownSpecs{seed: maphash.MakeSeed(), byDAG: make(map[string]knownSpec)}
}

// decodeEvent is DecodeEvent through the specs this watch knows.
func (k *knownSpecs) decodeEvent(ev *clientv3.Event) (core.Entry, bool, error) {
	e, ok, err := decodeEventWith(ev, k.decodeDAG)
	if ok && e.Task == "" && (e.Delete || err != nil) {
		delete(k.byDAG, e.DAG)
	}
	return e, ok, err
}

// decodeDAG decodes the DAG record v of e.DAG into e.
func (k *knownSpecs) decodeDAG(e *core.Entry, v []byte) error {
	i := bytes.LastIndex(v, tailStart)
	if i <= 0 {
		delete(k.byDAG, e.DAG)
		return k.full(e, v)
	}
	sum := maphash.Bytes(k.seed, v[:i])
	if held, ok := k.byDAG[e.DAG]; ok && held.prefixLen == i && held.sum == sum {
		if t, ok := k.tail(v[i+1:]); ok {
			e.D = &core.DAGRecord{DAG: held.dag, Spec: held.spec, Status: t.Status, Run: t.Run, SubmittedAt: t.SubmittedAt, FinishedAt: t.FinishedAt,
				CancelRequested: t.CancelRequested}
			return nil
		}
	}
	if err := k.full(e, v); err != nil {
		return err
	}
	if _, ok := k.tail(v[i+1:]); ok {
		k.byDAG[e.DAG] = knownSpec{prefixLen: i, sum: sum, dag: e.D.DAG, spec: e.D.Spec}
	} else {
		delete(k.byDAG, e.DAG)
	}
	return nil
}

// full decodes the DAG record v of e.DAG into e, reading the chunks a
// chunked one names at its revision.
func (k *knownSpecs) full(e *core.Entry, v []byte) error {
	rec, err := decodeHead(e.DAG, v)
	if err != nil {
		return err
	}
	if rec.Spec != nil {
		if k.read == nil {
			return errChunksNeeded
		}
		ctx := k.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		values, err := k.read(ctx, e.DAG, e.Rev, rec.Spec)
		if err != nil {
			return err
		}
		if err := attachChunks(rec, values); err != nil {
			return err
		}
	}
	e.D = rec
	return nil
}

// tail decodes `"status":…}` as an object holding the tail's fields and
// nothing else, with their exact names. Only the tail's depth is checked
// here: a held spec's bytes passed the check whole when first decoded, and
// a record decoded in full is checked by unmarshal.
func (k *knownSpecs) tail(b []byte) (recordTail, bool) {
	if !jsonguard.Shallow(b, jsonguard.MaxDepth) {
		return recordTail{}, false
	}
	k.scratch = append(append(k.scratch[:0], '{'), b...)
	var t recordTail
	rest, err := json.Parse(k.scratch, &t, json.DisallowUnknownFields|json.DontMatchCaseInsensitiveStructFields)
	if err != nil || len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return recordTail{}, false
	}
	return t, true
}
