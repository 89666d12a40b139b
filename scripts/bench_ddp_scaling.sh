#!/usr/bin/env bash
# Data-parallel scaling on one machine, dtrain against PyTorch DDP in the same call: ResNet-50
# (configs/resnet50_synthetic.toml: batch 128 per GPU, bf16, channels_last, synthetic data on
# the device) or ResNet-18 on 32x32 images (configs/resnet18_cifar_synthetic.toml, batch 256)
# at each GPU count, dtrain's DDP with overlap on and off, and scripts/bench_torch_ddp.py.
# At 1 GPU both sides train without DDP (dtrain: dist.strategy = single).
#   usage: scripts/bench_ddp_scaling.sh BUILD_DIR OUT_DIR ["1 2 4"] [resnet50|resnet18_cifar]
# Prints a markdown table; efficiency = img/s at N GPUs / (N x that side's own img/s at 1 GPU).
# Every run's log and metrics stay in OUT_DIR.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
read -ra counts <<<"${3:-1 2 4}"
[[ " ${counts[*]} " == *" 1 "* ]] || counts=(1 "${counts[@]}")  # efficiency needs 1 GPU
model=${4:-resnet50}
cd "$(dirname "$0")/.."
. scripts/ddp_bench_lib.sh  # launch, dtrain_run, torch_run, ratio

efficiency() {  # RATE N BASE -> RATE / (N x BASE)
  ratio "$1" "$(awk -v n="$2" -v b="$3" 'BEGIN { print (b == "-") ? "-" : n * b }')"
}

# A run that fails shows "-" (its log's tail goes to stderr); the others still report.
rows=() details=()
for n in "${counts[@]}"; do
  if [ "$n" -eq 1 ]; then
    on=$(dtrain_run 1 np1_single --set dist.strategy=single) || on="- - - -"
    off=$on
  else
    on=$(dtrain_run "$n" "np${n}_overlap_on" --set dist.strategy=ddp \
      --set dist.ddp.overlap=true) || on="- - - -"
    off=$(dtrain_run "$n" "np${n}_overlap_off" --set dist.strategy=ddp \
      --set dist.ddp.overlap=false) || off="- - - -"
    read -r _ _ on_ms on_busbw <<<"$on"
    read -r _ _ off_ms off_busbw <<<"$off"
    details+=("$n GPUs: comm $on_ms ms/step at $on_busbw GB/s busbw with overlap on, \
$off_ms ms/step at $off_busbw GB/s with overlap off")
  fi
  read -r on_rate on_exposed _ _ <<<"$on"
  read -r off_rate off_exposed _ _ <<<"$off"
  torch_rate=$(torch_run "$n" "torch_ddp_np$n") || true
  torch_rate=${torch_rate:--}
  if [ "$n" -eq 1 ]; then dtrain_base=$on_rate torch_base=$torch_rate; fi
  rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s |' "$n" \
    "$on_rate" "$(efficiency "$on_rate" "$n" "$dtrain_base")" "$on_exposed" \
    "$off_rate" "$off_exposed" "$torch_rate" "$(efficiency "$torch_rate" "$n" "$torch_base")")")
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$model on $gpu ($config): bf16, channels_last, synthetic data"
echo
echo "| GPUs | dtrain overlap on img/s | eff | exposed ms | overlap off img/s | exposed ms | torch DDP img/s | eff |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${details[@]}"
