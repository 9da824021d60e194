// Package metrics defines Orion's Prometheus metrics in one place, registered
// on a registry of their own so tests and benchmarks can run several servers
// in one process.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector Orion exports.
type Metrics struct {
	Registry *prometheus.Registry

	TasksIngested    prometheus.Counter
	TasksSucceeded   prometheus.Counter
	TasksFailed      prometheus.Counter
	TasksRetried     prometheus.Counter
	TasksCancelled   prometheus.Counter
	TasksUpstream    prometheus.Counter
	TasksSkipped     prometheus.Counter
	TasksOrphaned    prometheus.Counter
	DAGsSubmitted    prometheus.Counter
	DAGsFinished     *prometheus.CounterVec
	QueueSize        prometheus.Gauge
	Running          prometheus.Gauge
	TasksByStatus    *prometheus.GaugeVec
	DispatchLatency  prometheus.Histogram
	CommitLatency    prometheus.Histogram
	BatchSize        prometheus.Histogram
	CommitResends    prometheus.Counter
	IsLeader         prometheus.Gauge
	LeaderChanges    prometheus.Counter
	TakeoverSeconds  prometheus.Gauge
	AwaitedWorkers   prometheus.Gauge
	AppliedRevision  prometheus.Gauge
	ReplicaLag       prometheus.Gauge
	FencedWrites     prometheus.Counter
	ApplyErrors      prometheus.Counter
	BadValues        prometheus.Counter
	StaleResults     prometheus.Counter
	UnheldResults    prometheus.Counter
	RefusedClaims    *prometheus.CounterVec
	RefusedHellos    *prometheus.CounterVec
	FloodedStreams   prometheus.Counter
	DroppedEvents    prometheus.Counter
	RateLimited      prometheus.Counter
	TokenReloads     *prometheus.CounterVec
	HostRefused      prometheus.Counter
	ConnsRefused     prometheus.Counter
	TooLarge         prometheus.Counter
	KubeLabelErrors  prometheus.Counter
	HTTPRequests     *prometheus.CounterVec
	RetentionDeletes prometheus.Counter
	RequestedDeletes prometheus.Counter
	EtcdDBSizeBytes  prometheus.Gauge
	WorkerSlots      *prometheus.GaugeVec
	WorkerBusy       *prometheus.GaugeVec

	// Storage full (etcd's NOSPACE alarm).
	EtcdQuotaBytes     prometheus.Gauge
	EtcdNoSpace        prometheus.Gauge
	StorageFull        prometheus.Gauge
	StorageFullRefused prometheus.Counter

	// Keeping etcd's raft leader off the leader's node (leaderapart).
	EtcdLeaderMoves *prometheus.CounterVec

	Admission // global limits and storage admission (admission.go)
	// Poison entries: records the store refused alone for what they hold.
	PoisonEntries *prometheus.CounterVec
	// Event streams refused by a limit, by the limit's config key.
	SubscribersRefused *prometheus.CounterVec
}

// New creates and registers every metric, plus the Go and process collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{Registry: r}
	f := factory{r}
	m.TasksIngested = f.counter("orion_tasks_ingested_total", "Tasks accepted in submitted DAGs.")
	m.TasksSucceeded = f.counter("orion_tasks_succeeded_total", "Task attempts that succeeded.")
	m.TasksFailed = f.counter("orion_tasks_failed_total", "Tasks that failed for good (retries exhausted).")
	m.TasksRetried = f.counter("orion_tasks_retried_total", "Failed attempts that were scheduled for a retry.")
	m.TasksCancelled = f.counter("orion_tasks_cancelled_total", "Tasks cancelled with their DAG.")
	m.TasksUpstream = f.counter("orion_tasks_upstream_failed_total", "Tasks marked upstream_failed by a failure cascade.")
	m.TasksSkipped = f.counter("orion_tasks_skipped_total", "Tasks skipped by their trigger rule or condition, or handlers and notifications the DAG's end did not call for.")
	m.TasksOrphaned = f.counter("orion_tasks_orphaned_total", "Attempts re-queued because their worker vanished.")
	m.DAGsSubmitted = f.counter("orion_dags_submitted_total", "DAGs accepted.")
	m.DAGsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_dags_finished_total", Help: "DAGs that reached a terminal status, by status."}, []string{"status"})
	r.MustRegister(m.DAGsFinished)
	m.QueueSize = f.gauge("orion_queue_size", "Tasks ready and waiting for a worker slot.")
	m.Running = f.gauge("orion_tasks_running", "Tasks with an attempt running.")
	m.TasksByStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_tasks", Help: "Tasks held in memory, by status."}, []string{"status"})
	r.MustRegister(m.TasksByStatus)
	m.DispatchLatency = f.histogram("orion_dispatch_latency_seconds", "Time from a task becoming ready to its attempt being started.", prometheus.ExponentialBuckets(0.0001, 2, 18))
	m.CommitLatency = f.histogram("orion_commit_latency_seconds", "Time to commit one batch of log entries to etcd.", prometheus.ExponentialBuckets(0.0001, 2, 18))
	m.CommitResends = f.counter("orion_commit_resends_total", "Transactions etcd applied after their successor in the chain, which it then refused and which were sent again (commit_pipeline above 1): a raft round each.")
	m.BatchSize = f.histogram("orion_commit_batch_entries", "Log entries per commit.", prometheus.ExponentialBuckets(1, 2, 11))
	m.IsLeader = f.gauge("orion_is_leader", "1 while this replica is the leader.")
	m.LeaderChanges = f.counter("orion_leader_changes_total", "Times this replica became leader.")
	m.TakeoverSeconds = f.gauge("orion_last_takeover_seconds", "Time from winning the election to the first committed write of the term.")
	m.AwaitedWorkers = f.gauge("orion_takeover_awaited_workers", "Workers of the term before that a new leader waits for (at most the orphan grace) before it dispatches.")
	m.AppliedRevision = f.gauge("orion_applied_revision", "etcd revision of the last log entry applied.")
	m.ReplicaLag = f.gauge("orion_replica_lag_revisions", "How many etcd revisions a standby is behind the log it follows.")
	m.FencedWrites = f.counter("orion_fenced_writes_total", "Commits rejected because this replica's leadership fence was gone.")
	m.ApplyErrors = f.counter("orion_apply_errors_total", "Committed entries the state machine refused (a bug, or values edited by hand).")
	m.BadValues = f.counter("orion_bad_values_total", "Values under /orion/v1/ that did not decode and were skipped.")
	m.StaleResults = f.counter("orion_stale_results_total", "Results for attempts that were no longer current, discarded.")
	m.UnheldResults = f.counter("orion_unheld_results_total", "Results for attempts their worker does not hold (never dispatched to it, another worker's, or of a task the leader does not know), discarded.")
	m.RefusedClaims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_worker_claims_refused_total", Help: "Attempts a worker's hello listed that the log did not give it, cancelled on the worker, by reason (stale: the log moved past them, as after a failover; the others: never its to hold)."}, []string{"reason"})
	m.RefusedHellos = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_worker_hellos_refused_total", Help: "Worker streams refused at their hello, by reason (id, slots, labels, hello, version, workers)."}, []string{"reason"})
	r.MustRegister(m.RefusedClaims, m.RefusedHellos)
	m.FloodedStreams = f.counter("orion_worker_streams_flooded_total", "Worker streams closed for sending more messages than worker_stream_max_rate allows.")
	m.DroppedEvents = f.counter("orion_dropped_events_total", "Live events dropped because a subscriber was too slow.")
	m.SubscribersRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_event_subscribers_refused_total",
		Help: "Event streams refused because a limit was reached, by limit (max_event_subscribers: 503; max_event_subscribers_per_client: 429)."}, []string{"limit"})
	r.MustRegister(m.SubscribersRefused)
	m.RateLimited = f.counter("orion_rate_limited_total", "API requests refused by the rate limit.")
	m.TokenReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_auth_tokens_reloads_total",
		Help: "Reads of a changed tokens file (auth_tokens_file), by outcome: loaded, or refused (the tokens loaded before stay)."}, []string{"outcome"})
	r.MustRegister(m.TokenReloads)
	m.HostRefused = f.counter("orion_http_host_refused_total", "Requests refused because their Host is not in the allow-list (DNS rebinding or a missing allowed_hosts entry).")
	m.ConnsRefused = f.counter("orion_http_connections_refused_total", "Connections closed at once because their client address already held its limit of open connections.")
	m.TooLarge = f.counter("orion_submissions_too_large_total", "Submissions refused because they would not fit etcd's request limit or the decoded-size budget.")
	m.KubeLabelErrors = f.counter("orion_kube_label_errors_total", "Failed attempts to set the leader/standby label on a pod.")
	m.HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_http_requests_total", Help: "API requests by route and status code."}, []string{"route", "code"})
	r.MustRegister(m.HTTPRequests)
	m.EtcdLeaderMoves = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_etcd_leader_moves_total",
		Help: "MoveLeader requests this replica made while leading, to move etcd's raft leader off its own node, by outcome (moved, failed)."}, []string{"outcome"})
	r.MustRegister(m.EtcdLeaderMoves)
	m.RetentionDeletes = f.counter("orion_retention_deleted_dags_total", "Finished DAGs deleted by the retention policy.")
	m.RequestedDeletes = f.counter("orion_requested_deleted_dags_total", "Finished DAGs deleted on request (DELETE /api/v1/dags/{id}, orion delete).")
	m.EtcdDBSizeBytes = f.gauge("orion_etcd_db_size_bytes", "Size of the etcd backend database as reported by the member this node talks to.")
	m.EtcdQuotaBytes = f.gauge("orion_etcd_quota_bytes", "The backend quota (quota-backend-bytes) of the etcd member this node talks to, when etcd reports it.")
	m.EtcdNoSpace = f.gauge("orion_etcd_nospace", "1 while etcd has a NOSPACE alarm raised: its backend reached the quota and it refuses writes.")
	m.StorageFull = f.gauge("orion_storage_full", "1 while this leader holds its writes because etcd refused them for its quota (NOSPACE).")
	m.StorageFullRefused = f.counter("orion_submissions_refused_storage_full_total", "Submissions refused with 507 because etcd is full (NOSPACE).")
	m.WorkerSlots = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_worker_slots", Help: "Executor slots per worker (leader's view)."}, []string{"worker"})
	m.WorkerBusy = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "orion_worker_busy_slots", Help: "Busy executor slots per worker (leader's view)."}, []string{"worker"})
	r.MustRegister(m.WorkerSlots, m.WorkerBusy)
	m.Admission = newAdmission(f)
	m.PoisonEntries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orion_poison_entries_total",
		Help: "Records etcd refused alone as too large, by what the leader did instead: shrunk (written again without output tail, error and earlier attempts), failed (a dispatch that cannot be recorded: the task failed), parked (nothing smaller: left for the next term)."},
		[]string{"outcome"})
	r.MustRegister(m.PoisonEntries)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

type factory struct{ r *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.r.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.r.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.r.MustRegister(h)
	return h
}
