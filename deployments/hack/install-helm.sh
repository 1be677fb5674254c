#!/usr/bin/env bash
# Installs the pinned Helm into $CACHE_DIR/tools (default <repo>/.cache/tools)
# from the Go module proxy, so the chart checks need no package outside the
# Go toolchain. Prints the binary's path. A binary of the pinned version that
# is already there is kept.
#
# HELM_VERSION is the newest v3 release the proxy serves that builds with the
# project's Go (1.26); bump it here and in docs/INSTALL.md together.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=${CACHE_DIR:-$root/.cache}/tools
helm=$tools/helm

if [[ -x $helm ]] && "$helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
	echo "$helm"
	exit 0
fi
mkdir -p "$tools"
echo "installing helm $HELM_VERSION into $tools (go install, first build takes minutes)" >&2
# Helm stamps its version through ldflags; without them `helm version`
# prints a development version and the check above would never match.
GOBIN=$tools CGO_ENABLED=0 go install -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
"$helm" version --template '{{.Version}}' | grep -qx "$HELM_VERSION" ||
	{ echo "install-helm.sh: $helm does not report $HELM_VERSION" >&2; exit 1; }
echo "$helm"
