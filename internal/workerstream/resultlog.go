package workerstream

import "github.com/orion-sched/orion/internal/model"

// resultLog holds the results a worker has produced and no leader has
// acknowledged yet, in the order they were produced. Acks come one by one
// and a burst of noop tasks leaves tens of thousands pending, so an ack
// must cost O(1), not a scan and a shift of the rest: it marks its entry
// dead, and the dead are swept out once they are half of the log.
type resultLog struct {
	items []resultItem
	index map[model.AttemptID]int // live entry of each attempt in items
	dead  int
}

type resultItem struct {
	r    model.Result
	live bool
}

// add appends r; an earlier result of the same attempt is superseded.
func (l *resultLog) add(r model.Result) {
	if l.index == nil {
		l.index = make(map[model.AttemptID]int)
	}
	if i, ok := l.index[r.AttemptID]; ok {
		l.items[i].live = false
		l.dead++
	}
	l.index[r.AttemptID] = len(l.items)
	l.items = append(l.items, resultItem{r: r, live: true})
}

// ack forgets the result of id, if it is held.
func (l *resultLog) ack(id model.AttemptID) {
	i, ok := l.index[id]
	if !ok {
		return
	}
	delete(l.index, id)
	l.items[i] = resultItem{}
	l.dead++
	if l.dead > len(l.items)/2 {
		l.sweep()
	}
}

// sweep drops the dead entries, keeping the order of the live ones.
func (l *resultLog) sweep() {
	if len(l.index) == 0 {
		l.items, l.dead = nil, 0
		return
	}
	live := make([]resultItem, 0, len(l.index))
	for _, it := range l.items {
		if it.live {
			l.index[it.r.AttemptID] = len(live)
			live = append(live, it)
		}
	}
	l.items, l.dead = live, 0
}

// len is the number of results held.
func (l *resultLog) len() int { return len(l.index) }

// each calls fn with every result held, oldest first.
func (l *resultLog) each(fn func(r model.Result)) {
	for _, it := range l.items {
		if it.live {
			fn(it.r)
		}
	}
}
