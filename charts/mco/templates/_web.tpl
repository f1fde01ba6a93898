{{/*
The exporter-toolkit web configuration (--web.config.file) of a server component: its
`webConfig` value, plus a `tls_server_config` from its `tls` value when that is on (keys
written in `webConfig.tls_server_config` win). Components probed over HTTP (rulegen, extender)
get their probe paths in `auth_excluded_paths` when basic auth is on, so the kubelet, which
has no password, can still probe them. Renders "" when the component has nothing to configure.
Call with (dict "ctx" $ "component" NAME).
*/}}
{{- define "mco.webConfig" -}}
{{- $c := index .ctx.Values .component -}}
{{- $doc := deepCopy (default (dict) $c.webConfig) -}}
{{- $tls := default (dict) $c.tls -}}
{{- if $tls.enabled -}}
{{- $t := dict "cert_file" "/etc/mco/tls/tls.crt" "key_file" "/etc/mco/tls/tls.key" -}}
{{- if $tls.clientAuth -}}
{{- $_ := set $t "client_auth_type" "RequireAndVerifyClientCert" -}}
{{- $_ := set $t "client_ca_file" "/etc/mco/tls/ca.crt" -}}
{{- else if $tls.schedulerClientAuth -}}
{{- /* Certificates asked for and verified, required by the extender on its scheduler routes only. */ -}}
{{- $_ := set $t "client_auth_type" "VerifyClientCertIfGiven" -}}
{{- $_ := set $t "client_ca_file" "/etc/mco/tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $doc "tls_server_config" (merge (default (dict) (get $doc "tls_server_config")) $t) -}}
{{- end -}}
{{- if and (get $doc "basic_auth_users") (has .component (list "rulegen" "extender")) -}}
{{- $open := concat (default (list) (get $doc "auth_excluded_paths")) (list "/healthz" "/readyz") -}}
{{- $_ := set $doc "auth_excluded_paths" (uniq $open) -}}
{{- end -}}
{{- if $doc -}}
{{- toYaml $doc -}}
{{- end -}}
{{- end -}}

{{- define "mco.webConfigSecretName" -}}
{{- printf "%s-%s-web-config" (include "mco.fullname" .ctx) .component -}}
{{- end -}}

{{/* "https" when the component's web configuration turns TLS on, else "http". */}}
{{- define "mco.webScheme" -}}
{{- $doc := fromYaml (default "{}" (include "mco.webConfig" .)) -}}
{{- if get $doc "tls_server_config" -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* "true" when clients (the kubelet too) must present a certificate. */}}
{{- define "mco.webClientCerts" -}}
{{- $doc := fromYaml (default "{}" (include "mco.webConfig" .)) -}}
{{- $tls := default (dict) (get $doc "tls_server_config") -}}
{{- if eq (toString (get $tls "client_auth_type")) "RequireAndVerifyClientCert" -}}true{{- end -}}
{{- end -}}

{{/* The --web.config.file argument, as a list (empty without a web configuration). */}}
{{- define "mco.webArgs" -}}
{{- if include "mco.webConfig" . -}}
- --web.config.file=/etc/mco/web/web-config.yml
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{- define "mco.webVolumeMounts" -}}
{{- if include "mco.webConfig" . }}
- name: web-config
  mountPath: /etc/mco/web
  readOnly: true
{{- end }}
{{- $c := index .ctx.Values .component -}}
{{- if and $c.tls $c.tls.enabled }}
- name: tls
  mountPath: /etc/mco/tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* Call with (dict "ctx" $ "component" NAME "tlsSecret" NAME-of-the-tls-Secret). */}}
{{- define "mco.webVolumes" -}}
{{- if include "mco.webConfig" . }}
- name: web-config
  secret:
    secretName: {{ include "mco.webConfigSecretName" . }}
{{- end }}
{{- $c := index .ctx.Values .component -}}
{{- if and $c.tls $c.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .tlsSecret }}
{{- end }}
{{- end -}}

{{/*
Liveness on /healthz and readiness on /readyz, over the component's scheme. With client
certificates required the kubelet (which has none) cannot finish a TLS handshake: the probes
then only check that the port accepts connections. Call with (dict "ctx" $ "component" NAME
"port" PORT-NAME "initialDelay" N "livePeriod" N "readyPeriod" N).
*/}}
{{- define "mco.httpProbes" -}}
{{- $scheme := upper (include "mco.webScheme" .) -}}
{{- $mtls := include "mco.webClientCerts" . -}}
livenessProbe:
  {{- if $mtls }}
  tcpSocket:
    port: {{ .port }}
  {{- else }}
  httpGet:
    path: /healthz
    port: {{ .port }}
    scheme: {{ $scheme }}
  {{- end }}
  initialDelaySeconds: {{ .initialDelay }}
  periodSeconds: {{ .livePeriod }}
readinessProbe:
  {{- if $mtls }}
  tcpSocket:
    port: {{ .port }}
  {{- else }}
  httpGet:
    path: /readyz
    port: {{ .port }}
    scheme: {{ $scheme }}
  {{- end }}
  periodSeconds: {{ .readyPeriod }}
{{- end -}}
