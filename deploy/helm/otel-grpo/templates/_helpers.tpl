{{/* Names: <release>-otel-grpo-<component>, cut to 63 characters (a DNS label). */}}
{{- define "otel-grpo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "otel-grpo.name" -}}
{{- printf "%s-%s" (include "otel-grpo.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "otel-grpo.selectorLabels" -}}
app.kubernetes.io/name: otel-grpo
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "otel-grpo.labels" -}}
{{ include "otel-grpo.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The Secret with otlp_token, sidecar_token and sidecar_read_token. */}}
{{- define "otel-grpo.tokenSecret" -}}
{{- .Values.tokens.existingSecret | default (printf "%s-tokens" (include "otel-grpo.fullname" .)) -}}
{{- end -}}

{{/* The sidecar's in-cluster URL: a dotted name, so the sidecar is told to serve it (ALLOWED_HOSTS). */}}
{{- define "otel-grpo.sidecarHost" -}}
{{- printf "%s.%s.svc" (include "otel-grpo.name" (dict "root" . "component" "sidecar")) .Release.Namespace -}}
{{- end -}}

{{- define "otel-grpo.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
