package engine

import (
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// timerQueue holds the core's timers in one min-heap behind a single
// time.Timer, so thousands of retry timers cost no goroutines.
type timerQueue []timerItem

type timerItem struct {
	at   time.Time
	kind core.TimerKind
	id   model.AttemptID
}

func (q timerQueue) Len() int         { return len(q) }
func (q timerQueue) peek() *timerItem { return &q[0] }

func (q *timerQueue) push(t timerItem) {
	*q = append(*q, t)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].at.Before(h[p].at) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *timerQueue) pop() timerItem {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].at.Before(h[m].at) {
			m = l
		}
		if r := l + 1; r < n && h[r].at.Before(h[m].at) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
