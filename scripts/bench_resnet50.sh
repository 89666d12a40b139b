#!/usr/bin/env bash
# ResNet-50 training throughput on one GPU, dtrain against PyTorch (Python) in the same call:
# synthetic 224x224 data on the device, SGD momentum, batch 128, channels_last.
#   usage: scripts/bench_resnet50.sh BUILD_DIR [PRECISION ...]     (default precisions: bf16)
#   env:   REPEAT (default 3): runs of each side, alternated so drifting clocks hit both alike.
# Prints one line per precision: median dtrain img/s, median torch img/s, their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
shift
precisions=("${@:-bf16}")
repeat=${REPEAT:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

dtrain_rate() {  # precision run_index -> img/s, averaged after the first logged interval
  local name="$1_$2"
  "$build/trainer" --config configs/resnet50_synthetic.toml --set run.out_dir="$out" \
    --set run.name="$name" --set train.precision="$1" >"$out/$name.log" 2>&1 \
    || { cat "$out/$name.log" >&2; return 1; }
  # The first interval holds cuDNN's algorithm search, as the reference's warm-up steps do.
  python3 -c '
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if "\"kind\":\"step\"" in l]
rates = [s["throughput/img_per_s"] for s in steps[1:]]
print(f"{sum(rates) / len(rates):.0f}")' "$out/$name/metrics.jsonl"
}

torch_rate() {  # precision -> img/s
  python3 scripts/bench_torch_resnet50.py --batch 128 --precision "$1" --channels-last \
    --warmup 20 --steps 100 | sed 's/.*: \([0-9]*\) img\/s/\1/'
}

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for precision in "${precisions[@]}"; do
  ours=() reference=()
  for ((i = 0; i < repeat; ++i)); do
    ours+=("$(dtrain_rate "$precision" "$i")")
    reference+=("$(torch_rate "$precision")")
  done
  a=$(median "${ours[@]}") b=$(median "${reference[@]}")
  echo "resnet50 batch 128 $precision channels_last: dtrain $a img/s (runs ${ours[*]})," \
       "torch $b img/s (runs ${reference[*]}), ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')"
done
