#!/usr/bin/env bash
# Restarts a node's kubelet (node 1's when no node is named), as an
# operator's `systemctl restart kubelet` would: hack/cluster/restart.sh
# kubelet [NODE], which says how. Pods keep running; the new kubelet deletes
# every socket in its device-plugin directory and creates a new
# kubelet.sock, so device plugins must notice and register again: the
# end-to-end suite uses this to test that.
#
#   hack/cluster/restart-kubelet.sh [NODE]
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/restart.sh" kubelet "$@"
