{{/* The chart's name, or nameOverride. */}}
{{- define "otc-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name when it already
contains the chart's name, else "<release>-<chart>". 63 characters at most
(a DNS label).
*/}}
{{- define "otc-gateway.fullname" -}}
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

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "otc-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "otc-gateway.labels" -}}
helm.sh/chart: {{ include "otc-gateway.chart" . }}
{{ include "otc-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the release's pods (never change them: selectors are immutable). */}}
{{- define "otc-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otc-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The service account the pods run as. */}}
{{- define "otc-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "otc-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The admin Service's name: "<fullname>-admin", a DNS label (63 characters at most). */}}
{{- define "otc-gateway.adminName" -}}
{{- printf "%s-admin" (include "otc-gateway.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/* The Secret holding the admin token. */}}
{{- define "otc-gateway.adminTokenSecret" -}}
{{- default (printf "%s-admin" (include "otc-gateway.fullname" .)) .Values.adminToken.secretName }}
{{- end }}

{{/* Where a secretFiles entry is mounted. */}}
{{- define "otc-gateway.secretFileMountPath" -}}
{{- default (printf "/var/run/secrets/otc-gateway/%s" .secretName) .mountPath }}
{{- end }}

{{/*
gateway.toml: .Values.config through tpl, plus the [state] and
[idempotency] sections when redis.enabled.
*/}}
{{- define "otc-gateway.config" -}}
{{- $config := tpl .Values.config . | trimSuffix "\n" }}
{{- $config }}
{{- if .Values.redis.enabled }}
{{- if regexMatch "(?m)^\\s*\\[idempotency\\]" $config }}
{{- fail "redis.enabled: the chart writes the [idempotency] section itself; remove the one in config (set redis.ttl instead)" }}
{{- end }}
{{- if regexMatch "(?m)^\\s*\\[state\\]" $config }}
{{- fail "redis.enabled: the chart writes the [state] section itself; remove the one in config" }}
{{- end }}

# Added by the chart (redis.enabled): replicas share rate-limit buckets and
# idempotency entries in Redis.
[state]
{{- if .Values.redis.existingSecret }}
redis = "env:OTC_REDIS_URL"
{{- else }}
redis = {{ required "redis.url or redis.existingSecret is required when redis.enabled" .Values.redis.url | quote }}
{{- end }}

[idempotency]
ttl = {{ .Values.redis.ttl | default "10m" | quote }}
{{- end }}
{{- end }}
