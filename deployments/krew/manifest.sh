#!/usr/bin/env bash
# Builds the kubectl migflex plugin for krew and writes its plugin manifest:
#   deployments/krew/manifest.sh VERSION [URL_BASE]
# into _output/krew/: kubectl-migflex_linux_<arch>.tar.gz (the static
# binary alone) for amd64 and arm64, and migflex.yaml, the krew manifest
# with each archive's sha256 as krew requires. URL_BASE is where the archives are published (a release's
# download URL); without it the manifest is for a local install:
#   kubectl krew install --manifest=_output/krew/migflex.yaml \
#     --archive=_output/krew/kubectl-migflex_linux_amd64.tar.gz
# No archive is published by this project yet, so no manifest with a
# download URL is checked in: a checksum must be of the archive served.
set -euo pipefail

version=${1:?usage: deployments/krew/manifest.sh VERSION [URL_BASE]}
url_base=${2:-https://example.invalid/migflex/releases/download/$version}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root/_output/krew
mkdir -p "$out"

platforms=""
for arch in amd64 arm64; do
	dir=$(mktemp -d)
	GOOS=linux GOARCH=$arch CGO_ENABLED=0 go build -C "$root" -trimpath -o "$dir/kubectl-migflex" ./cmd/kubectl-migflex
	archive=kubectl-migflex_linux_$arch.tar.gz
	# A fixed mtime and owner, so that the same binary gives the same
	# archive and checksum.
	tar -C "$dir" --mtime=@0 --owner=0 --group=0 --numeric-owner -czf "$out/$archive" kubectl-migflex
	rm -rf "$dir"
	sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	platforms+="
  - selector:
      matchLabels:
        os: linux
        arch: $arch
    uri: $url_base/$archive
    sha256: $sum
    bin: kubectl-migflex"
done

cat >"$out/migflex.yaml" <<MANIFEST
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: migflex
spec:
  version: $version
  homepage: https://github.com/migflex/migflex
  shortDescription: Show MIG layouts and explain waiting GPU pods
  description: |
    kubectl migflex reads what migflex publishes on a cluster's Nodes and
    pods: each node's MIG layout, config state and the pods holding each
    instance (status), why a GPU pod waits or where it runs (explain), the
    planner's next round as a dry run (plan), a mig.config checked against
    a node's GPUs (validate), and a mig.config of any size written to a
    node (apply).
  platforms:$platforms
MANIFEST
echo "$out/migflex.yaml"
