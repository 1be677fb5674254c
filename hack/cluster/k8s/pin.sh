#!/usr/bin/env bash
# Writes the wrapper module that pins one Kubernetes release for the local
# cluster: hack/cluster/k8s/<minor>/go.mod (and go.sum, by go mod tidy).
#
#   hack/cluster/k8s/pin.sh v1.37.2
#
# k8s.io/kubernetes cannot be required alone: its go.mod replaces every
# k8s.io/<staging> module with ./staging/src/..., a path only its own
# repository has. The wrapper replaces each of them with its published
# release (v0.<minor>.<patch>), taking the list from that release's own
# go.mod, so a minor that adds a staging module (1.36 added
# k8s.io/cri-streaming and k8s.io/streaming) needs nothing by hand. Its go
# and godebug lines are Kubernetes' own. Commit both files; then add the
# minor to hack/cluster/k8s/minors if it is new.
set -euo pipefail
v=${1:?usage: $0 vMAJOR.MINOR.PATCH}
[[ $v =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "pin.sh: $v is not a release like v1.37.2" >&2; exit 2; }
staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$here/1.${BASH_REMATCH[1]}
mod=$(go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -s $mod ]] || { echo "pin.sh: the module proxy has no k8s.io/kubernetes@$v" >&2; exit 1; }
mkdir -p "$dir"
{
	cat <<GO
// Wrapper module that pins and builds Kubernetes $v for the local test
// cluster (../../build.sh). It is not part of the migflex module. Written
// by ../pin.sh $v: each ./staging module of k8s.io/kubernetes is replaced
// by its published release, since the staging paths only exist inside
// kubernetes' repository.
module github.com/migflex/migflex/hack/cluster/k8s/1.${BASH_REMATCH[1]}

$(grep -E '^go [0-9]' "$mod")

$(grep -E '^godebug ' "$mod")

require k8s.io/kubernetes $v

replace (
GO
	awk -v s="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, s }' "$mod"
	echo ")"
} >"$dir/go.mod"
cat >"$dir/tools.go" <<'GO'
//go:build tools

// Package k8s only records, for go mod tidy, which Kubernetes commands this
// module builds; ../../build.sh builds them by import path.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
rm -f "$dir/go.sum"
(cd "$dir" && go mod tidy)
echo "pinned $v in $dir"
