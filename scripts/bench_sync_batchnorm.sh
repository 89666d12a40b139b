#!/usr/bin/env bash
# What SyncBatchNorm costs in data-parallel ResNet-50, dtrain against PyTorch in the same call:
# at each GPU count, DDP with per-rank BatchNorm and with SyncBatchNorm (dtrain:
# model.sync_batchnorm; PyTorch: nn.SyncBatchNorm.convert_sync_batchnorm), on
# configs/resnet50_synthetic.toml's settings (batch 128 per GPU, bf16, channels_last).
#   usage: scripts/bench_sync_batchnorm.sh BUILD_DIR OUT_DIR ["2 4"]
# Prints a markdown table; "kept" = img/s with SyncBatchNorm / img/s without, per side.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
read -ra counts <<<"${3:-2 4}"
cd "$(dirname "$0")/.."
. scripts/ddp_bench_lib.sh  # launch, dtrain_run, torch_run, ratio

rows=()
for n in "${counts[@]}"; do
  plain=$(dtrain_run "$n" "np${n}_bn" --set dist.strategy=ddp) || plain="-"
  synced=$(dtrain_run "$n" "np${n}_sync_bn" --set dist.strategy=ddp \
    --set model.sync_batchnorm=true) || synced="-"
  torch_plain=$(torch_run "$n" "torch_np${n}_bn") || torch_plain="-"
  torch_synced=$(torch_run "$n" "torch_np${n}_sync_bn" --sync-bn) || torch_synced="-"
  read -r plain _ <<<"$plain"
  read -r synced _ <<<"$synced"
  rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s |' "$n" "$plain" "$synced" \
    "$(ratio "$synced" "$plain")" "${torch_plain:--}" "${torch_synced:--}" \
    "$(ratio "${torch_synced:--}" "${torch_plain:--}")")")
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "ResNet-50 DDP on $gpu: batch 128 per GPU, bf16, channels_last, synthetic data"
echo
echo "| GPUs | dtrain BN img/s | dtrain SyncBN img/s | kept | torch BN img/s | torch SyncBN img/s | kept |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
