#!/usr/bin/env bash
# On a multi-GPU machine: build, run the multi-rank tests (CPU and NCCL), the all-reduce
# benchmark against raw NCCL at 2 and 4 GPUs, and a short 2-GPU DDP training run.
#   usage: scripts/gpu_ddp_check.sh OUT_DIR      (after scripts/prepare_gpu_deps.sh brought .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi -L | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)

gpu_build dist_tests trainer bench_allreduce

echo "== multi-rank tests"
(cd build-gpu && ctest --output-on-failure -R '^dist\.' -j 4) >"$out/ctest.log" 2>&1
grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest.log" | tail -25

launch() { mpirun -np "$1" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "${@:2}"; }
echo "== all-reduce: ours against raw NCCL"
for n in 2 4; do
  [ "$n" -le "$gpus" ] && launch "$n" build-gpu/bench_allreduce 2>&1 | tee -a "$out/allreduce.txt"
done

echo "== 2-GPU DDP ResNet-50, 40 steps"
runs=$(mktemp -d)  # a fresh run directory: the trainer never writes into another run's
launch 2 build-gpu/trainer --config configs/resnet50_synthetic.toml --set dist.strategy=ddp \
  --set train.max_steps=40 --set run.out_dir="$runs" >"$out/ddp2.log" 2>&1
tail -5 "$out/ddp2.log"
tail -2 "$runs/resnet50_synthetic/metrics.jsonl"
