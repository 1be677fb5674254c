#!/usr/bin/env bash
# Try migflex in kind, with simulated GPUs (no GPU, no driver needed):
#
#   1. creates a kind cluster with two worker nodes (or reuses it),
#   2. builds the migflex image and loads it into the nodes,
#   3. installs the Helm chart with the simulated backend: worker 1 gets a
#      simulated H100-SXM5-80GB, worker 2 an A100-SXM4-40GB,
#   4. partitions worker 1's H100 into seven 1g.10gb MIG devices through its
#      nvidia.com/mig.config annotation and waits for
#      nvidia.com/mig.config.state=success,
#   5. prints the node's Allocatable, creates a pod asking for a 2g.20gb
#      device (which no node has) and prints the fallback annotation the
#      webhook put on it ("2g.20gb->1g.10gb").
#
# Needs docker, kind, kubectl and helm (or Go, to build the pinned helm with
# deployments/hack/install-helm.sh). Settings, as environment variables:
#   CLUSTER_NAME  kind cluster name (default migflex)
#   IMAGE         image tag to build and load (default migflex:kind)
#   SKIP_BUILD=1  load IMAGE as it is instead of building it
#   KIND_NODE_IMAGE  kind node image of a new cluster (kind create cluster
#                 --image), e.g. kindest/node:v1.37.2; default: kind's own.
#                 The chart needs Kubernetes 1.35 or newer, which the script
#                 checks.
# Remove everything with: kind delete cluster --name "$CLUSTER_NAME"
set -euo pipefail

CLUSTER_NAME=${CLUSTER_NAME:-migflex}
IMAGE=${IMAGE:-migflex:kind}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
# The chart's kubeVersion (deployments/helm/migflex/Chart.yaml).
MIN_MINOR=35
NAMESPACE=gpu-webhook
DEMO_NAMESPACE=migflex-demo
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBE_CONTEXT=kind-$CLUSTER_NAME
WORKER=$CLUSTER_NAME-worker
WORKER2=$CLUSTER_NAME-worker2

log() { printf '\n==> %s\n' "$*"; }
die() { echo "kind-up.sh: $*" >&2; exit 1; }
k() { kubectl --context "$KUBE_CONTEXT" "$@"; }

for tool in docker kind kubectl; do
	command -v "$tool" >/dev/null || die "$tool is required (https://kind.sigs.k8s.io/docs/user/quick-start/)"
done
if command -v helm >/dev/null; then
	HELM=$(command -v helm)
elif command -v go >/dev/null; then
	HELM=$("$ROOT/deployments/hack/install-helm.sh")
else
	die "helm is required (https://helm.sh/docs/intro/install/), or Go to build it"
fi

# The image name splits into repository and tag for the chart.
[[ $IMAGE == *:* ]] || die "IMAGE must have a tag, e.g. migflex:kind"
IMAGE_REPOSITORY=${IMAGE%:*}
IMAGE_TAG=${IMAGE##*:}

log "kind cluster $CLUSTER_NAME"
# Not `kind get clusters | grep -q`: with pipefail, grep quitting early can
# fail the pipeline.
clusters=$(kind get clusters 2>/dev/null)
if grep -qx "$CLUSTER_NAME" <<<"$clusters"; then
	echo "exists; reusing it"
else
	image_args=()
	[[ -z $KIND_NODE_IMAGE ]] || image_args=(--image "$KIND_NODE_IMAGE")
	# kind's nodes use the host's cgroups. On a cgroup v1 host the kubelet
	# of 1.35 and later refuses to start unless failCgroupV1 is false
	# (kind does not set it); on a cgroup v2 host nothing is patched.
	patches=
	if [[ $(docker info -f '{{.CgroupVersion}}' 2>/dev/null) == 1 ]]; then
		echo "the Docker host runs cgroup v1: the kubelets get failCgroupV1: false"
		patches='kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false'
	fi
	kind create cluster --name "$CLUSTER_NAME" "${image_args[@]}" --wait 120s --config - <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
$patches
nodes:
- role: control-plane
- role: worker
- role: worker
YAML
fi
for node in "$WORKER" "$WORKER2"; do
	k get node "$node" >/dev/null || die "node $node not found: is $CLUSTER_NAME a cluster this script created?"
done

# kind's default node image depends on the kind release; the chart refuses
# clusters older than 1.35. minor reads "35" or, on some builds, "35+".
version_json=$(k version -o json) || die "cannot reach the API server of $CLUSTER_NAME"
minor=$(sed -n '/"serverVersion"/,/}/s/^ *"minor": *"\([0-9]*\).*/\1/p' <<<"$version_json")
[[ $minor =~ ^[0-9]+$ ]] || die "cannot read the server version of $CLUSTER_NAME (kubectl version -o json)"
if ((minor < MIN_MINOR)); then
	die "$CLUSTER_NAME runs Kubernetes 1.$minor; migflex needs 1.$MIN_MINOR or newer. Delete it (kind delete cluster --name $CLUSTER_NAME) and set KIND_NODE_IMAGE to a newer node image, e.g. KIND_NODE_IMAGE=kindest/node:v1.37.2"
fi

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	log "building $IMAGE"
	docker build -t "$IMAGE" "$ROOT"
fi
log "loading $IMAGE into the nodes"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

log "installing migflex (simulated GPUs) into namespace $NAMESPACE"
# Only the workers simulate GPUs; the label keeps the agent off the
# control plane.
k label node "$WORKER" "$WORKER2" migflex.io/simulated-gpus=true --overwrite
k create namespace "$NAMESPACE" --dry-run=client -o yaml | k apply -f -
# The agent mounts host paths: let Pod Security admit it.
k label namespace "$NAMESPACE" pod-security.kubernetes.io/enforce=privileged --overwrite
"$HELM" upgrade --install migflex "$ROOT/deployments/helm/migflex" \
	--kube-context "$KUBE_CONTEXT" --namespace "$NAMESPACE" \
	--set backend=simulated \
	--set image.repository="$IMAGE_REPOSITORY" --set image.tag="$IMAGE_TAG" --set image.pullPolicy=Never \
	--set-string 'agent.nodeSelector.migflex\.io/simulated-gpus=true' \
	--set-json 'simulator.gpus=[{"model":"H100-SXM5-80GB","count":1}]' \
	--set-json "simulator.nodes={\"$WORKER2\":{\"gpus\":[{\"model\":\"A100-SXM4-40GB\",\"count\":1}]}}" \
	--wait --timeout 5m
k rollout status daemonset/migflex-agent -n "$NAMESPACE" --timeout=180s
k rollout status deployment/gpu-webhook -n "$NAMESPACE" --timeout=180s

log "partitioning $WORKER's H100 into 7x 1g.10gb"
k annotate node "$WORKER" --overwrite nvidia.com/mig.config='
version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.10gb: 7
'
if ! k wait "node/$WORKER" --for=jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'=success --timeout=180s; then
	echo "state: $(k get node "$WORKER" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}')" >&2
	echo "reason: $(k get node "$WORKER" -o jsonpath='{.metadata.annotations.migflex\.io/mig\.config\.reason}')" >&2
	k logs -n "$NAMESPACE" -l app=migflex-agent --tail=50 >&2 || true
	die "$WORKER did not reach nvidia.com/mig.config.state=success"
fi
# The kubelet publishes the devices the agent now serves.
k wait "node/$WORKER" --for=jsonpath='{.status.allocatable.nvidia\.com/mig-1g\.10gb}'=7 --timeout=120s

log "$WORKER Allocatable"
k get node "$WORKER" -o jsonpath='{.status.allocatable}'
echo

log "a pod asking for nvidia.com/mig-2g.20gb, which no node has"
k create namespace "$DEMO_NAMESPACE" --dry-run=client -o yaml | k apply -f -
k delete pod fallback-demo -n "$DEMO_NAMESPACE" --ignore-not-found --wait
# The migflex image is already on the nodes: the pod runs its `models`
# subcommand and exits, no other image to pull.
pod_yaml="apiVersion: v1
kind: Pod
metadata:
  name: fallback-demo
  namespace: $DEMO_NAMESPACE
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: [/device-plugin, models]
    resources:
      limits:
        nvidia.com/mig-2g.20gb: 1"
# The webhook decides from its informers' copy of the Nodes: wait until it
# has seen the new allocatable, asking with server-side dry runs (they
# store nothing), so the pod below is not rewritten to a stale choice.
for ((i = 0; i < 60; i++)); do
	ann=$(k create --dry-run=server -o jsonpath='{.metadata.annotations.gpu-webhook\.k8s\.io/fallback}' -f - <<<"$pod_yaml" 2>/dev/null) || ann=
	[[ $ann == *1g.10gb* ]] && break
	sleep 1
done
k apply -f - <<<"$pod_yaml"
fallback=$(k get pod fallback-demo -n "$DEMO_NAMESPACE" -o jsonpath='{.metadata.annotations.gpu-webhook\.k8s\.io/fallback}')
echo "gpu-webhook.k8s.io/fallback: ${fallback:-<none>}"
echo "limits: $(k get pod fallback-demo -n "$DEMO_NAMESPACE" -o jsonpath='{.spec.containers[0].resources.limits}')"
[[ -n $fallback ]] || {
	k logs -n "$NAMESPACE" -l app=gpu-webhook --tail=50 >&2 || true
	die "the webhook did not rewrite the pod"
}

cat <<EOF

migflex is running in kind cluster $CLUSTER_NAME (kubectl context $KUBE_CONTEXT).
  kubectl get nodes -L nvidia.com/mig.config.state,nvidia.com/gpu.product
  kubectl logs -n $NAMESPACE -l app=gpu-webhook
  kubectl exec -n $NAMESPACE ds/migflex-agent -- /device-plugin sim show
Remove it all: kind delete cluster --name $CLUSTER_NAME
EOF
