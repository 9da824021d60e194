package server

import (
	"context"
	"time"

	"github.com/orion-sched/orion/internal/http/events"
)

// newEventSnapshot fills the event stream's metrics messages from the
// replica's status, the leader as etcd names it, and the dispatch latency
// histogram over the last ten seconds. It runs off the scheduling loop.
func newEventSnapshot(s *Server) func(m *events.Metrics) {
	q, err := events.NewQuantiles(s.Metrics.DispatchLatency, 10*time.Second)
	if err != nil {
		q = nil
	}
	return func(m *events.Metrics) {
		eng := s.ref.Get()
		if eng == nil {
			return
		}
		st := eng.Status()
		events.FillFromStatus(m, st)
		if !st.Leader {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			if leader, err := eng.Leader(ctx); err == nil {
				m.Leader, m.LeaderKnown = leader, true
			}
			cancel()
		}
		if q != nil {
			if v, ok := q.Sample(time.Now(), 0.50, 0.99); ok {
				p50, p99 := v[0]*1000, v[1]*1000
				m.DispatchP50Ms, m.DispatchP99Ms = &p50, &p99
			}
		}
	}
}
