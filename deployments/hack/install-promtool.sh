#!/usr/bin/env bash
# Installs the pinned promtool into $CACHE_DIR/tools (default
# <repo>/.cache/tools) from the Go module proxy, so the alert rules are
# checked (`promtool check rules`, `promtool test rules`, test/manifests)
# with nothing outside the Go toolchain. Prints the binary's path. A binary
# of the pinned version that is already there is kept.
#
# Prometheus's Go module has no /v3 suffix, so its releases are published
# to the proxy as v0.<major*100+minor>.<patch>: Prometheus 3.16.0 is
# github.com/prometheus/prometheus v0.316.0, and `go install` of that
# version builds the release's promtool (the module has no replace
# directives). remove_all_sd leaves out the service-discovery plugins
# (AWS, Azure, GCE, Kubernetes, ...), which promtool's rule commands never
# use: half the build and a binary of 54 MB instead of 123 MB.
set -euo pipefail

PROMTOOL_VERSION=${PROMTOOL_VERSION:-3.16.0}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=${CACHE_DIR:-$root/.cache}/tools
promtool=$tools/promtool

if [[ -x $promtool ]] && "$promtool" --version 2>/dev/null | grep -q "^promtool, version $PROMTOOL_VERSION "; then
	echo "$promtool"
	exit 0
fi
IFS=. read -r major minor patch <<<"$PROMTOOL_VERSION"
module_version=v0.$((major * 100 + minor)).$patch
mkdir -p "$tools"
echo "installing promtool $PROMTOOL_VERSION ($module_version) into $tools (go install, first build takes minutes)" >&2
# The version is stamped through ldflags, as Prometheus's release build
# does; without it the check above would never match.
GOBIN=$tools CGO_ENABLED=0 go install -trimpath -tags remove_all_sd \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMTOOL_VERSION" \
	"github.com/prometheus/prometheus/cmd/promtool@$module_version"
"$promtool" --version | grep -q "^promtool, version $PROMTOOL_VERSION " ||
	{ echo "install-promtool.sh: $promtool does not report $PROMTOOL_VERSION" >&2; exit 1; }
echo "$promtool"
