#!/usr/bin/env bash
# Replays the suite the planner is judged on (docs/PLANNER.md): the trace's
# four pod lists and resamplings of its default list (multi-GPU tasks asking
# for 30 to 50% of the GPUs requested, GPU-sharing tasks for 40 to 100%), for
# each seed, one replay at a time, then scores migflex against the other
# real policies (test/bench/cmd/replayscore).
#
#   hack/replay-suite.sh OUT "1 2 3" [replay flags...]
#
# TRACE_DIR holds the trace's CSV files (default ../shared/traces/alibaba-openb
# from the checkout). POLICIES limits the policies replayed (default all);
# replays of the same pod list and seed in OUT, or in the directories of
# SCORE_WITH, are merged when scoring, so the other policies, which do not
# change with the planner, need replaying only once:
#
#   hack/replay-suite.sh _output/suite/base "1 2 3"
#   POLICIES=migflex SCORE_WITH=_output/suite/base hack/replay-suite.sh _output/suite/try "1 2 3"
#
# SUITE limits the pod lists ("default gpushare40 gpushare80 multigpu30
# multigpu=0.3 ... gpushare=1"). Replays run under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: $0 OUT SEEDS [replay flags...]}
seeds=${2:?usage: $0 OUT SEEDS [replay flags...]}
shift 2
T=${TRACE_DIR:-../shared/traces/alibaba-openb}
SUITE=${SUITE:-"default gpushare40 gpushare80 multigpu30 multigpu=0.3 multigpu=0.4 multigpu=0.5 gpushare=0.4 gpushare=0.6 gpushare=0.8 gpushare=1"}
# The binaries are built into OUT, so that rebuilding the checkout's does
# not change a suite half way.
mkdir -p "$out/bin"
go build -o "$out/bin/replay" ./test/bench/cmd/replay
go build -o "$out/bin/replayscore" ./test/bench/cmd/replayscore
policies=()
if [[ -n ${POLICIES:-} ]]; then policies=(-policies "$POLICIES"); fi
for seed in $seeds; do
	for item in $SUITE; do
		args=(-nodes "$T/openb_node_list_gpu_node.csv" -seed "$seed" "${policies[@]}")
		case $item in
		*=*) args+=(-pods "$T/openb_pod_list_default.csv" -resample "$item") ;;
		multigpu30) args+=(-pods "$T/openb_pod_list_$item.csv" -times-from "$T/openb_pod_list_default.csv") ;;
		*) args+=(-pods "$T/openb_pod_list_$item.csv") ;;
		esac
		dir="$out/${item/=/}-seed$seed"
		echo "== $item seed $seed -> $dir" >&2
		nice -n 10 "$out/bin/replay" "${args[@]}" -out "$dir" "$@" 2>"$dir.log" || { cat "$dir.log" >&2; exit 1; }
	done
done
# shellcheck disable=SC2086
"$out/bin/replayscore" -json "$out/score.json" -svg "$out/margin.svg" "$out" ${SCORE_WITH:-} >"$out/score.md"
head -5 "$out/score.md"
