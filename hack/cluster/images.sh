#!/usr/bin/env bash
# Builds the image tarballs the local cluster imports (no registry):
#   lc.local/pause:1      the pod sandbox (testbox pause)
#   lc.local/testbox:1    testbox, for test pods: env, sleep N, ls DIR
#   lc.local/migflex:e2e  /device-plugin, /webhook and /planner from bin/
#                         (make build), with the agent's glibc; only when
#                         they exist
# into $IMAGES_DIR (default .cache/images). Fast when nothing changed; the
# same inputs give the same image digests.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tools=$CACHE_DIR/tools
mkdir -p "$IMAGES_DIR" "$tools"
cd "$ROOT"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tools/testbox" ./hack/testbox
go build -trimpath -o "$tools/mkimage" ./hack/mkimage

"$tools/mkimage" -ref lc.local/pause:1 -out "$IMAGES_DIR/pause.tar" -add "$tools/testbox:/testbox" -entrypoint /testbox,pause
"$tools/mkimage" -ref lc.local/testbox:1 -out "$IMAGES_DIR/testbox.tar" -add "$tools/testbox:/testbox"
if [[ -x bin/device-plugin && -x bin/webhook && -x bin/planner ]]; then
	"$tools/mkimage" -ref lc.local/migflex:e2e -out "$IMAGES_DIR/migflex.tar" \
		-add bin/device-plugin:/device-plugin -add bin/webhook:/webhook -add bin/planner:/planner
else
	rm -f "$IMAGES_DIR/migflex.tar"
	log "no bin/device-plugin, bin/webhook and bin/planner (make build): skipped lc.local/migflex:e2e"
fi
