{{/* Names, labels and the pieces every xshard container shares. */}}

{{- define "xshard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's prefix for every object; short enough that "-shard-NN-NN" still fits a
     pod name (StatefulSet pod names carry a 10-character hash label: keep them <= 52). */}}
{{- define "xshard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 30 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 30 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "xshard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xshard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xshard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "xshard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: xshard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The annotations block of an object: commonAnnotations and the object's own (dict "ctx" $
     "extra" map), which win; nothing when both are empty. */}}
{{- define "xshard.annotations" -}}
{{- $all := merge (deepCopy (default dict .extra)) (deepCopy (default dict .ctx.Values.commonAnnotations)) -}}
{{- with $all }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The account the pods run as: the chart's (serviceAccount.create), else an existing one. */}}
{{- define "xshard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "xshard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A pod template's labels: the component's, then the component's podLabels (dict "ctx" $
     "component" "node" "values" .Values.node). */}}
{{- define "xshard.podLabels" -}}
{{ include "xshard.componentLabels" . }}
{{- with .values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A password from the auth Secret in the environment variable `name`: the processes read
     their passwords from there, never from argv (ps and /proc show argv to anyone). */}}
{{- define "xshard.passwordEnv" -}}
{{- if .ctx.Values.auth.enabled }}
{{- range .names }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ include "xshard.secretName" $.ctx | quote }}
      key: {{ $.ctx.Values.auth.existingSecretPasswordKey | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Labels of one component: (dict "ctx" $ "component" "node") */}}
{{- define "xshard.componentLabels" -}}
{{ include "xshard.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "xshard.componentSelector" -}}
{{ include "xshard.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "xshard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "xshard.clusterName" -}}
{{- default (include "xshard.fullname" .) .Values.clusterName -}}
{{- end -}}

{{- define "xshard.shardName" -}}
{{- printf "%s-shard-%d" (include "xshard.fullname" .ctx) (int .shard) -}}
{{- end -}}

{{- define "xshard.etcdName" -}}
{{- printf "%s-etcd" (include "xshard.fullname" .) -}}
{{- end -}}

{{- define "xshard.domain" -}}
{{- printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The etcd endpoints the xshard processes use: the external ones, else the chart's. */}}
{{- define "xshard.etcdEndpoints" -}}
{{- if .Values.etcd.external.endpoints -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- else -}}
{{- printf "http://%s.%s:%d" (include "xshard.etcdName" .) (include "xshard.domain" .) (int .Values.etcd.clientPort) -}}
{{- end -}}
{{- end -}}

{{- define "xshard.secretName" -}}
{{- default (printf "%s-auth" (include "xshard.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* The etcd options every xshard command takes (secrets go in the environment). */}}
{{- define "xshard.etcdArgs" -}}
- --etcd
- {{ include "xshard.etcdEndpoints" . | quote }}
{{- with .Values.etcd.external }}
{{- if .user }}
- --etcd-user
- {{ .user | quote }}
{{- end }}
{{- if .tls.enabled }}
- --etcd-cacert
- /etc/xshard/etcd-tls/{{ .tls.caKey }}
{{- if .tls.clientCert }}
- --etcd-cert
- /etc/xshard/etcd-tls/{{ .tls.certKey }}
- --etcd-key
- /etc/xshard/etcd-tls/{{ .tls.keyKey }}
{{- end }}
{{- end }}
{{- end }}
- --cluster
- {{ include "xshard.clusterName" . | quote }}
{{- end -}}

{{/* The environment of every xshard container: where etcd is (also for `kubectl exec ...
     xshard status`), its password, and the nodes' password. */}}
{{- define "xshard.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: XSHARD_ETCD
  value: {{ include "xshard.etcdEndpoints" . | quote }}
{{- with .Values.etcd.external }}
{{- if .user }}
- name: XSHARD_ETCD_USER
  value: {{ .user | quote }}
- name: XSHARD_ETCD_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "etcd.external.existingSecret is required with etcd.external.user" .existingSecret | quote }}
      key: {{ .passwordKey | quote }}
{{- end }}
{{- if .tls.enabled }}
- name: XSHARD_ETCD_CACERT
  value: /etc/xshard/etcd-tls/{{ .tls.caKey }}
{{- if .tls.clientCert }}
- name: XSHARD_ETCD_CERT
  value: /etc/xshard/etcd-tls/{{ .tls.certKey }}
- name: XSHARD_ETCD_KEY
  value: /etc/xshard/etcd-tls/{{ .tls.keyKey }}
{{- end }}
{{- end }}
{{- end }}
{{- include "xshard.passwordEnv" (dict "ctx" . "names" (list "XSHARD_NODE_PASSWORD")) }}
{{- end -}}

{{/* TLS: the Secret every xshard pod mounts read-only at /etc/xshard/tls. */}}
{{- define "xshard.tlsSecretName" -}}
{{- if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "xshard.fullname" .) -}}
{{- else -}}
{{- required "tls.existingSecret (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt) or tls.certManager.enabled is required with tls.enabled" .Values.tls.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The certificate, key and CA options (space-separated: also used in the preStop shell line). */}}
{{- define "xshard.tlsFiles" -}}
--tls-cert-file /etc/xshard/tls/tls.crt --tls-key-file /etc/xshard/tls/tls.key --tls-ca-cert-file /etc/xshard/tls/ca.crt
{{- end -}}

{{/* How the controller, the routers and `xshard failover` reach the nodes: over TLS, with the
     pod's certificate as the client one. */}}
{{- define "xshard.tlsClusterFlags" -}}
{{- if .Values.tls.enabled -}}
--tls-cluster yes {{ include "xshard.tlsFiles" . }}
{{- end -}}
{{- end -}}

{{/* The listener options of nodes and routers: (dict "ctx" $ "port" N "tlsPort" M). */}}
{{- define "xshard.listenArgs" -}}
{{- $v := .ctx.Values.tls -}}
- --port
- {{ ternary .port 0 (or (not $v.enabled) $v.plainPort) | quote }}
{{- if $v.enabled }}
- --tls-port
- {{ .tlsPort | quote }}
- --tls-auth-clients
- {{ include "xshard.tlsAuthClients" .ctx | quote }}
{{- range splitList " " (include "xshard.tlsClusterFlags" .ctx) }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* yes|no|optional; a YAML boolean (authClients: yes unquoted) counts as yes/no. */}}
{{- define "xshard.tlsAuthClients" -}}
{{- $a := toString .Values.tls.authClients -}}
{{- if eq $a "true" }}yes{{ else if eq $a "false" }}no{{ else }}{{ $a }}{{ end -}}
{{- end -}}

{{/* The container ports of nodes and routers, named for what they serve. */}}
{{- define "xshard.respPorts" -}}
{{- $v := .ctx.Values.tls -}}
{{- if or (not $v.enabled) $v.plainPort }}
- name: resp
  containerPort: {{ .port }}
{{- end }}
{{- if $v.enabled }}
- name: resp-tls
  containerPort: {{ .tlsPort }}
{{- end }}
{{- end -}}

{{- define "xshard.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/xshard/tls
  readOnly: true
{{- end }}
{{- if .Values.etcd.external.tls.enabled }}
- name: etcd-tls
  mountPath: /etc/xshard/etcd-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "xshard.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "xshard.tlsSecretName" . | quote }}
    defaultMode: 0440
{{- end }}
{{- if .Values.etcd.external.tls.enabled }}
- name: etcd-tls
  secret:
    secretName: {{ required "etcd.external.tls.existingSecret is required with etcd.external.tls.enabled" .Values.etcd.external.tls.existingSecret | quote }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Pods run as the image's non-root user; the volumes are made group-writable for it. */}}
{{- define "xshard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Every container, init and Job containers included: not negotiable through values. */}}
{{- define "xshard.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "xshard.metricsRelabelings" -}}
# The labels the rules and the dashboard group by: the processes do not export them.
- targetLabel: cluster
  replacement: {{ include "xshard.clusterName" . | quote }}
- sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
  targetLabel: kind
- sourceLabels: [__meta_kubernetes_pod_label_xshard_shard]
  targetLabel: shard
- sourceLabels: [__meta_kubernetes_pod_name]
  targetLabel: node
{{- end -}}
