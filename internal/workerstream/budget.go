package workerstream

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// A stream's budget (newBudget) starts full, so a worker closed for
// flooding that dialed again at once got a fresh burst every time: four
// such workers redialing every 100 ms cost the leader a join and a leave
// per stream on top of the messages, and with 1,000 idle event streams and
// `orion bench` on 2 cores starved it until a standby deposed it. So the
// budget of a worker, by its id and address, outlives its stream for
// budgetMemory: a worker that dials again goes on from what it had left,
// and one with less than half its burst left is refused at its hello,
// before it joins.

// budgetMemory is how long a worker's budget is kept after its stream ends.
const budgetMemory = time.Minute

// streamBudget is one stream's allowance; it is swapped, once, for the one
// its worker had kept (adopt).
type streamBudget struct{ lim atomic.Pointer[rate.Limiter] }

func newStreamBudget(r float64) *streamBudget {
	b := &streamBudget{}
	b.lim.Store(newBudget(r))
	return b
}

// Allow spends one message.
func (b *streamBudget) Allow() bool { return b.lim.Load().Allow() }

// Rested reports, spending one message, whether at least half the burst
// is left: what a worker needs to be let in. A worker closed for flooding
// thus waits half a second (its burst is a second's rate) before it can
// join again, instead of joining, flooding and leaving ten times a second.
func (b *streamBudget) Rested() bool {
	l := b.lim.Load()
	return l.Tokens() >= float64(l.Burst())/2 && l.Allow()
}

// keptBudgets are the budgets of workers by id and address, bounded: when
// it is full, budgets idle past budgetMemory go; if none has, a new worker
// is not remembered (it keeps its stream's own budget).
type keptBudgets struct {
	mu  sync.Mutex
	max int
	m   map[string]*keptBudget
}

type keptBudget struct {
	lim  *rate.Limiter
	seen time.Time
}

func newKeptBudgets(max int) *keptBudgets {
	return &keptBudgets{max: max, m: make(map[string]*keptBudget)}
}

// budgetKey names a worker's budget: its id and the host it dials from
// (another host may use the same id: it is not the same process).
func budgetKey(remote, worker string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return host + "\x00" + worker
}

// adopt gives b the budget its worker kept, if it kept one, or keeps b's.
func (k *keptBudgets) adopt(key string, b *streamBudget, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kb, ok := k.m[key]; ok && now.Sub(kb.seen) < budgetMemory {
		b.lim.Store(kb.lim)
		kb.seen = now
		return
	}
	if len(k.m) >= k.max {
		for key, kb := range k.m {
			if now.Sub(kb.seen) >= budgetMemory {
				delete(k.m, key)
			}
		}
		if len(k.m) >= k.max {
			return
		}
	}
	k.m[key] = &keptBudget{lim: b.lim.Load(), seen: now}
}

// ended notes when a worker's stream ended: its budget is kept from then.
func (k *keptBudgets) ended(key string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kb, ok := k.m[key]; ok {
		kb.seen = now
	}
}
