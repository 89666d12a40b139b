#!/usr/bin/env bash
# JPEG images at GPU speed: dtrain's image pipeline against PyTorch's DataLoader, each beside
# its own synthetic-data rate, in one call. ResNet-50, batch 128 per GPU, bf16, channels_last,
# SGD momentum, on an ImageNet-shaped folder of JPEGs (scripts/make_image_folder.py). At each
# GPU count:
#   dtrain  synthetic      configs/resnet50_synthetic.toml: the ceiling
#   dtrain  image folder   configs/resnet50_image_folder.toml: WORKERS loader threads per rank
#                          decode the crops, the GPU resizes, flips and normalises
#                          (data.image_transform = device); with HOST=1 also = host
#   PyTorch synthetic      scripts/torch_image_folder.py --synthetic
#   PyTorch DataLoader     scripts/torch_image_folder.py (ImageFolder, RandomResizedCrop, flip,
#                          ToTensor, Normalize; DataLoader worker processes, pinned memory), the
#                          best of the worker counts in TORCH_WORKERS
# One GPU: dtrain's `single` strategy (its step a CUDA graph) and plain PyTorch; more: DDP.
#   usage: scripts/bench_image_folder.sh BUILD_DIR OUT_DIR ["1 4"]
#   env:   WORKERS (12): dtrain's loader threads per rank, and its data.prefetch (each thread
#            fills a whole batch; more in the making would only stack up during the first
#            step's cuDNN search and flatter the rate later)
#          TORCH_WORKERS ("8 15"): DataLoader worker processes per rank, each count run
#          HOST (0): 1 also runs dtrain with data.image_transform = host
#          WARMUP (60), STEPS (60): steps left out, then steps measured (multiples of 20, the
#            logging interval). The warm-up is long so that batches stacked up while the
#            first step ran are used up before the clock starts.
#          FOLDER (/tmp/dtrain_imagenet_like): the images, made there when absent and reused
#            by later calls on the same machine; a folder of your own (ImageNet: train/ and
#            val/) is used as it is
#          IMAGES, CLASSES (1000): the folder to make; IMAGES by default just enough for the
#            largest GPU count's WARMUP + STEPS to stay within one epoch (both loaders refill
#            their pipelines at an epoch's start, which ImageNet's long epochs hide), and at
#            least 25 a class
# Prints one markdown table: img/s over all GPUs, that over the side's own synthetic rate,
# the ms a step waited for the loader, CPU cores busy (CPU seconds over wall seconds of
# rank 0's process and, for PyTorch, its worker processes) and dtrain's loader-thread time per
# image; all but img/s rank 0's, over the measured steps. Below it, each run's rate per logged
# interval (warm-up included for dtrain; "|" where it ends), to see it is steady, and the
# ratio dtrain / PyTorch on the folder. A failed run shows its log's tail and "-" in the
# table; the others still run. Every run's log and metrics stay in OUT_DIR.
# The folder is read from the page cache (it was just written or read): this measures
# decoding and transforms, not storage.
# Only for trying the script without a GPU: DEVICE=cpu (fp32), MODEL (resnet50), BATCH (128).
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
read -ra counts <<<"${3:-1 4}"
cd "$(dirname "$0")/.."
. scripts/ddp_bench_lib.sh  # launch, ratio; scripts/gpu_env.sh (NCCL_NVLS_ENABLE=0, mpirun as root)

workers=${WORKERS:-12} host=${HOST:-0} warmup=${WARMUP:-60} steps=${STEPS:-60}
read -ra torch_workers <<<"${TORCH_WORKERS:-8 15}"
device=${DEVICE:-cuda} arch=${MODEL:-resnet50} batch=${BATCH:-128}
folder=${FOLDER:-/tmp/dtrain_imagenet_like}
log_every=20
if ((warmup % log_every || steps % log_every || warmup < log_every || steps < log_every)); then
  echo "WARMUP $warmup and STEPS $steps must be multiples of the logging interval $log_every" >&2
  exit 2
fi
max_gpus=$(printf '%s\n' "${counts[@]}" | sort -n | tail -1)
# Train images for the largest count's steps plus one, val/ being 4% of all; at least 25 a
# class, so that every class has an image in val/ (make_image_folder.py requires one).
classes=${CLASSES:-1000}
needed=$(((warmup + steps + 1) * batch * max_gpus))
images=$(((needed * 100 / 96 / 1000 + 1) * 1000))
images=${IMAGES:-$((images > 25 * classes ? images : 25 * classes))}

dtrain_args=(--set train.max_steps=$((warmup + steps)) --set run.log_every="$log_every"
  --set train.eval_every=0 --set data.batch_size="$batch" --set model.name="$arch")
torch_args=(--batch "$batch" --warmup "$warmup" --steps "$steps" --log-every "$log_every"
  --model "$arch" --device "$device")
if [ "$device" = cpu ]; then
  dtrain_args+=(--set run.device=cpu --set train.precision=fp32)
  gpu="CPU ($(getconf _NPROCESSORS_ONLN) cores)"
else
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
fi

# The folder: ours (made by this script, its stamp naming what it holds) is remade when it
# holds other images; one without the stamp is someone's own and used as it is.
make_folder() {
  local stamp="$folder/made_by_bench_image_folder" want="images $images classes $classes seed 0"
  if [ -e "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "reusing $folder ($want)"
  elif [ -e "$stamp" ] || [ ! -e "$folder" ]; then
    rm -rf "${folder:?}" "$folder.partial"
    echo "making $folder: $images images on $(getconf _NPROCESSORS_ONLN) cores"
    python3 scripts/make_image_folder.py "$folder.partial" --images "$images" \
      --classes "$classes" \
      | tee "$out/make_image_folder.log"
    echo "$want" >"$folder.partial/made_by_bench_image_folder"
    mv "$folder.partial" "$folder"
  elif [ -d "$folder/train" ]; then
    echo "using $folder as it is (not made by this script)"
  else
    echo "FOLDER $folder exists without train/ and was not made by this script;" \
      "remove it or set FOLDER elsewhere" >&2
    exit 2
  fi
}

failed() {  # LOG: its tail on stderr
  echo "== $(basename "$1" .log) failed; the end of $1:" >&2
  tail -30 "$1" >&2
}

# N NAME CONFIG [--set ...] -> "img/s wait_ms cores decode_ms rates", rank 0's, over the
# logged intervals after WARMUP; rates: every interval's img/s, "|" where WARMUP ends.
dtrain_run() {
  local n=$1 name=$2 config=$3 strategy=single
  shift 3
  [ "$n" -gt 1 ] && strategy=ddp
  rm -rf "${out:?}/$name"  # a rerun into the same $out replaces the benchmark's earlier run
  launch "$n" "$build/trainer" --config "$config" --set run.out_dir="$out" \
    --set run.name="$name" --set dist.strategy=$strategy "${dtrain_args[@]}" "$@" \
    >"$out/$name.log" 2>&1 || { failed "$out/$name.log"; return 1; }
  python3 - "$out/$name/metrics.jsonl" "$warmup" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"step"' in l]
warmup = int(sys.argv[2])
# (steps in the interval, record) for the intervals wholly after the warm-up.
starts = [0] + [r["step"] for r in records[:-1]]
measured = [(r["step"] - s, r) for s, r in zip(starts, records) if s >= warmup]
def mean(key, digits):
    pairs = [(n, r[key]) for n, r in measured if key in r]
    if not pairs:
        return "-"
    return f"{sum(n * v for n, v in pairs) / sum(n for n, _ in pairs):.{digits}f}"
# The measured steps over their summed time (the batch is the same in every step).
rate = (f"{sum(n for n, _ in measured) / sum(n / r['throughput/img_per_s'] for n, r in measured):.0f}"
        if measured else "-")
rates = ",".join(("|" if s == warmup else "") + f"{r['throughput/img_per_s']:.0f}"
                 for s, r in zip(starts, records))
print(rate, mean("data/wait_ms", 1), mean("cpu/cores", 1), mean("data/decode_ms_per_image", 2),
      rates or "-")
PY
}

# N NAME [torch_image_folder.py options] -> "img/s wait_ms cores rates"
torch_run() {
  local n=$1 log="$out/$2.log"
  shift 2
  launch "$n" python3 scripts/torch_image_folder.py "${torch_args[@]}" "$@" >"$log" 2>&1 \
    || { failed "$log"; return 1; }
  local figures rates
  figures=$(sed -n 's/.*img\/s: \([0-9.]*\) | data wait ms\/step: \([0-9.]*\) | CPU cores busy: \([0-9.]*\).*/\1 \2 \3/p' "$log")
  rates=$(sed -n 's/^steps [0-9-]*: \([0-9]*\) img\/s$/\1/p' "$log" | paste -sd, -)
  [ -n "$figures" ] || { failed "$log"; return 1; }
  echo "$figures |${rates:--}"
}

# FIELDS COMMAND ARGS...: the command's figures, or FIELDS "-" where it failed; the run's
# name ($3 of the command's arguments) and wall seconds on stderr, to follow the call.
timed() {
  local fields=$1 start=$SECONDS
  shift
  "$@" || printf -- '- %.0s' $(seq "$fields")
  echo "$3: $((SECONDS - start)) s" >&2
}

row() {  # N SIDE DATA RATE BASE WAIT CORES DECODE
  rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s |' "$1" "$2" "$3" "$4" \
    "$(ratio "$4" "$5")" "$6" "$7" "$8")")
}

start=$SECONDS
make_folder
echo "folder ready after $((SECONDS - start)) s" >&2
rows=() details=()
for n in "${counts[@]}"; do
  dtrain_rate=-
  if [ "$device" != cpu ] && [ "$n" -gt "$(nvidia-smi -L | wc -l)" ]; then
    echo "skipping $n GPUs: this machine has $(nvidia-smi -L | wc -l)" >&2
    continue
  fi
  synth=$(timed 5 dtrain_run "$n" "dtrain_np${n}_synthetic" configs/resnet50_synthetic.toml)
  read -r base wait cores decode rates <<<"$synth"
  row "$n" dtrain synthetic "$base" "$base" "$wait" "$cores" "$decode"
  details+=("$n GPUs, dtrain synthetic: img/s per interval $rates")
  transforms=(device)
  [ "$host" = 1 ] && transforms+=(host)
  for transform in "${transforms[@]}"; do
    image=$(timed 5 dtrain_run "$n" "dtrain_np${n}_${transform}" \
      configs/resnet50_image_folder.toml --set data.path="$folder" \
      --set data.num_workers="$workers" --set data.prefetch="$workers" \
      --set data.image_transform="$transform")
    read -r rate wait cores decode rates <<<"$image"
    row "$n" dtrain "folder, $transform transform, $workers threads" "$rate" "$base" "$wait" \
      "$cores" "$decode"
    details+=("$n GPUs, dtrain $transform transform: img/s per interval $rates")
    if [ "$transform" = device ]; then dtrain_rate=$rate; fi
  done

  synth=$(timed 4 torch_run "$n" "torch_np${n}_synthetic" --synthetic)
  read -r base wait cores rates <<<"$synth"
  row "$n" PyTorch synthetic "$base" "$base" "$wait" "$cores" -
  details+=("$n GPUs, PyTorch synthetic: img/s per interval $rates")
  best="- - - -" best_workers=-
  for w in "${torch_workers[@]}"; do
    loader=$(timed 4 torch_run "$n" "torch_np${n}_workers$w" --data "$folder" --workers "$w")
    read -r rate _ _ rates <<<"$loader"
    details+=("$n GPUs, PyTorch DataLoader $w workers: $rate img/s, per interval $rates")
    if [ "$rate" != - ] && { [ "$best_workers" = - ] || \
      awk -v a="$rate" -v b="${best%% *}" 'BEGIN { exit !(a > b) }'; }; then
      best=$loader best_workers=$w
    fi
  done
  read -r rate wait cores _ <<<"$best"
  row "$n" PyTorch "DataLoader, best of ${torch_workers[*]} workers: $best_workers" "$rate" \
    "$base" "$wait" "$cores" -
  speedup=$(ratio "$dtrain_rate" "$rate")
  details+=("$n GPUs, on the folder: dtrain (device transform) / PyTorch (best) = $speedup")
done

echo
echo "$arch on $gpu, batch $batch per GPU, $([ "$device" = cpu ] && echo fp32 || echo bf16)," \
  "channels_last; $folder ($(find "$folder/train" -type f | wc -l) train images);" \
  "$steps steps measured after $warmup; $((SECONDS - start)) s in all"
echo
echo "| GPUs | side | data | img/s | vs own synthetic | data wait ms/step | CPU cores busy (rank 0) | decode ms/image |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${details[@]}"
