{{/*
orderflow.workload renders everything one service needs: Deployment,
Service, HorizontalPodAutoscaler, PodDisruptionBudget, NetworkPolicy and
ServiceMonitor. The per-service templates (gateway.yaml, ...) call it with a
dict:
  root         the chart's top context ($)
  key          the service's key in values ("splitWorker")
  component    the name suffix and component label ("split-worker")
  ports        list of (dict "name" "http" "port" 8080 ["appProtocol" "..."])
  readiness    probe dict for orderflow.probe (its http/grpc port)
  liveness     probe dict for orderflow.probe
  env          dict of environment variables set by the chart; the
               service's values env map overrides them
  secretEnv    list of (dict "name" ENV "key" SECRET_KEY ["optional" true])
  secretFiles  optional list of Secret keys mounted read-only as files under
               /etc/orderflow/secrets/<key>
  tlsSecret    optional name of a kubernetes.io/tls Secret (tls.crt, tls.key,
               ca.crt) mounted read-only under /etc/orderflow/grpc-tls
  shared       true to load the shared ConfigMap (envFrom)
  metricsPort  name of the port serving /metrics, "" for none
  ingress      list of (dict "ports" (list names) "from" (list peers)); an
               empty "from" admits every source
*/}}
{{- define "orderflow.workload" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .key -}}
{{- $name := include "orderflow.componentName" . -}}
{{- $sel := dict "root" $root "component" .component -}}
{{- $env := merge (deepCopy (default (dict) $v.env)) .env -}}
{{- $keda := and (hasKey $root.Values.keda .key) (index $root.Values.keda .key).enabled -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
spec:
  {{- if not (or $v.autoscaling.enabled $keda) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  selector:
    matchLabels:
      {{- include "orderflow.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "orderflow.labels" $sel | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
        checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
        {{- if .tlsSecret }}
        {{- /* Renewed certificates roll the gateway and the reconciler together. */}}
        checksum/grpc-tls: {{ include (print $root.Template.BasePath "/grpc-tls.yaml") $root | sha256sum }}
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "orderflow.serviceAccountName" $root }}
      automountServiceAccountToken: false
      enableServiceLinks: false
      {{- if $root.Values.hostNetwork }}
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- range . }}
        - name: {{ . }}
        {{- end }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .component }}
          image: {{ include "orderflow.image" (dict "root" $root "v" $v) | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          ports:
            {{- range .ports }}
            - name: {{ .name }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- end }}
          {{- if .shared }}
          envFrom:
            - configMapRef:
                name: {{ include "orderflow.configMapName" $root }}
          {{- end }}
          env:
            {{- range $k, $val := $env }}
            - name: {{ $k }}
              value: {{ $val | toString | quote }}
            {{- end }}
            {{- range .secretEnv }}
            - name: {{ .name }}
              valueFrom:
                secretKeyRef:
                  name: {{ include "orderflow.secretName" $root }}
                  key: {{ .key }}
                  {{- if .optional }}
                  optional: true
                  {{- end }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          startupProbe:
            {{- include "orderflow.probe" (merge (dict "period" 2 "failures" 30) .liveness) | nindent 12 }}
          readinessProbe:
            {{- include "orderflow.probe" (merge (dict "period" 5 "failures" 3) .readiness) | nindent 12 }}
          livenessProbe:
            {{- include "orderflow.probe" (merge (dict "period" 10 "failures" 3) .liveness) | nindent 12 }}
          {{- if gt (int $v.preStopSleepSeconds) 0 }}
          lifecycle:
            preStop:
              sleep:
                seconds: {{ $v.preStopSleepSeconds }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            privileged: false
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if .secretFiles }}
            - name: secret-files
              mountPath: /etc/orderflow/secrets
              readOnly: true
            {{- end }}
            {{- if .tlsSecret }}
            - name: grpc-tls
              mountPath: /etc/orderflow/grpc-tls
              readOnly: true
            {{- end }}
            {{- if and .shared $root.Values.config.tls.secretName }}
            - name: tls
              mountPath: /etc/orderflow/tls
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- with .tlsSecret }}
        - name: grpc-tls
          secret:
            secretName: {{ . }}
            defaultMode: 0440
        {{- end }}
        {{- with .secretFiles }}
        - name: secret-files
          secret:
            secretName: {{ include "orderflow.secretName" $root }}
            defaultMode: 0440
            items:
              {{- range . }}
              - key: {{ . }}
                path: {{ . }}
              {{- end }}
        {{- end }}
        {{- if and .shared $root.Values.config.tls.secretName }}
        - name: tls
          secret:
            secretName: {{ $root.Values.config.tls.secretName }}
            defaultMode: 0440
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $v.affinity }}
      affinity:
        {{- toYaml $v.affinity | nindent 8 }}
      {{- else if $root.Values.topologySpread.antiAffinity }}
      {{- /* Soft: prefer nodes without a pod of the same component. */}}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: {{ $root.Values.topologySpread.topologyKey }}
                labelSelector:
                  matchLabels:
                    {{- include "orderflow.selectorLabels" $sel | nindent 20 }}
      {{- end }}
      {{- if $root.Values.topologySpread.enabled }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: {{ $root.Values.topologySpread.topologyKey }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "orderflow.selectorLabels" $sel | nindent 14 }}
        {{- with $root.Values.topologySpread.zoneKey }}
        - maxSkew: 1
          topologyKey: {{ . }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "orderflow.selectorLabels" $sel | nindent 14 }}
        {{- end }}
      {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- include "orderflow.selectorLabels" $sel | nindent 4 }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
      protocol: TCP
      {{- with .appProtocol }}
      appProtocol: {{ . }}
      {{- end }}
    {{- end }}
{{- if $v.autoscaling.enabled }}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ $name }}
  minReplicas: {{ $v.autoscaling.minReplicas }}
  maxReplicas: {{ $v.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $v.autoscaling.targetCPUUtilizationPercentage }}
    {{- with $v.autoscaling.targetMemoryUtilizationPercentage }}
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
{{- end }}
{{- if $v.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
spec:
  {{- if hasKey $v.pdb "minAvailable" }}
  minAvailable: {{ $v.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "orderflow.selectorLabels" $sel | nindent 6 }}
{{- end }}
{{- if $root.Values.networkPolicy.enabled }}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "orderflow.selectorLabels" $sel | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    {{- range .ingress }}
    - ports:
        {{- range .ports }}
        - port: {{ . }}
          protocol: TCP
        {{- end }}
      {{- with .from }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    {{- end }}
{{- end }}
{{- if and $root.Values.serviceMonitor.enabled .metricsPort }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ $name }}
  labels:
    {{- include "orderflow.labels" $sel | nindent 4 }}
    {{- with $root.Values.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "orderflow.selectorLabels" $sel | nindent 6 }}
  endpoints:
    - port: {{ .metricsPort }}
      path: /metrics
      interval: {{ $root.Values.serviceMonitor.interval }}
      scrapeTimeout: {{ $root.Values.serviceMonitor.scrapeTimeout }}
      # /metrics answers 401 without the scrape token (ORDERFLOW_METRICS_TOKEN).
      authorization:
        type: Bearer
        credentials:
          name: {{ include "orderflow.secretName" $root }}
          key: metrics-token
{{- end }}
{{- end -}}
