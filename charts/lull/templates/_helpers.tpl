{{/* The chart's name, "lull" unless nameOverride. */}}
{{- define "lull.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it already holds
the chart's name (release "lull" gives lull-controller, as config/default
names it), release-chart otherwise.
*/}}
{{- define "lull.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "lull.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The controller's Deployment, ServiceAccount and ClusterRole name. */}}
{{- define "lull.controller" -}}
{{- printf "%s-controller" (include "lull.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The metrics Service's name. A Service's name is a DNS-1035 label: at most
63 characters, a letter first, no dots; a release name may hold dots and
start with a digit ("1.prod"), so dots become dashes and a leading digit
gets "lull-" before it. The controller's name is cut to leave room for the
suffix.
*/}}
{{- define "lull.metricsService" -}}
{{- $name := include "lull.controller" . | replace "." "-" }}
{{- if regexMatch "^[0-9]" $name }}
{{- $name = printf "lull-%s" $name }}
{{- end }}
{{- printf "%s-metrics" ($name | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Labels every object of the release carries. */}}
{{- define "lull.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "lull.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lull
{{- end }}

{{/* The labels the controller's pods are selected by. */}}
{{- define "lull.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lull.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* The controller image: repository@digest, or repository:tag (appVersion by default). */}}
{{- define "lull.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The documents of a YAML file of the chart (files/...), each as a map;
empty documents (a file's leading comments) dropped. Returned as a YAML
list under "docs", since a named template can only return a string.
*/}}
{{- define "lull.fileDocs" -}}
{{- $docs := list }}
{{- range regexSplit "(?m)^---[ \t]*$" (.Files.Get .path) -1 }}
{{- $doc := fromYaml . }}
{{- if $doc }}
{{- $docs = append $docs $doc }}
{{- end }}
{{- end }}
{{- dict "docs" $docs | toYaml }}
{{- end }}
