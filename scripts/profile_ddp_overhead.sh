#!/usr/bin/env bash
# What DDP adds to a step on one GPU: ResNet-50 (configs/resnet50_synthetic.toml) as `single`
# and as `ddp` on a world of one, each with steps 40-44 under the Kineto profiler, then the GPU
# time per step by kernel and the kernels that differ (scripts/trace_summary.py).
#   usage: scripts/profile_ddp_overhead.sh BUILD_DIR OUT_DIR [--set ...]
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
for strategy in single ddp; do
  rm -rf "${out:?}/$strategy"  # a rerun into OUT_DIR replaces this script's earlier run
  mpirun -np 1 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$build/trainer" \
    --config configs/resnet50_synthetic.toml --set run.out_dir="$out" \
    --set run.name="$strategy" --set dist.strategy="$strategy" --set train.max_steps=60 \
    --set run.profile_start=40 --set run.profile_steps=5 "$@" >"$out/$strategy.log" 2>&1 \
    || { tail -20 "$out/$strategy.log"; exit 1; }
  grep -h '"kind":"step"' "$out/$strategy/metrics.jsonl" | tail -1 |
    python3 -c "import json,sys; m=json.load(sys.stdin); print('$strategy', 'step ms', m['time/step_ms'])"
done
python3 scripts/trace_summary.py 5 "$out/single/trace.rank0.json" "$out/ddp/trace.rank0.json"
