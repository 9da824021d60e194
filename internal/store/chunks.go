package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// A DAG too large for one etcd request is stored in chunks.
//
// etcd refuses a request over --max-request-bytes (1.5 MiB), which held a
// DAG to about a thousand tasks when its record carried all of them. A DAG
// whose record would encode past ChunkThreshold is written instead as:
//
//	/orion/v1/dags/<id>/spec/000000   a JSON array of its first tasks
//	/orion/v1/dags/<id>/spec/000001   the next ones, each chunk at most
//	...                               Limits.ChunkSize bytes
//	/orion/v1/dags/<id>               its record without its tasks, naming the
//	                                  chunks (core.SpecRef: count, tasks,
//	                                  bytes, SHA-256), written last
//
// Each chunk is committed in a transaction of its own through the leader's
// Writer (fenced, in the chain of commit markers), and the record, the
// DAG's head, in the transaction after the last chunk: the head is what
// makes the DAG visible. Readers never see half a DAG: the log decoders
// skip the chunk keys (ParseKey: a '/' after the id), and a DAG is built
// only when its head is read, from the chunks it names, checked whole
// against its digest. Chunks never change once their head is written, so
// a follower reads them with one range read at the head's revision (a
// watch restarted between the chunks and the head would not see them
// again, so it never relies on having seen them), and a load, which reads
// the DAG prefix at one revision anyway, takes them from its own pages.
//
// Later writes of the head (the DAG's end, a cancellation, a retry) carry
// the same reference and no tasks: they stay small. The head's deletion
// deletes the chunks in the same transaction (Ops). Chunks a leader wrote
// without living to write their head are removed by the next leader
// (SweepOrphanChunks) and are never loaded.

// ChunkThreshold is the record size above which a DAG is stored in chunks:
// below it a submission is one put, as it always was.
const ChunkThreshold = 256 << 10

// ChunkSize is the most one chunk's value holds: a transaction's byte
// budget, within the record limit.
func (l Limits) ChunkSize() int {
	n := l.MaxBytes
	if n <= 0 {
		n = DefaultLimits.MaxBytes
	}
	return min(n, l.RecordLimit())
}

// chunkThreshold is ChunkThreshold, or the chunk size when smaller (an
// etcd with a small --max-request-bytes).
func (l Limits) chunkThreshold() int { return min(ChunkThreshold, l.ChunkSize()) }

// chunkInfix separates a DAG's id from its chunks' numbers.
const chunkInfix = "/spec/"

// ChunkPrefix covers every chunk of one DAG.
func ChunkPrefix(dagID string) string { return DAGKey(dagID) + chunkInfix }

// ChunkKey is where chunk n of a DAG's tasks lives. Numbers are zero-padded
// so that the keys sort in order.
func ChunkKey(dagID string, n int) string { return fmt.Sprintf("%s%06d", ChunkPrefix(dagID), n) }

// DAGSubkeysPrefix covers every key under a DAG's own (its chunks), and no
// other DAG's: "d1/" does not match "d10".
func DAGSubkeysPrefix(dagID string) string { return DAGKey(dagID) + "/" }

// parseChunkKey splits a chunk key into its DAG id and chunk number.
func parseChunkKey(key string) (dagID string, n int, ok bool) {
	if !strings.HasPrefix(key, DAGPrefix) {
		return "", 0, false
	}
	rest := key[len(DAGPrefix):]
	i := strings.Index(rest, chunkInfix)
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+len(chunkInfix):])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return rest[:i], n, true
}

// SplitSpec decides how a DAG submission e is stored: when its record
// would encode past the chunk threshold, it sets e.D.Spec and e.Chunks to
// the chunks of its tasks (which Ops then writes before the record, and
// which leave the record without them); otherwise it leaves e as it is.
// A single task too large for one etcd request is a *TooLargeError.
// Called off the leader's loop, where the submission is measured: the
// encoding is the costly part of a large submission.
func SplitSpec(e *core.Entry, lim Limits) error {
	if e.D == nil || e.D.Spec != nil || e.Task != "" || e.Delete {
		return nil
	}
	size, limit := lim.ChunkSize(), lim.RecordLimit()
	var (
		chunks []string
		cur    = []byte{'['}
		total  int
	)
	for i := range e.D.Tasks {
		b, err := json.Marshal(&e.D.Tasks[i])
		if err != nil {
			return err
		}
		if len(b)+2 > limit {
			return &TooLargeError{DAG: e.DAG, Size: len(b), Limit: limit}
		}
		total += len(b) + 1
		if len(cur) > 1 && len(cur)+1+len(b)+1 > size {
			chunks = append(chunks, string(append(cur, ']')))
			cur = cur[:1]
		}
		if len(cur) > 1 {
			cur = append(cur, ',')
		}
		cur = append(cur, b...)
	}
	if total <= lim.chunkThreshold() {
		return nil // the record (its tasks and a few hundred bytes more) is small: one put
	}
	chunks = append(chunks, string(append(cur, ']')))
	h := sha256.New()
	var n int64
	for _, c := range chunks {
		h.Write([]byte(c))
		n += int64(len(c))
	}
	e.D.Spec = &core.SpecRef{Chunks: len(chunks), Tasks: len(e.D.Tasks), Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	e.Chunks = chunks
	return nil
}

// headOf is the record written for a chunked DAG: rec without its tasks.
func headOf(rec *core.DAGRecord) *core.DAGRecord {
	h := *rec
	h.Tasks = nil
	return &h
}

// chunkOps are the puts of a submission's chunks, one piece each (each
// goes in a transaction of its own). The first also deletes any chunk
// numbered past the last, left by an earlier attempt to submit a DAG with
// this id that no head made visible.
func chunkOps(e *core.Entry) []piece {
	out := make([]piece, 0, len(e.Chunks))
	for i, c := range e.Chunks {
		ops := []clientv3.Op{clientv3.OpPut(ChunkKey(e.DAG, i), c)}
		if i == 0 {
			ops = append(ops, clientv3.OpDelete(ChunkKey(e.DAG, len(e.Chunks)),
				clientv3.WithRange(clientv3.GetPrefixRangeEnd(ChunkPrefix(e.DAG)))))
		}
		out = append(out, piece{ops: ops, bytes: len(c), alone: true})
	}
	return out
}

// errChunksNeeded is a chunked head decoded where its chunks cannot be
// read (DecodeKV, DecodeEvent): the store's load and watch read them.
var errChunksNeeded = errors.New("the DAG's tasks are in chunks this decoder does not read")

// attachChunks sets rec's tasks from the values of the chunks its head
// names, in order, after checking that they are all of them and unchanged,
// and validates the DAG they make.
func attachChunks(rec *core.DAGRecord, values [][]byte) error {
	ref := rec.Spec
	if len(values) != ref.Chunks {
		return fmt.Errorf("DAG record names %d chunks, %d found", ref.Chunks, len(values))
	}
	h := sha256.New()
	var n int64
	for _, v := range values {
		h.Write(v)
		n += int64(len(v))
	}
	if n != ref.Bytes || hex.EncodeToString(h.Sum(nil)) != ref.SHA256 {
		return fmt.Errorf("DAG chunks hold %d bytes, not the %d (sha256 %s) the record names", n, ref.Bytes, ref.SHA256)
	}
	tasks := make([]model.Task, 0, min(int64(ref.Tasks), n/16)) // a task's JSON is at least {"id":"a"}, and more
	for i, v := range values {
		var part []model.Task
		if err := unmarshal(v, &part); err != nil {
			return fmt.Errorf("chunk %d: %w", i, err)
		}
		tasks = append(tasks, part...)
	}
	if len(tasks) != ref.Tasks {
		return fmt.Errorf("DAG chunks hold %d tasks, the record names %d", len(tasks), ref.Tasks)
	}
	rec.Tasks = tasks
	return validateStored(rec)
}

// chunkPageBytes bounds one response of readChunks.
const chunkPageBytes = 8 << 20

// readChunks reads the chunks ref names of DAG id at revision rev (the
// head's: they were committed before it and never change after).
func readChunks(ctx context.Context, kv clientv3.KV, id string, rev int64, ref *core.SpecRef, lim Limits) ([][]byte, error) {
	out := make([][]byte, 0, ref.Chunks)
	per := max(1, chunkPageBytes/lim.ChunkSize())
	for len(out) < ref.Chunks {
		from, to := len(out), min(len(out)+per, ref.Chunks)
		pctx, cancel := context.WithTimeout(ctx, loadPageTimeout)
		resp, err := kv.Get(pctx, ChunkKey(id, from), clientv3.WithRange(ChunkKey(id, to)), clientv3.WithRev(rev))
		cancel()
		if err != nil {
			return nil, err
		}
		for i, item := range resp.Kvs {
			if string(item.Key) != ChunkKey(id, from+i) {
				return nil, fmt.Errorf("DAG %s: chunk %d of %d missing at revision %d", id, from+i, ref.Chunks, rev)
			}
			out = append(out, item.Value)
		}
		if len(resp.Kvs) != to-from {
			return nil, fmt.Errorf("DAG %s: chunk %d of %d missing at revision %d", id, from+len(resp.Kvs), ref.Chunks, rev)
		}
	}
	return out, nil
}

// chunkReadError is a watch's read of a head's chunks that failed for a
// reason other than the chunks themselves (etcd did not answer, the
// revision was compacted): the watch ends, and the follower watches again
// from what it applied, or reloads.
type chunkReadError struct{ err error }

func (e *chunkReadError) Error() string { return "reading a DAG's chunks: " + e.err.Error() }
func (e *chunkReadError) Unwrap() error { return e.err }

// chunkReader reads, for a watch, the chunks of the heads it decodes.
func chunkReader(kv clientv3.KV, lim Limits) func(ctx context.Context, id string, rev int64, ref *core.SpecRef) ([][]byte, error) {
	return func(ctx context.Context, id string, rev int64, ref *core.SpecRef) ([][]byte, error) {
		values, err := readChunks(ctx, kv, id, rev, ref, lim)
		if err != nil && (ctx.Err() != nil || errors.Is(err, rpctypes.ErrCompacted) || unknownOutcome(err)) {
			return nil, &chunkReadError{err: err}
		}
		return values, err
	}
}

// sweepTimeout bounds one sweep of orphaned chunks.
const sweepTimeout = 30 * time.Second

// SweepOrphanChunks deletes the chunks that no head names and that were
// written before the term fenced by fence began: a leader died between a
// DAG's chunks and its head, and no later leader will write that head
// (the client's retry of the submission writes the chunks again). The
// chunks of this term's submissions in flight are newer than its fence,
// and the deletion of each DAG's chunks is conditional on none of them
// having been written since they were read, so a submission that reuses
// the id meanwhile keeps its own. It returns the number of chunks deleted.
func SweepOrphanChunks(ctx context.Context, kv clientv3.KV, fence Fence) (int, error) {
	heads := map[string]bool{}
	orphans := map[string][]orphanChunk{}
	key, end := DAGPrefix, clientv3.GetPrefixRangeEnd(DAGPrefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(10000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, key, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, item := range resp.Kvs {
			k := string(item.Key)
			if id, _, ok := ParseKey(k); ok {
				heads[id] = true
			} else if id, _, ok := parseChunkKey(k); ok && item.ModRevision < fence.Rev {
				orphans[id] = append(orphans[id], orphanChunk{key: k, mod: item.ModRevision})
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	deleted := 0
	for id, chunks := range orphans {
		if heads[id] {
			continue // chunks past its last: its next deletion takes them
		}
		for len(chunks) > 0 {
			part := chunks[:min(len(chunks), 60)]
			chunks = chunks[len(part):]
			cmps := []clientv3.Cmp{fence.cmp(), clientv3.Compare(clientv3.CreateRevision(DAGKey(id)), "=", 0)}
			ops := make([]clientv3.Op, 0, len(part))
			for _, c := range part {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(c.key), "=", c.mod))
				ops = append(ops, clientv3.OpDelete(c.key))
			}
			resp, err := kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return deleted, err
			}
			if resp.Succeeded {
				deleted += len(part)
			}
		}
	}
	return deleted, nil
}

type orphanChunk struct {
	key string
	mod int64
}

// validateStored checks a DAG record read from etcd: a value edited by
// hand must still be a valid DAG. Sizes are not checked again: etcd bounds
// a stored value, and a record an earlier version accepted must still load.
func validateStored(rec *core.DAGRecord) error {
	return dag.Validate(&rec.DAG, dag.Limits{MaxTasks: maxStoredTasks, MaxDecodedBytes: 1 << 40, Stored: true})
}

// maxStoredTasks and maxChunkedBytes bound a stored DAG, far past what the
// API accepts (an earlier version's records must still load), and keep a
// hand-edited record from sizing an allocation that ends the process.
const (
	maxStoredTasks  = 1 << 24
	maxChunkedBytes = 1 << 32
	maxChunks       = 1 << 16 // 32 GiB of chunks as large as etcd's default takes
)

// decodeHead decodes a DAG record. A chunked one (Spec set) comes back
// without its tasks and unvalidated: attachChunks completes it.
func decodeHead(id string, v []byte) (*core.DAGRecord, error) {
	var rec core.DAGRecord
	if err := unmarshal(v, &rec); err != nil {
		return nil, err
	}
	if rec.ID != id {
		return nil, fmt.Errorf("record id %q does not match its key", rec.ID)
	}
	if rec.Spec != nil {
		if len(rec.Tasks) != 0 {
			return nil, errors.New("a DAG record naming chunks holds tasks too")
		}
		// The reference sizes what its readers allocate before they read
		// a chunk, and a hand-edited one could name any numbers: a chunk
		// holds at least one task and two bytes, a stored DAG at most
		// validateStored's tasks and maxChunkedBytes.
		if ref := rec.Spec; ref.Chunks <= 0 || ref.Tasks <= 0 || ref.Tasks > maxStoredTasks || ref.Chunks > min(ref.Tasks, maxChunks) ||
			ref.Bytes < 2*int64(ref.Chunks) || ref.Bytes > maxChunkedBytes {
			return nil, fmt.Errorf("DAG record names %d chunks of %d tasks in %d bytes: out of range", ref.Chunks, ref.Tasks, ref.Bytes)
		}
		return &rec, nil
	}
	if err := validateStored(&rec); err != nil {
		return nil, err
	}
	if cap(rec.Tasks) > len(rec.Tasks) {
		// The decoder grows the task list as it reads, up to twice its
		// length (a task is 384 bytes), and the replica holds it as long
		// as the DAG lives: keep just the tasks. (attachChunks makes a
		// chunked DAG's list at its length.)
		rec.Tasks = append(make([]model.Task, 0, len(rec.Tasks)), rec.Tasks...)
	}
	return &rec, nil
}

// decodeHeadEntry decodes a DAG record into e, a chunked one without its
// tasks (Load attaches them from its pages).
func decodeHeadEntry(e *core.Entry, v []byte) error {
	rec, err := decodeHead(e.DAG, v)
	if err != nil {
		return err
	}
	e.D = rec
	return nil
}

// loadChunks gathers, for Load, the chunks its pages of the DAG prefix
// hold, and attaches them to their heads once the prefix is read: a head
// sorts before its chunks, but other DAGs' keys may sort between them
// ("d1", "d1-a", "d1/spec/000000"). Chunks no head names are never
// decoded: a leader died before their head (SweepOrphanChunks).
type loadChunks struct {
	byDAG map[string]map[int][]byte
	heads []int // indexes of chunked heads in the snapshot's DAGs
}

func newLoadChunks() *loadChunks { return &loadChunks{byDAG: map[string]map[int][]byte{}} }

// take keeps item if it is a chunk, and reports whether it was.
func (l *loadChunks) take(item *mvccpb.KeyValue) bool {
	id, n, ok := parseChunkKey(string(item.Key))
	if !ok {
		return false
	}
	m := l.byDAG[id]
	if m == nil {
		m = map[int][]byte{}
		l.byDAG[id] = m
	}
	m[n] = item.Value
	return true
}

// head notes the DAG record at index i of the snapshot's DAGs.
func (l *loadChunks) head(i int, rec *core.DAGRecord) {
	if rec != nil && rec.Spec != nil {
		l.heads = append(l.heads, i)
	}
}

// attach completes the chunked heads among dags; one whose chunks are
// missing or do not match is reported in bad and dropped.
func (l *loadChunks) attach(dags []core.Entry, bad []error) ([]core.Entry, []error) {
	if len(l.heads) == 0 {
		return dags, bad
	}
	drop := map[int]bool{}
	for _, i := range l.heads {
		e := &dags[i]
		m := l.byDAG[e.DAG]
		values := make([][]byte, 0, e.D.Spec.Chunks)
		for n := 0; n < e.D.Spec.Chunks; n++ {
			v, ok := m[n]
			if !ok {
				break
			}
			values = append(values, v)
		}
		if err := attachChunks(e.D, values); err != nil {
			bad = append(bad, &DecodeError{Key: DAGKey(e.DAG), Rev: e.Rev, Err: err})
			drop[i] = true
		}
		delete(l.byDAG, e.DAG)
	}
	if len(drop) == 0 {
		return dags, bad
	}
	out := dags[:0]
	for i := range dags {
		if !drop[i] {
			out = append(out, dags[i])
		}
	}
	return out, bad
}
