#!/usr/bin/env bash
# Large batches on Fashion-MNIST over several seeds: SimpleCNN for EPOCHS epochs with SGD at
# global batch 128 (configs/fashion_mnist.toml, the baseline), LAMB at 4096
# (configs/fashion_mnist_lamb_4k.toml) and LARS at 4096 (configs/fashion_mnist_lars_4k.toml) at
# each of LARS_SETTINGS, every run one process on one GPU (dist.strategy = single), PER_GPU runs
# at once on each GPU. Every run takes micro-steps of 64 (train.grad_accum 2 and 64), so
# BatchNorm normalises batches of 64 as in the CPU runs of docs/LARGE_BATCH.md. Prints a
# markdown table of test accuracies: each seed's final one, the means of the final and the
# best, and the gap of the mean final to the baseline's against the 1-point bar.
#   usage: scripts/bench_large_batch.sh BUILD_DIR OUT_DIR
#   EPOCHS (default 30), SEEDS (default "0 1 2"), PER_GPU (runs at once per GPU, default 6),
#   GPUS (default: all that nvidia-smi lists), FASHION_MNIST (default
#   /usr/share/datasets/fashion-mnist, else .cache/fashion-mnist: the IDX files),
#   LARS_SETTINGS (each lr:eta[:warmup_epochs], default "10:0.001 5:0.002 2.5:0.004 5:0.002:3
#   10:0.001:3"; the warm-up defaults to the config's) and DEVICE (default cuda; cpu tries the
#   script on a machine without GPUs) override.
# Every run's log (NAME.log) and directory (NAME/) stay in OUT_DIR.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
cd "$(dirname "$0")/.."
device=${DEVICE:-cuda}
if [ "$device" = cpu ]; then
  gpus=${GPUS:-1}
  hardware="CPU, $(nproc) cores"
else
  . scripts/gpu_env.sh  # LD_LIBRARY_PATH: the trainer's JPEG/PNG libraries in .deps
  gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
  hardware="$gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
fi
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -e "$data/train-images-idx3-ubyte.gz" ] || data=.cache/fashion-mnist
data=$(cd "$data" && pwd)
epochs=${EPOCHS:-30} per_gpu=${PER_GPU:-6}
read -ra seeds <<<"${SEEDS:-0 1 2}"
read -ra lars_settings <<<"${LARS_SETTINGS:-10:0.001 5:0.002 2.5:0.004 5:0.002:3 10:0.001:3}"

# The settings, one table row each: run-name prefix, label, global batch, config, overrides.
names=(sgd_128 lamb_4k)
labels=("SGD (baseline)" "LAMB")
batches=(128 4096)
configs=(configs/fashion_mnist.toml configs/fashion_mnist_lamb_4k.toml)
overrides=("train.grad_accum=2" "train.grad_accum=64")
lars_warmup=$(sed -n 's/^warmup_epochs = //p' configs/fashion_mnist_lars_4k.toml)
for setting in "${lars_settings[@]}"; do
  IFS=: read -r lr eta warmup <<<"$setting"
  warmup=${warmup:-$lars_warmup}
  names+=("lars_4k_lr${lr}_eta${eta}_w${warmup}")
  labels+=("LARS lr $lr, eta $eta, warm-up $warmup")
  batches+=(4096)
  configs+=(configs/fashion_mnist_lars_4k.toml)
  overrides+=("train.grad_accum=64 optim.lr=$lr optim.trust_coefficient=$eta \
schedule.warmup_epochs=$warmup")
done

run_one() {  # GPU NAME CONFIG KEY=VALUE...: one training run; a failed one leaves NAME.failed
  local gpu=$1 name=$2 config=$3 kv sets=()
  shift 3
  for kv; do sets+=(--set "$kv"); done
  # A run directory that holds a run is refused: a rerun into the same OUT_DIR replaces it.
  rm -rf "${out:?}/$name" "$out/$name.failed"
  # 2 torch threads and no loader threads (the data is in memory) keep PER_GPU x GPUS
  # processes within 16 cores per GPU.
  CUDA_VISIBLE_DEVICES=$gpu "$build/trainer" --config "$config" "${sets[@]}" \
    --set dist.strategy=single --set run.device="$device" --set run.num_threads=2 \
    --set data.num_workers=0 --set data.batch_size=64 --set data.path="$data" \
    --set train.epochs="$epochs" --set run.out_dir="$out" --set run.name="$name" \
    >"$out/$name.log" 2>&1 || {
    { echo "$name failed:"; tail -20 "$out/$name.log"; } >&2
    touch "$out/$name.failed"
  }
}

slots=()  # slots[k]: the pid of the run in slot k, which trains on GPU k % gpus
free_slot() {  # sets slot to one whose run has ended, waiting for a run to end if none has
  while :; do
    for ((slot = 0; slot < gpus * per_gpu; slot++)); do
      if [ -z "${slots[slot]:-}" ] || ! kill -0 "${slots[slot]}" 2>/dev/null; then return; fi
    done
    wait -n  # run_one reports its run's failure itself and returns 0
  done
}

accuracy() {  # NAME -> "final best": test accuracy % after the last epoch, and the best
  if [ -e "$out/$1.failed" ]; then echo "- -"; return; fi
  python3 - "$out/$1/metrics.jsonl" <<'PY'
import json, sys
evals = [r["accuracy/test"] for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "eval"]
print(f"{100 * evals[-1]:.2f} {100 * max(evals):.2f}")
PY
}

mean() {  # VALUES... -> their mean over those that are not "-"
  awk 'BEGIN { for (i = 1; i < ARGC; i++) if (ARGV[i] != "-") { s += ARGV[i]; n++ }
               if (n) printf "%.2f\n", s / n; else print "-" }' "$@"
}

row() {  # INDEX BASELINE_MEAN -> the setting's table row; sets row_mean (its mean final)
  local i=$1 base=$2 seed final best finals=() bests=()
  for seed in "${seeds[@]}"; do
    read -r final best <<<"$(accuracy "${names[i]}_s$seed")"
    finals+=("$final") bests+=("$best")
  done
  row_mean=$(mean "${finals[@]}")
  local verdict
  verdict=$(awk -v m="$row_mean" -v b="$base" 'BEGIN {
    if (m == "-" || b == "-") print "- | -"
    else printf "%+.2f | %s\n", m - b, (m - b >= -1) ? "yes" : "no" }')
  printf '| %s | %s |' "${labels[i]}" "${batches[i]}"
  printf ' %s |' "${finals[@]}"
  printf ' %s | %s | %s |\n' "$row_mean" "$(mean "${bests[@]}")" "$verdict"
}

runs=0
for seed in "${seeds[@]}"; do
  for i in "${!names[@]}"; do
    free_slot
    read -ra args <<<"${overrides[i]} run.seed=$seed"
    run_one $((slot % gpus)) "${names[i]}_s$seed" "${configs[i]}" "${args[@]}" &
    slots[slot]=$!
    runs=$((runs + 1))
  done
done
wait

echo "Fashion-MNIST, SimpleCNN, $epochs epochs, micro-batches of 64, seeds ${seeds[*]}:" \
  "test accuracy % | $hardware, $per_gpu runs at once per GPU | $(date '+%Y-%m-%d %H:%M %Z')"
echo
printf '| setting | global batch |'
printf ' seed %s final |' "${seeds[@]}"
echo ' mean final | mean best | gap to baseline (points) | within 1 point |'
printf '|---|---|'
printf -- '---|%.0s' "${seeds[@]}"
echo '---|---|---|---|'
row 0 -  # the baseline's own row gives the baseline's mean
base=$row_mean
for ((i = 1; i < ${#names[@]}; i++)); do row "$i" "$base"; done
echo
echo "wall time: $SECONDS s for $runs runs"
