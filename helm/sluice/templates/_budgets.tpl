{{/*
Token budgets, refusal metadata and spreading connections over new pods: sluice's flags for
them (serve mode), and the same as sluice's own variables (the `ratelimit` personality, which
reads upstream's variables otherwise).
*/}}
{{- define "sluice.budgetArgs" -}}
{{- if .Values.server.recordOverLimit }}
- --record-over-limit
{{- end }}
{{- if .Values.server.refusalMetadata }}
- --refusal-metadata
{{- end }}
{{- if .Values.autoscaling.enabled }}
- --grpc-max-connection-age={{ int64 .Values.autoscaling.maxConnectionAgeMinutes }}m
{{- end }}
{{- end }}

{{- define "sluice.budgetEnv" -}}
{{- if .Values.server.recordOverLimit }}
- name: SLUICE_RECORD_OVER_LIMIT
  value: "true"
{{- end }}
{{- if .Values.server.refusalMetadata }}
- name: SLUICE_REFUSAL_METADATA
  value: "true"
{{- end }}
{{- if .Values.autoscaling.enabled }}
- name: SLUICE_GRPC_MAX_CONNECTION_AGE
  value: "{{ int64 .Values.autoscaling.maxConnectionAgeMinutes }}m"
{{- end }}
{{- end }}
