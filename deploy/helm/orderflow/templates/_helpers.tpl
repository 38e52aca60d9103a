{{/*
Names, labels and the small pieces every template shares.
*/}}

{{/* orderflow.name is the chart name, or nameOverride. */}}
{{- define "orderflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* orderflow.fullname is "<release>-<name>" (or fullnameOverride), at most 40 characters so component suffixes fit in 63. */}}
{{- define "orderflow.fullname" -}}
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

{{/* orderflow.componentName is "<fullname>-<component>"; call with (dict "root" $ "component" "gateway"). */}}
{{- define "orderflow.componentName" -}}
{{- printf "%s-%s" (include "orderflow.fullname" .root) .component -}}
{{- end -}}

{{/* orderflow.labels are the labels of every object; call with (dict "root" $ "component" "gateway"), component may be "". */}}
{{- define "orderflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "orderflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: orderflow
{{- end -}}

{{/* orderflow.selectorLabels select one component's pods (or the release's when component is ""). */}}
{{- define "orderflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orderflow.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* orderflow.serviceAccountName is the ServiceAccount every pod runs as. */}}
{{- define "orderflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "orderflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* orderflow.secretName is the Secret holding the credentials. */}}
{{- define "orderflow.secretName" -}}
{{- default (include "orderflow.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* orderflow.configMapName is the ConfigMap of shared settings. */}}
{{- define "orderflow.configMapName" -}}
{{- include "orderflow.fullname" . -}}
{{- end -}}

{{/* orderflow.image is "repository:tag" or "repository@digest"; call with the service's values. The tag defaults to the chart's appVersion. */}}
{{- define "orderflow.image" -}}
{{- if .v.image.digest -}}
{{- printf "%s@%s" .v.image.repository .v.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .v.image.repository (default .root.Chart.AppVersion .v.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* orderflow.serviceURL is http://<component service>:<port>; call with (dict "root" $ "component" "fulfilmentsim" "port" 8082). */}}
{{- define "orderflow.serviceURL" -}}
{{- printf "http://%s:%v" (include "orderflow.componentName" .) .port -}}
{{- end -}}

{{/* orderflow.probe renders one probe body; call with (dict "http" "<port name>" "path" "/livez|/readyz") or (dict "grpc" <port number>) plus "period" and "failures". */}}
{{- define "orderflow.probe" -}}
{{- if .http -}}
httpGet:
  path: {{ required "orderflow.probe: path" .path }}
  port: {{ .http }}
{{- else -}}
grpc:
  port: {{ .grpc }}
{{- end }}
periodSeconds: {{ .period }}
timeoutSeconds: 2
failureThreshold: {{ .failures }}
{{- end -}}

{{/* orderflow.peer is a NetworkPolicyPeer (YAML) selecting one component's pods, or the whole release's when component is ""; use with fromYaml. */}}
{{- define "orderflow.peer" -}}
podSelector:
  matchLabels:
    {{- include "orderflow.selectorLabels" . | nindent 4 }}
{{- end -}}

{{/* orderflow.payEnv is the provider settings of the gateway and the reconciler (config.pay), as a YAML map of environment variables. */}}
{{- define "orderflow.payEnv" -}}
{{- $p := .Values.config.pay -}}
ORDERFLOW_PAY_MERCHANT_KEY_FILE: /etc/orderflow/secrets/pay-merchant-key
{{- with $p.mchID }}
ORDERFLOW_PAY_MCHID: {{ . | quote }}
{{- end }}
{{- with $p.appID }}
ORDERFLOW_PAY_APPID: {{ . | quote }}
{{- end }}
{{- with $p.merchantSerial }}
ORDERFLOW_PAY_MERCHANT_SERIAL: {{ . | quote }}
{{- end }}
{{- if eq $p.keyMode "publicKey" }}
ORDERFLOW_PAY_PUBLIC_KEY_FILE: /etc/orderflow/secrets/pay-public-key
ORDERFLOW_PAY_PUBLIC_KEY_ID: {{ required "config.pay.publicKeyID (ORDERFLOW_PAY_PUBLIC_KEY_ID) is required with config.pay.keyMode=publicKey" $p.publicKeyID | quote }}
{{- else if eq $p.keyMode "platformCertificate" }}
ORDERFLOW_PAY_PLATFORM_KEY_FILE: /etc/orderflow/secrets/pay-platform-certificate
{{- end }}
{{- end -}}

{{/* orderflow.paySecretFiles is the Secret keys the gateway and the reconciler mount as files, as a YAML list. */}}
{{- define "orderflow.paySecretFiles" -}}
- pay-merchant-key
{{- if eq .Values.config.pay.keyMode "publicKey" }}
- pay-public-key
{{- else if eq .Values.config.pay.keyMode "platformCertificate" }}
- pay-platform-certificate
{{- end }}
{{- end -}}

{{/* orderflow.grpcTLSEnv is the mutual-TLS settings of the gateway and the reconciler (grpcTLS), as a YAML map of environment variables; with generated certificates the gateway expects the reconciler's Service name in its certificate, whatever address it dials. */}}
{{- define "orderflow.grpcTLSEnv" -}}
{{- if .Values.grpcTLS.enabled }}
ORDERFLOW_GRPC_TLS_CERT_FILE: /etc/orderflow/grpc-tls/tls.crt
ORDERFLOW_GRPC_TLS_KEY_FILE: /etc/orderflow/grpc-tls/tls.key
ORDERFLOW_GRPC_TLS_CA_FILE: /etc/orderflow/grpc-tls/ca.crt
{{- if include "orderflow.grpcTLSGenerated" . }}
ORDERFLOW_GRPC_TLS_SERVER_NAME: {{ include "orderflow.componentName" (dict "root" . "component" "reconciler") }}
{{- end }}
{{- end }}
{{- end -}}

{{/* orderflow.grpcTLSServerEnv is the reconciler's side of the mutual TLS (grpcTLS), as a YAML map of environment variables: the names a client certificate must carry, grpcTLS.clientNames or else the gateway's name as the generated certificate carries it. */}}
{{- define "orderflow.grpcTLSServerEnv" -}}
{{- if .Values.grpcTLS.enabled }}
ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES: {{ .Values.grpcTLS.clientNames | default (list (include "orderflow.componentName" (dict "root" . "component" "gateway"))) | join "," | quote }}
{{- end }}
{{- end -}}

{{/* orderflow.grpcTLSGenerated is "true" when the chart generates the mutual-TLS certificates (grpcTLS on, neither Secret named), else "". Naming only one of the two Secrets is refused (both must chain to one CA), and so is generating them for a reconciler outside the release (it would not trust them). */}}
{{- define "orderflow.grpcTLSGenerated" -}}
{{- $t := .Values.grpcTLS -}}
{{- if and $t.enabled (ne (empty $t.gatewaySecret) (empty $t.reconcilerSecret)) -}}
{{- fail "grpcTLS.gatewaySecret and grpcTLS.reconcilerSecret go together: name both Secrets (kubernetes.io/tls with tls.crt, tls.key and ca.crt, from one CA), or neither and the chart generates them" -}}
{{- end -}}
{{- if and $t.enabled (empty $t.gatewaySecret) .Values.gateway.enabled (not .Values.reconciler.enabled) -}}
{{- fail "grpcTLS: the reconciler is not part of this release, so the chart cannot generate its certificate; name grpcTLS.gatewaySecret and grpcTLS.reconcilerSecret (from the reconciler's CA), or set grpcTLS.enabled=false" -}}
{{- end -}}
{{- if and $t.enabled (empty $t.gatewaySecret) }}true{{ end -}}
{{- end -}}

{{/* orderflow.grpcTLSSecret is the TLS Secret of a service (call with (dict "root" $ "which" "gateway")): the one named in grpcTLS, else the generated one; "" when mutual TLS is off. */}}
{{- define "orderflow.grpcTLSSecret" -}}
{{- if .root.Values.grpcTLS.enabled -}}
{{- index .root.Values.grpcTLS (printf "%sSecret" .which) | default (printf "%s-%s-grpc-tls" (include "orderflow.fullname" .root) .which) -}}
{{- end -}}
{{- end -}}
