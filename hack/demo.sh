#!/usr/bin/env bash
# make demo: migflex's main job on a real (local) Kubernetes, as root, as a
# narrated terminal session.
#
# It builds what is needed (bin/, the pinned Kubernetes binaries, the
# images), brings up the local cluster of hack/cluster with its three nodes
# (a demo cluster already up is torn down and brought up again, so every
# run starts from the same state), installs migflex with simulated GPUs
# from deployments/kustomize/overlays/local (node 1: two H100-SXM5-80GB
# through the device plugin; mf-dra: two A100-SXM4-80GB through DRA;
# mf-b200: one B200-180GB through the device plugin), and then shows with
# plain kubectl: node 1's allocatable before and after `kubectl annotate
# node ... nvidia.com/mig.config=...` with a different layout for each GPU,
# and a pod asking for a MIG profile no node has, rewritten by the fallback
# webhook, running on the profile node 1 has; then, with the planner
# installed (overlays/local-planner), a pod for a profile no node has
# running on a GPU the planner reshaped for it, with the Events and the
# time it took; then `kubectl migflex explain` on that pod and `kubectl
# migflex status`, the plugin from bin/. Last, the DRA node: its layout as
# a ResourceSlice, a pod with an unchanged nvidia.com/mig-* request served
# through a ResourceClaim, and the planner's reshape for a pod the layout
# cannot serve, timed beside the device-plugin path's; then the DRA node's
# driver in dynamic mode: every placement offered with the GPUs' counters,
# and an unchanged nvidia.com/mig-3g.40gb pod running on the instance its
# claim's Prepare made, with `kubectl migflex status`. With NODES=1 the
# cluster has node 1 alone, and the DRA part is left out.
# The cluster stays up to explore; hack/cluster/down.sh (make cluster-down)
# tears it down.
#
# Nothing leaves this machine: see "Network safety" in hack/cluster/README.md.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root: it runs a kubelet and changes host networking while the cluster is up (see hack/cluster/README.md)"
cd "$ROOT"

KUBECTL=$K8S_BIN/kubectl
NS=default
POD=fallback-demo
PLANNER_POD=planner-demo
DRA_POD=dra-demo
DRA_PLANNER_POD=planner-dra-demo
DYN_POD=dra-dynamic-demo
STEP="starting"

finish() {
	local rc=$?
	trap - EXIT
	if [[ $rc -ne 0 ]]; then
		{
			echo
			echo "demo failed (exit $rc) while: $STEP"
			if [[ -n $(pid_of kube-apiserver) ]]; then
				echo "The cluster is still up, to look around:"
				echo "  export KUBECONFIG=$KUBECONFIG_ADMIN"
				echo "  $KUBECTL get pods -A; $KUBECTL describe node $NODE_NAME"
			fi
			echo "Component logs: $LOG_DIR"
			echo "Tear down with: make cluster-down   (or hack/cluster/down.sh)"
		} >&2
	fi
	exit "$rc"
}
trap finish EXIT

# Bold headers and cyan commands on a terminal only.
bold='' cyan='' plain=''
if [[ -t 1 ]]; then bold=$'\033[1m' cyan=$'\033[36m' plain=$'\033[0m'; fi
# step <what>: a section header.
step() {
	STEP=$1
	printf '\n%s==> %s%s\n' "$bold" "$1" "$plain"
}
# run <command>: shows the command as a user would type it, then runs
# exactly that text. kubectl is lib.sh's function: the pinned kubectl with
# the cluster's admin kubeconfig.
run() {
	printf '\n%s$ %s%s\n' "$cyan" "$1" "$plain"
	eval "$1"
}

# The device-plugin and DRA parts below wait and show alike:
# poll <tries> <command...>: runs the command every 0.5 s until it
# succeeds, at most tries times; fails when it never did.
poll() {
	local tries=$1 i
	shift
	for ((i = 0; i < tries; i++)); do
		"$@" && return 0
		sleep 0.5
	done
	return 1
}
# admits <pod yaml> <how>: whether the webhook admits the pod as how says:
# rewritten (a fallback annotated), reshape (left as asked, for the
# planner) or as-is (neither). The webhook decides from its informers'
# copies of the Nodes and slices, which trail the cluster: a server-side
# dry run, which stores nothing, says what it does now.
admits() {
	local ann
	ann=$(kubectl create --dry-run=server -o jsonpath='{.metadata.annotations}' -f - <<<"$1" 2>/dev/null) || return 1
	case $2 in
	rewritten) [[ $ann == *gpu-webhook.k8s.io/fallback* ]] ;;
	reshape) [[ $ann == *migflex.io/reshape* ]] ;;
	as-is) [[ $ann != *gpu-webhook.k8s.io/fallback* && $ann != *migflex.io/reshape* ]] ;;
	*) die "admits: no such case $2" ;;
	esac
}
# wait_admits <pod yaml> <how> <failure>: waits up to 30 s until the
# webhook admits the pod as how says (admits), or dies with failure.
wait_admits() {
	poll 60 admits "$1" "$2" || die "$3 (kubectl -n gpu-webhook logs -l app=gpu-webhook)"
}
# apply_pod <pod yaml>: creates the pod, the command shown as typed.
apply_pod() {
	run "kubectl apply -f - <<EOF
$1
EOF"
}
# wait_phase <pod> <phase> <timeout>: waits for the pod's phase.
wait_phase() {
	run "kubectl wait --for=jsonpath='{.status.phase}'=$2 pod/$1 --timeout=$3"
}
# run_timed <pod yaml> <pod> <timeout>: creates the pod and waits until it
# runs; TOOK_MS is how long that took from the apply, in ms.
run_timed() {
	local start
	start=$(date +%s%N)
	apply_pod "$1"
	wait_phase "$2" Running "$3"
	TOOK_MS=$((($(date +%s%N) - start) / 1000000))
}
# secs <ms>: "1.234 s".
secs() { printf '%d.%03d s' $(($1 / 1000)) $(($1 % 1000)); }
# wait_applied <node>: waits for the node's layout to be in place.
wait_applied() {
	run "kubectl wait --for=jsonpath='{.metadata.labels.nvidia\.com/mig\.config\.state}'=success node/$1 --timeout=180s"
}
# hand_to_planner <node>: the layout set by hand would keep the planner
# off the node for 10 minutes (--manual-hold): removing the annotation
# hands the node over at once (the GPUs keep their layout, the agent says
# so), and the label opts it in.
hand_to_planner() {
	run "kubectl annotate node $1 nvidia.com/mig.config-"
	run "kubectl label node $1 --overwrite migflex.io/planner=enabled"
}
# planned_events <pod>: the planner's MigReshapePlanned Events on the pod.
planned_events() {
	run "kubectl get events --field-selector involvedObject.name=$1,reason=MigReshapePlanned -o custom-columns=REASON:.reason,MESSAGE:.message"
}
# claim_of <pod>: the ResourceClaim made for the pod's extended resources
# (extendedResourceClaimStatus); empty when it is not served through DRA.
claim_of() {
	kubectl get pod "$1" -o jsonpath='{.status.extendedResourceClaimStatus.resourceClaimName}'
}

# --- build -------------------------------------------------------------------
step "Building migflex (bin/), the pinned Kubernetes $K8S_VERSION and containerd $CONTAINERD_VERSION binaries (cold: minutes, then cached) and the images"
run "make build"
"$HACK_CLUSTER/build.sh"
"$HACK_CLUSTER/images.sh"

# --- cluster -------------------------------------------------------------------
running=()
for c in $(all_components); do
	[[ -z $(pid_of "$c") ]] || running+=("$c")
done
if ((${#running[@]})); then
	step "A local cluster is already up (${running[*]}): tearing it down to start clean"
	"$HACK_CLUSTER/down.sh"
fi
step "Bringing up a local cluster of $NODES nodes (etcd, kube-apiserver, controller-manager, scheduler; each node a containerd and a kubelet)"
"$HACK_CLUSTER/up.sh"
export KUBECONFIG=$KUBECONFIG_ADMIN
NODE=$NODE_NAME
DRA_NODE=
((NODES < 2)) || DRA_NODE=$(extra_node_name 2)
echo
echo "Below, kubectl is $KUBECTL (Kubernetes $K8S_VERSION) with KUBECONFIG=$KUBECONFIG_ADMIN."
run "kubectl get nodes -o wide -L migflex.io/serve"

# --- install -------------------------------------------------------------------
step "Installing migflex with simulated GPUs from its manifests"
run "kubectl apply -k deployments/kustomize/overlays/local"
run "kubectl -n gpu-webhook wait --for=condition=Complete job/migflex-certgen --timeout=180s"
run "kubectl -n gpu-webhook rollout status daemonset/migflex-agent --timeout=180s"
[[ -z $DRA_NODE ]] || run "kubectl -n gpu-webhook rollout status daemonset/migflex-agent-dra --timeout=180s"
run "kubectl -n gpu-webhook rollout status deployment/gpu-webhook --timeout=180s"
run "kubectl -n gpu-webhook get pods -o wide"

# --- before ------------------------------------------------------------------
step "BEFORE: every node's GPUs as its agent reports them, and node $NODE's two as its kubelet serves them (MIG off: two whole GPUs)"
# The kubelet puts the agent's first registration into the Node status
# within its next status update.
run "kubectl wait --for=jsonpath='{.status.allocatable.nvidia\.com/gpu}'=2 node/$NODE --timeout=120s"
run "kubectl get nodes -L migflex.io/serving -L nvidia.com/gpu.product -L nvidia.com/gpu.count -L nvidia.com/mig.config.state"
run "kubectl describe node $NODE | sed -n '/^Allocatable:/,/^System Info:/p'"

# --- the layout ----------------------------------------------------------------
step "Partitioning the GPUs, in mig-parted's format: GPU 0 into one 3g.40gb and four 1g.10gb, GPU 1 into one 7g.80gb"
run "kubectl annotate node $NODE --overwrite nvidia.com/mig.config='
version: v1
mig-configs:
  selected:
  - devices: [0]
    mig-enabled: true
    mig-devices:
      3g.40gb: 1
      1g.10gb: 4
  - devices: [1]
    mig-enabled: true
    mig-devices:
      7g.80gb: 1
'"
# success means the kubelet has put the new layout into the Node's
# allocatable too: a pod can be scheduled on it from here on.
wait_applied "$NODE"

step "AFTER: the kubelet serves the MIG profiles (the whole GPUs read 0 now)"
run "kubectl get node $NODE -L nvidia.com/mig.config.state -L nvidia.com/mig-7g.80gb.count -L nvidia.com/mig-3g.40gb.count -L nvidia.com/mig-1g.10gb.count"
run "kubectl describe node $NODE | sed -n '/^Allocatable:/,/^System Info:/p'"
run "kubectl get events --field-selector involvedObject.kind=Node,reason=MigConfigApplied"

# --- the fallback --------------------------------------------------------------
step "A pod asks for nvidia.com/mig-2g.20gb, which no node has"
pod_yaml="apiVersion: v1
kind: Pod
metadata:
  name: $POD
  namespace: $NS
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: lc.local/testbox:1
    imagePullPolicy: Never
    args: [env]
    resources:
      limits:
        nvidia.com/mig-2g.20gb: 1"
# The webhook must have seen the new allocatable.
wait_admits "$pod_yaml" rewritten "the fallback webhook does not rewrite the demo pod"
apply_pod "$pod_yaml"
wait_phase "$POD" Succeeded 120s

step "The webhook rewrote it to the nearest profile a node has, node $NODE's 1g.10gb, and it ran there"
run "kubectl get pod $POD -o jsonpath='{.metadata.annotations.gpu-webhook\.k8s\.io/fallback}{\"\\n\"}'"
run "kubectl get pod $POD -o jsonpath='{.spec.containers[0].resources}{\"\\n\"}'"
run "kubectl get pod $POD -o wide"
run "kubectl logs $POD | grep -E '^(NVIDIA_VISIBLE_DEVICES|MIGFLEX_)'"
# Two replicas: whichever answered logged the rewrite (--tail=-1: with a
# selector kubectl shows only the last 10 lines of each pod).
run "kubectl -n gpu-webhook logs -l app=gpu-webhook --tail=-1 | grep 'Rewrote GPU request' | grep -v 'dryRun=true'"

# --- the planner ---------------------------------------------------------------
step "The planner (off by default): installing it, and handing the node over to it"
old_webhook=$(kubectl -n gpu-webhook get pods -l app=gpu-webhook -o jsonpath='{.items[*].metadata.labels.pod-template-hash}')
run "kubectl apply -k deployments/kustomize/overlays/local-planner"
run "kubectl -n gpu-webhook rollout status deployment/migflex-planner --timeout=180s"
run "kubectl -n gpu-webhook rollout status deployment/gpu-webhook --timeout=180s"
# The webhook's replicas share one port: the old ones (not reshape-first)
# answer admissions until they are gone (preStop, then their drain).
webhook_gone() { [[ -z $(kubectl -n gpu-webhook get pods -l "app=gpu-webhook,pod-template-hash=$1" -o name) ]]; }
for hash in $(tr ' ' '\n' <<<"$old_webhook" | sort -u); do
	poll 120 webhook_gone "$hash" || true
done
hand_to_planner "$NODE"

step "A pod asks for nvidia.com/mig-2g.20gb again: the webhook, now reshape-first, leaves it as asked, and the planner reshapes a free GPU for it"
planner_pod="apiVersion: v1
kind: Pod
metadata:
  name: $PLANNER_POD
  namespace: $NS
spec:
  containers:
  - name: main
    image: lc.local/testbox:1
    imagePullPolicy: Never
    args: [sleep, '3600']
    resources:
      limits:
        nvidia.com/mig-2g.20gb: 1"
# The webhook's copy of the Node, rebuilt at most every second, must show
# the node opted in.
wait_admits "$planner_pod" reshape "the reshape-first webhook rewrites the demo pod"
run_timed "$planner_pod" "$PLANNER_POD" 180s
dp_took_ms=$TOOK_MS
limits=$(kubectl get pod "$PLANNER_POD" -o jsonpath='{.spec.containers[0].resources.limits}')
[[ $limits == *mig-2g.20gb* ]] || die "the demo pod runs with $limits, not the nvidia.com/mig-2g.20gb it asked for"
printf '\n%sThe pod was Running %s after kubectl apply began (the agent writes the new counts into the Node allocatable once the kubelet holds the devices, --publish-allocatable; without it the scheduler waits for the next node status update of the kubelet, every 10 s by default).%s\n' "$bold" "$(secs "$dp_took_ms")" "$plain"

step "What happened: the planner's Event on the pod, the agent's on the node, the new layout"
run "kubectl get pod $PLANNER_POD -o jsonpath='{.metadata.annotations.migflex\\.io/reshape}{\"\\n\"}'"
run "kubectl get pod $PLANNER_POD -o jsonpath='{.spec.containers[0].resources.limits}{\"\\n\"}'"
planned_events "$PLANNER_POD"
run "kubectl get events --field-selector involvedObject.kind=Node,reason=MigConfigApplied --sort-by=.lastTimestamp -o custom-columns=REASON:.reason,MESSAGE:.message | tail -n 1"
run "kubectl get node $NODE -o jsonpath='{.metadata.annotations.nvidia\.com/mig\.config}'"
run "kubectl get node $NODE -L nvidia.com/mig.config.state -L nvidia.com/mig-2g.20gb.count"

# --- kubectl migflex -----------------------------------------------------------
# kubectl finds the plugin, bin/kubectl-migflex, on PATH. Its plugin lookup
# stops at the first flag, so `kubectl migflex` runs the pinned kubectl
# without lib.sh's --kubeconfig (KUBECONFIG is exported above).
export PATH=$ROOT/bin:$PATH
kubectl() {
	if [[ ${1:-} == migflex ]]; then "$KUBECTL" "$@"; else "$K8S_BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; fi
}
step "kubectl migflex: the node's GPUs, instances and the pods holding them, and why the planner's pod runs where it does"
run "kubectl migflex explain $PLANNER_POD"
run "kubectl migflex status"

# --- DRA -----------------------------------------------------------------------
# Node $DRA_NODE serves through Dynamic Resource Allocation from the start:
# the overlay's DRA pool (migflex-agent-dra on the nodes labelled
# migflex.io/serve=dra, as the chart's agent.draNodeSelector makes it), with
# the DeviceClasses, the agent's DRA permissions and the policy that limits
# them to its node's ResourceSlices.
if [[ -n $DRA_NODE ]]; then
step "DRA: node $DRA_NODE serves its two A100-SXM4-80GB through DRA, beside node $NODE's device plugin (pods keep their nvidia.com/mig-* requests)"
run "kubectl get nodes -L migflex.io/serve -L migflex.io/serving"
run "kubectl -n gpu-webhook get daemonsets -o wide"
# 60 DeviceClasses (one per MIG profile of every supported model, one for
# whole GPUs, general ones for claims that select by CEL): only the last
# lines of kubectl's list are shown.
run "kubectl get deviceclasses | tail -n 5"

# Both GPUs alike: the planner may change either for the reshape below.
step "DRA: a layout set by hand on node $DRA_NODE, each GPU one 3g.40gb and four 1g.10gb; the agent publishes it as a ResourceSlice, one device per MIG instance"
run "kubectl annotate node $DRA_NODE --overwrite nvidia.com/mig.config='
version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices:
      3g.40gb: 1
      1g.10gb: 4
'"
# The state label may still read success from the layout before: wait for
# the slice to list this one (success on a DRA node means it does).
want=$(printf '%s\n' 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 3g.40gb 3g.40gb)
# slice_lists <profiles>: whether the slice lists them (got: what it lists).
slice_lists() {
	got=$(kubectl get resourceslices --field-selector spec.nodeName="$DRA_NODE" -o jsonpath='{range .items[*].spec.devices[*]}{.attributes.profile.string}{"\n"}{end}' | sort)
	[[ $got == "$1" ]]
}
poll 240 slice_lists "$want" || die "the ResourceSlice lists $(tr '\n' ' ' <<<"$got"), not the layout set by hand"
wait_applied "$DRA_NODE"
run "kubectl get resourceslices"
run "kubectl get resourceslices --field-selector spec.nodeName=$DRA_NODE -o jsonpath='{range .items[*].spec.devices[*]}{.name}{\"\\t\"}{.attributes.profile.string}{\"\\t\"}{.attributes.uuid.string}{\"\\n\"}{end}'"
run "kubectl get deviceclasses migflex.io gpu.migflex.io mig-1g.10gb.migflex.io mig-2g.20gb.migflex.io mig-3g.40gb.migflex.io -o custom-columns=NAME:.metadata.name,EXTENDED-RESOURCE:.spec.extendedResourceName"

step "DRA: a pod for node $DRA_NODE with an unchanged spec (limits: nvidia.com/mig-1g.10gb: 1) runs, served through a ResourceClaim"
dra_pod="apiVersion: v1
kind: Pod
metadata:
  name: $DRA_POD
  namespace: $NS
spec:
  restartPolicy: Never
  nodeSelector:
    kubernetes.io/hostname: $DRA_NODE
  containers:
  - name: main
    image: lc.local/testbox:1
    imagePullPolicy: Never
    args: [env]
    resources:
      limits:
        nvidia.com/mig-1g.10gb: 1"
# The webhook reads the node's supply from its informer's copy of the
# slices: it must let the pod through as it is.
wait_admits "$dra_pod" as-is "the webhook does not admit the DRA demo pod as it is"
apply_pod "$dra_pod"
wait_phase "$DRA_POD" Succeeded 120s
run "kubectl get pod $DRA_POD -o jsonpath='{.status.extendedResourceClaimStatus}{\"\\n\"}'"
[[ -n $(claim_of "$DRA_POD") ]] || die "the DRA demo pod has no extendedResourceClaimStatus: not served through DRA"
run "kubectl logs $DRA_POD | grep -E '^NVIDIA_VISIBLE_DEVICES'"
run "kubectl delete pod $DRA_POD"

step "DRA: the planner reshapes node $DRA_NODE for a pod asking for nvidia.com/mig-2g.20gb, as it did on the device-plugin path"
hand_to_planner "$DRA_NODE"
dra_planner_pod=${planner_pod//$PLANNER_POD/$DRA_PLANNER_POD}
dra_planner_pod=${dra_planner_pod/spec:/spec:
  nodeSelector:
    kubernetes.io/hostname: $DRA_NODE}
wait_admits "$dra_planner_pod" reshape "the reshape-first webhook leaves the DRA demo pod to the planner"
run_timed "$dra_planner_pod" "$DRA_PLANNER_POD" 180s
dra_took_ms=$TOOK_MS
[[ -n $(claim_of "$DRA_PLANNER_POD") ]] || die "the DRA planner demo pod runs without a claim: not served through DRA"
printf '\n%sPlanner reshape, kubectl apply to Running: DRA %s; device plugin (above) %s. On DRA the scheduler sees the new device when the agent republishes the ResourceSlice; on the device-plugin path when the agent writes the allocatable the kubelet holds (--publish-allocatable), not at the next status update of the kubelet.%s\n' \
	"$bold" "$(secs "$dra_took_ms")" "$(secs "$dp_took_ms")" "$plain"
planned_events "$DRA_PLANNER_POD"
run "kubectl get pod $DRA_PLANNER_POD -o jsonpath='{.status.extendedResourceClaimStatus}{\"\\n\"}'"
run "kubectl get resourceslices --field-selector spec.nodeName=$DRA_NODE -o jsonpath='{range .items[*].spec.devices[*]}{.name}{\"\\t\"}{.attributes.profile.string}{\"\\n\"}{end}'"

# Dynamic mode (docs/DRA.md): the driver offers every placement the GPUs
# could make, with shared counters so the scheduler never allocates two
# that overlap, and makes the instance at the claim's Prepare. It applies
# no layout, so the planner's mig.config goes first; the planner never
# changes a dynamic GPU, so the node leaves it too.
step "DRA dynamic mode: node $DRA_NODE's driver switched to --dra-mode=dynamic (Helm agent.draMode=dynamic); it applies no layout, so the node's mig.config and the planner's hold on it go first"
run "kubectl delete pod $DRA_PLANNER_POD"
run "kubectl annotate node $DRA_NODE nvidia.com/mig.config-"
run "kubectl label node $DRA_NODE migflex.io/planner-"
run "kubectl -n gpu-webhook patch daemonset migflex-agent-dra --type json -p '[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/args/-\", \"value\": \"--dra-mode=dynamic\"}]'"
run "kubectl -n gpu-webhook rollout status daemonset/migflex-agent-dra --timeout=180s"
run "kubectl wait --for=jsonpath='{.metadata.labels.migflex\.io/dra-mode}'=dynamic node/$DRA_NODE --timeout=120s"
# The new driver destroys the idle instances of the layout before, then
# publishes the placements: 26 devices per A100 (25 placements and the
# whole GPU), all of them once no instance is left.
# dynamic_published: whether the slices offer counters and the 52
# devices (counters, devices: what they offer).
dynamic_published() {
	counters=$(kubectl get resourceslices --field-selector spec.nodeName="$DRA_NODE" -o jsonpath='{.items[*].spec.sharedCounters[*].name}')
	devices=$(kubectl get resourceslices --field-selector spec.nodeName="$DRA_NODE" -o jsonpath='{range .items[*].spec.devices[*]}{.name}{"\n"}{end}' | grep -c . || true)
	[[ -n $counters && $devices == 52 ]]
}
poll 240 dynamic_published || die "node $DRA_NODE's slices do not offer dynamic mode's placements (counter sets: '$counters', $devices devices, want 52)"

step "DRA dynamic mode: the slices offer every profile at every placement, each consuming its GPU's counters; no instance exists yet"
run "kubectl get resourceslices --field-selector spec.nodeName=$DRA_NODE"
run "kubectl get resourceslices --field-selector spec.nodeName=$DRA_NODE -o jsonpath='{range .items[*].spec.sharedCounters[*]}{.name}{\": \"}{.counters}{\"\\n\"}{end}'"
run "kubectl get resourceslices --field-selector spec.nodeName=$DRA_NODE -o jsonpath='{range .items[*].spec.devices[*]}{.name}{\"\\t\"}{.attributes.profile.string}{\"\\n\"}{end}' | grep -E 'gpu-0-mig-(3g40gb|7g80gb)|^gpu-0\\s'"
run "kubectl migflex status $DRA_NODE"

step "DRA dynamic mode: a pod with an unchanged spec (limits: nvidia.com/mig-3g.40gb: 1) runs on an instance its claim's Prepare made"
dyn_pod="apiVersion: v1
kind: Pod
metadata:
  name: $DYN_POD
  namespace: $NS
spec:
  nodeSelector:
    kubernetes.io/hostname: $DRA_NODE
  containers:
  - name: main
    image: lc.local/testbox:1
    imagePullPolicy: Never
    args: [sleep, '3600']
    resources:
      limits:
        nvidia.com/mig-3g.40gb: 1"
# As above: the webhook lets it through as it is once its copy of the
# slices shows the node can make a 3g.40gb.
wait_admits "$dyn_pod" as-is "the webhook does not admit the dynamic-mode demo pod as it is"
run_timed "$dyn_pod" "$DYN_POD" 120s
dyn_took_ms=$TOOK_MS
claim=$(claim_of "$DYN_POD")
[[ -n $claim ]] || die "the dynamic-mode demo pod runs without a claim: not served through DRA"
printf '\n%sRunning %s after kubectl apply began, with no layout asked for: the instance was made at Prepare.%s\n' "$bold" "$(secs "$dyn_took_ms")" "$plain"
# The driver writes status.devices just after Prepare answers.
prepared() { [[ -n $(kubectl get resourceclaim "$1" -o jsonpath='{.status.devices[*].data.uuid}') ]]; }
poll 40 prepared "$claim" || true
run "kubectl get resourceclaim $claim -o jsonpath='{range .status.allocation.devices.results[*]}allocated: {.device}{\"\\n\"}{end}{range .status.devices[*]}status.devices: {.data}{\"\\n\"}{end}'"
run "kubectl exec $DYN_POD -- /testbox env | grep -E '^NVIDIA_VISIBLE_DEVICES'"
# The agent reads the GPUs again once its in-use poll (every 2 s) finds
# the pod on an instance it has not seen: then its layout names both.
layout_names() { [[ $(kubectl get node "$DRA_NODE" -o jsonpath='{.metadata.annotations.migflex\.io/mig\.layout}') == *"$1"* ]]; }
poll 60 layout_names "$NS/$DYN_POD" || true
run "kubectl migflex status $DRA_NODE"
fi

# --- what next -----------------------------------------------------------------
STEP="done"
cat <<EOF

${bold}==> Done in $((SECONDS - T0))s. The cluster stays up; to keep exploring:$plain

  export KUBECONFIG=$KUBECONFIG_ADMIN
  alias kubectl=$KUBECTL   # the pinned kubectl; the host's may differ

  export PATH=$ROOT/bin:\$PATH   # the kubectl migflex plugin
  kubectl migflex status                            # nodes, GPUs, instances, holders, free devices
  kubectl migflex explain POD                       # why a pod waits, or where it runs
  kubectl migflex plan                              # the planner's next round, dry run
  kubectl describe node $NODE                       # labels, MigConfig* Events
  kubectl get resourceslices -o yaml                # the node's devices, as the DRA scheduler sees them
  kubectl get node $NODE -o jsonpath='{.metadata.annotations.migflex\.io/mig\.layout}' | jq .
  kubectl -n gpu-webhook exec ds/migflex-agent -- /device-plugin sim show
  kubectl -n gpu-webhook exec ds/migflex-agent-dra -- /device-plugin sim show   # node 2's instances, made at Prepare (dynamic mode)
  kubectl -n gpu-webhook exec ds/migflex-agent -- /device-plugin sim inject-xid --gpu 0 --gi 1 --xid 79
  #   the device is tainted in the ResourceSlice (left out where DRADeviceTaints is off), healthy again 30s later (MIGFLEX_AGENT_HEALTH_QUIET_PERIOD)
  kubectl annotate node $NODE --overwrite nvidia.com/mig.config='{version: v1, mig-configs: {selected: [{devices: all, mig-enabled: true, mig-devices: {2g.20gb: 3}}]}}'
  kubectl -n gpu-webhook logs ds/migflex-agent
  kubectl -n gpu-webhook logs -l app=gpu-webhook --tail=-1
  kubectl -n gpu-webhook logs -l app=migflex-planner --tail=-1        # the planner's rounds
  kubectl get events -A --field-selector reason=MigReshapeImpossible   # pods no reshape can serve, and why

Tear down (stops everything and undoes the host changes):

  make cluster-down        # or: hack/cluster/down.sh
EOF
