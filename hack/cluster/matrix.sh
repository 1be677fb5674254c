#!/usr/bin/env bash
# make test-matrix: the whole end-to-end suite on every supported Kubernetes
# minor (hack/cluster/k8s/minors), one after the other, each on a fresh
# local cluster (hack/cluster/e2e.sh, which builds the minor's binaries
# when missing and always tears down), as root. Then the results table,
# minor x suite -> result, tests and time, with the commit and the date:
#   _output/matrix/<UTC time>/{results.md,<minor>.log}
# and the same table in docs/SUPPORT.md between its test-matrix markers.
# Every minor runs even when one fails; the exit status is 1 if any did.
#
#   hack/cluster/matrix.sh [go test flags]   e.g. -run TestHarness
#   MATRIX_MINORS="1.35 1.37" hack/cluster/matrix.sh   only these minors
#
# The suites are the e2e tests grouped by what they prove: "harness" (the
# cluster and its network safety), "agent & webhook" (layouts, allocatable,
# allocation, fallback, busy GPUs, kubelet and agent restarts, health),
# "planner", and "helm chart".
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root (it runs the e2e suite on a local cluster)"
cd "$ROOT"

read -ra minors <<<"${MATRIX_MINORS:-$(k8s_minors | tr '\n' ' ')}"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$ROOT/_output/matrix/$stamp
mkdir -p "$out"
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!docs/SUPPORT.md' || commit+="+changes"
date=$(date -u +%Y-%m-%d)

# suite <test name>: the suite a top-level test belongs to.
suite() {
	case $1 in
	TestHarness* | TestDeprecation*) echo "harness" ;;
	TestHelm*) echo "helm chart" ;;
	TestPlanner*) echo "planner" ;;
	*) echo "agent & webhook" ;;
	esac
}

rows=() failed_any=0
for m in "${minors[@]}"; do
	log "Kubernetes $m: the e2e suite"
	t=$SECONDS rc=0
	K8S_VERSION=$m "$HACK_CLUSTER/e2e.sh" "$@" >"$out/$m.log" 2>&1 || rc=$?
	wall=$((SECONDS - t))
	release=$(k8s_pinned "$m")
	timings=$(sed -n 's/.*timings: \(build .*\)$/\1/p' "$out/$m.log" | tail -n1)
	log "Kubernetes $release: exit $rc in ${wall}s (${timings:-no timings}); log $out/$m.log"
	((rc == 0)) || failed_any=1
	# Top-level results: "--- PASS: TestX (12.34s)" at the start of a line.
	declare -A pass=() fail=() secs=() names=()
	while read -r verdict name dur; do
		s=$(suite "$name")
		names[$s]=1
		if [[ $verdict == PASS ]]; then pass[$s]=$((${pass[$s]:-0} + 1)); else fail[$s]="${fail[$s]:-}${fail[$s]:+, }$name"; fi
		secs[$s]=$(awk -v a="${secs[$s]:-0}" -v b="${dur//[()s]/}" 'BEGIN { printf "%.0f", a + b }')
	done < <(sed -n 's/^--- \(PASS\|FAIL\): \(Test[^ ]*\) \(([0-9.]*s)\)$/\1 \2 \3/p' "$out/$m.log")
	if ((${#names[@]} == 0)); then
		rows+=("| $release | (no test ran) | **fail** (exit $rc) | 0 | ${wall} s in all ($timings) |")
	fi
	for s in "harness" "agent & webhook" "planner" "helm chart"; do
		[[ -n ${names[$s]:-} ]] || continue
		n_fail=0
		[[ -z ${fail[$s]:-} ]] || n_fail=$(tr ',' '\n' <<<"${fail[$s]}" | grep -c .)
		result=pass
		[[ -z ${fail[$s]:-} ]] || result="**fail**: ${fail[$s]}"
		rows+=("| $release | $s | $result | $((${pass[$s]:-0} + n_fail)) | ${secs[$s]} s |")
	done
	rows+=("| $release | (whole run: exit $rc) | $([[ $rc -eq 0 ]] && echo pass || echo '**fail**') | | ${wall} s: $timings |")
	unset pass fail secs names
done

{
	echo "<!-- test-matrix:begin (written by hack/cluster/matrix.sh; do not edit) -->"
	echo "\`make test-matrix\` at commit \`$commit\`, $date (UTC), containerd $CONTAINERD_VERSION; $(nproc) cores$([[ $# -gt 0 ]] && echo ", go test flags: \`$*\`"). Each minor on a fresh local cluster; time per suite is the sum of its tests' times, the whole run's is wall time with build, bring-up, tests and tear-down."
	echo
	echo "| Kubernetes | suite | result | tests | time |"
	echo "| --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
	echo "<!-- test-matrix:end -->"
} >"$out/results.md"

doc=$ROOT/docs/SUPPORT.md
if grep -q '^<!-- test-matrix:begin' "$doc" && grep -q '^<!-- test-matrix:end' "$doc"; then
	awk -v f="$out/results.md" '
		/^<!-- test-matrix:begin/ { while ((getline l < f) > 0) print l; skip = 1; next }
		/^<!-- test-matrix:end/ { skip = 0; next }
		!skip' "$doc" >"$doc.tmp" && mv "$doc.tmp" "$doc"
	log "results in $out/results.md and docs/SUPPORT.md"
else
	log "results in $out/results.md (docs/SUPPORT.md has no test-matrix markers)"
fi
cat "$out/results.md"
exit "$failed_any"
