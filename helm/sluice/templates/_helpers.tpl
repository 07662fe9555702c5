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

{{/* The Secret and key holding the global store's URL (one limit across regions). */}}
{{- define "sluice.globalRedisSecret" -}}
{{- default (printf "%s-global-redis" (include "sluice.fullname" .)) .Values.region.globalRedis.existingSecret }}
{{- end }}

{{/* Whether this release is one of several regions sharing a global store. */}}
{{- define "sluice.regional" -}}
{{- if or .Values.region.globalRedis.url .Values.region.globalRedis.existingSecret }}true{{ end }}
{{- end }}

{{/* The Secret holding the admin listener's token file. */}}
{{- define "sluice.adminSecret" -}}
{{- default (printf "%s-admin-tokens" (include "sluice.fullname" .)) .Values.admin.tokens.existingSecret }}
{{- end }}

{{/* The admin listener's token file, as mounted in the pod. */}}
{{- define "sluice.adminTokenFile" -}}
/etc/sluice/admin/{{ .Values.admin.tokens.existingSecretKey }}
{{- end }}

{{/* statsd.tags as --statsd-tags wants them: k=v,k2=v2, in key order. */}}
{{- define "sluice.statsdTags" -}}
{{- $tags := list }}
{{- range $key := keys .Values.statsd.tags | sortAlpha }}
{{- $tags = append $tags (printf "%s=%v" $key (index $.Values.statsd.tags $key)) }}
{{- end }}
{{- join "," $tags }}
{{- end }}

{{/* The pod's node address, for a statsd agent on each node ($(HOST_IP) in statsd.addr). */}}
{{- define "sluice.hostIpEnv" -}}
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- end }}

{{/* The PersistentVolumeClaim of the memory store, when persistence is on. */}}
{{- define "sluice.dataClaim" -}}
{{- default (printf "%s-data" (include "sluice.fullname" .)) .Values.store.memory.persistence.existingClaim }}
{{- end }}

{{/* A listen address: host and port, the host bracketed when it is IPv6. */}}
{{/*
The host names a browser may reach the HTTP port by (--http-allowed-hosts): the Service's
DNS names and server.httpAllowedHosts (an Ingress host, a cluster domain of another name).
*/}}
{{- define "sluice.allowedHosts" -}}
{{- $name := include "sluice.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $names := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) -}}
{{- join "," (concat $names .Values.server.httpAllowedHosts) -}}
{{- end }}

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
{{- if and (include "sluice.regional" .) (not .Values.region.name) }}
{{- fail "region.globalRedis needs region.name: this release's region among those sharing the global store." }}
{{- end }}
{{- if and .Values.region.name (not (include "sluice.regional" .)) }}
{{- fail "region.name needs region.globalRedis.url or region.globalRedis.existingSecret: the global store every region reaches." }}
{{- end }}
{{- if and .Values.upstreamEnv.enabled (ne .Values.store.type "redis") }}
{{- fail "upstreamEnv.enabled=true configures sluice as envoyproxy/ratelimit, which counts in Redis: set store.type=redis and store.redis.url (redis://host:port), or store.redis.existingSecret holding upstream's REDIS_URL." }}
{{- end }}
{{- if and (not .Values.existingConfigMap) (not .Values.rules) (not .Values.xds.enabled) }}
{{- fail "no rules: set rules (one key per file) or existingConfigMap, or take them from xDS (xds.enabled)." }}
{{- end }}
{{- if and .Values.xds.enabled (not .Values.xds.server) }}
{{- fail "xds.enabled needs xds.server (host:port of the control plane)." }}
{{- end }}
{{- if and .Values.tracing.enabled (not .Values.tracing.endpoint) }}
{{- fail "tracing.enabled needs tracing.endpoint (the OTLP/gRPC collector, e.g. http://otel-collector:4317)." }}
{{- end }}
{{- if and .Values.admin.enabled (not .Values.admin.tokens.existingSecret) (not .Values.admin.tokens.value) }}
{{- fail "admin.enabled needs its bearer tokens: admin.tokens.existingSecret (a Secret holding the token file) or admin.tokens.value (the file's text: name:token lines). sluice refuses to start the admin listener without a token." }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret)." }}
{{- end }}
{{- $drain := add (int .Values.preStopSleepSeconds) (int .Values.server.shutdownDelay) (int .Values.server.shutdownGrace) }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds=%d is shorter than the drain it must cover: preStopSleepSeconds (%d) + server.shutdownDelay (%d) + server.shutdownGrace (%d) = %d; the kubelet would kill sluice mid-drain." (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) (int .Values.server.shutdownDelay) (int .Values.server.shutdownGrace) (int $drain)) }}
{{- end }}
{{- include "sluice.validateMemory" . }}
{{- end }}

{{/*
Refuses a --max-counters that cannot fit the memory limit: maxCounters x bytesPerCounter plus
the process's base must stay under resources.limits.memory (no limit: nothing to check).
*/}}
{{- define "sluice.validateMemory" -}}
{{- $limit := dig "limits" "memory" "" .Values.resources }}
{{- if and (eq .Values.store.type "memory") $limit }}
{{- $limitBytes := include "sluice.bytes" $limit | float64 }}
{{- $counters := mulf (float64 .Values.store.memory.maxCounters) (float64 .Values.store.memory.bytesPerCounter) }}
{{- $needed := addf $counters (mulf (float64 .Values.store.memory.baseMemoryMiB) 1048576.0) }}
{{- if gt $needed $limitBytes }}
{{- fail (printf "store.memory.maxCounters=%d cannot fit resources.limits.memory=%s: %d counters x %d bytes + %d MiB for the process = %.0f MiB. Lower maxCounters or raise the memory limit (the pod would be OOM-killed before the bound refuses new keys)." (int64 .Values.store.memory.maxCounters) $limit (int64 .Values.store.memory.maxCounters) (int64 .Values.store.memory.bytesPerCounter) (int64 .Values.store.memory.baseMemoryMiB) (divf $needed 1048576.0)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* A Kubernetes memory quantity (e.g. 256Mi, 1Gi, 500M, 1e9, 268435456) in bytes. */}}
{{- define "sluice.bytes" -}}
{{- $q := toString . }}
{{- $units := dict "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "K" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 }}
{{- $bytes := "" }}
{{- range $suffix, $factor := $units }}
{{- if and (not $bytes) (hasSuffix $suffix $q) }}
{{- $bytes = mulf (float64 (trimSuffix $suffix $q)) $factor | toString }}
{{- end }}
{{- end }}
{{- default (float64 $q | toString) $bytes }}
{{- end }}

{{/* The most replicas that may run: the autoscaler's maximum, else replicaCount. */}}
{{- define "sluice.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ max 1 (int .Values.autoscaling.maxReplicas) }}{{ else }}{{ max 1 (int .Values.replicaCount) }}{{ end }}
{{- end }}

{{/*
A checksum of every setting that reaches the pod, so a change rolls the pods. The rules are
left out on purpose: sluice reloads them in place, without a restart.
*/}}
{{- define "sluice.settingsChecksum" -}}
{{- $settings := omit .Values "rules" "existingConfigMap" "tests" "metrics" "podDisruptionBudget" "autoscaling" "networkPolicy" "store" }}
{{- /* The Redis URL is the Secret's: its own checksum covers it. */}}
{{- $store := merge (dict "redis" (omit .Values.store.redis "url")) (omit .Values.store "redis") }}
{{- toJson (list $settings $store) | sha256sum }}
{{- end }}

{{/*
A checksum of the Redis URL: the chart's own Secret as rendered, or the existing Secret's data
as the cluster holds it (read with lookup at install and upgrade; empty under helm template).
*/}}
{{- define "sluice.redisSecretChecksum" -}}
{{- if .Values.store.redis.existingSecret }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.store.redis.existingSecret }}
{{- toJson (dig "data" dict $secret) | sha256sum }}
{{- else }}
{{- include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* The container lifecycle: the preStop sleep unless `lifecycle` brings its own preStop. */}}
{{- define "sluice.lifecycle" -}}
{{- $lifecycle := deepCopy .Values.lifecycle }}
{{- if and (gt (int .Values.preStopSleepSeconds) 0) (not (hasKey $lifecycle "preStop")) }}
{{- $_ := set $lifecycle "preStop" (dict "sleep" (dict "seconds" (int .Values.preStopSleepSeconds))) }}
{{- end }}
{{- if $lifecycle }}{{ toYaml $lifecycle }}{{ end }}
{{- end }}

{{/* The check-only protojson call of `helm test`: tests.descriptor with hits_addend 0. */}}
{{- define "sluice.testCall" -}}
{{- $entries := list }}
{{- range (splitList "," .Values.tests.descriptor) }}
{{- $pair := splitn "=" 2 . }}
{{- $entries = append $entries (dict "key" $pair._0 "value" (default "" $pair._1)) }}
{{- end }}
{{- dict "domain" .Values.tests.domain "descriptors" (list (dict "entries" $entries "hitsAddend" "0")) | toJson }}
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
{{- with .Values.xds }}
{{- if .enabled }}
- name: CONFIG_TYPE
  value: GRPC_XDS_SOTW
- name: CONFIG_GRPC_XDS_SERVER_URL
  value: {{ .server | quote }}
- name: CONFIG_GRPC_XDS_NODE_ID
  value: {{ .nodeId | quote }}
{{- with .nodeMetadata }}
- name: CONFIG_GRPC_XDS_NODE_METADATA
  value: {{ include "sluice.pairs" . | quote }}
{{- end }}
- name: FORCE_START_WITHOUT_INITIAL_CONFIG
  value: {{ .forceStart | quote }}
- name: CONFIG_GRPC_XDS_SERVER_USE_TLS
  value: {{ .tls.enabled | quote }}
{{- if and .tls.enabled .tls.secretName }}
- name: CONFIG_GRPC_XDS_CLIENT_TLS_CERT
  value: /etc/sluice/xds-tls/tls.crt
- name: CONFIG_GRPC_XDS_CLIENT_TLS_KEY
  value: /etc/sluice/xds-tls/tls.key
- name: CONFIG_GRPC_XDS_SERVER_TLS_CACERT
  value: /etc/sluice/xds-tls/ca.crt
{{- end }}
{{- with .tls.serverName }}
- name: CONFIG_GRPC_XDS_SERVER_TLS_SAN
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.tracing.enabled }}
- name: TRACING_ENABLED
  value: "true"
- name: TRACING_EXPORTER_PROTOCOL
  value: {{ .Values.tracing.protocol | quote }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.tracing.endpoint | quote }}
- name: TRACING_SAMPLING_RATE
  value: {{ .Values.tracing.samplingRatio | quote }}
- name: TRACING_SERVICE_NAME
  value: {{ .Values.tracing.serviceName | quote }}
- name: TRACING_SERVICE_NAMESPACE
  value: {{ .Release.Namespace | quote }}
- name: TRACING_SERVICE_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- range $name, $value := .Values.upstreamEnv.extra }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}

{{/* `k=v,k2=v2` from a map, sorted by key (upstream's CONFIG_GRPC_XDS_NODE_METADATA form). */}}
{{- define "sluice.pairs" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
