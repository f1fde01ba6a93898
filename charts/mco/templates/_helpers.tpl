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
{{- with include "mco.prometheusSelectorLabels" .ctx | fromYaml }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels a Prometheus selects MCO's ServiceMonitors and PrometheusRule by:
monitoring.additionalLabels plus `release: <monitoring.prometheusRelease>`. Also passed to the
rulegen controller, so the PrometheusRule it re-applies keeps them. */}}
{{- define "mco.prometheusSelectorLabels" -}}
{{- $m := .Values.monitoring -}}
{{- $labels := deepCopy ($m.additionalLabels | default dict) -}}
{{- if and $m.requirePrometheusRelease (not $m.prometheusRelease) -}}
{{- fail "monitoring.prometheusRelease is empty: this scenario installs ServiceMonitors and a PrometheusRule for kube-prometheus-stack, which selects them by its release label. Add --set monitoring.prometheusRelease=<the kube-prometheus-stack release name> (helm list -A shows it), or monitoring.requirePrometheusRelease=false when your Prometheus selects them otherwise (monitoring.additionalLabels)" -}}
{{- end -}}
{{- with $m.prometheusRelease -}}
{{- $other := get $labels "release" -}}
{{- if and $other (ne (toString $other) .) -}}
{{- fail (printf "monitoring.prometheusRelease=%s and monitoring.additionalLabels.release=%s disagree: set only monitoring.prometheusRelease" . (toString $other)) -}}
{{- end -}}
{{- $_ := set $labels "release" . -}}
{{- end -}}
{{- if $labels }}{{ toYaml $labels }}{{ end -}}
{{- end -}}

{{/* The enabled Prometheus Operator objects, each with the value that turns it off. */}}
{{- define "mco.monitoringObjects" -}}
{{- $v := .Values -}}
{{- $out := list -}}
{{- if and $v.exporter.enabled $v.exporter.serviceMonitor.enabled -}}
{{- $out = append $out "ServiceMonitor (exporter.serviceMonitor.enabled)" -}}
{{- end -}}
{{- range $c := list "reporter" "rulegen" "extender" -}}
{{- $x := index $v $c -}}
{{- if and $x.enabled $x.serviceMonitor.enabled -}}
{{- $out = append $out (printf "ServiceMonitor (%s.serviceMonitor.enabled)" $c) -}}
{{- end -}}
{{- end -}}
{{- if $v.rules.enabled -}}
{{- $out = append $out "PrometheusRule (rules.enabled)" -}}
{{- end -}}
{{- if $v.rulegen.enabled -}}
{{- $out = append $out "rulegen controller (rulegen.enabled)" -}}
{{- end -}}
{{- join ", " $out -}}
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

{{/* Gate of every Prometheus Operator object: "true", or a failed render. An enabled object is
never dropped. Helm knows the cluster's APIs only when it talks to one (helm install/upgrade,
Flux, `helm template --validate`, Argo CD's --api-versions): that set holds kind-qualified
entries such as v1/Namespace, which the offline default set never does. Offline (`helm
template`) the objects are rendered; against a cluster that does not serve
monitoring.coreos.com/v1 the render fails, naming the values that turn each object off. */}}
{{- define "mco.hasMonitoringAPI" -}}
{{- $caps := .Capabilities.APIVersions -}}
{{- if and (not ($caps.Has "monitoring.coreos.com/v1")) ($caps.Has "v1/Namespace") -}}
{{- with include "mco.monitoringObjects" . -}}
{{- fail (printf "the cluster does not serve monitoring.coreos.com/v1 (the Prometheus Operator's API: ServiceMonitor, PrometheusRule), which these need: %s. Install the Prometheus Operator (kube-prometheus-stack) first, or set those values to false and scrape the exporter and load the rules (mco-rulegen render --format rules) in your Prometheus yourself" .) -}}
{{- end -}}
{{- end -}}
true
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
{{- include "mco.webScheme" (dict "ctx" . "component" "extender") -}}
{{- end -}}

{{/* Base URL of the extender inside the cluster. */}}
{{- define "mco.extenderURL" -}}
{{- printf "%s://%s.%s.svc:%v" (include "mco.extenderScheme" .) (include "mco.extenderServiceName" .) .Release.Namespace .Values.extender.service.port -}}
{{- end -}}

{{/* Base URL the schedulers call: the scheduler port of the Service when the extender serves
the scheduler routes on a port of their own (extender.schedulerPort), else the one port. */}}
{{- define "mco.extenderSchedulerURL" -}}
{{- $port := .Values.extender.service.port -}}
{{- if .Values.extender.schedulerPort }}{{ $port = .Values.extender.service.schedulerPort }}{{ end -}}
{{- printf "%s://%s.%s.svc:%v" (include "mco.extenderScheme" .) (include "mco.extenderServiceName" .) .Release.Namespace $port -}}
{{- end }}

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

{{/* The exporter's --collector.biolatency.buckets from the DetectionRuleConfig spec this chart
installs (rulegen/latency.py computes the same; `mco-rulegen buckets` prints it): for each
latency signal, every bound from the last one below warn to the first one at or above critical.
The bounds and the signals come from the generated files/biolatency-buckets.yaml. */}}
{{- define "mco.biolatencyBuckets" -}}
{{- $table := fromYaml (.Files.Get "files/biolatency-buckets.yaml") -}}
{{- if not $table.bounds -}}
{{- fail "files/biolatency-buckets.yaml is missing from the chart: run `make generate`" -}}
{{- end -}}
{{- $spec := fromYaml (include "mco.detectionSpec" .) -}}
{{- $keep := dict -}}
{{- range $table.signals -}}
{{- $t := index (index (index $spec.detections .detection) "signals") .signal -}}
{{- $warn := float64 $t.warn -}}
{{- $critical := float64 $t.critical -}}
{{- $low := float64 (first $table.bounds) -}}
{{- $high := float64 (last $table.bounds) -}}
{{- $found := false -}}
{{- range $table.bounds -}}
{{- if lt (float64 .) $warn }}{{ $low = float64 . }}{{ end -}}
{{- if and (not $found) (ge (float64 .) $critical) }}{{ $high = float64 . }}{{ $found = true }}{{ end -}}
{{- end -}}
{{- range $i, $b := $table.bounds -}}
{{- if and (ge (float64 $b) $low) (le (float64 $b) $high) }}{{ $_ := set $keep (printf "%02d" $i) $b }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $i := keys $keep | sortAlpha }}{{ $out = append $out (index $keep $i | toString) }}{{ end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Whether the exporters run biolatency: `exporter.collectors.biolatency` where set, else
`exporter.kernelEvents.enabled`. */}}
{{- define "mco.biolatencyRuns" -}}
{{- $e := .Values.exporter -}}
{{- if ternary (index $e.collectors "biolatency") $e.kernelEvents.enabled (hasKey $e.collectors "biolatency") }}true{{ end -}}
{{- end -}}

{{/* The exporters' --collector.biolatency.buckets as they run it (`all` where biolatency does
not run: no histogram, nothing for the rulegen controller to check). */}}
{{- define "mco.exporterBuckets" -}}
{{- $options := .Values.exporter.collectorOptions -}}
{{- if not (include "mco.biolatencyRuns" .) -}}
all
{{- else if hasKey $options "biolatency.buckets" -}}
{{- index $options "biolatency.buckets" -}}
{{- else -}}
{{- include "mco.biolatencyBuckets" . -}}
{{- end -}}
{{- end -}}

{{/* Seconds in a DetectionRuleConfig duration (`1m30s` -> 90), for flags that take seconds. */}}
{{- define "mco.durationSeconds" -}}
{{- $h := regexFind "[0-9]+h" . | trimSuffix "h" | default "0" | int -}}
{{- $m := regexFind "[0-9]+m" . | trimSuffix "m" | default "0" | int -}}
{{- $s := regexFind "[0-9]+s" . | trimSuffix "s" | default "0" | int -}}
{{- add (mul $h 3600) (mul $m 60) $s -}}
{{- end -}}

{{/* The URLs the reporter queries (JSON list): one per shard (prometheus.shards), else
prometheus.url. */}}
{{- define "mco.prometheusURLs" -}}
{{- $p := .Values.prometheus -}}
{{- toJson ($p.shards | default (list $p.url)) -}}
{{- end -}}

{{/* The reporter's PromQL credentials: flags naming files under /etc/mco/prometheus, and the
projected volume holding them, from existing Secrets (a ConfigMap for the CA). Secrets never
reach the arguments: a `user:pass@` URL is refused, without echoing it. */}}
{{- define "mco.prometheusAuth" -}}
{{- $p := .Values.prometheus -}}
{{- $auth := $p.auth -}}
{{- $tls := $p.tls -}}
{{- range $key, $urls := dict "prometheus.url" (list $p.url) "prometheus.shards" ($p.shards | default list) -}}
{{- range $urls -}}
{{- if regexMatch "^[^/]*//[^/?#]*@" . -}}
{{- fail (printf "%s must not hold credentials (`user:password@host`): they would be written into the reporter's arguments. Put the password in a Secret and set prometheus.auth.basicAuth.username and passwordSecretName, or use prometheus.auth.bearerToken.secretName." $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $auth.bearerToken.secretName (or $auth.basicAuth.username $auth.basicAuth.passwordSecretName) -}}
{{- fail "prometheus.auth: set either bearerToken or basicAuth, not both" -}}
{{- end -}}
{{- if ne (empty $auth.basicAuth.username) (empty $auth.basicAuth.passwordSecretName) -}}
{{- fail "prometheus.auth.basicAuth needs both username and passwordSecretName" -}}
{{- end -}}
{{- if and $tls.ca.secretName $tls.ca.configMapName -}}
{{- fail "prometheus.tls.ca: set either secretName or configMapName, not both" -}}
{{- end -}}
{{- $dir := "/etc/mco/prometheus" -}}
{{- $args := list -}}
{{- $sources := list -}}
{{- with $auth.bearerToken.secretName -}}
{{- $args = append $args (printf "--prometheus-bearer-token-file=%s/token" $dir) -}}
{{- $sources = append $sources (dict "secret" (dict "name" . "items" (list (dict "key" $auth.bearerToken.key "path" "token")))) -}}
{{- end -}}
{{- with $auth.basicAuth.passwordSecretName -}}
{{- $args = concat $args (list (printf "--prometheus-basic-auth-user=%s" $auth.basicAuth.username) (printf "--prometheus-basic-auth-password-file=%s/password" $dir)) -}}
{{- $sources = append $sources (dict "secret" (dict "name" . "items" (list (dict "key" $auth.basicAuth.passwordKey "path" "password")))) -}}
{{- end -}}
{{- $caItems := list (dict "key" $tls.ca.key "path" "ca.crt") -}}
{{- with $tls.ca.secretName -}}
{{- $sources = append $sources (dict "secret" (dict "name" . "items" $caItems)) -}}
{{- end -}}
{{- with $tls.ca.configMapName -}}
{{- $sources = append $sources (dict "configMap" (dict "name" . "items" $caItems)) -}}
{{- end -}}
{{- if or $tls.ca.secretName $tls.ca.configMapName -}}
{{- $args = append $args (printf "--prometheus-ca-file=%s/ca.crt" $dir) -}}
{{- end -}}
{{- with $tls.clientCertSecretName -}}
{{- $args = concat $args (list (printf "--prometheus-cert-file=%s/client.crt" $dir) (printf "--prometheus-key-file=%s/client.key" $dir)) -}}
{{- $sources = append $sources (dict "secret" (dict "name" . "items" (list (dict "key" "tls.crt" "path" "client.crt") (dict "key" "tls.key" "path" "client.key")))) -}}
{{- end -}}
{{- if $tls.insecureSkipVerify -}}
{{- $args = append $args "--prometheus-insecure-skip-verify" -}}
{{- end -}}
{{- $volumes := list -}}
{{- $mounts := list -}}
{{- if $sources -}}
{{- /* 0440: the reporter's group (fsGroup 65532) reads, nobody else. */ -}}
{{- $volumes = list (dict "name" "prometheus-credentials" "projected" (dict "defaultMode" 288 "sources" $sources)) -}}
{{- $mounts = list (dict "name" "prometheus-credentials" "mountPath" $dir "readOnly" true) -}}
{{- end -}}
{{- toJson (dict "args" $args "volumes" $volumes "volumeMounts" $mounts) -}}
{{- end -}}

{{/* The kata collector's shim paths: its option, or the exporter's default
(exporter/collectors/kata.py DEFAULT_SHIMS; a test keeps the two equal). */}}
{{- define "mco.kataShimPaths" -}}
{{- $default := "/usr/bin/containerd-shim-kata-v2,/usr/local/bin/containerd-shim-kata-v2,/opt/kata/bin/containerd-shim-kata-v2" -}}
{{- index .Values.exporter.collectorOptions "kata.shim-paths" | default $default -}}
{{- end -}}

{{/* Host directories mounted under the exporter's rootfs for the kata collector, as a JSON
list: the top-level directory of each shim path (/usr, /opt). Not the shim's own directory:
kata-deploy deletes and recreates /opt/kata on every rollout, which would leave a bind mount of
/opt/kata/bin pointing at the deleted directory. None when the kata collector is off. */}}
{{- define "mco.kataHostDirs" -}}
{{- $dirs := list -}}
{{- $collectors := .Values.exporter.collectors -}}
{{- if or (not (hasKey $collectors "kata")) (index $collectors "kata") -}}
{{- range splitList "," (include "mco.kataShimPaths" .) -}}
{{- $path := trim . -}}
{{- if $path -}}
{{- $parts := splitList "/" (trimPrefix "/" $path) -}}
{{- if or (not (hasPrefix "/" $path)) (lt (len $parts) 2) (has ".." $parts) -}}
{{- fail (printf "exporter.collectorOptions kata.shim-paths: %q must be an absolute path below a top-level directory" $path) -}}
{{- end -}}
{{- $dirs = append $dirs (printf "/%s" (first $parts)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $dirs) -}}
{{- end -}}

{{/* A Kubernetes memory quantity (`512Mi`, `1Gi`, `0.5Gi`, `1G`, `536870912`) in bytes. */}}
{{- define "mco.bytes" -}}
{{- if not (kindIs "string" .) -}}
{{- int64 . -}}{{/* a YAML number: Helm holds it as a float64, which toString writes 1e+08 */}}
{{- else -}}
{{- $q := trim . -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $number $q -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if or (not $number) (not (hasKey $units $unit)) -}}
{{- fail (printf "%q is not a memory quantity like 512Mi, 1Gi or 536870912" $q) -}}
{{- end -}}
{{- mulf (float64 $number) (get $units $unit) | int64 -}}
{{- end -}}
{{- end -}}

{{/* The extender's per-worker body budget (`--max-body-memory`, bytes): the pod's
extender.maxBodyMemory shared by its workers, at least extender.maxBodySize (one body of the
largest size must fit, or the extender refuses to start). */}}
{{- define "mco.extenderBodyMemory" -}}
{{- $x := .Values.extender -}}
{{- $share := div (include "mco.bytes" $x.maxBodyMemory | int64) (int64 $x.workers) -}}
{{- max $share (include "mco.bytes" $x.maxBodySize | int64) -}}
{{- end -}}

{{/* Memory the extender's pod needs (bytes): per worker its body budget plus ~100Mi for the
report, the verdict tables and one decode (docs/extender.md, "All bodies together"). */}}
{{- define "mco.extenderMemoryNeed" -}}
{{- $perWorker := add (include "mco.extenderBodyMemory" . | int64) 104857600 -}}
{{- mul (int64 .Values.extender.workers) $perWorker -}}
{{- end -}}

{{/* The second kube-scheduler elects a leader (on its own Lease) only with more than one replica. */}}
{{- define "mco.kubeSchedulerLeaderElect" -}}
{{- gt (int .Values.scheduler.kubeScheduler.deploy.replicas) 1 -}}
{{- end -}}

{{/* The second kube-scheduler's image: the cluster's own version unless a tag is given. */}}
{{- define "mco.kubeSchedulerImage" -}}
{{- $img := .Values.scheduler.kubeScheduler.deploy.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else if $img.tag -}}
{{- printf "%s:%s" $img.repository $img.tag -}}
{{- else -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- printf "%s:v%d.%d.%d" $img.repository $v.Major $v.Minor $v.Patch -}}
{{- end -}}
{{- end -}}

{{/* The MutatingAdmissionPolicy API to write scheduler.tierAffinity in: admissionregistration.k8s.io
v1 (GA and served by default from Kubernetes 1.36), else v1beta1 (1.34-1.35, with the
MutatingAdmissionPolicy feature gate and --runtime-config). Offline (`helm template`, no
kind-qualified entries) v1; against a cluster that serves neither, a failed render naming the
value that turns it off. */}}
{{- define "mco.mutatingPolicyAPI" -}}
{{- $caps := .Capabilities.APIVersions -}}
{{- if $caps.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else if $caps.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1beta1
{{- else if $caps.Has "v1/Namespace" -}}
{{- fail "scheduler.tierAffinity.enabled: the cluster serves no MutatingAdmissionPolicy API (admissionregistration.k8s.io/v1 from Kubernetes 1.36, v1beta1 on 1.34-1.35 with the MutatingAdmissionPolicy feature gate and --runtime-config=admissionregistration.k8s.io/v1beta1=true). Set it to false and add the preferred node affinity to the pods' templates yourself (docs/helm.md, \"Scoring without the extender\")" -}}
{{- else -}}
admissionregistration.k8s.io/v1
{{- end -}}
{{- end -}}
