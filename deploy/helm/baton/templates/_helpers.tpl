{{/* The release's base name: <release>-baton, or the release alone if it has "baton" in it. */}}
{{- define "baton.fullname" -}}
{{- if contains "baton" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-baton" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "baton.headless" -}}
{{- printf "%s-headless" (include "baton.fullname" .) -}}
{{- end -}}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: baton
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "baton.labels" -}}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The DNS domain of the nodes' names: <pod>.<this>. */}}
{{- define "baton.domain" -}}
{{- printf "%s.%s.svc.%s" (include "baton.headless" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* -peers: every founding member by its name, the same on every node. */}}
{{- define "baton.peers" -}}
{{- $full := include "baton.fullname" . -}}
{{- $domain := include "baton.domain" . -}}
{{- $port := .Values.ports.raft -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $peers = append $peers (printf "%s-%d=%s-%d.%s:%v" $full $i $full $i $domain $port) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{/* A cluster of n keeps serving while a majority runs. */}}
{{- define "baton.quorum" -}}
{{- add (div (int .Values.replicas) 2) 1 -}}
{{- end -}}

{{- define "baton.adminSecret" -}}
{{- if .Values.adminToken.create -}}
{{- printf "%s-admin" (include "baton.fullname" .) -}}
{{- else -}}
{{- required "adminToken.existingSecret (a Secret with the ops API's admin token) is required, or adminToken.create with adminToken.value" .Values.adminToken.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "baton.tlsSecret" -}}
{{- $prefix := .root.Values.tls.secretPrefix | default (include "baton.fullname" .root) -}}
{{- printf "%s-%d-tls" $prefix .i -}}
{{- end -}}

{{- define "baton.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end -}}
{{- end -}}
