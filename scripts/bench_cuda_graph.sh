#!/usr/bin/env bash
# train.cuda_graph on one GPU: dtrain's `single` strategy eager ("off") and with its forward
# and backward replayed as a CUDA graph ("on", what "auto" picks for these runs), beside
# PyTorch (scripts/bench_torch_ddp.py, eager), for ResNet-18 on 32x32 images
# (configs/resnet18_cifar_synthetic.toml, batch 256: a step bound by kernel launches) and
# ResNet-50 (configs/resnet50_synthetic.toml, batch 128), bf16, channels_last, synthetic data
# on the device. ROUNDS rounds (default 3) alternate the three runs, so that a drift of the
# machine reaches each alike; the table gives each side's median and the rounds' range, and
# the ratios of the medians.
#   usage: scripts/bench_cuda_graph.sh BUILD_DIR OUT_DIR [MODELS]  (MODELS: default
#          "resnet18_cifar resnet50")
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
models=${3:-resnet18_cifar resnet50}
rounds=${ROUNDS:-3}
cd "$(dirname "$0")/.."

median_range() {  # VALUES... -> "median (min-max)"
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.0f (%.0f-%.0f)\n", m, v[1], v[NR] }'
}

echo "| model | dtrain eager img/s | dtrain cuda_graph img/s | PyTorch img/s | graph / eager | graph / PyTorch |"
echo "|---|---|---|---|---|---|"
for model in $models; do
  . scripts/ddp_bench_lib.sh  # config, torch_args, dtrain_run, torch_run, ratio for $model
  eager=() graphed=() torch=()
  for r in $(seq 1 "$rounds"); do
    read -r rate _ <<<"$(dtrain_run 1 "${model}_eager_r$r" --set dist.strategy=single \
      --set train.cuda_graph=off)"
    eager+=("$rate")
    read -r rate _ <<<"$(dtrain_run 1 "${model}_graph_r$r" --set dist.strategy=single \
      --set train.cuda_graph=on)"
    graphed+=("$rate")
    torch+=("$(torch_run 1 "${model}_torch_r$r")")
  done
  e=$(median_range "${eager[@]}") g=$(median_range "${graphed[@]}") t=$(median_range "${torch[@]}")
  echo "| $model | $e | $g | $t | $(ratio "${g%% *}" "${e%% *}") | $(ratio "${g%% *}" "${t%% *}") |"
done
