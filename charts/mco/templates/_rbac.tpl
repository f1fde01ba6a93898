{{/* A component's ServiceAccount: (dict "ctx" $ "component" NAME). */}}
{{- define "mco.serviceAccount" -}}
{{- $ := .ctx -}}
{{- $c := index $.Values .component -}}
{{- if and $c.enabled $c.serviceAccount.create -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "mco.serviceAccountName" . }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "mco.componentLabels" . | nindent 4 }}
  {{- with $c.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
{{- end -}}

{{/* A (Cluster)RoleBinding of a component's ServiceAccount: (dict "ctx" $ "component" NAME "kind" "ClusterRole"|"Role"). */}}
{{- define "mco.binding" -}}
{{- $ := .ctx -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ .kind }}Binding
metadata:
  name: {{ include "mco.fullname" $ }}-{{ .component }}
  {{- if eq .kind "Role" }}
  namespace: {{ $.Release.Namespace }}
  {{- end }}
  labels:
    {{- include "mco.componentLabels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ .kind }}
  name: {{ include "mco.fullname" $ }}-{{ .component }}
subjects:
  - kind: ServiceAccount
    name: {{ include "mco.serviceAccountName" . }}
    namespace: {{ $.Release.Namespace }}
{{- end -}}

{{/* Lease rules for leader election: create one, then read and renew only the component's own. */}}
{{- define "mco.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ printf "%s-%s" (include "mco.fullname" .ctx) .component | quote }}]
  verbs: ["get", "patch"]
{{- end -}}
