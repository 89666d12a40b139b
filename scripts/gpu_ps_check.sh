#!/usr/bin/env bash
# On a multi-GPU machine, the parameter server: build, its multi-rank tests (CPU ranks and
# GPU workers over NCCL), then ResNet-50 (configs/resnet50_ps.toml) on every GPU under ddp and
# the ps variants (colocated bsp and ssp over collectives, the transport's default on GPUs;
# bsp over messages and async, which runs over messages), and again with worker 1 slowed 1.5x
# every step and with the workers slowed 1.5x in turn.
#   usage: scripts/gpu_ps_check.sh OUT_DIR [build|bench|all]   (default all; after
#          scripts/prepare_gpu_deps.sh brought .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1 what=${2:-all}
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi -L | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)
export NCCL_NVLS_ENABLE=0

if [ "$what" != bench ]; then
  gpu_build dist_tests trainer
  echo "== parameter-server tests"
  (cd build-gpu && ctest --output-on-failure -R '^dist\.(ps|piece_state)' -j 4) \
    >"$out/ctest.log" 2>&1
  grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest.log" | tail -15
fi
[ "$what" = build ] && exit 0

steps=${STEPS:-60}
echo "== ResNet-50 bf16 on $gpus GPUs, $steps steps: ddp and ps"
scripts/sweep_strategies.sh build-gpu "$out/uniform" --ranks "$gpus" --steps "$steps" \
  --repeat 1 --config configs/resnet50_ps.toml \
  --strategies "ddp ps:bsp ps:ssp1 ps:ssp2 ps:bsp+messages ps:async" | tee "$out/uniform.md"
echo "== the same, worker 1 slowed 1.5x"
scripts/sweep_strategies.sh build-gpu "$out/straggler" --ranks "$gpus" --steps "$steps" \
  --repeat 1 --config configs/resnet50_ps.toml --strategies "ddp ps:bsp ps:ssp2" \
  --set "debug.slow_ranks=[1]" --set debug.slow_factor=1.5 | tee "$out/straggler.md"
echo "== the same, every worker slowed 1.5x in turn (step s slows worker s mod $gpus)"
workers=$(seq -s, 0 $((gpus - 1)))
scripts/sweep_strategies.sh build-gpu "$out/rotating" --ranks "$gpus" --steps "$steps" \
  --repeat 1 --config configs/resnet50_ps.toml --strategies "ddp ps:bsp ps:ssp1 ps:ssp2" \
  --set "debug.slow_ranks=[$workers]" --set debug.slow_factor=1.5 \
  --set debug.slow_pattern=rotating | tee "$out/rotating.md"
