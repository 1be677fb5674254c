{{/*
The release notes (NOTES.txt), as a named template so that a test can render
them (helm template leaves NOTES.txt out).
*/}}
{{- define "migflex.notes" -}}
{{- if ne .Release.Namespace "gpu-webhook" -}}
WARNING: migflex is installed in namespace {{ .Release.Namespace }}, not gpu-webhook.
It works there, but the troubleshooting commands in migflex's documentation
name gpu-webhook (kubectl logs -n gpu-webhook -l app=gpu-webhook, ...): use
-n {{ .Release.Namespace }} instead. Object names are fixed in any namespace,
so migflex is installed once per cluster.

{{ end -}}
migflex {{ .Chart.AppVersion }} is installed in namespace {{ .Release.Namespace }} (backend: {{ .Values.backend }}).

Partition a node's GPUs:
  kubectl annotate node NODE nvidia.com/mig.config='
  version: v1
  mig-configs:
    selected:
    - devices: all
      mig-enabled: true
      mig-devices: {"2g.20gb": 3}' --overwrite
  kubectl get node NODE -L nvidia.com/mig.config.state
  kubectl get node NODE -o jsonpath='{.status.allocatable}'
{{- if .Values.webhook.enabled }}

The fallback webhook (MutatingWebhookConfiguration {{ include "migflex.webhookConfigName" . }}):
  kubectl get pods -n {{ .Release.Namespace }} -l app=gpu-webhook
  kubectl logs -n {{ .Release.Namespace }} -l app=gpu-webhook
A pod it rewrote carries the annotation gpu-webhook.k8s.io/fallback ("2g.20gb->1g.10gb").
Opt a namespace or pod out with the label migflex.io/fallback=disabled.
{{- end }}
{{- if eq .Values.certificates.mode "certgen" }}

The webhook's certificate is in Secret {{ .Values.certificates.secretName }}, made by the
migflex-certgen Jobs and owned by {{ include "migflex.webhookConfigName" . }}: helm uninstall deletes it with that.
{{- end }}
{{- end }}
