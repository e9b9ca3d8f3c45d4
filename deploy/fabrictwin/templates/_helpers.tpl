{{/*
Names, labels, addresses and the checks every template relies on.
*/}}

{{- define "fabrictwin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fabrictwin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fabrictwin.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; ctx: dict "root" $ "component" name. */}}
{{- define "fabrictwin.labels" -}}
helm.sh/chart: {{ include "fabrictwin.chart" .root }}
{{ include "fabrictwin.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: fabrictwin
{{- end -}}

{{- define "fabrictwin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fabrictwin.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The Service (and Deployment) name of a component; ctx: dict "root" $ "component" name. */}}
{{- define "fabrictwin.componentName" -}}
{{- printf "%s-%s" (include "fabrictwin.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fabrictwin.simulatorHeadlessName" -}}
{{- printf "%s-simulator-headless" (include "fabrictwin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fabrictwin.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fabrictwin.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fabrictwin.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The grpc.health.v1 service name each server reports SERVING for (services/<name>/__main__.py). */}}
{{- define "fabrictwin.healthService" -}}
{{- $names := dict "topology" "fabrictwin.v1.TopologyService" "simulator" "fabrictwin.v1.SimulationService" "telemetry" "fabrictwin.v1.TelemetryService" "orchestrator" "fabrictwin.v1.ScenarioService" -}}
{{- index $names . -}}
{{- end -}}

{{/* host:port of a component's ClusterIP Service; ctx: dict "root" $ "component" name. */}}
{{- define "fabrictwin.address" -}}
{{- $port := index .root.Values .component "port" -}}
{{- printf "%s.%s.svc.%s:%v" (include "fabrictwin.componentName" .) .root.Release.Namespace .root.Values.clusterDomain $port -}}
{{- end -}}

{{/*
The orchestrator's simulator target: one DNS name that resolves to every ready simulator pod
(headless Service); the orchestrator keeps a channel per pod (services/orchestrator/replicas.py).
*/}}
{{- define "fabrictwin.simulatorTarget" -}}
{{- printf "dns:///%s.%s.svc.%s:%v" (include "fabrictwin.simulatorHeadlessName" .) .Release.Namespace .Values.clusterDomain .Values.simulator.port -}}
{{- end -}}

{{/* The Secret and key holding the database URL; fails when none or both are configured. */}}
{{- define "fabrictwin.databaseSecretName" -}}
{{- if and .Values.postgresql.dev .Values.database.existingSecret -}}
{{- fail "set either database.existingSecret (your PostgreSQL) or postgresql.dev=true (a throwaway one), not both" -}}
{{- else if .Values.postgresql.dev -}}
{{- printf "%s-postgresql-dev" (include "fabrictwin.fullname" .) -}}
{{- else if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- fail "topology, telemetry and orchestrator need PostgreSQL: set database.existingSecret (a Secret whose key database.key holds a postgresql:// URL), or postgresql.dev=true to try FabricTwin with a throwaway database" -}}
{{- end -}}
{{- end -}}

{{- define "fabrictwin.databaseSecretKey" -}}
{{- if .Values.postgresql.dev -}}url{{- else -}}{{ .Values.database.key }}{{- end -}}
{{- end -}}

{{/*
Checks the TLS values once: a Secret is named, and topology, simulator and telemetry (called by the
same peers, with one set of peer settings each) all serve TLS or none does.
*/}}
{{- define "fabrictwin.checkTls" -}}
{{- if .Values.tls.enabled -}}
{{- if not .Values.tls.existingSecret -}}
{{- fail "tls.enabled needs tls.existingSecret: a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt)" -}}
{{- end -}}
{{- $called := 0 -}}
{{- range list "topology" "simulator" "telemetry" -}}
{{- if has . $.Values.tls.services -}}{{- $called = add1 $called -}}{{- end -}}
{{- end -}}
{{- if and (gt $called 0) (lt $called 3) -}}
{{- fail (printf "tls.services %v: topology, simulator and telemetry are called by the same peers with one set of peer settings, so list all three or none of them (the orchestrator may serve TLS alone)" .Values.tls.services) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the component serves TLS; ctx: dict "root" $ "component" name. */}}
{{- define "fabrictwin.tls" -}}
{{- $root := .root -}}
{{- include "fabrictwin.checkTls" $root -}}
{{- if and $root.Values.tls.enabled (has .component $root.Values.tls.services) -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the peers the component calls serve TLS (all of them do, or none: fabrictwin.checkTls);
ctx: dict "root" $ "peers" list.
*/}}
{{- define "fabrictwin.peerTls" -}}
{{- $root := .root -}}
{{- include "fabrictwin.checkTls" $root -}}
{{- $found := false -}}
{{- range .peers -}}
{{- if and $root.Values.tls.enabled (has . $root.Values.tls.services) -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- if $found -}}true{{- end -}}
{{- end -}}

{{/*
The items of the auth Secret a pod mounts at /etc/fabrictwin/auth: `token`, and `read-only-token`
when auth.readOnlyKey names one; ctx: dict "root" $ "readOnly" bool.
*/}}
{{- define "fabrictwin.authItems" -}}
- key: {{ .root.Values.auth.key }}
  path: token
{{- if and .readOnly .root.Values.auth.readOnlyKey }}
- key: {{ .root.Values.auth.readOnlyKey }}
  path: read-only-token
{{- end }}
{{- end -}}

{{/* Whole seconds of the pod's termination grace: drain + grace + cleanup, each rounded up. */}}
{{- define "fabrictwin.terminationGracePeriodSeconds" -}}
{{- $s := .Values.shutdown -}}
{{- add (ceil $s.drainSeconds) (ceil $s.graceSeconds) (ceil $s.cleanupSeconds) -}}
{{- end -}}

{{/* Refuse probe settings that would restart a service while it drains. */}}
{{- define "fabrictwin.checkProbes" -}}
{{- $live := .Values.probes.liveness -}}
{{- if le (mulf $live.periodSeconds $live.failureThreshold) (float64 .Values.shutdown.drainSeconds) -}}
{{- fail (printf "probes.liveness: periodSeconds x failureThreshold (%v s) must exceed shutdown.drainSeconds (%v s), or the kubelet restarts a draining service" (mulf $live.periodSeconds $live.failureThreshold) .Values.shutdown.drainSeconds) -}}
{{- end -}}
{{- end -}}
