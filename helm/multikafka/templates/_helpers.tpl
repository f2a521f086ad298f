{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "multikafka.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: <release>-<chart> unless the release name already
contains the chart name.
*/}}
{{- define "multikafka.fullname" -}}
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

{{- define "multikafka.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels common to every object.
*/}}
{{- define "multikafka.labels" -}}
helm.sh/chart: {{ include "multikafka.chart" . }}
app.kubernetes.io/name: {{ include "multikafka.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels of the coordinator (component keeps etcd pods out of it).
*/}}
{{- define "multikafka.selectorLabels" -}}
app.kubernetes.io/name: {{ include "multikafka.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: coordinator
{{- end }}

{{- define "multikafka.etcd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "multikafka.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end }}

{{- define "multikafka.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
Name of the embedded etcd's StatefulSet and (headless) Service; at most 52
characters, so the StatefulSet's controller-revision-hash label fits in 63.
*/}}
{{- define "multikafka.etcd.fullname" -}}
{{- printf "%s-etcd" (include "multikafka.fullname" . | trunc 47 | trimSuffix "-") }}
{{- end }}

{{/*
MULTIKAFKA_ETCD: the embedded etcd's Service, or the external endpoints.
*/}}
{{- define "multikafka.etcd.url" -}}
{{- if .Values.etcd.embedded.enabled }}
{{- printf "http://%s.%s.svc:2379" (include "multikafka.etcd.fullname" .) .Release.Namespace }}
{{- else if .Values.etcd.external.endpoints }}
{{- join "," .Values.etcd.external.endpoints }}
{{- else }}
{{- fail "set etcd.external.endpoints (e.g. {http://etcd:2379}) or etcd.embedded.enabled=true" }}
{{- end }}
{{- end }}

{{/*
The Secret and key holding the admin token; empty when there is none.
*/}}
{{- define "multikafka.adminToken.secretName" -}}
{{- if .Values.adminToken.existingSecret }}
{{- .Values.adminToken.existingSecret }}
{{- else if .Values.adminToken.value }}
{{- printf "%s-admin-token" (include "multikafka.fullname" .) }}
{{- end }}
{{- end }}

{{- define "multikafka.adminToken.secretKey" -}}
{{- if .Values.adminToken.existingSecret }}
{{- .Values.adminToken.existingSecretKey | default "admin-token" }}
{{- else }}
{{- print "admin-token" }}
{{- end }}
{{- end }}

{{/*
Refuse values the coordinator cannot run with.
*/}}
{{- define "multikafka.validate" -}}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount must be 0 or 1: leader election (HA) is not built yet, two coordinators would both act on etcd" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- end }}
