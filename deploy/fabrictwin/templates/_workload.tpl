{{/*
One Deployment and its Service, shared by the four services.
ctx: dict
  "root"      $
  "component" topology | simulator | telemetry | orchestrator
  "database"  true when the service keeps state in PostgreSQL
  "peers"     the peers it calls: any of topology, simulator, telemetry
  "replicas"  the replica count, or nil when an HPA owns it
  "strategy"  RollingUpdate | Recreate
*/}}

{{/* FABRICTWIN_* variables the chart sets itself: `env` in values may not override them. */}}
{{- define "fabrictwin.managedEnv" -}}
FABRICTWIN_HOST FABRICTWIN_PORT FABRICTWIN_METRICS_PORT FABRICTWIN_LOG_LEVEL FABRICTWIN_LOG_FORMAT FABRICTWIN_GRACE_SECONDS FABRICTWIN_DRAIN_SECONDS FABRICTWIN_DATA_DIR FABRICTWIN_DATABASE_URL FABRICTWIN_AUTH_TOKEN FABRICTWIN_AUTH_TOKEN_FILE FABRICTWIN_READ_ONLY_TOKEN FABRICTWIN_READ_ONLY_TOKEN_FILE FABRICTWIN_TLS_CERT FABRICTWIN_TLS_KEY FABRICTWIN_TLS_CLIENT_CA FABRICTWIN_PEER_TLS_CA FABRICTWIN_PEER_TLS_CERT FABRICTWIN_PEER_TLS_KEY FABRICTWIN_WORKERS FABRICTWIN_TOPOLOGY_ADDRESS FABRICTWIN_SIMULATOR_ADDRESSES FABRICTWIN_TELEMETRY_ADDRESS NUMBA_CACHE_DIR HOME
{{- end -}}

{{- define "fabrictwin.probe" -}}
{{- $values := index .root.Values.probes .kind -}}
{{- if .tls -}}
{{- /* The kubelet's gRPC probe speaks plaintext; a TLS listener is only checked for accepting. */ -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .port }}
  service: {{ include "fabrictwin.healthService" .component }}
{{- end }}
periodSeconds: {{ $values.periodSeconds }}
failureThreshold: {{ $values.failureThreshold }}
timeoutSeconds: {{ $values.timeoutSeconds }}
{{- end -}}

{{- define "fabrictwin.deployment" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $values := index $root.Values $component -}}
{{- $tls := include "fabrictwin.tls" . -}}
{{- $peerTls := include "fabrictwin.peerTls" . -}}
{{- $managed := splitList " " (include "fabrictwin.managedEnv" .) -}}
{{- include "fabrictwin.checkProbes" $root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "fabrictwin.componentName" . }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrictwin.labels" . | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" .replicas) }}
  replicas: {{ .replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: {{ .strategy }}
  selector:
    matchLabels:
      {{- include "fabrictwin.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "fabrictwin.labels" . | nindent 8 }}
      annotations:
        {{- if $root.Values.metrics.enabled }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $root.Values.metrics.port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "fabrictwin.serviceAccountName" $root }}
      # The services never call the Kubernetes API.
      automountServiceAccountToken: false
      # No docker-link variables: a Service named e.g. `fabrictwin` would inject FABRICTWIN_PORT=tcp://...
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ include "fabrictwin.terminationGracePeriodSeconds" $root }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $component }}
          image: {{ include "fabrictwin.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: ["python", "-m", "services.{{ $component }}"]
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          ports:
            - name: grpc
              containerPort: {{ $values.port }}
              protocol: TCP
            {{- if $root.Values.metrics.enabled }}
            - name: metrics
              containerPort: {{ $root.Values.metrics.port }}
              protocol: TCP
            {{- end }}
          env:
            - name: FABRICTWIN_HOST
              value: {{ $root.Values.bindAddress | quote }}
            - name: FABRICTWIN_PORT
              value: {{ $values.port | quote }}
            {{- if $root.Values.metrics.enabled }}
            - name: FABRICTWIN_METRICS_PORT
              value: {{ $root.Values.metrics.port | quote }}
            {{- end }}
            - name: FABRICTWIN_LOG_LEVEL
              value: {{ $root.Values.logLevel | quote }}
            - name: FABRICTWIN_LOG_FORMAT
              value: {{ $root.Values.logFormat | quote }}
            - name: FABRICTWIN_DRAIN_SECONDS
              value: {{ $root.Values.shutdown.drainSeconds | quote }}
            - name: FABRICTWIN_GRACE_SECONDS
              value: {{ $root.Values.shutdown.graceSeconds | quote }}
            - name: FABRICTWIN_DATA_DIR
              value: /tmp/fabrictwin
            - name: HOME
              value: /tmp
            - name: NUMBA_CACHE_DIR
              value: /var/cache/numba
            {{- if .database }}
            - name: FABRICTWIN_DATABASE_URL
              valueFrom:
                secretKeyRef:
                  name: {{ include "fabrictwin.databaseSecretName" $root }}
                  key: {{ include "fabrictwin.databaseSecretKey" $root }}
            {{- end }}
            {{- if $root.Values.auth.existingSecret }}
            {{- /* Files of the mounted Secret, never variables: not in `kubectl describe`, not in /proc/<pid>/environ. */}}
            - name: FABRICTWIN_AUTH_TOKEN_FILE
              value: /etc/fabrictwin/auth/token
            {{- if $root.Values.auth.readOnlyKey }}
            - name: FABRICTWIN_READ_ONLY_TOKEN_FILE
              value: /etc/fabrictwin/auth/read-only-token
            {{- end }}
            {{- end }}
            {{- if $tls }}
            - name: FABRICTWIN_TLS_CERT
              value: /etc/fabrictwin/tls/tls.crt
            - name: FABRICTWIN_TLS_KEY
              value: /etc/fabrictwin/tls/tls.key
            {{- if $root.Values.tls.clientCA }}
            - name: FABRICTWIN_TLS_CLIENT_CA
              value: /etc/fabrictwin/tls/ca.crt
            {{- end }}
            {{- end }}
            {{- if $peerTls }}
            {{- /* Its peers serve TLS: verify them against the Secret's CA; present its certificate for mutual TLS. */}}
            - name: FABRICTWIN_PEER_TLS_CA
              value: /etc/fabrictwin/tls/ca.crt
            {{- if $root.Values.tls.clientCA }}
            - name: FABRICTWIN_PEER_TLS_CERT
              value: /etc/fabrictwin/tls/tls.crt
            - name: FABRICTWIN_PEER_TLS_KEY
              value: /etc/fabrictwin/tls/tls.key
            {{- end }}
            {{- end }}
            {{- if eq $component "simulator" }}
            - name: FABRICTWIN_WORKERS
              value: {{ $values.workers | quote }}
            {{- end }}
            {{- if has "topology" .peers }}
            - name: FABRICTWIN_TOPOLOGY_ADDRESS
              value: {{ include "fabrictwin.address" (dict "root" $root "component" "topology") | quote }}
            {{- end }}
            {{- if has "simulator" .peers }}
            - name: FABRICTWIN_SIMULATOR_ADDRESSES
              value: {{ include "fabrictwin.simulatorTarget" $root | quote }}
            {{- end }}
            {{- if has "telemetry" .peers }}
            - name: FABRICTWIN_TELEMETRY_ADDRESS
              value: {{ include "fabrictwin.address" (dict "root" $root "component" "telemetry") | quote }}
            {{- end }}
            {{- /* limits: camelCase flag names (maxFlows) -> FABRICTWIN_MAX_FLOWS; null keeps the default. */}}
            {{- range $name, $value := $values.limits }}
            {{- if not (kindIs "invalid" $value) }}
            {{- $variable := printf "FABRICTWIN_%s" ($name | snakecase | upper) }}
            {{- if hasKey $values.env $variable }}
            {{- fail (printf "%s.env.%s and %s.limits.%s set the same limit; keep one" $component $variable $component $name) }}
            {{- end }}
            - name: {{ $variable }}
              value: {{ $value | int64 | quote }}
            {{- end }}
            {{- end }}
            {{- range $name, $value := $values.env }}
            {{- if has $name $managed }}
            {{- fail (printf "%s.env.%s is set by the chart; use the chart's own value for it (values.yaml)" $component $name) }}
            {{- end }}
            - name: {{ $name }}
              value: {{ $value | quote }}
            {{- end }}
          startupProbe:
            {{- include "fabrictwin.probe" (dict "root" $root "component" $component "port" $values.port "tls" $tls "kind" "startup") | nindent 12 }}
          readinessProbe:
            {{- include "fabrictwin.probe" (dict "root" $root "component" $component "port" $values.port "tls" $tls "kind" "readiness") | nindent 12 }}
          livenessProbe:
            {{- include "fabrictwin.probe" (dict "root" $root "component" $component "port" $values.port "tls" $tls "kind" "liveness") | nindent 12 }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: numba-cache
              mountPath: /var/cache/numba
            {{- if or $tls $peerTls }}
            - name: tls
              mountPath: /etc/fabrictwin/tls
              readOnly: true
            {{- end }}
            {{- if $root.Values.auth.existingSecret }}
            - name: auth
              mountPath: /etc/fabrictwin/auth
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: {{ $root.Values.scratch.tmpSizeLimit }}
        - name: numba-cache
          emptyDir:
            sizeLimit: {{ $root.Values.scratch.numbaCacheSizeLimit }}
        {{- if or $tls $peerTls }}
        - name: tls
          secret:
            secretName: {{ $root.Values.tls.existingSecret }}
            defaultMode: 0440
        {{- end }}
        {{- if $root.Values.auth.existingSecret }}
        - name: auth
          secret:
            secretName: {{ $root.Values.auth.existingSecret }}
            defaultMode: 0440
            items:
              {{- include "fabrictwin.authItems" (dict "root" $root "readOnly" true) | nindent 14 }}
        {{- end }}
      {{- if and (eq $component "simulator") $values.spreadOverNodes }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "fabrictwin.selectorLabels" . | nindent 14 }}
      {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{- define "fabrictwin.service" -}}
{{- $root := .root -}}
{{- $values := index $root.Values .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "fabrictwin.componentName" . }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrictwin.labels" . | nindent 4 }}
    fabrictwin.io/metrics: "true"
  {{- with $values.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $values.service.type }}
  selector:
    {{- include "fabrictwin.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $values.port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    {{- if $root.Values.metrics.enabled }}
    - name: metrics
      port: {{ $root.Values.metrics.port }}
      targetPort: metrics
      protocol: TCP
      appProtocol: http
    {{- end }}
{{- end -}}
