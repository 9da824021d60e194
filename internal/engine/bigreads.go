package engine

import (
	"context"
	"iter"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/core"
)

// Reads that stay proportional to what they return when DAGs are big and
// many: the list of DAGs from an index kept newest first (not sorted per
// read), a DAG's head with its shape instead of every task, and its tasks
// a page at a time. Owned by the loop, like the core it reads.

// bigReads is what the loop keeps for these reads.
type bigReads struct {
	// newest lists the DAGs by creation, oldest first: a DAG is appended
	// when its first entry applies (its revision is the newest), so the
	// list stays sorted without sorting. Deleted DAGs stay until a read
	// passes them, counted in stale, and go when they are half the list.
	newest []indexed
	stale  int
	// shapes keeps the shapes of the big DAGs read lately (at most
	// maxShapes): built once per DAG, their counts read per request.
	shapes map[string]*shaped
}

// shaped is a DAG's shape with the counts last read of it, and when.
type shaped struct {
	s      *core.Shape
	counts []core.StatusCounts
	at     time.Time
}

// shapeCountsFresh is how long a shape's counts are answered again rather
// than read: reading them reads every task's status on the loop (a few ms
// at 100,000 tasks), so however many pages poll a big DAG, the loop
// spends that at most once a second on it.
const shapeCountsFresh = time.Second

type indexed struct {
	id  string
	seq int64
}

// maxShapes bounds the shapes kept: each costs about 4 bytes per task.
const maxShapes = 16

// applied keeps the index current with an entry the core applied.
func (b *bigReads) applied(c *core.Core, en *core.Entry) {
	if en.Task != "" {
		return
	}
	if en.Delete {
		b.stale++
		delete(b.shapes, en.DAG)
		b.compact(c)
		return
	}
	seq, ok := c.DAGSeq(en.DAG)
	if !ok || seq != en.Rev {
		return
	}
	// Created by this entry, or by an earlier one of its transaction: the
	// DAGs of one revision are ordered by id (as restored), the list
	// read backwards.
	k := len(b.newest)
	for ; k > 0 && b.newest[k-1].seq == seq; k-- {
		if b.newest[k-1].id == en.DAG {
			return
		}
	}
	for k < len(b.newest) && b.newest[k].id > en.DAG {
		k++
	}
	b.newest = slices.Insert(b.newest, k, indexed{en.DAG, seq})
	delete(b.shapes, en.DAG) // a DAG of the same id before it
}

// restored rebuilds the index from a core loaded whole.
func (b *bigReads) restored(c *core.Core) {
	b.newest, b.stale, b.shapes = b.newest[:0], 0, nil
	for id, seq := range c.DAGOrder() {
		b.newest = append(b.newest, indexed{id, seq})
	}
	sort.Slice(b.newest, func(i, j int) bool {
		x, y := b.newest[i], b.newest[j]
		if x.seq != y.seq {
			return x.seq < y.seq
		}
		return x.id > y.id // read backwards: the same seq by id, as core.DAGs
	})
}

// compact drops the DAGs gone once they are half the index.
func (b *bigReads) compact(c *core.Core) {
	if b.stale*2 < len(b.newest) || b.stale < 64 {
		return
	}
	kept := b.newest[:0]
	for _, x := range b.newest {
		if seq, ok := c.DAGSeq(x.id); ok && seq == x.seq {
			kept = append(kept, x)
		}
	}
	clear(b.newest[len(kept):])
	b.newest, b.stale = kept, 0
}

// all yields the DAGs indexed, newest first.
func (b *bigReads) all() iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		for i := len(b.newest) - 1; i >= 0; i-- {
			if !yield(b.newest[i].id, b.newest[i].seq) {
				return
			}
		}
	}
}

// shape returns DAG id's shape, built at its first read, and its counts,
// read again once they are shapeCountsFresh old.
func (b *bigReads) shape(c *core.Core, id string, now time.Time) (*core.Shape, []core.StatusCounts) {
	if x := b.shapes[id]; x != nil {
		if now.Sub(x.at) < shapeCountsFresh && !now.Before(x.at) {
			return x.s, x.counts
		}
		if counts, ok := c.ShapeCounts(x.s); ok {
			x.counts, x.at = counts, now
			return x.s, counts
		}
		delete(b.shapes, id)
	}
	s, ok := c.Shape(id)
	if !ok {
		return nil, nil
	}
	if b.shapes == nil {
		b.shapes = map[string]*shaped{}
	}
	if len(b.shapes) >= maxShapes {
		for k := range b.shapes { // any one: a shape is cheap to build again
			delete(b.shapes, k)
			break
		}
	}
	counts, _ := c.ShapeCounts(s)
	b.shapes[id] = &shaped{s: s, counts: counts, at: now}
	return s, counts
}

// HeadRead is what DAGHead reads: the DAG with at most its first limit
// tasks (nil View when this replica holds no such DAG), whether some were
// left out, and then its shape with each node's counts (at most a second
// old: shapeCountsFresh), and the revision.
type HeadRead struct {
	View      *core.DAGView
	Truncated bool
	Shape     *core.Shape
	Counts    []core.StatusCounts
	Rev       int64
}

// DAGHead returns a DAG with at most limit of its tasks (core.DAGHead),
// and its shape when some were left out.
func (e *Engine) DAGHead(ctx context.Context, id string, limit int) (HeadRead, error) {
	return read(e, ctx, func() HeadRead {
		r := HeadRead{Rev: e.c.Rev()}
		r.View, r.Truncated, _ = e.c.DAGHead(id, limit)
		if r.Truncated {
			r.Shape, r.Counts = e.bigReads.shape(e.c, id, e.clock.Now())
		}
		return r
	})
}

// TasksQuery selects a page of a DAG's tasks (Tasks).
type TasksQuery struct {
	Statuses core.StatusSet
	// Group is a map group's id (its instances) or a shape node's id
	// (its tasks, with their instances).
	Group  string
	Cursor core.TaskCursor
	Limit  int
}

// TasksRead is what Tasks reads: the page (nil when there is no such DAG
// or group), whether the DAG exists, and the revision.
type TasksRead struct {
	Page     *core.TaskPageResult
	DAGFound bool
	Rev      int64
}

// Tasks returns a page of a DAG's tasks (core.TaskPage); a shape node's
// id as Group lists that node's tasks.
func (e *Engine) Tasks(ctx context.Context, id string, q TasksQuery) (TasksRead, error) {
	return read(e, ctx, func() TasksRead {
		r := TasksRead{Rev: e.c.Rev()}
		cq := core.TaskQuery{Statuses: q.Statuses, From: q.Cursor, Limit: q.Limit}
		if strings.HasPrefix(q.Group, core.ShapeGroupPrefix) {
			s, _ := e.bigReads.shape(e.c, id, e.clock.Now())
			if s == nil {
				return r
			}
			r.DAGFound = true
			nd := s.Node(q.Group)
			if nd == nil {
				return r
			}
			cq.Members = nd.Members
		} else {
			cq.Group = q.Group
		}
		var err error
		r.Page, r.DAGFound, err = e.c.TaskPage(id, cq)
		if err != nil {
			r.Page = nil
		}
		return r
	})
}
