package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bounds of the per-client limiter map.
const (
	maxClients = 10000            // distinct clients tracked at once
	sweepEvery = 30 * time.Second // how often idle clients are forgotten
)

// ipLimiter is a token bucket per client key. A client idle for longer than
// it takes its bucket to refill is forgotten: a new bucket would be the same.
type ipLimiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration

	mu        sync.Mutex
	clients   map[string]*clientBucket
	lastSweep time.Time
}

type clientBucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newIPLimiter(perSecond float64) *ipLimiter {
	burst := max(1, int(2*perSecond))
	refill := float64(burst) / perSecond * float64(time.Second)
	idle := time.Second
	if refill > float64(idle) {
		idle = time.Duration(math.Min(refill, float64(24*time.Hour)))
	}
	return &ipLimiter{limit: rate.Limit(perSecond), burst: burst, idle: idle,
		clients: make(map[string]*clientBucket)}
}

// allow takes a token for key, or says how long until one is available.
func (l *ipLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.sweep(now)
	}
	c := l.clients[key]
	if c == nil {
		if len(l.clients) >= maxClients {
			if now.Sub(l.lastSweep) >= time.Second {
				l.sweep(now)
			}
			// Still full (many clients at once): forget arbitrary ones. It
			// only ever grants a forgotten client a fresh bucket.
			for k := range l.clients {
				if len(l.clients) < maxClients {
					break
				}
				delete(l.clients, k)
			}
		}
		c = &clientBucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.clients[key] = c
	}
	c.seen = now
	res := c.lim.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now) // give the token back: a refused request costs nothing
		return false, d
	}
	return true, 0
}

func (l *ipLimiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, c := range l.clients {
		if now.Sub(c.seen) >= l.idle {
			delete(l.clients, k)
		}
	}
}

func (l *ipLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
