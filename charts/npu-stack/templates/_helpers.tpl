{{/* Chart name, truncated to DNS label limits. */}}
{{- define "npu-stack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name. */}}
{{- define "npu-stack.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains (include "npu-stack.name" .) .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "npu-stack.name" .) | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Namespace of every namespaced object. */}}
{{- define "npu-stack.namespace" -}}
{{- default .Release.Namespace .Values.namespace }}
{{- end }}

{{/* Recommended labels; call with (dict "ctx" $ "component" "x"). */}}
{{- define "npu-stack.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "npu-stack.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: npu-stack
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels; immutable once a DaemonSet exists. */}}
{{- define "npu-stack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "npu-stack.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The one image helper: (dict "image" .Values.images.hooks "ctx" $), plus
"tag" to override the image's own tag (the driver's per-profile tag).
imageRegistry (an air-gapped mirror) replaces the image's registry; then
registry/repository, then @digest if set, else :tag (default appVersion).
*/}}
{{- define "npu-stack.image" -}}
{{- $registry := .ctx.Values.imageRegistry | default .image.registry }}
{{- $repo := .image.repository }}
{{- if $registry }}{{ $repo = printf "%s/%s" $registry .image.repository }}{{ end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (.tag | default .image.tag | default .ctx.Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/* Driver image of one profile: (dict "profile" $p "ctx" $). */}}
{{- define "npu-stack.driverImage" -}}
{{- include "npu-stack.image" (dict "image" .ctx.Values.driver.image "ctx" .ctx "tag" (include "npu-stack.driverTag" .)) }}
{{- end }}

{{/* Pull secrets of every pod. */}}
{{- define "npu-stack.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Driver image tag of one profile: (dict "profile" $p "ctx" $). */}}
{{- define "npu-stack.driverTag" -}}
{{- $data := dict "version" (toString .ctx.Values.driver.version) "chip" .profile.chip "kernel" .profile.kernel "os" .profile.os "name" .profile.name }}
{{- tpl .ctx.Values.driver.tagTemplate $data }}
{{- end }}

{{/* Hash of everything that defines the desired driver: names the job-mode rollout Job. */}}
{{- define "npu-stack.driverSpecHash" -}}
{{- $spec := dict "enabled" .Values.driver.enabled "version" (toString .Values.driver.version) "image" .Values.driver.image "tagTemplate" .Values.driver.tagTemplate "profiles" .Values.driver.profiles "policy" .Values.driver.upgradePolicy }}
{{- toJson $spec | sha256sum | trunc 10 }}
{{- end }}

{{/* Node selector of the node agents. */}}
{{- define "npu-stack.npuNodeSelector" -}}
{{- with .Values.npuNodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Tolerations of the node agents. */}}
{{- define "npu-stack.nodeAgentTolerations" -}}
{{- with .Values.nodeAgentTolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Driver tree on the host that CDI and the device plugin read. */}}
{{- define "npu-stack.driverRoot" -}}
{{- .Values.driver.hostDriverPath }}
{{- end }}

{{/* ServiceAccount names. */}}
{{- define "npu-stack.sa" -}}
{{- printf "%s-%s" (include "npu-stack.fullname" .ctx) .component }}
{{- end }}

{{/* Downward-API env every node agent gets. */}}
{{- define "npu-stack.agentEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}

{{/*
Our Go binaries get the container's memory limit as the runtime's soft
limit: near it the garbage collector works harder instead of the kernel
killing the process (a rollout over thousands of nodes, a burst of
events).
*/}}
{{- define "npu-stack.goMemLimit" -}}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
{{- end }}

{{/*
The rollout's policy flags (driver.upgradePolicy), one a line: in the
rollout's command line and in the policy ConfigMap, which every running
rollout watches so the newest policy takes effect at once.
*/}}
{{- define "npu-stack.rolloutPolicyFlags" -}}
{{- $p := .Values.driver.upgradePolicy -}}
{{- join "\n" (list
  (printf "--auto-upgrade=%v" $p.autoUpgrade)
  (printf "--paused=%v" $p.paused)
  (printf "--max-parallel-upgrades=%v" $p.maxParallelUpgrades)
  (printf "--max-unavailable=%v" $p.maxUnavailable)
  (printf "--max-failures=%v" $p.maxFailures)
  (printf "--canary-selector=%v" $p.canarySelector)
  (printf "--wait-for-completion-selector=%v" $p.waitForCompletion.podSelector)
  (printf "--wait-for-completion-timeout=%vs" $p.waitForCompletion.timeoutSeconds)
  (printf "--npu-pod-deletion-force=%v" $p.npuPodDeletion.force)
  (printf "--npu-pod-deletion-timeout=%vs" $p.npuPodDeletion.timeoutSeconds)
  (printf "--npu-pod-deletion-delete-emptydir=%v" $p.npuPodDeletion.deleteEmptyDir)
  (printf "--drain=%v" $p.drain.enable)
  (printf "--drain-force=%v" $p.drain.force)
  (printf "--drain-selector=%v" $p.drain.podSelector)
  (printf "--drain-timeout=%vs" $p.drain.timeoutSeconds)
  (printf "--drain-delete-emptydir=%v" $p.drain.deleteEmptyDir)
  (printf "--reboot-timeout=%vs" $p.rebootTimeoutSeconds)
  (printf "--nodes-left-behind=%v" $p.nodesLeftBehind)
) -}}
{{- end }}

{{/* The rollout's command line, shared by the hook Job, the job-mode Job and the resume CronJob. */}}
{{- define "npu-stack.rolloutArgs" -}}
{{- $p := .Values.driver.upgradePolicy -}}
- rollout
- {{ printf "--namespace=%v" (include "npu-stack.namespace" .) | quote }}
- {{ printf "--label-domain=%v" .Values.labelDomain | quote }}
- {{ printf "--npu-node-selector=%v" (include "npu-stack.selectorString" .Values.npuNodeSelector) | quote }}
- {{ printf "--driver-selector=app=npu-driver-daemonset,app.kubernetes.io/instance=%v" .Release.Name | quote }}
- {{ printf "--policy-configmap=%s-rollout-policy" (include "npu-stack.fullname" .) | quote }}
{{- range splitList "\n" (include "npu-stack.rolloutPolicyFlags" .) }}
- {{ . | quote }}
{{- end }}
{{- /* 90% of the Job's hard limit: the rollout stops first and prints its
summary (the stuck nodes and their fix) before the Job is killed. */}}
- {{ printf "--deadline=%vs" (div (mul .Values.hooks.activeDeadlineSeconds 9) 10) | quote }}
{{- if .Values.devicePlugin.enabled }}
- {{ printf "--reroll=%s/%s-device-plugin" (include "npu-stack.namespace" .) (include "npu-stack.fullname" .) | quote }}
{{- end }}
{{- if .Values.exporter.enabled }}
- {{ printf "--reroll=%s/%s-exporter" (include "npu-stack.namespace" .) (include "npu-stack.fullname" .) | quote }}
{{- end }}
{{- range $p.rerollTargets }}
{{- if .name }}
- {{ printf "--reroll=%s/%s" .namespace .name | quote }}
{{- else }}
- {{ printf "--reroll=%s/selector:%s" .namespace .selector | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* A map of labels as a selector string k=v,k2=v2 (sorted). */}}
{{- define "npu-stack.selectorString" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}{{ $pairs = append $pairs (printf "%s=%s" $k $v) }}{{ end }}
{{- join "," $pairs }}
{{- end }}

{{/* Pod spec of the rollout (hook Job, job-mode Job and resume CronJob). */}}
{{- define "npu-stack.rolloutPodSpec" -}}
serviceAccountName: {{ include "npu-stack.sa" (dict "ctx" .ctx "component" "rollout") }}
restartPolicy: Never
securityContext:
  {{- toYaml .ctx.Values.hooks.podSecurityContext | nindent 2 }}
{{- include "npu-stack.imagePullSecrets" .ctx }}
{{- include "npu-stack.avoidNPUNodes" .ctx }}
containers:
  - name: rollout
    image: {{ include "npu-stack.image" (dict "image" .ctx.Values.images.hooks "ctx" .ctx) }}
    imagePullPolicy: {{ .ctx.Values.images.hooks.pullPolicy }}
    args:
      {{- include "npu-stack.rolloutArgs" .ctx | nindent 6 }}
      {{- range .extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      {{- include "npu-stack.goMemLimit" . | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
    resources:
      {{- toYaml .ctx.Values.hooks.resources | nindent 6 }}
{{- end }}

{{/*
Hooks prefer non-NPU nodes: an NPU node may be the one being rebooted.
Preferred, not required, so a cluster of NPU nodes only still runs them.
*/}}
{{- define "npu-stack.avoidNPUNodes" -}}
{{- with .Values.npuNodeSelector }}
affinity:
  nodeAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        preference:
          matchExpressions:
            {{- range $k, $v := . }}
            - {key: {{ $k | quote }}, operator: NotIn, values: [{{ $v | quote }}]}
            {{- end }}
{{- end }}
{{- end }}

{{/*
Job spec fields shared by the rollout Jobs: exit code 2 means the rollout
cannot finish (deadline or failure budget) and fails the Job at once;
other failures (a crash, an OOM kill) retry, which is safe because the
rollout resumes from node state.
*/}}
{{- define "npu-stack.rolloutJobSpec" -}}
backoffLimit: 3
activeDeadlineSeconds: {{ .Values.hooks.activeDeadlineSeconds }}
podFailurePolicy:
  rules:
    - action: FailJob
      onExitCodes:
        containerName: rollout
        operator: In
        values: [2]
{{- end }}
