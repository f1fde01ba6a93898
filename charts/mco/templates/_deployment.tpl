{{/*
The Deployment shape the reporter, the rulegen controller and the extender share. Call with
(dict "ctx" $ "component" NAME "command" [..] "args" YAML-list-string "port" N
      "probes" YAML-string "volumes" YAML-list-string "volumeMounts" YAML-list-string).
*/}}
{{- define "mco.deployment" -}}
{{- $ := .ctx -}}
{{- $c := index $.Values .component -}}
{{- $sel := dict "ctx" $ "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "mco.fullname" $ }}-{{ .component }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mco.componentLabels" $sel | nindent 4 }}
spec:
  replicas: {{ $c.replicas }}
  selector:
    matchLabels:
      {{- include "mco.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "mco.componentLabels" $sel | nindent 8 }}
        {{- with $c.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if or $c.podAnnotations .podAnnotations }}
      annotations:
        {{- with .podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $c.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "mco.serviceAccountName" $sel }}
      {{- with $c.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- include "mco.restrictedPodSecurityContext" $ | nindent 8 }}
      containers:
        - name: {{ .component }}
          image: {{ include "mco.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          command:
            {{- toYaml .command | nindent 12 }}
          args:
            {{- .args | nindent 12 }}
            {{- include "mco.logArgs" $ | nindent 12 }}
            {{- range $c.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            {{- with $c.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: {{ .portName }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- if .schedulerPort }}
            - name: scheduler
              containerPort: {{ .schedulerPort }}
              protocol: TCP
            {{- end }}
          {{- .probes | nindent 10 }}
          {{- with $c.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- include "mco.restrictedContainerSecurityContext" $ | nindent 12 }}
          volumeMounts:
            # Writable scratch space; the root file system is read-only.
            - name: tmp
              mountPath: /tmp
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $c.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with $c.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $c.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      affinity:
        {{- if $c.affinity }}
        {{- toYaml $c.affinity | nindent 8 }}
        {{- else }}
        # Replicas on different nodes, so one node failing never takes them all.
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- include "mco.selectorLabels" $sel | nindent 20 }}
        {{- end }}
      {{- with $c.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* A PodDisruptionBudget for a component with podDisruptionBudget.{enabled,minAvailable|maxUnavailable}. */}}
{{- define "mco.pdb" -}}
{{- $ := .ctx -}}
{{- $c := index $.Values .component -}}
{{- $sel := dict "ctx" $ "component" .component -}}
{{- if and $c.enabled $c.podDisruptionBudget.enabled -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "mco.fullname" $ }}-{{ .component }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mco.componentLabels" $sel | nindent 4 }}
spec:
  {{- if hasKey $c.podDisruptionBudget "minAvailable" }}
  minAvailable: {{ $c.podDisruptionBudget.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $c.podDisruptionBudget.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "mco.selectorLabels" $sel | nindent 6 }}
{{- end -}}
{{- end -}}

{{/* A metrics Service (headless) and its ServiceMonitor for a component. */}}
{{- define "mco.metricsService" -}}
{{- $ := .ctx -}}
{{- $c := index $.Values .component -}}
{{- $sel := dict "ctx" $ "component" .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "mco.fullname" $ }}-{{ .component }}-metrics
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mco.componentLabels" $sel | nindent 4 }}
    mco.io/job: mco-{{ .component }}
spec:
  clusterIP: None
  selector:
    {{- include "mco.selectorLabels" $sel | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .port }}
      targetPort: {{ .portName }}
      protocol: TCP
{{- if and $c.serviceMonitor.enabled (include "mco.hasMonitoringAPI" $) }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "mco.fullname" $ }}-{{ .component }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mco.monitoringLabels" $sel | nindent 4 }}
spec:
  jobLabel: mco.io/job
  selector:
    matchLabels:
      {{- include "mco.selectorLabels" $sel | nindent 6 }}
      mco.io/job: mco-{{ .component }}
  namespaceSelector:
    matchNames:
      - {{ $.Release.Namespace }}
  endpoints:
    - port: metrics
      path: /metrics
      scheme: {{ include "mco.webScheme" $sel }}
      interval: {{ $c.serviceMonitor.interval | quote }}
      {{- with $c.serviceMonitor.tlsConfig }}
      tlsConfig:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.serviceMonitor.basicAuth }}
      basicAuth:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $c.serviceMonitor.allShards }}
      relabelings:
        # With the Prometheus Operator's `shards`, every shard keeps this target instead of
        # the one its address hashes to, so every shard holds the series the alerts on this
        # component read (docs/helm.md, Sharded engines).
        - targetLabel: __tmp_disable_sharding
          replacement: "true"
      {{- end }}
{{- end }}
{{- end -}}
