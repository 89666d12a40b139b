#!/usr/bin/env bash
# On a GPU machine: build with CUDA LibTorch, run the unit tests, a bf16 and an fp16 ResNet-50
# run, the ResNet-50 benchmark against PyTorch, and load a checkpoint into torchvision.
#   usage: scripts/gpu_validate.sh OUT_DIR      (after scripts/prepare_gpu_deps.sh brought .deps)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

gpu_build

echo "== unit tests (end-to-end scripts need Debian's Fashion-MNIST, absent here)"
(cd build-gpu && ctest --output-on-failure -E '^e2e\.' -j 8) >"$out/ctest.log" 2>&1
tail -15 "$out/ctest.log"

echo "== ResNet-50 fp16 (loss scaling) and checkpoint export"
runs=$(mktemp -d)  # a fresh run directory: the trainer never writes into another run's
build-gpu/trainer --config configs/resnet50_synthetic.toml --set run.out_dir="$runs" \
  --set run.name=fp16 --set train.precision=fp16 --set train.max_steps=40 \
  --set train.keep_checkpoints=1 --set train.checkpoint_every=40 2>&1 | tail -4
python3 - "$runs/fp16/checkpoints/step_00000040/model.pt" <<'PY'
import sys, torch, torchvision
state = torch.load(sys.argv[1], weights_only=False)
model = torchvision.models.resnet50()
model.load_state_dict(state, strict=True)
print(f"torchvision resnet50 loaded {len(state)} tensors from dtrain's checkpoint (strict)")
PY

echo "== ResNet-50 throughput: dtrain vs PyTorch"
scripts/bench_resnet50.sh build-gpu bf16 fp16 fp32 | tee "$out/bench.txt"
