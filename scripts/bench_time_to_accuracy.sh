#!/usr/bin/env bash
# Time to a test accuracy on Fashion-MNIST, dtrain against the ordinary PyTorch script in the
# same call: ResNet-18 with the small stem (configs/fashion_mnist_resnet18.toml against
# scripts/torch_fashion_mnist.py: same model, optimizer, schedule, epochs, global batch 256
# and augmentation: random crops of the image padded by 2 pixels, mirrored half the time),
# on each GPU count (dtrain: `single` on one GPU, where the step is a CUDA graph, `ddp`
# on more; PyTorch: DistributedDataParallel on more). Each side's time is wall seconds from
# its process's start (dtrain: the eval records' time/wall_s; PyTorch: from its first
# statement) to the first evaluation at or above TARGET.
#   usage: scripts/bench_time_to_accuracy.sh BUILD_DIR OUT_DIR ["1 4"]
#   FASHION_MNIST (default /usr/share/datasets/fashion-mnist, else .cache/fashion-mnist: the
#   IDX files), EPOCHS (default 20), TARGET (default 0.94) override.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
read -ra counts <<<"${3:-1 4}"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh  # NCCL_NVLS_ENABLE=0, mpirun as root
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -e "$data/train-images-idx3-ubyte.gz" ] || data=.cache/fashion-mnist
data=$(cd "$data" && pwd)
epochs=${EPOCHS:-20} target=${TARGET:-0.94}

launch() {  # N COMMAND...
  local n=$1
  shift
  mpirun -np "$n" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    -x MASTER_PORT=$((29600 + n)) "$@"
}

dtrain_time() {  # N -> "seconds epoch best_accuracy" ("-" where the target was not reached)
  local n=$1 name="dtrain_np$1" strategy=single
  [ "$n" -gt 1 ] && strategy=ddp
  rm -rf "${out:?}/$name"
  launch "$n" "$build/trainer" --config configs/fashion_mnist_resnet18.toml \
    --set run.out_dir="$out" --set run.name="$name" --set data.path="$data" \
    --set dist.strategy=$strategy --set data.batch_size=$((256 / n)) \
    --set train.epochs="$epochs" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; }
  python3 - "$out/$name/metrics.jsonl" "$target" <<'PY'
import json, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "eval"]
hit = next((r for r in evals if r["accuracy/test"] >= float(sys.argv[2])), None)
best = max((r["accuracy/test"] for r in evals), default=0.0)
print(f"{hit['time/wall_s']:.1f} {int(hit['epoch'])}" if hit else "- -", f"{100 * best:.2f}")
PY
}

torch_time() {  # N -> "seconds epoch best_accuracy"
  local n=$1 log="$out/torch_np$1.log"
  launch "$n" python3 scripts/torch_fashion_mnist.py --data "$data" --epochs "$epochs" \
    --batch 256 --lr 0.2 --momentum 0.9 --weight-decay 5e-4 --warmup-epochs 1 --augment \
    --target "$target" >"$log" 2>&1 || { tail -20 "$log" >&2; }
  python3 - "$log" "$target" <<'PY'
import re, sys
line = r"epoch (\d+) \| test accuracy ([0-9.]+)% \| wall ([0-9.]+) s"
rows = [(float(a) / 100, float(w), int(e))
        for e, a, w in re.findall(line, open(sys.argv[1]).read())]
hit = next((r for r in rows if r[0] >= float(sys.argv[2])), None)
best = max((r[0] for r in rows), default=0.0)
print(f"{hit[1]:.1f} {hit[2]}" if hit else "- -", f"{100 * best:.2f}")
PY
}

echo "Fashion-MNIST, ResNet-18 (small stem), $epochs epochs, global batch 256, bf16:" \
  "wall s to $target"
echo
echo "| GPUs | dtrain s (epoch) | best % | PyTorch s (epoch) | best % | PyTorch / dtrain |"
echo "|---|---|---|---|---|---|"
for n in "${counts[@]}"; do
  read -r ds de dbest <<<"$(dtrain_time "$n")"
  read -r ts te tbest <<<"$(torch_time "$n")"
  speedup=$(awk -v d="$ds" -v t="$ts" \
    'BEGIN { if (d == "-" || t == "-") print "-"; else printf "%.2f", t / d }')
  echo "| $n | $ds ($de) | $dbest | $ts ($te) | $tbest | $speedup |"
done
