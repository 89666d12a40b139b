#!/usr/bin/env bash
# ResNet-50 training throughput on one GPU, dtrain against PyTorch (Python) in the same call:
# synthetic 224x224 data on the device, SGD momentum, batch 128, channels_last.
#   usage: scripts/bench_resnet50.sh BUILD_DIR [PRECISION ...]     (default precisions: bf16)
# Prints one line per precision: dtrain img/s, torch img/s, ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
shift
precisions=("${@:-bf16}")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for precision in "${precisions[@]}"; do
  "$build/trainer" --config configs/resnet50_synthetic.toml --set run.out_dir="$out" \
    --set run.name="$precision" --set train.precision="$precision" >"$out/$precision.log" 2>&1 \
    || { cat "$out/$precision.log"; exit 1; }
  # The first logged interval holds cuDNN's algorithm search; average the rest, as the
  # reference does after its warm-up steps.
  ours=$(python3 - "$out/$precision/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"step"' in l]
rates = [s["throughput/img_per_s"] for s in steps[1:]]
print(f"{sum(rates) / len(rates):.0f}")
PY
)
  reference=$(python3 scripts/bench_torch_resnet50.py --batch 128 --precision "$precision" \
    --channels-last --warmup 20 --steps 100 | sed 's/.*: \([0-9]*\) img\/s/\1/')
  echo "resnet50 batch 128 $precision channels_last: dtrain $ours img/s, torch $reference img/s," \
       "ratio $(python3 -c "print(f'{$ours / $reference:.3f}')")"
done
