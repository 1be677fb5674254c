#!/usr/bin/env bash
# make test-arm64: migflex for arm64 (Grace: GH200, GB200 nodes) builds
# here and its agent runs. Cross-compiles with `make build GOARCH=arm64`
# (the cgo agent with Debian's gcc-aarch64-linux-gnu), checks that each
# binary is an aarch64 ELF, and runs the agent's offline commands under
# Debian's qemu-user-static: `device-plugin models` must list the built-in
# models (GB200's among them), `device-plugin validate` must accept a layout that fits and
# refuse one that does not, as the amd64 build does. qemu-aarch64-static is
# called directly with the cross libc (-L), so nothing is registered with
# binfmt_misc on the host.
#
# Needs: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user-static
# (make test-deps installs them, as root).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
T0=$SECONDS
log() { echo "[check-arm64 $((SECONDS - T0))s] $*"; }
die() { printf 'check-arm64.sh: %b\n' "$*" >&2; exit 1; }

for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
	command -v "$tool" >/dev/null || die "$tool is missing: make test-deps installs it (root), or apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
done
SYSROOT=/usr/aarch64-linux-gnu
[[ -d $SYSROOT/lib ]] || die "no arm64 libc in $SYSROOT: apt-get install libc6-dev-arm64-cross"

BIN=$ROOT/bin/linux_arm64
make --no-print-directory build GOARCH=arm64 BIN="$BIN"
for b in device-plugin webhook planner; do
	machine=$(LC_ALL=C readelf -h "$BIN/$b" | awk -F: '/Machine:/ { gsub(/^ +/, "", $2); print $2 }')
	[[ $machine == AArch64 ]] || die "$BIN/$b is built for ${machine:-nothing readelf knows}, not AArch64"
done
log "built device-plugin, webhook and planner for arm64 in $BIN"

arm() { qemu-aarch64-static -L "$SYSROOT" "$@"; }
models=$(arm "$BIN/device-plugin" models) || die "device-plugin models failed under qemu: $models"
for m in GB200-186GB H100-SXM5-80GB; do
	grep -q "$m" <<<"$models" || die "device-plugin models under qemu lists no $m:\n$models"
done
log "device-plugin models under qemu: $(grep -c . <<<"$models") lines, GB200-186GB and H100-SXM5-80GB among them"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/fits.yaml" <<'YAML'
version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices: {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
YAML
cat >"$tmp/too-big.yaml" <<'YAML'
version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 3}
YAML
arm "$BIN/device-plugin" validate -f "$tmp/fits.yaml" --gpus H100-SXM5-80GB:4 >"$tmp/out" 2>&1 ||
	die "device-plugin validate refused a layout that fits, under qemu:\n$(cat "$tmp/out")"
rc=0
arm "$BIN/device-plugin" validate -f "$tmp/too-big.yaml" --gpus H100-SXM5-80GB:4 >"$tmp/out" 2>&1 || rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "needs 12 of 8 memory slices" "$tmp/out"; then
	die "device-plugin validate of an impossible layout under qemu: exit $rc, want 1 and the reason:\n$(cat "$tmp/out")"
fi
log "device-plugin validate under qemu: accepts a layout that fits, refuses 3g.40gb x3 (exit 1)"
