{{/* Names: fullnameOverride, else <release>-<nameOverride or otel-grpo> (the release alone when it holds that
     name), cut to 63 characters (a DNS label). The selector labels keep the chart's constant name whatever
     these are (see below). */}}
{{- define "otel-grpo.fullname" -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if contains $name .Release.Name -}}
{{- $full = .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- /* Services take DNS-1035 labels: a letter first, no dot (helm allows release names like 1grpo or a.b). */ -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) -}}
{{- fail (printf "release name %q: the objects would be named %s-..., which Kubernetes refuses for a Service (a DNS-1035 label: a lowercase letter first, no dot); install under a name starting with a letter, or set fullnameOverride" .Release.Name $full) -}}
{{- end -}}
{{- $full -}}
{{- end -}}

{{/* A component's name: <fullname>-<component>, a DNS label of at most 63 characters. Where that is
     longer (release names of 41 to 53 characters) the fullname is cut, never the component, and
     6 hex characters of the whole fullname's sha256 go before the component: every component keeps a
     name of its own, and two releases whose names differ only in what the cut drops keep theirs (the
     cut alone gave both one name). A name that fits is never changed. */}}
{{- define "otel-grpo.name" -}}
{{- $suffix := printf "-%s" .component -}}
{{- $full := include "otel-grpo.fullname" .root -}}
{{- if le (add (len $full) (len $suffix)) 63 -}}
{{- $full }}{{ $suffix }}
{{- else -}}
{{- $full | trunc (sub 63 (add (len $suffix) 7) | int) | trimSuffix "-" }}-{{ $full | sha256sum | trunc 6 }}{{ $suffix }}
{{- end -}}
{{- end -}}

{{/* The selector labels: a Deployment's spec.selector is immutable, so `helm upgrade` fails on any change
     to them. They are fixed for the life of a release: the chart's name as a constant (not .Chart.Name
     or its version), the release name and the component; never the chart or app version, nor a value.
     tests/stack/test_helm_upgrade.py holds them to that. */}}
{{- define "otel-grpo.selectorLabels" -}}
app.kubernetes.io/name: otel-grpo
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every object's labels, one map, each key once (a key written twice is a duplicate YAML key, which
     kustomize and kubectl refuse): the selector labels and the chart's, then commonLabels, then the
     object's own label values passed as "extra", a list of (list "<values path>" <map>) — podLabels on
     pods, monitoring.labels on the PrometheusRule and ServiceMonitors, ...: the more specific source wins
     a key two of them name. No source may name a label the chart sets: a second value for a selector
     label would leave the pods outside their Deployment's selector.
     Call with (dict "root" $ "component" "x" ["extra" (list (list "podLabels" .Values.podLabels))]). */}}
{{- define "otel-grpo.labels" -}}
{{- $labels := dict "app.kubernetes.io/name" "otel-grpo" "app.kubernetes.io/instance" .root.Release.Name
      "app.kubernetes.io/component" .component "app.kubernetes.io/version" (toString .root.Chart.AppVersion)
      "app.kubernetes.io/managed-by" .root.Release.Service
      "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) -}}
{{- $chart := keys $labels -}}
{{- range $source := prepend (.extra | default list) (list "commonLabels" .root.Values.commonLabels) -}}
{{- range $key, $value := index $source 1 | default dict -}}
{{- if has $key $chart -}}
{{- fail (printf "%s.%s: the chart sets that label itself (its selectors rest on it); use another key" (index $source 0) $key) -}}
{{- end -}}
{{- $_ := set $labels $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* An image as the anchors write it: [registry/]repository, then @digest or :tag (default: the
     chart's appVersion). global.imageRegistry, when set, replaces every image's registry.
     Call with (dict "root" $ "image" .Values.<component>.image). */}}
{{- define "otel-grpo.image" -}}
{{- $registry := .root.Values.global.imageRegistry | default .image.registry -}}
{{- $name := ternary (printf "%s/%s" $registry .image.repository) .image.repository (ne $registry "") -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $name .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (.image.tag | default .root.Chart.AppVersion | toString) -}}
{{- end -}}
{{- end -}}

{{/* A memory quantity (512Mi, 0.5Gi, 600M, 536870912: bytes) in MiB; empty for any other form (the
     API server judges those). */}}
{{- define "otel-grpo.mebibytes" -}}
{{- $q := ternary (printf "%.0f" (float64 .)) (toString .) (or (kindIs "float64" .) (kindIs "int64" .)) -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $q -}}
{{- $factors := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624
      "Ei" 1152921504606846976 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 -}}
{{- $number := regexReplaceAll "[A-Za-z]+$" $q "" -}}
{{- divf (mulf (float64 $number) (get $factors (trimPrefix $number $q))) 1048576 -}}
{{- end -}}
{{- end -}}

{{/* A user's env value (sidecar.env, follower.env) as a quoted string. A number from a values file
     reaches the template as a float64, which `quote` writes as 1.34217728e+08 from 1,000,000 up: the
     settings (pydantic ints) refuse that and the pod crash-loops. Whole numbers are written as
     integers, anything else as given (0.5, true, strings). */}}
{{- define "otel-grpo.envValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- printf "%.0f" . | quote -}}
{{- else -}}
{{- . | quote -}}
{{- end -}}
{{- end -}}

{{/* An extra env map (sidecar.env, follower.env) may not name a variable the chart sets in that container:
     the pod would carry it twice. Call with (dict "values" "sidecar.env" "env" <map> "set" (dict <name> <what
     to set instead> ...)). */}}
{{- define "otel-grpo.checkEnv" -}}
{{- range $k, $_ := .env | default dict -}}
{{- with get $.set $k -}}
{{- fail (printf "%s.%s: the chart sets %s itself; set %s instead" $.values $k $k .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "otel-grpo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "otel-grpo.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret with otlp_token, sidecar_token and sidecar_read_token. */}}
{{- define "otel-grpo.tokenSecret" -}}
{{- .Values.tokens.existingSecret | default (printf "%s-tokens" (include "otel-grpo.fullname" .)) -}}
{{- end -}}

{{/* The tokens, key -> base64 value, as JSON; resolved once per render and kept for the other
     templates (the Secret, the datasource and every pod's checksum must see the same values):
       tokens.existingSecret: what `lookup` reads of it (nothing under `helm template`: no cluster);
       otherwise each key from tokens.<value> if given, else the chart's Secret already in the
       cluster (`lookup`: an upgrade keeps them), else random (a new install, or `helm template`,
       where every render differs: GitOps needs existingSecret or the explicit values). */}}
{{- define "otel-grpo.tokenData" -}}
{{- if not (hasKey .Values "_otelGrpoTokens") -}}
{{- $found := (lookup "v1" "Secret" .Release.Namespace (include "otel-grpo.tokenSecret" .)).data | default dict -}}
{{- $given := dict "otlp_token" .Values.tokens.otlpToken "sidecar_token" .Values.tokens.sidecarToken "sidecar_read_token" .Values.tokens.sidecarReadToken -}}
{{- $data := dict -}}
{{- range $key, $value := $given -}}
{{- if $.Values.tokens.existingSecret -}}
{{- with get $found $key }}{{ $_ := set $data $key . }}{{ end -}}
{{- else -}}
{{- $_ := set $data $key ($value | b64enc | default (get $found $key) | default (randAlphaNum 32 | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "_otelGrpoTokens" $data -}}
{{- end -}}
{{- toJson (get .Values "_otelGrpoTokens") -}}
{{- end -}}

{{/* checksum/tokens: changes when the tokens change, so pods holding them as environment restart. */}}
{{- define "otel-grpo.tokensChecksum" -}}
{{- printf "%s\n%s" (include "otel-grpo.tokenSecret" .) (include "otel-grpo.tokenData" .) | sha256sum -}}
{{- end -}}

{{/* The sidecar's in-cluster URL: a dotted name, so the sidecar is told to serve it (ALLOWED_HOSTS). */}}
{{- define "otel-grpo.sidecarHost" -}}
{{- printf "%s.%s.svc" (include "otel-grpo.name" (dict "root" . "component" "sidecar")) .Release.Namespace -}}
{{- end -}}

{{/* A pod's metadata: labels (+ podLabels), annotations (podAnnotations, the component's, the
     checksums passed in, then the fixed "annotations" passed in, which win).
     Call with (dict "root" $ "component" "x" "values" .Values.x "checksums" (dict ...) ["annotations" (dict ...)]). */}}
{{- define "otel-grpo.podMetadata" -}}
labels:
  {{- include "otel-grpo.labels" (dict "root" .root "component" .component "extra" (list (list "podLabels" .root.Values.podLabels))) | nindent 2 }}
{{- $annotations := merge (dict) (.values.podAnnotations | default dict) (.root.Values.podAnnotations | default dict) }}
{{- range $k, $v := .checksums }}
{{- $_ := set $annotations (printf "checksum/%s" $k) $v }}
{{- end }}
{{- range $k, $v := .annotations }}
{{- $_ := set $annotations $k $v }}
{{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What every pod spec shares: no API token, no service links (a Service named
     <x>-sidecar would inject OTEL_GRPO_SIDECAR_PORT=tcp://..., which the sidecar reads as its
     port), non-root, scheduling (with "spread": replicas on different nodes unless .values.affinity
     says otherwise). Call with (dict "root" $ "values" .Values.<component> ["component" "x" "spread" true]). */}}
{{- define "otel-grpo.podSpec" -}}
serviceAccountName: {{ include "otel-grpo.serviceAccountName" .root }}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if .spread }}
# Replicas on different nodes where the cluster has room: one node's loss takes one replica.
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "otel-grpo.selectorLabels" (dict "root" .root "component" .component) | nindent 14 }}
{{- end }}
{{- end -}}

{{/* The linter findings a workload makes on purpose, as the annotation kube-score reads (it has no
     field for a reason: the reasons are these, and docs/operations.md, "Upgrades, linters and Pod Security"):
       container-image-pull-policy: IfNotPresent, the image pinned by tag or digest: pods restart while
         the registry is down; <component>.image.pullPolicy=Always where pull credentials must be re-checked.
       container-resources: no CPU limit (CFS throttling stalls ingest and the probes); only while the
         requests and the memory limit are set, so a missing one is still reported.
       pod-networkpolicy: networkPolicy.enabled=false by default (where Prometheus and Grafana run differs
         per cluster); with it on, egress stays open (the database and a collector of yours are URLs).
       and the template's own (`checks`): each says why where it is passed.
     Call with (dict "values" .Values.<component> "resources" <the container's resources> ["checks" (list ...)]). */}}
{{- define "otel-grpo.lintIgnores" -}}
{{- $ignore := concat (list "pod-networkpolicy") (.checks | default list) -}}
{{- if ne (.values.image.pullPolicy | default "") "Always" }}{{ $ignore = append $ignore "container-image-pull-policy" }}{{ end -}}
{{- $r := .resources | default dict -}}
{{- $requests := $r.requests | default dict -}}
{{- $limits := $r.limits | default dict -}}
{{- if and (not $limits.cpu) $limits.memory $requests.cpu $requests.memory }}{{ $ignore = append $ignore "container-resources" }}{{ end -}}
kube-score/ignore: {{ $ignore | uniq | sortAlpha | join "," | quote }}
{{- end -}}

{{/* A PodDisruptionBudget for a component whose values hold podDisruptionBudget. */}}
{{- define "otel-grpo.pdb" -}}
{{- $replicas := ternary 1 .values.replicas (kindIs "invalid" .values.replicas) | int }}
{{- with .values.podDisruptionBudget }}
{{- if .enabled }}
{{- if and (kindIs "invalid" .minAvailable) (kindIs "invalid" .maxUnavailable) }}
{{- fail (printf "%s.podDisruptionBudget: set minAvailable or maxUnavailable (both are null: a budget that limits nothing), or enabled=false" $.component) }}
{{- end }}
{{- /* A budget that lets none of the pods go blocks every node drain (kubectl drain retries for ever). */}}
{{- $none := false }}
{{- $said := printf "maxUnavailable=%v" .maxUnavailable }}
{{- if not (kindIs "invalid" .minAvailable) }}
{{- $said = printf "minAvailable=%v" .minAvailable }}
{{- if kindIs "string" .minAvailable }}
{{- /* a percentage is rounded up (PodDisruptionBudget's rule): 50% of 1 pod keeps it */}}
{{- $need := div (add (mul (trimSuffix "%" .minAvailable | int) $replicas) 99) 100 }}
{{- $none = ge (int $need) $replicas }}
{{- else }}
{{- $none = ge (int .minAvailable) $replicas }}
{{- end }}
{{- else }}
{{- $none = has (toString .maxUnavailable) (list "0" "0%") }}
{{- end }}
{{- if and $none (gt $replicas 0) }}{{- /* no pods (scaled to 0): the budget holds nothing back */}}
{{- fail (printf "%s.podDisruptionBudget.%s with %d replica(s) lets no pod be evicted: every node drain would wait for ever; lower it or set enabled=false" $.component $said $replicas) }}
{{- end }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "otel-grpo.name" $ }}
  namespace: {{ $.root.Release.Namespace }}
  labels:
    {{- include "otel-grpo.labels" $ | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" .minAvailable) }}
  minAvailable: {{ .minAvailable }}
  {{- else }}
  maxUnavailable: {{ .maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "otel-grpo.selectorLabels" $ | nindent 6 }}
---
{{- end }}
{{- end }}
{{- end -}}

{{/* The chart's own pods that send OTLP to its collector, as a JSON list of components: the collector's
     NetworkPolicy lets them in whatever networkPolicy.otlpFrom says. A template whose pod sends to
     otel-grpo.otlpEndpoint or to the collector's Service belongs here (tests find them in the pods). */}}
{{- define "otel-grpo.otlpSenders" -}}
{{- $senders := list -}}
{{- if .Values.follower.enabled }}{{ $senders = append $senders "follower" }}{{ end -}}
{{- if .Values.tests.enabled }}{{ $senders = append $senders "test" }}{{ end -}}
{{- toJson $senders -}}
{{- end -}}

{{- /* Where trainers and the follower send OTLP/gRPC: the chart's collector, or collector.endpoint when
       collector.enabled=false (a collector of yours). */}}
{{- define "otel-grpo.otlpEndpoint" -}}
{{- if .Values.collector.enabled -}}
http://{{ include "otel-grpo.name" (dict "root" . "component" "collector") }}.{{ .Release.Namespace }}:4317
{{- else if .Values.collector.endpoint -}}
{{ .Values.collector.endpoint }}
{{- else -}}
{{- fail "collector.enabled=false needs collector.endpoint: the OTLP/gRPC endpoint of your collector" -}}
{{- end -}}
{{- end }}

{{/* The release's sidecar datasource in Grafana: a name people pick in the dashboards' `sidecar` variable, and a
     uid (at most 40 characters) of the namespace and release, the same on every render. */}}
{{- define "otel-grpo.datasourceName" -}}
Sidecar {{ .Release.Namespace }}/{{ include "otel-grpo.fullname" . }}
{{- end -}}
{{- define "otel-grpo.datasourceUid" -}}
grpo-{{ printf "%s/%s" .Release.Namespace (include "otel-grpo.fullname" .) | sha256sum | trunc 16 }}
{{- end -}}
