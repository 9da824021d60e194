package schedule

import (
	"time"
)

// State is what the planner knows of a schedule beyond its spec.
type State struct {
	// Cursor is the schedule's watermark: every tick at or before it has
	// been handled (fired or dropped). A new schedule's cursor is its
	// creation time.
	Cursor time.Time
	// Active is the number of its runs still running.
	Active int
}

// Drop reasons.
const (
	DropCatchup = "catchup" // late, and the catch-up policy drops it
	DropOverlap = "overlap" // a run was still active and overlap is skip
)

// Action is what becomes of one due tick.
type Action struct {
	Tick time.Time
	Fire bool   // false: dropped
	Late bool   // handled after its grace
	Drop string // why it was dropped (DropCatchup, DropOverlap)
}

// Plan is what to do at one moment.
type Plan struct {
	// Actions lists the due ticks handled now, oldest first. Fire those
	// with Fire set, in order, then record Cursor.
	Actions []Action
	// Dropped counts further late ticks the catch-up policy dropped without
	// listing them (older than the listed ones); at least that many when
	// Many is set (more than the planner enumerates).
	Dropped int
	Many    bool
	// Cursor is the watermark once the actions are done.
	Cursor time.Time
	// Waiting is set when a due tick waits for a run to finish (overlap
	// queue, or max_active_runs reached): plan again when one does.
	Waiting bool
	// Wake is the next tick after now, when to plan again (zero: the
	// schedule has no more ticks).
	Wake time.Time
}

// maxScan bounds the ticks the planner enumerates forward from a cursor;
// past it (a schedule paused for a year at one tick a second), it finds the
// last due ticks looking back from now instead.
const maxScan = 10000

// Plan decides, at now, what becomes of the ticks due since st.Cursor: the
// catch-up policy first (which late ticks still fire), then the overlap
// policy (whether a tick may start while st.Active runs are running).
func (c *Compiled) Plan(st State, now time.Time) Plan {
	p := Plan{Cursor: st.Cursor, Wake: c.Next(maxTime(now, st.Cursor))}
	keep := 2
	if c.catchup == CatchupAll {
		keep = max(c.limit, 1) + 1
	}
	due, earlier, many := c.due(st.Cursor, now, keep)
	p.Dropped, p.Many = earlier, many
	if len(due) == 0 {
		if earlier > 0 || many {
			p.Cursor = now
		}
		return p
	}
	if earlier > 0 || many {
		p.Cursor = due[0].Add(-time.Nanosecond)
	}
	acts := make([]Action, len(due))
	onTime, late := 0, 0
	for i, t := range due {
		acts[i] = Action{Tick: t, Late: now.Sub(t) > c.graceOf(t)}
		if acts[i].Late {
			late++
		} else {
			onTime++
		}
	}
	// Catch-up: late ticks come first (ticks are in order and grace never
	// reaches the next tick).
	fireLate := 0
	switch c.catchup {
	case CatchupAll:
		fireLate = min(late, c.limit)
	case CatchupLatest:
		if onTime == 0 && late > 0 {
			fireLate = 1
		}
	}
	seenLate := 0
	for i := range acts {
		if !acts[i].Late {
			acts[i].Fire = true
			continue
		}
		seenLate++
		if seenLate > late-fireLate {
			acts[i].Fire = true
		} else {
			acts[i].Drop = DropCatchup
		}
	}
	// Overlap: at most a cap of active runs.
	limit := c.maxActive
	if limit == 0 && c.overlap != OverlapAllow {
		limit = 1
	}
	active := st.Active
	for i := range acts {
		a := &acts[i]
		if a.Fire {
			switch {
			case limit == 0 || active < limit:
				active++
			case c.overlap == OverlapSkip:
				a.Fire, a.Drop = false, DropOverlap
			default: // queue, or allow with max_active_runs: wait
				p.Waiting = true
				p.Actions = acts[:i]
				return p
			}
		}
		p.Cursor = a.Tick
	}
	p.Actions = acts
	return p
}

// due returns the last keep ticks in (after, now], oldest first, and how
// many earlier ticks there were (many: at least maxScan).
func (c *Compiled) due(after, now time.Time, keep int) (last []time.Time, earlier int, many bool) {
	ring := make([]time.Time, 0, keep)
	n := 0
	t := after
	for range maxScan {
		t = c.Next(t)
		if t.IsZero() || t.After(now) {
			return ring, n - len(ring), false
		}
		if len(ring) == keep {
			copy(ring, ring[1:])
			ring = ring[:keep-1]
		}
		ring = append(ring, t)
		n++
	}
	// Too many to walk: look back from now, over a growing window, until
	// it holds keep ticks (or reaches what was already walked).
	for span := time.Minute; ; span *= 4 {
		from := now.Add(-span)
		if !from.After(t) {
			from = t
		}
		ring = ring[:0]
		for u := c.Next(from); !u.IsZero() && !u.After(now); u = c.Next(u) {
			if len(ring) == keep {
				copy(ring, ring[1:])
				ring = ring[:keep-1]
			}
			ring = append(ring, u)
		}
		if len(ring) == keep || from.Equal(t) {
			return ring, n, true
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
