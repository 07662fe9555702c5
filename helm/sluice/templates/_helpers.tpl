{{/* Chart name. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name (63 characters at most, a DNS label). */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the chart label. */}}
{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
{{ include "sluice.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The service account to use. */}}
{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding the rule files. */}}
{{- define "sluice.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "sluice.fullname" .)) .Values.existingConfigMap }}
{{- end }}

{{/* The Secret and key holding the Redis URL. */}}
{{- define "sluice.redisSecret" -}}
{{- default (printf "%s-redis" (include "sluice.fullname" .)) .Values.store.redis.existingSecret }}
{{- end }}

{{/* The PersistentVolumeClaim of the memory store, when persistence is on. */}}
{{- define "sluice.dataClaim" -}}
{{- default (printf "%s-data" (include "sluice.fullname" .)) .Values.store.memory.persistence.existingClaim }}
{{- end }}

{{/* A listen address: host and port, the host bracketed when it is IPv6. */}}
{{- define "sluice.listen" -}}
{{- $host := index . 0 }}{{- $port := index . 1 }}
{{- if contains ":" $host }}[{{ $host }}]:{{ $port }}{{ else }}{{ $host }}:{{ $port }}{{ end }}
{{- end }}

{{/* Whether the memory store keeps its counters on a PersistentVolume. */}}
{{- define "sluice.persistent" -}}
{{- if and (eq .Values.store.type "memory") .Values.store.memory.persistence.enabled }}true{{ end }}
{{- end }}

{{/*
Refuses values that would deploy something wrong. The memory store counts inside one pod:
several replicas would each admit the full limit.
*/}}
{{- define "sluice.validate" -}}
{{- if eq .Values.store.type "memory" }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "store.type=memory keeps the counters inside each pod, so with replicaCount=%d every replica would admit the full limit on its own (%dx in total). Use replicaCount=1, or store.type=redis to share counters between replicas." (int .Values.replicaCount) (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "store.type=memory keeps the counters inside each pod, so with autoscaling.enabled=true every replica would admit the full limit on its own. Disable autoscaling, or use store.type=redis to share counters between replicas." }}
{{- end }}
{{- end }}
{{- if and (eq .Values.store.type "redis") (not .Values.store.redis.url) (not .Values.store.redis.existingSecret) }}
{{- fail "store.type=redis needs store.redis.url or store.redis.existingSecret." }}
{{- end }}
{{- if and .Values.upstreamEnv.enabled (ne .Values.store.type "redis") }}
{{- fail "upstreamEnv.enabled=true configures sluice as envoyproxy/ratelimit, which counts in Redis: set store.type=redis and store.redis.url (redis://host:port), or store.redis.existingSecret holding upstream's REDIS_URL." }}
{{- end }}
{{- if and (not .Values.existingConfigMap) (not .Values.rules) }}
{{- fail "no rules: set rules (one key per file) or existingConfigMap." }}
{{- end }}
{{- end }}

{{/*
The environment of the `ratelimit` personality (upstreamEnv.enabled): envoyproxy/ratelimit's
variables for what the chart's values say, in upstream's layout (the rules ConfigMap at
/data/ratelimit/config, as Istio's sample mounts it), then upstreamEnv.extra.
*/}}
{{- define "sluice.upstreamEnv" -}}
- name: RUNTIME_ROOT
  value: /data
- name: RUNTIME_SUBDIRECTORY
  value: ratelimit
- name: RUNTIME_WATCH_ROOT
  value: "false"
- name: RUNTIME_IGNOREDOTFILES
  value: "true"
- name: HOST
  value: {{ .Values.server.bindAddress | quote }}
- name: GRPC_HOST
  value: {{ .Values.server.bindAddress | quote }}
- name: PORT
  value: "8080"
- name: GRPC_PORT
  value: "8081"
- name: LOG_LEVEL
  value: {{ .Values.server.logLevel | quote }}
- name: LOG_FORMAT
  value: {{ .Values.server.logFormat | quote }}
- name: USE_STATSD
  value: "false"
- name: MERGE_DOMAIN_CONFIG
  value: {{ .Values.server.mergeDomains | quote }}
- name: SHADOW_MODE
  value: {{ .Values.server.shadowMode | quote }}
- name: REDIS_SOCKET_TYPE
  value: tcp
- name: REDIS_TYPE
  value: {{ .Values.upstreamEnv.redisType | quote }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "sluice.redisSecret" . }}
      key: {{ .Values.store.redis.existingSecretKey }}
{{- range $name, $value := .Values.upstreamEnv.extra }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
