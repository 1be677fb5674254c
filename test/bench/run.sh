#!/usr/bin/env bash
# Runs every migflex benchmark and writes the results (see docs/BENCHMARKS.md):
#
#   $BENCH_OUT/results.md     the machine, then every table below, in one file
#   $BENCH_OUT/machine.txt    nproc, free -g, the CPU model, uptime before and after
#   $BENCH_OUT/micro.txt      go test -bench output (decision, handler, planner)
#   $BENCH_OUT/webhook.{md,json}   webhook throughput/latency/memory, informer vs list,
#                             and against the floor (floorwebhook: the HTTPS round trip alone)
#   $BENCH_OUT/reconfig.{md,json}  agent reconfiguration latency and memory
#   $BENCH_OUT/scale.{md,json}     planner and reshape-first webhook at 5000 Nodes
#   $BENCH_OUT/{webhook,reconfig}/ every process's log
#
# BENCH_OUT defaults to _output/bench/<UTC time>. Needs the envtest binaries
# (make envtest-assets); KUBEBUILDER_ASSETS overrides where they are.
# Extra flags for the tools: WEBHOOKBENCH_FLAGS, RECONFIGBENCH_FLAGS,
# SCALEBENCH_FLAGS (default: no cap on the nodes a round changes);
# BENCHTIME is go test's -benchtime (default 1s).
#
# Nothing here fails on a time: the tools exit non-zero only when a run
# breaks or an admission gets a wrong answer.
set -euo pipefail

cd "$(dirname "$0")/../.."
GO=${GO:-go}
OUT=${BENCH_OUT:-_output/bench/$(date -u +%Y%m%dT%H%M%SZ)}
ASSETS=${KUBEBUILDER_ASSETS:-$PWD/.cache/envtest}
BENCHTIME=${BENCHTIME:-1s}
BIN=$OUT/bin
mkdir -p "$BIN"
start=$(date +%s)

log() { echo "$(date +%H:%M:%S) bench: $*" >&2; }

machine() {
	echo "## $1"
	echo "\$ nproc"; nproc
	echo "\$ free -g"; free -g
	echo "\$ grep -m1 'model name' /proc/cpuinfo"; grep -m1 'model name' /proc/cpuinfo || true
	echo "\$ uptime"; uptime
}

machine "before" >"$OUT/machine.txt"
log "results in $OUT; $(uptime)"

log "building the binaries"
CGO_ENABLED=0 $GO build -trimpath -o "$BIN/webhook" ./cmd/webhook
CGO_ENABLED=1 $GO build -trimpath -o "$BIN/device-plugin" ./cmd/device-plugin
CGO_ENABLED=0 $GO build -trimpath -o "$BIN/listwebhook" ./test/bench/cmd/listwebhook
CGO_ENABLED=0 $GO build -trimpath -o "$BIN/floorwebhook" ./test/bench/cmd/floorwebhook
$GO build -o "$BIN/webhookbench" ./test/bench/cmd/webhookbench
$GO build -o "$BIN/reconfigbench" ./test/bench/cmd/reconfigbench
CGO_ENABLED=0 $GO build -trimpath -o "$BIN/planner" ./cmd/planner
$GO build -o "$BIN/scalebench" ./test/bench/cmd/scalebench

log "micro-benchmarks (go test -bench, -benchtime $BENCHTIME)"
$GO test -run '^$' -benchtime "$BENCHTIME" -count 1 \
	-bench 'BenchmarkDecide|BenchmarkDecideCapacity|BenchmarkSnapshotFromList|BenchmarkBuilderNodeUpdate|BenchmarkMutate|BenchmarkPlanner' \
	./internal/webhook/fallback ./internal/webhook ./internal/domain/migconfig | tee "$OUT/micro.txt" >&2

log "webhook: informer cache vs list per admission at 100, 1000 and 5000 nodes, then 50000 pods"
# shellcheck disable=SC2086 # word splitting of the extra flags is wanted
"$BIN/webhookbench" -out "$OUT" -assets "$ASSETS" \
	-webhook-bin "$BIN/webhook" -list-webhook-bin "$BIN/listwebhook" -floor-webhook-bin "$BIN/floorwebhook" ${WEBHOOKBENCH_FLAGS:-}

log "reconfiguration: the agent on 8 simulated H100s"
# shellcheck disable=SC2086
"$BIN/reconfigbench" -out "$OUT" -assets "$ASSETS" -agent-bin "$BIN/device-plugin" ${RECONFIGBENCH_FLAGS:-}

log "scale: the planner and the reshape-first webhook at 5000 Nodes, 1000 pending pods"
# shellcheck disable=SC2086
"$BIN/scalebench" -out "$OUT" -assets "$ASSETS" -planner-bin "$BIN/planner" -webhook-bin "$BIN/webhook" \
	${SCALEBENCH_FLAGS:--planner-args=--max-nodes-per-round=1000}

machine "after" >>"$OUT/machine.txt"
{
	echo "# migflex benchmark results"
	echo
	echo "Taken $(date -u '+%Y-%m-%d %H:%M UTC') at $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)'), in $(($(date +%s) - start)) s."
	echo
	echo '```'
	cat "$OUT/machine.txt"
	echo '```'
	echo
	echo "## Micro-benchmarks"
	echo
	echo '```'
	grep -E '^(goos|goarch|pkg|cpu|Benchmark)' "$OUT/micro.txt"
	echo '```'
	echo
	echo "## Webhook"
	echo
	cat "$OUT/webhook.md"
	echo
	echo "## Reconfiguration"
	echo
	cat "$OUT/reconfig.md"
	echo
	echo "## Scale"
	echo
	cat "$OUT/scale.md"
} >"$OUT/results.md"
log "done in $(($(date +%s) - start)) s: $OUT/results.md"
