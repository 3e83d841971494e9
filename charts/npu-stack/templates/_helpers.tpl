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

{{/*
The CDI spec file the device plugin's pods write (cdi.specDir, the kind
with "/" and "." as "-"); the driver pods remove it at npu-hooks
uninstall.
*/}}
{{- define "npu-stack.cdiSpecFile" -}}
{{- printf "%s/%s.yaml" .Values.cdi.specDir (.Values.cdi.kind | replace "/" "-" | replace "." "-") }}
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
{{- $data := dict "version" (toString .ctx.Values.driver.version) "chip" .profile.chip "kernel" (.profile.imageKernel | default .profile.kernel) "nodeKernel" .profile.kernel "os" .profile.os "name" .profile.name }}
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

{{/* Driver tree on the host when no profile names its own. */}}
{{- define "npu-stack.driverRoot" -}}
{{- .Values.driver.hostDriverPath }}
{{- end }}

{{/* Host driver tree of one profile: (dict "profile" $p "ctx" $). */}}
{{- define "npu-stack.profileDriverRoot" -}}
{{- .profile.hostDriverPath | default .ctx.Values.driver.hostDriverPath }}
{{- end }}

{{/*
The node groups of the device plugin and the exporter, as JSON
[{name, path, profiles}]: one group per host driver tree the profiles use.
The vendor images read the driver at /usr/local/Ascend/driver inside the
container (MindCluster v7.3.0 Dockerfiles, LD_LIBRARY_PATH), so each pod
mounts its node's tree there, and one DaemonSet can serve only nodes that
share a host path. One tree (the usual case, and the passthrough driver):
one group named "" that selects every NPU node, as before. Several (a
fleet mixing KubeOS, whose driver lives in /var/lib/Ascend/driver, with
other OSes): the group of driver.hostDriverPath keeps the name "", every
other is named after its first profile and selects its profiles' nodes.
*/}}
{{- define "npu-stack.driverGroups" -}}
{{- $groups := list }}
{{- if .Values.driver.enabled }}
{{- $paths := list }}
{{- $byPath := dict }}
{{- range .Values.driver.profiles }}
{{- $path := include "npu-stack.profileDriverRoot" (dict "profile" . "ctx" $) }}
{{- if not (hasKey $byPath $path) }}
{{- $paths = append $paths $path }}
{{- $_ := set $byPath $path list }}
{{- end }}
{{- $_ := set $byPath $path (append (get $byPath $path) .) }}
{{- end }}
{{- range $paths }}
{{- $profiles := get $byPath . }}
{{- $name := "" }}
{{- if and (gt (len $paths) 1) (ne . $.Values.driver.hostDriverPath) }}
{{- $name = (first $profiles).name }}
{{- end }}
{{- $groups = append $groups (dict "name" $name "path" . "profiles" (ternary $profiles (list) (gt (len $paths) 1))) }}
{{- end }}
{{- else }}
{{- $groups = list (dict "name" "" "path" .Values.driver.hostDriverPath "profiles" list) }}
{{- end }}
{{- toJson $groups }}
{{- end }}

{{/* Component of a group's device plugin or exporter: (dict "base" "device-plugin" "group" $g). */}}
{{- define "npu-stack.groupComponent" -}}
{{- .base }}{{ if .group.name }}-{{ .group.name }}{{ end }}
{{- end }}

{{/* Group of one profile: (dict "profile" $p "ctx" $). */}}
{{- define "npu-stack.profileGroup" -}}
{{- $path := include "npu-stack.profileDriverRoot" . }}
{{- range (include "npu-stack.driverGroups" .ctx | fromJsonArray) }}
{{- if eq .path $path }}{{ toJson . }}{{ end }}
{{- end }}
{{- end }}

{{/*
Scheduling of a group's pods: the NPU nodes, and with several groups only
the nodes of the group's profiles (a profile's chip, kernel and os labels
and its own nodeSelector; the terms are ORed).
*/}}
{{- define "npu-stack.groupScheduling" -}}
{{- include "npu-stack.npuNodeSelector" .ctx }}
{{- with .group.profiles }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        {{- range . }}
        {{- $l := $.ctx.Values.driver.profileLabels }}
        {{- $sel := merge (dict $l.chip .chip $l.kernel .kernel $l.os .os) (.nodeSelector | default dict) }}
        - matchExpressions:
            {{- range $k, $v := $sel }}
            - {key: {{ $k | quote }}, operator: In, values: [{{ $v | quote }}]}
            {{- end }}
        {{- end }}
{{- end }}
{{- end }}

{{/*
The host's / at /host (read-only, host mounts propagated) for our binaries
that read host files or run npu-smi: they get --host-root=/host and resolve
every host path under it (npu-smi runs chrooted there, so the host's own
loader and libraries apply). Not recursive read-only: /dev, /run and /sys
stay as the host mounts them.
*/}}
{{- define "npu-stack.hostRootMount" -}}
- {name: host-root, mountPath: /host, readOnly: true, mountPropagation: HostToContainer}
{{- end }}
{{- define "npu-stack.hostRootVolume" -}}
- name: host-root
  hostPath: {path: /, type: Directory}
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
{{- $flags := list
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
  (printf "--settle=%vs" $p.settleSeconds)
-}}
{{- range $p.maintenanceWindows }}
{{- $flags = append $flags (printf "--maintenance-window=%s" (include "npu-stack.windowSpec" .)) }}
{{- end }}
{{- join "\n" $flags -}}
{{- end }}

{{/* The rollout's command line, shared by the hook Job, the job-mode Job and the resume CronJob. */}}
{{- define "npu-stack.rolloutArgs" -}}
- rollout
- {{ printf "--namespace=%v" (include "npu-stack.namespace" .) | quote }}
- {{ printf "--label-domain=%v" .Values.labelDomain | quote }}
- {{ printf "--npu-node-selector=%v" (include "npu-stack.selectorString" .Values.npuNodeSelector) | quote }}
- {{ printf "--driver-selector=app=npu-driver-daemonset,app.kubernetes.io/instance=%v" .Release.Name | quote }}
- {{ printf "--policy-configmap=%s-rollout-policy" (include "npu-stack.fullname" .) | quote }}
- {{ printf "--record-labels=app.kubernetes.io/instance=%v,app.kubernetes.io/part-of=npu-stack" .Release.Name | quote }}
{{- range splitList "\n" (include "npu-stack.rolloutPolicyFlags" .) }}
- {{ . | quote }}
{{- end }}
{{- /* 90% of the Job's hard limit: the rollout stops first and prints its
summary (the stuck nodes and their fix) before the Job is killed. */}}
- {{ printf "--deadline=%vs" (div (mul .Values.hooks.activeDeadlineSeconds 9) 10) | quote }}
{{- range include "npu-stack.chipDaemonSets" . | fromJsonArray }}
- {{ printf "--reroll=%s" . | quote }}
{{- end }}
{{- end }}

{{/*
The DaemonSets whose pods hold the chips on a node, as a JSON list of
"<namespace>/<name>" and "<namespace>/selector:<label selector>": the
device plugin and the exporter of every group (when enabled), then
driver.upgradePolicy.rerollTargets. The rollout re-rolls them after a
driver change (--reroll) and the driver pod deletes their pods on its
node before an install over a loaded driver (--stop): one list, so the
two never differ.
*/}}
{{- define "npu-stack.chipDaemonSets" -}}
{{- $out := list }}
{{- range $group := include "npu-stack.driverGroups" . | fromJsonArray }}
{{- range $base, $on := dict "device-plugin" $.Values.devicePlugin.enabled "exporter" $.Values.exporter.enabled }}
{{- if $on }}
{{- $out = append $out (printf "%s/%s-%s" (include "npu-stack.namespace" $) (include "npu-stack.fullname" $) (include "npu-stack.groupComponent" (dict "base" $base "group" $group))) }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.driver.upgradePolicy.rerollTargets }}
{{- if .name }}
{{- $out = append $out (printf "%s/%s" .namespace .name) }}
{{- else }}
{{- $out = append $out (printf "%s/selector:%s" .namespace .selector) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The gate of every pod that opens the chips through the vendor's dcmi (the
device plugin, the exporter): an init container that waits until the
driver is loaded and ready. While the ready marker is absent (no driver
yet, a wedge removed it, or the driver pod took it away to install over
the loaded driver before the reboot) the pod's main container does not
start, so nothing of ours holds the chips. (dict "ctx" $ "group" $group).
It calls no API: the exporter's pod mounts no token.
*/}}
{{- define "npu-stack.waitForDriver" -}}
- name: wait-for-driver
  image: {{ include "npu-stack.image" (dict "image" .ctx.Values.images.healthwatch "ctx" .ctx) }}
  imagePullPolicy: {{ .ctx.Values.images.healthwatch.pullPolicy }}
  args:
    - validate
    - --host-root=/host
    - --wait
    - --node-name=$(NODE_NAME)
    - {{ printf "--driver-root=%v" .group.path | quote }}
    - {{ printf "--marker-dir=%v" .ctx.Values.driver.markerDir | quote }}
    {{- /* No --driver-version: whatever driver is loaded and ready
    is the one to serve until the reboot. A version here would
    roll these DaemonSets on every driver.version bump, and their new
    pods would wait for a driver only the post-upgrade rollout
    loads: a deadlock under helm --wait, Flux and Argo CD. */}}
    {{- if not .ctx.Values.driver.enabled }}
    # Pre-installed driver: no driver pod writes a marker; chips
    # visible through npu-smi is the gate.
    - --require-marker=false
    {{- end }}
    {{- if .injector }}
    # cdi.inject: no chip is advertised before the NRI injector can give
    # a container allocated one its driver user space.
    - --require-injector
    {{- end }}
  env:
    {{- include "npu-stack.agentEnv" .ctx | nindent 4 }}
  # npu-smi opens /dev/davinci* (mode 0660, root or the driver's
  # HwHiAiUser group: docs/host-contract.md, "Device nodes"):
  # root, and privileged for the device cgroup. A non-root process
  # gets no effective capabilities even when privileged.
  securityContext:
    privileged: true
    runAsUser: 0
  volumeMounts:
    {{- include "npu-stack.hostRootMount" .ctx | nindent 4 }}
{{- end }}

{{/*
Refusals of driver install values the schema cannot express (relations
between two values).
*/}}
{{- define "npu-stack.checkDriverInstall" -}}
{{- $d := .Values.driver }}
{{- $least := add (int64 $d.installTimeoutSeconds) 30 }}
{{- if lt (int64 $d.terminationGracePeriodSeconds) $least }}
{{- fail (printf "driver.terminationGracePeriodSeconds (%v) must be at least driver.installTimeoutSeconds (%v) + 30 = %v: at the end of the grace period the kubelet kills the driver container, and a running installer with it, leaving a half-installed driver. Set driver.terminationGracePeriodSeconds to %v or more, or lower driver.installTimeoutSeconds" $d.terminationGracePeriodSeconds $d.installTimeoutSeconds $least $least) }}
{{- end }}
{{- if lt (int64 $d.installRetry.maxSeconds) (int64 $d.installRetry.initialSeconds) }}
{{- fail (printf "driver.installRetry.maxSeconds (%v) is below driver.installRetry.initialSeconds (%v): the longest wait between install retries cannot be shorter than the first. Set driver.installRetry.maxSeconds to %v or more, or lower driver.installRetry.initialSeconds" $d.installRetry.maxSeconds $d.installRetry.initialSeconds $d.installRetry.initialSeconds) }}
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
{{- include "npu-stack.hookPlacement" .ctx }}
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
Placement of the hook pods (preflight, rollout, resume, uninstall): the
user's hooks.nodeSelector and hooks.tolerations (e.g. infra nodes), and a
preference for non-NPU nodes.
*/}}
{{- define "npu-stack.hookPlacement" -}}
{{- with .Values.hooks.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.hooks.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- include "npu-stack.avoidNPUNodes" . }}
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

{{/*
The command of a vendor binary (the argument) in its vendor image, under
upstream's umask 027 (MindCluster v7.3.0 npu-exporter.yaml: `umask
027;npu-exporter ...` under /bin/bash -c; the images' Dockerfiles put
umask 027 in /etc/profile): the image's bash sets the umask and execs the
binary, which keeps the container's PID and signals; the container's args
follow as "$@", never parsed by the shell.
*/}}
{{- define "npu-stack.umaskCommand" -}}
{{ list "/bin/bash" "-c" "umask 027; exec \"$0\" \"$@\"" . | toJson }}
{{- end }}

{{/* umaskCommand after a command that must succeed first: (list
"first command" "/path/binary"). The first command is the chart's own
text; the binary's flags stay positional parameters. */}}
{{- define "npu-stack.umaskCommandAfter" -}}
{{ list "/bin/bash" "-c" (printf "%s && umask 027 && exec \"$0\" \"$@\"" (index . 0)) (index . 1) | toJson }}
{{- end }}
