#!/usr/bin/env bash
# DDP with its step replayed as a CUDA graph (train.cuda_graph = "on", the all-reduces captured
# inside it) against the eager DDP step, on N GPUs: ResNet-18 on synthetic 32x32 data
# in fp32, the training loss of every one of the first STEPS steps. Two eager runs give the
# run-to-run noise (cuDNN's algorithm choice); the graphed run must stay within ten times it
# (at least 1e-5 relative). A rank whose gradients were not averaged, or were a step late,
# moves the loss from the second step on by far more.
#   usage: scripts/gpu_graph_check.sh BUILD_DIR OUT_DIR [N]    (STEPS: default 20)
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
n=${3:-2}
steps=${STEPS:-20}
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh  # NCCL_NVLS_ENABLE=0, mpirun as root

run() {  # NAME GRAPH: trains, leaves NAME/metrics.jsonl in $out
  rm -rf "${out:?}/$1"
  mpirun -np "$n" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    "$build/trainer" --config configs/resnet18_cifar_synthetic.toml \
    --set run.out_dir="$out" --set run.name="$1" --set dist.strategy=ddp \
    --set train.precision=fp32 --set train.max_steps="$steps" --set run.log_every=1 \
    --set train.cuda_graph="$2" >"$out/$1.log" 2>&1 || { tail -20 "$out/$1.log"; exit 1; }
}

run eager_a off
run eager_b off
run graphed on
grep -h "cuda_graph:" "$out/graphed.log" | head -1
python3 - "$out" <<'PY'
import json, sys
def losses(name):
    rows = [json.loads(line) for line in open(f"{sys.argv[1]}/{name}/metrics.jsonl")]
    return [r["loss/train"] for r in rows if "loss/train" in r]
a, b, g = losses("eager_a"), losses("eager_b"), losses("graphed")
assert len(a) == len(b) == len(g) > 1, (len(a), len(b), len(g))
def worst(x, y):
    return max(abs(p - q) / abs(q) for p, q in zip(x, y))
noise, graphed = worst(b, a), worst(g, a)
bound = max(10 * noise, 1e-5)
print(f"{len(a)} steps: eager vs eager {noise:.2e}, graphed vs eager {graphed:.2e} "
      f"(bound {bound:.2e}); losses {a[0]:.4f} -> {a[-1]:.4f}")
sys.exit(0 if graphed <= bound else 1)
PY
