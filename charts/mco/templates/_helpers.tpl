{{/* Names, labels and small shared pieces. */}}

{{- define "mco.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or just the release when it already contains the chart name. */}}
{{- define "mco.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mco.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "mco.labels" -}}
helm.sh/chart: {{ include "mco.chart" . }}
app.kubernetes.io/name: {{ include "mco.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mco
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of one component: call with (dict "ctx" $ "component" "exporter"). */}}
{{- define "mco.componentLabels" -}}
{{ include "mco.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels of one component (stable across upgrades). */}}
{{- define "mco.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mco.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels for Prometheus Operator objects: component labels plus monitoring.additionalLabels. */}}
{{- define "mco.monitoringLabels" -}}
{{ include "mco.componentLabels" . }}
{{- with .ctx.Values.monitoring.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ServiceAccount name of a component: (dict "ctx" $ "component" "reporter"). */}}
{{- define "mco.serviceAccountName" -}}
{{- $sa := (index .ctx.Values .component).serviceAccount -}}
{{- if $sa.create -}}
{{- default (printf "%s-%s" (include "mco.fullname" .ctx) .component) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{- define "mco.image" -}}
{{- $img := .Values.image -}}
{{- $ref := printf "%s/%s" $img.registry $img.repository | trimPrefix "/" -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $ref $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* True when the Prometheus Operator's API is served. */}}
{{- define "mco.hasMonitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* Log flags shared by all components. */}}
{{- define "mco.logArgs" -}}
- --log.level={{ .Values.log.level }}
- --log.format={{ .Values.log.format }}
{{- end -}}

{{/* Restricted-profile security context of the controllers and the extender. */}}
{{- define "mco.restrictedContainerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mco.restrictedPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Names of objects other templates refer to. */}}
{{- define "mco.extenderServiceName" -}}
{{- printf "%s-extender" (include "mco.fullname" .) -}}
{{- end -}}

{{- define "mco.extenderScheme" -}}
{{- if .Values.extender.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Base URL of the extender inside the cluster. */}}
{{- define "mco.extenderURL" -}}
{{- printf "%s://%s.%s.svc:%v" (include "mco.extenderScheme" .) (include "mco.extenderServiceName" .) .Release.Namespace .Values.extender.service.port -}}
{{- end -}}

{{- define "mco.extenderTLSSecretName" -}}
{{- if .Values.extender.tls.secretName -}}
{{- .Values.extender.tls.secretName -}}
{{- else -}}
{{- printf "%s-extender-tls" (include "mco.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "mco.rulesName" -}}
{{- printf "%s-rules" (include "mco.fullname" .) -}}
{{- end -}}

{{/* The generated default DetectionRuleConfig, parsed; fails loudly when the file is absent. */}}
{{- define "mco.defaultDetectionRuleConfig" -}}
{{- $raw := .Files.Get "files/detectionruleconfig-default.yaml" -}}
{{- if not $raw -}}
{{- fail "files/detectionruleconfig-default.yaml is missing from the chart: run `make generate`" -}}
{{- end -}}
{{- $raw -}}
{{- end -}}

{{/* The DetectionRuleConfig spec the chart installs: the generated default with
detectionRuleConfig.spec deep-merged over it, as YAML. */}}
{{- define "mco.detectionSpec" -}}
{{- $default := fromYaml (include "mco.defaultDetectionRuleConfig" .) -}}
{{- if $default.Error -}}
{{- fail (printf "files/detectionruleconfig-default.yaml is not valid YAML: %s" $default.Error) -}}
{{- end -}}
{{- toYaml (mergeOverwrite (deepCopy $default.spec) (deepCopy .Values.detectionRuleConfig.spec)) -}}
{{- end -}}

{{/* Seconds in a DetectionRuleConfig duration (`1m30s` -> 90), for flags that take seconds. */}}
{{- define "mco.durationSeconds" -}}
{{- $h := regexFind "[0-9]+h" . | trimSuffix "h" | default "0" | int -}}
{{- $m := regexFind "[0-9]+m" . | trimSuffix "m" | default "0" | int -}}
{{- $s := regexFind "[0-9]+s" . | trimSuffix "s" | default "0" | int -}}
{{- add (mul $h 3600) (mul $m 60) $s -}}
{{- end -}}
