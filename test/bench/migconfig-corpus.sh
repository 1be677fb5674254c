#!/usr/bin/env bash
# Measures the hostile mig.config corpus (internal/domain/migconfig/migconfigtest:
# aliases, nesting, huge numbers, lists and strings, many configurations,
# junk; up to 256 KiB) in a process of its own: `device-plugin validate` on
# each document against eight simulated H100s, its peak RSS (GNU time's %M)
# and wall time, next to a real document's as the baseline. The growth is
# what the document costs the config engine; see docs/BENCHMARKS.md.
#
#   test/bench/migconfig-corpus.sh            # table on stdout
#
# OUT keeps the corpus and the binary (default: a temporary directory).
# Needs GNU time (TIME_BIN, default /usr/bin/time). Nothing here fails on a
# time or a size; it exits non-zero only when a document is accepted.
set -euo pipefail

cd "$(dirname "$0")/../.."
GO=${GO:-go}
TIME_BIN=${TIME_BIN:-/usr/bin/time}
OUT=${OUT:-$(mktemp -d)}
BIN=$OUT/device-plugin
mkdir -p "$OUT/corpus"

CGO_ENABLED=1 $GO build -trimpath -o "$BIN" ./cmd/device-plugin
$GO test -count 1 -run '^TestHostileDocumentsAreBounded$' ./internal/domain/migconfig -args -corpus-out "$OUT/corpus" >/dev/null

# measure FILE: prints "exit peak-KiB seconds".
measure() {
	local code=0
	"$TIME_BIN" -f '%M %e' -o "$OUT/time.txt" "$BIN" validate -f "$1" --gpus H100-SXM5-80GB:8 >/dev/null 2>&1 || code=$?
	echo "$code $(tail -n 1 "$OUT/time.txt")"
}

read -r _ base _ < <(measure "$OUT/corpus/map-form.yaml")
echo "baseline (a real document, map form): ${base} KiB peak RSS"
echo
echo "| document | bytes | exit | peak RSS (KiB) | growth (KiB) | seconds |"
echo "| --- | --: | --: | --: | --: | --: |"
worst_growth=0 worst_secs=0 accepted=0
for f in "$OUT"/corpus/*.yaml; do
	name=$(basename "$f" .yaml)
	case $name in list-form | map-form | run-ai-form | anchored-entry) continue ;; esac
	read -r code peak secs < <(measure "$f")
	growth=$((peak - base))
	echo "| $name | $(wc -c <"$f") | $code | $peak | $growth | $secs |"
	[ "$code" -eq 0 ] && accepted=$((accepted + 1))
	[ "$growth" -gt "$worst_growth" ] && worst_growth=$growth
	worst_secs=$(awk -v a="$worst_secs" -v b="$secs" 'BEGIN { print (b > a) ? b : a }')
done
echo
echo "max growth ${worst_growth} KiB, max ${worst_secs} s; $(uptime)"
[ "$accepted" -eq 0 ] || { echo "$accepted documents accepted" >&2; exit 1; }
