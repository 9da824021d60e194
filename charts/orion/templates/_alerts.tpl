{{/*
The alert rules, shared by the PrometheusRule and deploy/prometheus/orion-alerts.yaml
(rendered from this chart). include "orion.alertRules" . gives a YAML list.
*/}}
{{- define "orion.alertSelector" -}}
{{- if .Values.metrics.prometheusRule.selector }}
{{- .Values.metrics.prometheusRule.selector }}
{{- else }}
{{- printf "job=%q, namespace=%q" (include "orion.scheduler.headless" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{- define "orion.alertRules" -}}
{{- $sel := include "orion.alertSelector" . }}
{{- $p := .Values.metrics.prometheusRule }}
- alert: OrionLeaderAbsent
  expr: sum(orion_is_leader{ {{- $sel -}} }) == 0
  for: 30s
  labels:
    severity: critical
  annotations:
    summary: No Orion scheduler replica leads
    description: >-
      No replica has reported orion_is_leader=1 for 30s: nothing is scheduled
      and writes answer 503. Check etcd health and the replicas' logs; find
      the election with `etcdctl elect -l /orion/v1/election`.
- alert: OrionMetricsAbsent
  expr: absent(orion_is_leader{ {{- $sel -}} })
  for: 5m
  labels:
    severity: warning
  annotations:
    summary: No Orion scheduler metrics are scraped
    description: >-
      Prometheus has no orion_is_leader series: the replicas are down or the
      scrape fails (the /metrics route needs the API token).
- alert: OrionSlowTakeover
  expr: >-
    max by (namespace, pod) (orion_last_takeover_seconds{ {{- $sel -}} }) > {{ $p.takeoverSeconds }}
    and on (namespace, pod)
    (increase(orion_leader_changes_total{ {{- $sel -}} }[15m]) > 0
     or changes(orion_last_takeover_seconds{ {{- $sel -}} }[15m]) > 0)
  labels:
    severity: warning
  annotations:
    summary: An Orion failover took more than {{ $p.takeoverSeconds }}s
    description: >-
      {{ "{{ $labels.pod }}" }} took {{ "{{ $value | humanizeDuration }}" }} from winning the election to
      its first committed write. Look at etcd latency (commit latency
      histogram) and the size of the state loaded.
- alert: OrionDroppedEvents
  expr: sum by (namespace, pod) (rate(orion_dropped_events_total{ {{- $sel -}} }[5m])) > 0
  for: 10m
  labels:
    severity: warning
  annotations:
    summary: Orion drops live events for slow subscribers
    description: >-
      {{ "{{ $labels.pod }}" }} dropped {{ "{{ $value | humanize }}" }} events/s over 10m: a
      subscriber (console, CLI --wait) cannot keep up.
- alert: OrionReplicaLag
  expr: max by (namespace, pod) (orion_replica_lag_revisions{ {{- $sel -}} }) > {{ int $p.replicaLagRevisions }}
  for: 5m
  labels:
    severity: warning
  annotations:
    summary: An Orion standby lags behind the log
    description: >-
      {{ "{{ $labels.pod }}" }} is {{ "{{ $value }}" }} etcd revisions behind for 5m; a
      takeover by this replica would be slow.
- alert: OrionApplyErrors
  expr: sum by (namespace, pod) (increase(orion_apply_errors_total{ {{- $sel -}} }[10m])) > 0
  labels:
    severity: critical
  annotations:
    summary: Orion refused committed log entries
    description: >-
      {{ "{{ $labels.pod }}" }}'s state machine refused committed entries in the last
      10m: a bug, or values edited by hand under /orion/v1/.
- alert: OrionEtcdStorageFull
  expr: max(orion_etcd_nospace{ {{- $sel -}} }) > 0
  for: 2m
  labels:
    severity: critical
  annotations:
    summary: etcd is full (NOSPACE) and Orion refuses submissions
    description: >-
      etcd raised its NOSPACE alarm: its backend reached the quota and it
      refuses writes, so submissions answer 507 storage_full and task
      transitions wait. Orion's own members (orion etcd, embedded) compact,
      defragment and disarm by themselves once retention has freed space;
      any other etcd needs `etcdctl compact`, `etcdctl defrag --cluster` and
      `etcdctl alarm disarm` (docs/operations.md#storage-full), or a larger quota.
- alert: OrionEtcdNearQuota
  expr: max(orion_etcd_db_size_bytes{ {{- $sel -}} } / (orion_etcd_quota_bytes{ {{- $sel -}} } > 0)) > 0.8
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: etcd's database is over 80% of its quota
    description: >-
      etcd uses {{ "{{ $value | humanizePercentage }}" }} of its backend quota; at
      100% it refuses writes (NOSPACE). Shorten the retention, or raise
      quota-backend-bytes (and the volume under it).
{{- with $p.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end }}
