{{/*
Names. The full name is capped at 40 characters: StatefulSet pods get
"-<ordinal>" and "controller-revision-hash" labels get "-<hash>" on top of
"<fullname>-scheduler".
*/}}
{{- define "orion.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{- define "orion.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "orion.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "orion.etcd.fullname" -}}{{ include "orion.fullname" . }}-etcd{{- end }}
{{- define "orion.etcd.headless" -}}{{ include "orion.fullname" . }}-etcd-headless{{- end }}
{{- define "orion.scheduler.fullname" -}}{{ include "orion.fullname" . }}-scheduler{{- end }}
{{- define "orion.scheduler.headless" -}}{{ include "orion.fullname" . }}-scheduler-headless{{- end }}
{{- define "orion.worker.fullname" -}}{{ include "orion.fullname" . }}-worker{{- end }}
{{- define "orion.worker.serviceAccountName" -}}{{ include "orion.fullname" . }}-worker{{- end }}
{{- define "orion.podTasks.namespace" -}}{{ default .Release.Namespace .Values.workers.podTasks.namespace }}{{- end }}
{{- define "orion.api.service" -}}{{ include "orion.fullname" . }}{{- end }}
{{- define "orion.active.service" -}}{{ include "orion.fullname" . }}-active{{- end }}
{{- define "orion.config.name" -}}{{ include "orion.fullname" . }}-config{{- end }}

{{/* The Secret holding the API token: the user's, or the chart's. */}}
{{/* Whether the chart makes the workers' token (worker-token.yaml). */}}
{{- define "orion.workerToken.generated" -}}
{{- and .Values.workers.enabled (not .Values.workers.tokenSecret) (not .Values.auth.tokensSecret) -}}
{{- end }}

{{/* The tokens file the replicas read: the user's, the chart's, or none. */}}
{{- define "orion.tokensSecret" -}}
{{- if .Values.auth.tokensSecret }}{{ .Values.auth.tokensSecret }}{{ else if eq (include "orion.workerToken.generated" .) "true" }}{{ include "orion.fullname" . }}-tokens{{ end }}
{{- end }}
{{- define "orion.tokensKey" -}}
{{- if .Values.auth.tokensSecret }}{{ .Values.auth.tokensKey }}{{ else }}tokens.yaml{{ end }}
{{- end }}

{{- define "orion.auth.secretName" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecret }}{{ else }}{{ include "orion.fullname" . }}-auth{{ end }}
{{- end }}

{{- define "orion.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "orion.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "orion.labels" -}}
helm.sh/chart: {{ include "orion.chart" . }}
{{ include "orion.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: orion
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "orion.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Component labels: include "orion.componentLabels" (list $ "etcd"). */}}
{{- define "orion.componentLabels" -}}
{{ include "orion.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "orion.componentSelectorLabels" -}}
{{ include "orion.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/*
Image of a component: include "orion.image" (list $ .Values.etcd.image "").
The third element is a tag suffix used when the component sets no tag of its
own ("-worker" for workers).
*/}}
{{- define "orion.image" -}}
{{- $root := index . 0 }}
{{- $img := index . 1 }}
{{- $suffix := index . 2 }}
{{- $repo := default $root.Values.image.repository $img.repository }}
{{- if $img.tag }}
{{- printf "%s:%s" $repo $img.tag }}
{{- else if and $root.Values.image.digest (not $suffix) }}
{{- printf "%s@%s" $repo $root.Values.image.digest }}
{{- else }}
{{- printf "%s:%s%s" $repo (default $root.Chart.AppVersion $root.Values.image.tag) $suffix }}
{{- end }}
{{- end }}

{{- define "orion.pullPolicy" -}}
{{- default (index . 0).Values.image.pullPolicy (index . 1).pullPolicy }}
{{- end }}

{{/* Soft or hard pod anti-affinity on the node, unless affinity is given:
include "orion.affinity" (list $ "scheduler" .Values.scheduler).
With scheduler.avoidEtcdNodes (and the chart's etcd), scheduler and etcd pods
also prefer nodes without a pod of the other (a weaker term than their own
spread): a node lost then rarely takes the scheduler's leader and etcd's
raft leader together. */}}
{{- define "orion.affinity" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- $v := index . 2 }}
{{- $other := "" }}
{{- if and $root.Values.scheduler.avoidEtcdNodes $root.Values.etcd.enabled }}
{{- $other = get (dict "scheduler" "etcd" "etcd" "scheduler") $component }}
{{- end }}
{{- if $v.affinity }}
{{- toYaml $v.affinity }}
{{- else if or (eq $v.antiAffinity "soft") (eq $v.antiAffinity "hard") }}
podAntiAffinity:
  {{- if eq $v.antiAffinity "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "orion.componentSelectorLabels" (list $root $component) | nindent 10 }}
  {{- end }}
  {{- if or (eq $v.antiAffinity "soft") $other }}
  preferredDuringSchedulingIgnoredDuringExecution:
    {{- if eq $v.antiAffinity "soft" }}
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "orion.componentSelectorLabels" (list $root $component) | nindent 12 }}
    {{- end }}
    {{- if $other }}
    - weight: 50
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "orion.componentSelectorLabels" (list $root $other) | nindent 12 }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The DNS name of an etcd member: include "orion.etcd.memberHost" (list $ "orion-etcd-0"). */}}
{{- define "orion.etcd.memberHost" -}}
{{- $root := index . 0 }}
{{- printf "%s.%s.%s.svc.%s" (index . 1) (include "orion.etcd.headless" $root) $root.Release.Namespace $root.Values.clusterDomain }}
{{- end }}

{{/* etcd client URLs the replicas use: every member, or etcd.endpoints. */}}
{{- define "orion.etcd.endpoints" -}}
{{- if .Values.etcd.enabled }}
{{- $urls := list }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $host := include "orion.etcd.memberHost" (list $ (printf "%s-%d" (include "orion.etcd.fullname" $) $i)) }}
{{- $urls = append $urls (printf "http://%s:%d" $host (int $.Values.etcd.clientPort)) }}
{{- end }}
{{- join "," $urls }}
{{- else }}
{{- join "," .Values.etcd.endpoints }}
{{- end }}
{{- end }}

{{/* --initial-cluster: name=peer URL of every member. */}}
{{- define "orion.etcd.initialCluster" -}}
{{- $members := list }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $name := printf "%s-%d" (include "orion.etcd.fullname" $) $i }}
{{- $members = append $members (printf "%s=http://%s:%d" $name (include "orion.etcd.memberHost" (list $ $name)) (int $.Values.etcd.peerPort)) }}
{{- end }}
{{- join "," $members }}
{{- end }}

{{/* The API Service URL (workers, the helm test). */}}
{{- define "orion.api.url" -}}
{{- printf "%s://%s.%s.svc.%s:%d" (include "orion.api.scheme" .) (include "orion.api.service" .) .Release.Namespace .Values.clusterDomain (int .Values.scheduler.service.port) }}
{{- end }}

{{/* TLS on the replicas' port (tls.*): the scheme, the Secret, where it is mounted. */}}
{{- define "orion.api.scheme" -}}{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}{{- end }}
{{- define "orion.tls.secretName" -}}{{ .Values.tls.existingSecret | default (printf "%s-tls" (include "orion.fullname" .)) }}{{- end }}
{{- define "orion.tls.dir" -}}/etc/orion-tls{{- end }}

{{/* A probe (scheduler.readinessProbe, livenessProbe) over HTTPS with TLS on. */}}
{{- define "orion.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if and $root.Values.tls.enabled $probe.httpGet }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/*
ORION_ALLOWED_HOSTS of a scheduler replica: every name the release's
Services give it (short, .<ns>, .<ns>.svc, .<ns>.svc.<clusterDomain>), its
own name under the headless Service, its pod IP (kubelet probes, Prometheus
scrapes and the other replicas use it), then allowedHosts. $(POD_NAME) and
$(POD_IP) are expanded by the kubelet from the env above it.
*/}}
{{- define "orion.allowedHosts" -}}
{{- $ns := .Release.Namespace }}
{{- $domain := .Values.clusterDomain }}
{{- $hosts := list }}
{{- $services := list (include "orion.api.service" .) (include "orion.scheduler.headless" .) }}
{{- if .Values.activeService.enabled }}
{{- $services = append $services (include "orion.active.service" .) }}
{{- end }}
{{- range $svc := $services }}
{{- $hosts = concat $hosts (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $domain)) }}
{{- end }}
{{- $pod := printf "$(POD_NAME).%s" (include "orion.scheduler.headless" .) }}
{{- $hosts = concat $hosts (list (printf "%s.%s.svc.%s" $pod $ns $domain) (printf "%s.%s.svc" $pod $ns) (printf "%s.%s" $pod $ns) $pod "$(POD_IP)") }}
{{- join "," (concat $hosts .Values.allowedHosts) }}
{{- end }}

{{/* Where the etcd TLS Secret is mounted in the replicas. */}}
{{- define "orion.etcd.tlsDir" -}}/etc/orion-etcd-tls{{- end }}

{{/* The env entry of the API token. */}}
{{- define "orion.auth.env" -}}
- name: ORION_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "orion.auth.secretName" . }}
      key: {{ .Values.auth.secretKey }}
{{- end }}

{{/* Checks that the schema cannot express. */}}
{{- define "orion.validate" -}}
{{- if and .Values.etcd.enabled (gt (int .Values.config.max_txn_ops) 0) (lt (int .Values.etcd.maxTxnOps) (int .Values.config.max_txn_ops)) }}
{{- fail (printf "config.max_txn_ops (%d) must not exceed etcd.maxTxnOps (%d): every Orion transaction would be refused" (int .Values.config.max_txn_ops) (int .Values.etcd.maxTxnOps)) }}
{{- end }}
{{- if and .Values.etcd.enabled (eq (int .Values.etcd.clientPort) (int .Values.etcd.peerPort)) }}
{{- fail "etcd.clientPort and etcd.peerPort must differ" }}
{{- end }}
{{- if and .Values.etcd.enabled (lt (int .Values.etcd.electionMs) (mul 5 (int .Values.etcd.heartbeatMs))) }}
{{- fail (printf "etcd.electionMs (%d) must be at least 5 x etcd.heartbeatMs (%d)" (int .Values.etcd.electionMs) (int .Values.etcd.heartbeatMs)) }}
{{- end }}
{{- if and .Values.etcd.tls.enabled .Values.etcd.enabled }}
{{- fail "etcd.tls applies to an existing etcd (etcd.enabled=false): the chart's own members serve plain http inside the namespace" }}
{{- end }}
{{- if and (not .Values.workers.enabled) (lt (int .Values.config.slots) 1) }}
{{- fail "workers.enabled=false needs config.slots >= 1: otherwise nothing runs tasks" }}
{{- end }}
{{- if and .Values.auth.existingSecret .Values.auth.token }}
{{- fail "set auth.existingSecret or auth.token, not both" }}
{{- end }}
{{- end }}
