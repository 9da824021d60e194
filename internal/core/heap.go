package core

// readyQueue is a min-heap of ready tasks ordered by priority (lower first),
// then by DAG submission order (the revision that created the DAG, then the
// DAG id for DAGs created in one transaction), then by the task's position
// in its DAG (and an instance's in its map group). The order is a function of committed state
// only, so every replica would dispatch in the same order.
//
// Entries are removed lazily: a task that stopped being ready while queued is
// skipped when it reaches the top (task.queued tracks membership so a task is
// never in the heap twice).
type readyQueue []*task

// priority is t's priority, read from its DAG when all its tasks share
// one: the heaps compare priorities at every step, and a spec is a cache
// miss away.
func (t *task) priority() int {
	if d := t.dag; d.onePrio {
		return d.prio
	}
	return t.spec().Priority
}

func less(a, b *task) bool {
	pa, pb := a.priority(), b.priority()
	if pa != pb {
		return pa < pb
	}
	if a.dag.seq != b.dag.seq {
		return a.dag.seq < b.dag.seq
	}
	if a.dag != b.dag {
		return a.dag.id < b.dag.id
	}
	if a.idx != b.idx {
		return a.idx < b.idx
	}
	return a.ii < b.ii // a map group's instances, in index order
}

func (q *readyQueue) push(t *task) {
	if t.queued {
		return
	}
	t.queued = true
	*q = append(*q, t)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *readyQueue) pop() *task {
	h := *q
	n := len(h) - 1
	top := h[0]
	h[0] = h[n]
	h[n] = nil
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(h[r], h[l]) {
			m = r
		}
		if !less(h[m], h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	top.queued = false
	return top
}

func (q readyQueue) Len() int { return len(q) }

// add appends t without ordering the heap: BecomeLeader queues every ready
// task that way and orders each queue once (heapify), O(n) for n tasks
// instead of O(n log n) and a copy at each doubling of the slice.
func (q *readyQueue) add(t *task) {
	if t.queued {
		return
	}
	t.queued = true
	*q = append(*q, t)
}

// sorted reports whether the queue is in order, and so a heap already.
func (q readyQueue) sorted() bool {
	for i := 1; i < len(q); i++ {
		if less(q[i], q[i-1]) {
			return false
		}
	}
	return true
}

// heapify orders the queue as a heap after add.
func (q readyQueue) heapify() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q readyQueue) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && less(q[r], q[l]) {
			m = r
		}
		if !less(q[m], q[i]) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}
