#!/usr/bin/env bash
# Installs the Debian packages the README's commands need and this machine
# lacks: `make test` runs it for the shell linter, the arm64 cross compiler
# and qemu-user-static (make test-deps), hack/cluster/up.sh (and so `make
# demo`) for the cluster's packages (runc, the CNI plugins, ...).
#
#   hack/install-debs.sh PACKAGE:PROBE...
#
# PROBE is a command looked up on PATH, or an absolute path that must be
# executable; its package is installed when it is missing. Installing needs
# root and apt-get; without them the script names what to install and
# fails.
set -euo pipefail
missing=()
for p in "$@"; do
	pkg=${p%%:*} probe=${p#*:}
	if [[ $probe == /* ]]; then
		[[ -x $probe ]] || missing+=("$pkg")
	else
		command -v "$probe" >/dev/null || missing+=("$pkg")
	fi
done
((${#missing[@]})) || exit 0
me=$(basename "$0")
if [[ $EUID -ne 0 ]]; then
	echo "$me: ${missing[*]} missing; install them as root (apt-get install ${missing[*]}) or run this as root" >&2
	exit 1
fi
command -v apt-get >/dev/null || {
	echo "$me: ${missing[*]} missing and there is no apt-get: install them with your package manager" >&2
	exit 1
}
echo "$me: installing ${missing[*]} with apt-get" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
