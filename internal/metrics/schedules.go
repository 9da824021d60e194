package metrics

import "github.com/prometheus/client_golang/prometheus"

// Schedules are the metrics of schedule ticks, which the leader fires.
type Schedules struct {
	Fired   prometheus.Counter
	Late    prometheus.Counter
	Skipped *prometheus.CounterVec
	Count   prometheus.Gauge
	// Pass is how long the leader's firing passes take (read, plan, fire
	// every due tick, record the cursors): a pass longer than a schedule's
	// period makes its ticks late.
	Pass prometheus.Histogram
}

// NewSchedules creates the schedule metrics and registers them on r.
func NewSchedules(r *prometheus.Registry) *Schedules {
	f := factory{r}
	s := &Schedules{
		Fired: f.counter("orion_schedule_ticks_fired_total", "Schedule ticks that created their run (on this replica, while it led)."),
		Late:  f.counter("orion_schedule_ticks_late_total", "Schedule ticks fired after their grace (caught up after an outage, a pause or a queue)."),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_schedule_ticks_skipped_total",
			Help: "Schedule ticks dropped by a policy: reason catchup (late, and the catch-up policy drops it) or overlap (a run was still active)."}, []string{"reason"}),
		Count: f.gauge("orion_schedules", "Schedules the leader follows."),
		Pass: f.histogram("orion_schedule_pass_seconds", "How long a pass of the leader's schedule firer takes: read the schedules, fire every due tick, record the cursors.",
			prometheus.ExponentialBuckets(0.001, 2, 14)),
	}
	r.MustRegister(s.Skipped)
	return s
}
