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
Labels of the coordinator's objects.
*/}}
{{- define "multikafka.coordinator.labels" -}}
{{ include "multikafka.labels" . }}
app.kubernetes.io/component: coordinator
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
Where a token comes from: "<secret name>/<key>", or "" when there is none.
Called with (dict "root" $ "token" .Values.adminToken "name" "admin-token").
An existing Secret wins over a value; a value lives in a Secret the chart
creates, <fullname>-<name>, under the key <name>.
*/}}
{{- define "multikafka.tokenRef" -}}
{{- if .token.existingSecret }}
{{- printf "%s/%s" .token.existingSecret (.token.existingSecretKey | default .name) }}
{{- else if .token.value }}
{{- printf "%s-%s/%s" (include "multikafka.fullname" .root) .name .name }}
{{- end }}
{{- end }}

{{- define "multikafka.adminToken.ref" -}}
{{- include "multikafka.tokenRef" (dict "root" . "token" .Values.adminToken "name" "admin-token") }}
{{- end }}

{{- define "multikafka.readerToken.ref" -}}
{{- include "multikafka.tokenRef" (dict "root" . "token" .Values.readerToken "name" "reader-token") }}
{{- end }}

{{/*
"<secret name>/<key>" of the external etcd's password, or "". (multikafka.validate
refuses auth without a username, and any auth with the embedded etcd.)
*/}}
{{- define "multikafka.etcd.passwordRef" -}}
{{- $auth := .Values.etcd.external.auth }}
{{- if $auth.existingSecret }}
{{- printf "%s/%s" $auth.existingSecret ($auth.passwordKey | default "password") }}
{{- else if $auth.password }}
{{- printf "%s-etcd-auth/password" (include "multikafka.fullname" .) }}
{{- end }}
{{- end }}

{{/*
A Secret volume with one key as one file, readable by the pod's group
(fsGroup) only. Called with (dict "name" <volume> "secretKey" (list <secret
name> <key>) "path" <file name>).
*/}}
{{- define "multikafka.secretFileVolume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ index .secretKey 0 }}
    defaultMode: 0440
    items:
      - key: {{ index .secretKey 1 }}
        path: {{ .path }}
{{- end }}

{{/*
Refuse values the coordinator cannot run with. (values.schema.json checks
keys and types; these are the rules between values.)
*/}}
{{- define "multikafka.validate" -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.tls.clientCA.secretName (not .Values.tls.secretName) }}
{{- fail "tls.clientCA.secretName (mutual TLS) needs tls.secretName: the server's own certificate" }}
{{- end }}
{{- $external := .Values.etcd.external }}
{{- if .Values.etcd.embedded.enabled }}
{{- if or $external.tls.secretName $external.auth.username $external.auth.existingSecret $external.auth.password }}
{{- fail "etcd.external.tls and etcd.external.auth apply to an external etcd; the embedded etcd (etcd.embedded.enabled) speaks plain http without auth" }}
{{- end }}
{{- else }}
{{- if $external.tls.secretName }}
{{- range $external.endpoints }}
{{- if hasPrefix "http://" . }}
{{- fail (printf "etcd.external.tls.secretName is set, but etcd.external.endpoints has %s: use https://" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $external.tls.clientCertificate (not $external.tls.secretName) }}
{{- fail "etcd.external.tls.clientCertificate needs etcd.external.tls.secretName (the Secret with tls.crt and tls.key)" }}
{{- end }}
{{- if and $external.auth.username (not (or $external.auth.existingSecret $external.auth.password)) }}
{{- fail "etcd.external.auth.username needs etcd.external.auth.existingSecret or etcd.external.auth.password" }}
{{- end }}
{{- if and (or $external.auth.existingSecret $external.auth.password) (not $external.auth.username) }}
{{- fail "etcd.external.auth.existingSecret/password need etcd.external.auth.username" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Pod anti-affinity over the coordinator pods, from .Values.podAntiAffinity.
*/}}
{{- define "multikafka.podAntiAffinity" -}}
{{- if eq .Values.podAntiAffinity "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "multikafka.selectorLabels" . | nindent 10 }}
{{- else if eq .Values.podAntiAffinity "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "multikafka.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end }}

{{/*
Where the access policy comes from: "secret/<name>/<key>", "configMap/<name>/<key>"
(the chart's own for access.policy.value), or "".
*/}}
{{- define "multikafka.accessPolicy.ref" -}}
{{- $p := .Values.access.policy }}
{{- $key := $p.existingSecretKey | default "policy.yaml" }}
{{- if $p.existingSecret }}
{{- printf "secret/%s/%s" $p.existingSecret $key }}
{{- else if $p.existingConfigMap }}
{{- printf "configMap/%s/%s" $p.existingConfigMap $key }}
{{- else if $p.value }}
{{- printf "configMap/%s-access-policy/policy.yaml" (include "multikafka.fullname" .) }}
{{- end }}
{{- end }}
