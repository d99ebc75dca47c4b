{{/*
Shared helpers: names, labels, image references, and the checks that values.schema.json
cannot express.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "vramfit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The base name of every object: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". Kept to 40 characters so that the
longest suffix ("-operator-leader-election") still fits in 63.
*/}}
{{- define "vramfit.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "vramfit.operator.fullname" -}}
{{- printf "%s-operator" (include "vramfit.fullname" .) }}
{{- end }}

{{- define "vramfit.agent.fullname" -}}
{{- printf "%s-agent" (include "vramfit.fullname" .) }}
{{- end }}

{{- define "vramfit.cacheAgent.fullname" -}}
{{- printf "%s-cache-agent" (include "vramfit.fullname" .) }}
{{- end }}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "vramfit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels of every object. Call with (dict "root" $ "component" "operator");
component may be empty for objects shared by the whole release (CRDs, dashboard).
*/}}
{{- define "vramfit.labels" -}}
{{- $root := .root -}}
helm.sh/chart: {{ include "vramfit.chart" $root }}
{{ include "vramfit.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: vramfit
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels a Deployment/DaemonSet/Service selects on (immutable once installed). */}}
{{- define "vramfit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vramfit.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/* ServiceAccount names. */}}
{{- define "vramfit.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "vramfit.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "vramfit.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "vramfit.agent.fullname" .) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference: "repository@digest", or, only with images.allowTags, "repository:tag"
(the tag defaults to the appVersion). Call with
(dict "root" $ "name" "operator" "image" .Values.operator.image).
A release pins every image by digest (scripts/pin-images.sh writes them into values.yaml):
a tag can be moved to other content, and with IfNotPresent each node keeps what it pulled.
*/}}
{{- define "vramfit.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else if .root.Values.images.allowTags }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- else }}
{{- fail (printf "%s.image.digest is empty: a release pins each image by digest (its values.yaml holds them, written by scripts/pin-images.sh). Set %s.image.digest=sha256:<digest>, or images.allowTags=true to run %s by its tag alone (a development build)." .name .name .image.repository) }}
{{- end }}
{{- end }}

{{/*
The pod-level security context both components run with: a fixed non-root UID/GID
(65532, distroless "nonroot") and the RuntimeDefault seccomp profile.
*/}}
{{- define "vramfit.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container-level security context: nothing to escalate, nothing to write. */}}
{{- define "vramfit.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The operator's rules on InferenceJobs: in its ClusterRole when it watches every namespace,
in a Role per namespace of operator.watchNamespaces otherwise.
*/}}
{{- define "vramfit.operator.jobRules" -}}
# Watch jobs and write their status (plan, phase, conditions).
- apiGroups: ["vramfit.io"]
  resources: ["inferencejobs"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["vramfit.io"]
  resources: ["inferencejobs/status"]
  verbs: ["get", "patch"]
# Setting blockOwnerDeletion on the pods' owner reference needs this where the
# OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift).
- apiGroups: ["vramfit.io"]
  resources: ["inferencejobs/finalizers"]
  verbs: ["update"]
# serve.autoscaling: the replicas written as `kubectl scale` writes them, and the
# HorizontalPodAutoscalers (KEDA's included) read so as to stay out of a job one targets.
- apiGroups: ["vramfit.io"]
  resources: ["inferencejobs/scale"]
  verbs: ["patch"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list"]
# serve.inferencePool: the Gateway API Inference Extension's pool of each such job
# (server-side applied, owned by the job; a cluster without that CRD is told by an event).
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["create", "patch"]
# Served jobs: the Service named after each job and, from two replicas, its
# PodDisruptionBudget (server-side applied, owned by the job, watched to repair them).
# Groups (gpus.maxNodes above 1): a headless Service and a NetworkPolicy per running group,
# deleted once it no longer runs.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}

{{/* Checks across values that the JSON schema cannot express; fail with a clear message. */}}
{{- define "vramfit.validate" -}}
{{- if and (gt (int .Values.operator.replicas) 1) (not .Values.operator.leaderElection.enabled) }}
{{- fail (printf "operator.replicas is %d but operator.leaderElection.enabled is false: several operators without a Lease would write the same objects. Enable leader election or set operator.replicas to 1." (int .Values.operator.replicas)) }}
{{- end }}
{{- end }}
