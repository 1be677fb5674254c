{{/*
Fixed object names: the seed FAQ's commands name them, and cluster-scoped
objects (the MutatingWebhookConfiguration, ClusterRoles) exist once per
cluster anyway.
*/}}
{{- define "migflex.webhookName" -}}gpu-webhook{{- end }}
{{- define "migflex.webhookConfigName" -}}gpu-allocation-webhook{{- end }}
{{- define "migflex.agentName" -}}migflex-agent{{- end }}
{{- define "migflex.certgenName" -}}migflex-certgen{{- end }}
{{- define "migflex.plannerName" -}}migflex-planner{{- end }}

{{/*
"true" when the webhook runs reshape-first: webhook.reshapeFirst true, or
auto with the planner enabled and not in dry run.
*/}}
{{- define "migflex.reshapeFirst" -}}
{{- $r := toString .Values.webhook.reshapeFirst -}}
{{- if or (eq $r "true") (and (eq $r "auto") .Values.planner.enabled (not .Values.planner.dryRun)) -}}true{{- end -}}
{{- end }}

{{- define "migflex.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Labels of every object. Call with (dict "ctx" $ "component" "agent").
*/}}
{{- define "migflex.labels" -}}
app.kubernetes.io/name: migflex
app.kubernetes.io/part-of: migflex
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The simulator config of one pool: (dict "ctx" $ "gpus" LIST "nodes" MAP).
*/}}
{{- define "migflex.simConfig" -}}
{{- $sim := .ctx.Values.simulator -}}
{{- $cfg := dict "version" "v1" "gpus" .gpus "stateDir" $sim.stateDir -}}
{{- with .nodes }}{{ $_ := set $cfg "nodes" . }}{{ end -}}
{{- with $sim.models }}{{ $_ := set $cfg "models" . }}{{ end -}}
{{- with $sim.operationDelay }}{{ $_ := set $cfg "operationDelay" . }}{{ end -}}
{{- with $sim.faults }}{{ $_ := set $cfg "faults" . }}{{ end -}}
{{ toYaml $cfg }}
{{- end }}

{{/*
The architectures migflex's image is built for (the Dockerfile: amd64 and
arm64, for Grace nodes). Every pod of the chart requires a node of one of
them unless its affinity value replaces the default affinity.
*/}}
{{- define "migflex.archAffinity" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - {{ include "migflex.archExpression" . }}
{{- end }}
{{- define "migflex.archExpression" -}}
{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
{{- end }}
