{{/* Names, labels and images shared by the templates. */}}

{{- define "holmes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: "<release>-holmes", or the release name when it already holds the chart name. */}}
{{- define "holmes.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "holmes.operatorName" -}}
{{- printf "%s-operator" (include "holmes.fullname" .) }}
{{- end }}

{{- define "holmes.labelerName" -}}
{{- printf "%s-nic-labeler" (include "holmes.fullname" .) }}
{{- end }}

{{- define "holmes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "holmes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: holmes
{{- end }}

{{- define "holmes.operatorSelector" -}}
app.kubernetes.io/name: {{ include "holmes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "holmes.labelerSelector" -}}
app.kubernetes.io/name: {{ include "holmes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nic-labeler
{{- end }}

{{- define "holmes.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "holmes.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "holmes.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "holmes.nodeImage" -}}
{{- printf "%s:%s" .Values.nodeImage.repository (default .Chart.AppVersion .Values.nodeImage.tag) }}
{{- end }}

{{/* The coordinator's in-cluster URL, handed to every worker pod: wss:// unless
coordinator.tls.enabled is false. */}}
{{- define "holmes.coordinatorURL" -}}
{{- printf "%s://%s-coordinator.%s.svc:%d" (ternary "wss" "ws" .Values.coordinator.tls.enabled) (include "holmes.fullname" .) .Release.Namespace (int .Values.coordinator.port) }}
{{- end }}

{{/* The Secret holding the coordinator's CA (ca.crt), serving certificate (tls.crt, tls.key)
and, when the operator makes them itself, the CA's key (ca.key). */}}
{{- define "holmes.tlsSecretName" -}}
{{- default (printf "%s-coordinator-tls" (include "holmes.fullname" .)) .Values.coordinator.tls.secretName }}
{{- end }}

{{/* Whether the operator makes and renews the certificate itself (TLS on, no cert-manager). */}}
{{- define "holmes.selfManagedTLS" -}}
{{- if and .Values.coordinator.tls.enabled (not .Values.certManager.enabled) }}true{{ end }}
{{- end }}

{{/* The names the serving certificate is for: the coordinator and metrics Services, each as
<svc>, <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.<clusterDomain>; one per line. */}}
{{- define "holmes.tlsNames" -}}
{{- $ns := .Release.Namespace }}
{{- $domain := .Values.coordinator.tls.clusterDomain }}
{{- range $svc := list (printf "%s-coordinator" (include "holmes.fullname" .)) (printf "%s-metrics" (include "holmes.fullname" .)) }}
{{ $svc }}
{{ $svc }}.{{ $ns }}
{{ $svc }}.{{ $ns }}.svc
{{ $svc }}.{{ $ns }}.svc.{{ $domain }}
{{- end }}
{{- end }}

{{/* Restricted pod security: non-root, no privilege escalation, read-only root, no capabilities. */}}
{{- define "holmes.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "holmes.containerSecurityContext" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* The enabled gang schedulers, "kueue,volcano,coscheduling" order ("" when none); fails when
scheduling.default names one that is not enabled. */}}
{{- define "holmes.gangSchedulers" -}}
{{- $s := .Values.scheduling }}
{{- $on := list }}
{{- range $g := list "kueue" "volcano" "coscheduling" }}
{{- if (index $s $g).enabled }}{{ $on = append $on $g }}{{ end }}
{{- end }}
{{- if and (ne $s.default "none") (not (has $s.default $on)) }}
{{- fail (printf "scheduling.default: %s is not enabled (set scheduling.%s.enabled: true)" $s.default $s.default) }}
{{- end }}
{{- join "," $on }}
{{- end }}
