#!/usr/bin/env bash
# Builds the pinned Kubernetes components, etcd and containerd that the
# local test cluster and envtest run, from the Go module proxy (no git
# checkout, no registry).
#
#   hack/cluster/build.sh            build everything the cluster runs that is missing
#   hack/cluster/build.sh etcd kube-apiserver kubectl   only these
#   K8S_VERSION=1.35 hack/cluster/build.sh              another supported minor
#
# Versions come from the wrapper modules' go.mod files (hack/cluster/k8s/<minor>,
# hack/cluster/etcd, hack/cluster/containerd) and K8S_VERSION picks the minor
# (versions.sh), so bumping a version is a go.mod change. Binaries land in a
# directory keyed by version, every version side by side, and are never
# rebuilt once present:
#   $CACHE_DIR/k8s/<version>/bin/{kube-apiserver,kubelet,kube-controller-manager,kube-scheduler,kubectl}
#   $CACHE_DIR/etcd/<version>/bin/etcd
#   $CACHE_DIR/containerd/<version>/bin/{containerd,containerd-shim-runc-v2,ctr}
#   $CACHE_DIR/tools/apiproxy   hack/cluster/apiproxy, which the nodes after
#       the first run; this module's own, so built again each time (go's
#       build cache makes that quick)
#   $CACHE_DIR/envtest/{etcd,kube-apiserver,kubectl}   symlinks to the chosen
#       minor's: KUBEBUILDER_ASSETS (set when named, or when missing)
# CACHE_DIR defaults to <repo>/.cache (git-ignored).
set -euo pipefail

HACK_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK_CLUSTER/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-$ROOT/.cache}
GO=${GO:-go}
# shellcheck source=hack/cluster/versions.sh
source "$HACK_CLUSTER/versions.sh"

K8S_COMPONENTS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl)
# Built only when named: the kind node image (hack/kind) needs them, the
# local cluster does not.
KIND_COMPONENTS=(kubeadm kube-proxy)
ALL=("${K8S_COMPONENTS[@]}" etcd containerd apiproxy "${KIND_COMPONENTS[@]}")

ETCD_VERSION=$(modversion "$HACK_CLUSTER/etcd/go.mod" go.etcd.io/etcd/server/v3)
[[ -n $ETCD_VERSION ]] || { echo "build.sh: cannot read the etcd version from $HACK_CLUSTER/etcd/go.mod" >&2; exit 1; }
ETCD_BIN=$CACHE_DIR/etcd/$ETCD_VERSION/bin
ENVTEST_DIR=$CACHE_DIR/envtest

want=("$@")
named=$#
[[ ${#want[@]} -gt 0 ]] || want=("${K8S_COMPONENTS[@]}" etcd containerd apiproxy)
for c in "${want[@]}"; do
	[[ " ${ALL[*]} " == *" $c "* ]] || { echo "build.sh: unknown component $c (known: ${ALL[*]})" >&2; exit 2; }
done

mkdir -p "$K8S_BIN" "$ETCD_BIN" "$CONTAINERD_BIN" "$ENVTEST_DIR"
# Two builds at once (say envtest assets and the e2e suite) would compile the
# same thing twice on two cores; the second waits and then finds it done.
exec 9>"$CACHE_DIR/.build.lock"
flock 9
rm -rf "$K8S_BIN"/.tmp.* "$ETCD_BIN"/.tmp.* "$CONTAINERD_BIN"/.tmp.* # left by an interrupted build

T0=$SECONDS
log() { echo "[build $((SECONDS - T0))s] $*"; }

export CGO_ENABLED=0
# -modcacherw keeps the module cache deletable by a plain rm -rf.
export GOFLAGS="${GOFLAGS:-} -modcacherw"

# build <module dir> <bin dir> <ldflags> <name=import path>...: builds the
# missing commands into a scratch dir and moves each into place, so an
# interrupted build never leaves a truncated binary that would be "cached".
build() {
	local dir=$1 bin=$2 ldflags=$3; shift 3
	local pkgs=() names=() kv
	for kv in "$@"; do
		[[ -x $bin/${kv%%=*} ]] && continue
		names+=("${kv%%=*}"); pkgs+=("${kv#*=}")
	done
	[[ ${#pkgs[@]} -gt 0 ]] || return 0
	log "building ${names[*]} (cold: minutes)"
	local tmp
	tmp=$(mktemp -d "$bin/.tmp.XXXXXX")
	# With one package -o names the file: go would call etcd's "server".
	local o=$tmp/
	[[ ${#pkgs[@]} -eq 1 ]] && o=$tmp/${names[0]}
	(cd "$dir" && "$GO" build -trimpath -ldflags "$ldflags" -o "$o" "${pkgs[@]}") || { rm -rf "$tmp"; return 1; }
	local n
	for n in "${names[@]}"; do mv -f "$tmp/$n" "$bin/$n"; done
	rmdir "$tmp"
	log "built ${names[*]}"
}

k8s=()
for c in "${want[@]}"; do
	[[ $c == etcd || $c == containerd || $c == apiproxy ]] || k8s+=("$c=k8s.io/kubernetes/cmd/$c")
done
if [[ ${#k8s[@]} -gt 0 ]]; then
	minor=${K8S_MINOR#1.}
	ld="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	build "$K8S_MODULE" "$K8S_BIN" "$ld" "${k8s[@]}"
fi
if [[ " ${want[*]} " == *" etcd "* ]]; then
	build "$HACK_CLUSTER/etcd" "$ETCD_BIN" "-s -w" "etcd=go.etcd.io/etcd/server/v3"
fi
if [[ " ${want[*]} " == *" containerd "* ]]; then
	# Static like the rest (CGO_ENABLED=0): containerd needs no cgo for
	# what the cluster uses (overlayfs, runc through the shim, CRI, CDI).
	# go build stamps no version; containerd --version should say which.
	cm=github.com/containerd/containerd/v2
	build "$HACK_CLUSTER/containerd" "$CONTAINERD_BIN" "-s -w -X $cm/version.Version=${CONTAINERD_VERSION#v}" \
		"containerd=$cm/cmd/containerd" "containerd-shim-runc-v2=$cm/cmd/containerd-shim-runc-v2" "ctr=$cm/cmd/ctr"
fi
if [[ " ${want[*]} " == *" apiproxy "* ]]; then
	mkdir -p "$CACHE_DIR/tools"
	(cd "$ROOT" && "$GO" build -trimpath -ldflags "-s -w" -o "$CACHE_DIR/tools/apiproxy" ./hack/cluster/apiproxy)
fi

# The envtest directory points at whichever of its three binaries exist,
# for the minor chosen (the default one unless K8S_VERSION says), when
# they are asked for by name (make envtest-assets) or not linked yet. A
# build of everything for a cluster (e2e.sh, up.sh) leaves the links as
# they are: an e2e run on another minor once repointed them there, and
# the next make test's unit step, which uses whatever they name, ran the
# integration tests against that minor's API server.
# Relative links keep working when the checkout moves.
for n in etcd kube-apiserver kubectl; do
	rel=k8s/$K8S_VERSION/bin/$n
	[[ $n == etcd ]] && rel=etcd/$ETCD_VERSION/bin/$n
	((named)) || [[ ! -e $ENVTEST_DIR/$n ]] || continue
	if [[ -x $CACHE_DIR/$rel ]]; then ln -sfn "../$rel" "$ENVTEST_DIR/$n"; fi
done
envtest=$(readlink "$ENVTEST_DIR/kube-apiserver" || true)
log "k8s $K8S_VERSION in $K8S_BIN; etcd $ETCD_VERSION in $ETCD_BIN; containerd $CONTAINERD_VERSION in $CONTAINERD_BIN; KUBEBUILDER_ASSETS=$ENVTEST_DIR (its kube-apiserver: ${envtest:-none})"
