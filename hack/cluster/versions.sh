# shellcheck shell=bash disable=SC2034 # the scripts sourcing this use its variables
# Which Kubernetes and containerd the local cluster runs; sourced by lib.sh
# and build.sh (set HACK_CLUSTER and CACHE_DIR first).
#
# K8S_VERSION picks the Kubernetes minor: unset, the default one of
# k8s/minors; else a minor (1.35, v1.35) or its pinned release (v1.35.4).
# It becomes the pinned release, with:
#   K8S_MINOR          1.35
#   K8S_MODULE         the minor's wrapper module (k8s/1.35)
#   K8S_BIN            $CACHE_DIR/k8s/<release>/bin: every minor side by side
#   K8S_FEATURE_GATES  the minor's gates (k8s/minors), "" for none
# containerd is one version for every minor (containerd/go.mod):
#   CONTAINERD_VERSION, CONTAINERD_BIN ($CACHE_DIR/containerd/<version>/bin:
#   containerd, containerd-shim-runc-v2, ctr)

K8S_MINORS_FILE=$HACK_CLUSTER/k8s/minors

# modversion <go.mod> <module>: the version a wrapper module requires.
modversion() {
	awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}
# k8s_minors: the supported minors, oldest first.
k8s_minors() { awk '!/^#/ && NF { print $1 }' "$K8S_MINORS_FILE"; }
k8s_default_minor() { awk '!/^#/ && NF && $2 == "default" { print $1 }' "$K8S_MINORS_FILE"; }
k8s_oldest_minor() { k8s_minors | head -n1; }
# k8s_gates <minor>: its feature gates, "" for none.
k8s_gates() { awk -v m="$1" '!/^#/ && $1 == m { if ($4 != "-") print $4 }' "$K8S_MINORS_FILE"; }
# k8s_pinned <minor>: the release its wrapper module pins.
k8s_pinned() { modversion "$HACK_CLUSTER/k8s/$1/go.mod" k8s.io/kubernetes; }

versions_fail() { echo "$(basename "$0"): $*" >&2; exit 2; }

K8S_REQUESTED=${K8S_VERSION:-}
if [[ -z $K8S_REQUESTED ]]; then
	K8S_MINOR=$(k8s_default_minor)
	[[ -n $K8S_MINOR ]] || versions_fail "no default minor in $K8S_MINORS_FILE"
elif [[ $K8S_REQUESTED =~ ^v?(1\.[0-9]+)(\.[0-9]+)?$ ]]; then
	K8S_MINOR=${BASH_REMATCH[1]}
else
	versions_fail "K8S_VERSION=$K8S_REQUESTED: want a minor (1.37) or a release (v1.37.2)"
fi
k8s_minors | grep -qxF "$K8S_MINOR" ||
	versions_fail "Kubernetes $K8S_MINOR is not supported here; supported: $(k8s_minors | tr '\n' ' ')($K8S_MINORS_FILE)"
K8S_MODULE=$HACK_CLUSTER/k8s/$K8S_MINOR
K8S_VERSION=$(k8s_pinned "$K8S_MINOR")
[[ -n $K8S_VERSION ]] || versions_fail "no k8s.io/kubernetes version in $K8S_MODULE/go.mod"
if [[ $K8S_REQUESTED =~ \.[0-9]+\.[0-9]+$ && v${K8S_REQUESTED#v} != "$K8S_VERSION" ]]; then
	versions_fail "K8S_VERSION=$K8S_REQUESTED: the $K8S_MINOR line is pinned at $K8S_VERSION ($K8S_MODULE/go.mod; k8s/pin.sh pins another release)"
fi
K8S_FEATURE_GATES=$(k8s_gates "$K8S_MINOR")
K8S_BIN=$CACHE_DIR/k8s/$K8S_VERSION/bin

CONTAINERD_VERSION=$(modversion "$HACK_CLUSTER/containerd/go.mod" github.com/containerd/containerd/v2)
[[ -n $CONTAINERD_VERSION ]] || versions_fail "no containerd version in $HACK_CLUSTER/containerd/go.mod"
CONTAINERD_BIN=$CACHE_DIR/containerd/$CONTAINERD_VERSION/bin
