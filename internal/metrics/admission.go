package metrics

import "github.com/prometheus/client_golang/prometheus"

// Admission are the metrics of what Orion admits: the global limits on live
// work and schedules, and the storage it keeps below etcd's quota.
type Admission struct {
	// Refused counts refusals by the setting that refused: max_live_dags,
	// max_live_tasks, max_schedules, min_schedule_interval,
	// storage_admission_ratio.
	Refused *prometheus.CounterVec
	// Limit is each setting's value (the ratio for storage_admission_ratio),
	// so that an alert can compare a count with its limit.
	Limit     *prometheus.GaugeVec
	LiveDAGs  prometheus.Gauge
	LiveTasks prometheus.Gauge

	// The storage gauge (internal/store.SpaceGauge): etcd's database as
	// last measured, what the admission limit allows, and whether new
	// work is refused for storage.
	StorageInUse     prometheus.Gauge
	StorageLimit     prometheus.Gauge
	StorageLimited   prometheus.Gauge
	PressureDeletes  prometheus.Counter
	PressureCompacts prometheus.Counter
}

func newAdmission(f factory) Admission {
	a := Admission{
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_admission_refused_total",
			Help: "Submissions, retries and schedules refused by a global limit, by setting (max_live_dags, max_live_tasks, max_schedules, min_schedule_interval, storage_admission_ratio)."},
			[]string{"limit"}),
		Limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_admission_limit",
			Help: "The value of each global limit (0: none), by setting; storage_admission_ratio is a share of etcd's quota."}, []string{"limit"}),
		LiveDAGs:  f.gauge("orion_live_dags", "DAGs running (submitted or retried, not finished): what max_live_dags bounds."),
		LiveTasks: f.gauge("orion_live_tasks", "Tasks of the DAGs running, finished or not: what max_live_tasks bounds."),
		StorageInUse: f.gauge("orion_storage_in_use_bytes",
			"etcd's database in use as the leader estimates it (last measured, plus what it wrote since): what storage_admission_ratio bounds."),
		StorageLimit: f.gauge("orion_storage_admission_limit_bytes",
			"The size of etcd's database in use above which new DAGs and schedules are refused with 507 (storage_admission_ratio of the quota)."),
		StorageLimited: f.gauge("orion_storage_limited",
			"1 while new DAGs and schedules are refused because etcd's database is above the admission limit."),
		PressureDeletes: f.counter("orion_storage_pressure_deleted_dags_total",
			"Finished DAGs deleted ahead of their retention, oldest first, because etcd's database was above the admission limit."),
		PressureCompacts: f.counter("orion_storage_pressure_compactions_total",
			"Compactions of etcd's history the leader asked for because etcd's database was above the admission limit."),
	}
	f.r.MustRegister(a.Refused, a.Limit)
	return a
}
