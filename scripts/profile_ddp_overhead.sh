#!/usr/bin/env bash
# What DDP adds to a step: the model as `single` on one GPU and as `ddp` on GPUS GPUs, each with
# steps 40-44 under the Kineto profiler, then rank 0's GPU time per step by kernel, the idle
# gaps of its compute stream and the kernels that differ (scripts/trace_summary.py).
#   usage: [CONFIG=configs/X.toml] [GPUS=N] scripts/profile_ddp_overhead.sh BUILD_DIR OUT_DIR [--set ...]
# CONFIG: default configs/resnet50_synthetic.toml; GPUS: default 1 (DDP on a world of one,
# which shows the strategy's own cost without any peer).
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
config=${CONFIG:-configs/resnet50_synthetic.toml}
gpus=${GPUS:-1}
for strategy in single ddp; do
  ranks=1
  [ "$strategy" = ddp ] && ranks=$gpus
  rm -rf "${out:?}/$strategy"  # a rerun into OUT_DIR replaces this script's earlier run
  mpirun -np "$ranks" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$build/trainer" \
    --config "$config" --set run.out_dir="$out" \
    --set run.name="$strategy" --set dist.strategy="$strategy" --set train.max_steps=60 \
    --set run.profile_start=40 --set run.profile_steps=5 "$@" >"$out/$strategy.log" 2>&1 \
    || { tail -20 "$out/$strategy.log"; exit 1; }
  grep -h '"kind":"step"' "$out/$strategy/metrics.jsonl" | tail -1 |
    python3 -c "import json,sys; m=json.load(sys.stdin); print('$strategy x$ranks', 'step ms', m['time/step_ms'], 'exposed ms', m.get('comm/exposed_ms', '-'))"
done
python3 scripts/trace_summary.py 5 "$out/single/trace.rank0.json" "$out/ddp/trace.rank0.json"
