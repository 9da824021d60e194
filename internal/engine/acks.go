package engine

import "slices"

// ackQueue holds the acknowledgements of reported results until the
// transaction that makes them durable. A result is durable once every
// entry proposed up to its report has committed: its own record, and
// whatever made it moot. Acknowledging only with a transaction that takes
// the last pending entry was correct, and under a steady load never came:
// more than a transaction's worth was always pending, so workers kept
// tens of thousands of results unacknowledged, and after a takeover each
// new leader had to take them all again before its first commit.
//
// So acknowledgements go in two groups. The closed group waits for the
// first until entries of the pending queue (those pending when it
// closed); the open one gathers what is reported meanwhile. When a batch
// takes the closed group's last entry, the batch carries its
// acknowledgements, and the open group closes on everything still pending.
// Anything that rearranges the pending queue (a failed transaction's
// entries sent again, entries refused while etcd is full) merges the
// groups to wait for all that is pending: later, never early.
type ackQueue struct {
	closed, open []resultRef
	until        int  // entries at the front of pending the closed group waits for
	all          bool // until is all of pending, as the next batch finds it
}

// add queues the acknowledgement of a result whose proposals, if any, are
// pending or taken already.
func (q *ackQueue) add(r resultRef) { q.open = append(q.open, r) }

// taken is told that a batch took n entries from the front of the pending
// queue and left left; it returns the acknowledgements the batch makes
// durable.
func (q *ackQueue) taken(n, left int) []resultRef {
	if q.all {
		q.until, q.all = n+left, false
	}
	q.until -= n
	if left == 0 {
		return q.takeAll()
	}
	if q.until > 0 {
		return nil
	}
	out := q.closed
	q.closed, q.open, q.until = q.open, nil, left
	return out
}

// takeAll returns every acknowledgement: everything proposed is committed.
func (q *ackQueue) takeAll() []resultRef {
	out := slices.Concat(q.closed, q.open)
	*q = ackQueue{}
	return out
}

// putBack takes back the acknowledgements of a transaction that failed, to
// wait, with every other, for all that will then be pending.
func (q *ackQueue) putBack(acks []resultRef) {
	q.closed = slices.Concat(acks, q.closed, q.open)
	q.open, q.all = nil, true
}

// rearranged is told that the pending queue changed other than at its
// ends: every acknowledgement waits for all of it.
func (q *ackQueue) rearranged() { q.putBack(nil) }

// drop forgets the acknowledgements of results that will not be made
// durable in this term: their workers keep them and send them again.
func (q *ackQueue) drop(fn func(resultRef) bool) {
	q.closed = slices.DeleteFunc(q.closed, fn)
	q.open = slices.DeleteFunc(q.open, fn)
}

// len is the number of acknowledgements waiting.
func (q *ackQueue) len() int { return len(q.closed) + len(q.open) }
