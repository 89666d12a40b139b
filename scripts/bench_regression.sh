#!/usr/bin/env bash
# DDP throughput of this tree against another build of dtrain (an earlier commit), on the same
# GPUs in one call: ResNet-50 (or ResNet-18 at 32x32) synthetic, bf16, channels_last, alternating
# rounds so both see the same machine state; prints each round and the median ratio.
#   usage: scripts/bench_regression.sh BUILD BASELINE_BUILD OUT_DIR [GPUS=4] [ROUNDS=3] [MODEL]
# BASELINE_BUILD is the build directory of the other tree (e.g. `git archive COMMIT` unpacked
# and built the same way); both read this tree's config, so it must hold only keys both know.
set -euo pipefail
build=$(cd "$1" && pwd)
baseline=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)
gpus=${4:-4}
rounds=${5:-3}
model=${6:-resnet50}
cd "$(dirname "$0")/.."
. scripts/ddp_bench_lib.sh  # launch, dtrain_run, ratio

strategy=ddp
[ "$gpus" -eq 1 ] && strategy=single
ours=() theirs=()
for round in $(seq 1 "$rounds"); do
  read -r rate _ <<<"$(build=$baseline dtrain_run "$gpus" "baseline_r$round" \
    --set dist.strategy=$strategy)"
  theirs+=("$rate")
  read -r rate _ <<<"$(dtrain_run "$gpus" "this_r$round" --set dist.strategy=$strategy)"
  ours+=("$rate")
  echo "round $round: this $rate img/s, baseline ${theirs[-1]} img/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mine=$(median "${ours[@]}") base=$(median "${theirs[@]}")
echo "$model, $gpus GPU(s), $strategy: median this $mine img/s, baseline $base img/s," \
  "ratio $(ratio "$mine" "$base") (this: ${ours[*]}; baseline: ${theirs[*]})"
