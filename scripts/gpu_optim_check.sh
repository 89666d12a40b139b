#!/usr/bin/env bash
# On a GPU machine: build the optimizer tests and benchmark, run LARS, LAMB and the multi-tensor
# kernels on the GPU (ctest optim.cuda), and time SGD, LARS and LAMB steps on ResNet-50 against
# the memory-bandwidth floor.
#   usage: scripts/gpu_optim_check.sh OUT_DIR      (after scripts/prepare_gpu_deps.sh brought .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

gpu_build optim_tests bench_optim

echo "== optim tests on the GPU"
(cd build-gpu && ctest --output-on-failure -R '^optim\.cuda$') >"$out/ctest.log" 2>&1
tail -8 "$out/ctest.log"

echo "== optimizer step time (ResNet-50, fp32)"
build-gpu/bench_optim cuda | tee "$out/bench_optim.txt"
