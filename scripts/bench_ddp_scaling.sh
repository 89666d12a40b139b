#!/usr/bin/env bash
# Data-parallel scaling on one machine, dtrain against PyTorch DDP in the same call: ResNet-50
# (configs/resnet50_synthetic.toml: batch 128 per GPU, bf16, channels_last, synthetic data on
# the device) or ResNet-18 on 32x32 images (configs/resnet18_cifar_synthetic.toml, batch 256)
# at each GPU count, dtrain as its defaults run it, as a CUDA graph with DDP's all-reduces after
# backward, eagerly with DDP's overlap on and off, and scripts/bench_torch_ddp.py.
# At 1 GPU both sides train without DDP (dtrain: dist.strategy = single), and PyTorch's step
# also runs as a CUDA graph, with its GPU busy time (bench_torch_ddp.py --cuda-graph --gpu-busy).
#   usage: scripts/bench_ddp_scaling.sh BUILD_DIR OUT_DIR ["1 2 4"] [resnet50|resnet18_cifar]
# Prints a markdown table; efficiency = img/s at N GPUs / (N x that side's own img/s at 1 GPU).
# DEFAULT_ONLY=1 runs dtrain's defaults and PyTorch alone (issue 15's targets), the other
# columns "-": a round at 4 GPUs takes 2 runs rather than 6.
# Every run's log and metrics stay in OUT_DIR.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
read -ra counts <<<"${3:-1 2 4}"
[[ " ${counts[*]} " == *" 1 "* ]] || counts=(1 "${counts[@]}")  # efficiency needs 1 GPU
model=${4:-resnet50}
default_only=${DEFAULT_ONLY:-0}
cd "$(dirname "$0")/.."
. scripts/ddp_bench_lib.sh  # launch, dtrain_run, torch_run, ratio

efficiency() {  # RATE N BASE -> RATE / (N x BASE)
  ratio "$1" "$(awk -v n="$2" -v b="$3" 'BEGIN { print (b == "-") ? "-" : n * b }')"
}

# A run that fails shows "-" (its log's tail goes to stderr); the others still report.
# "default" is the trainer's own choice (the step a CUDA graph where train.cuda_graph's auto
# allows it: `single`, and `ddp` with its all-reduces inside the graph, overlapping backward);
# "graph, overlap off" launches them inside the graph after backward; "graph, fp32 grads" is
# the default with the gradients all-reduced in the parameters' fp32 (dist.ddp.reduce_dtype =
# "param", PyTorch DDP's choice) rather than in bf16; "eager" turns the graph off, with DDP's
# all-reduces overlapped with backward or after it. Inside a graph the all-reduces are not
# timed: "exposed ms" is then "-".
rows=() details=()
for n in "${counts[@]}"; do
  if [ "$n" -eq 1 ]; then
    default=$(dtrain_run 1 np1_single --set dist.strategy=single) || default="- - - -"
    graph_off=$default
    fp32_grads=$default
    on="- - - -"
    [ "$default_only" = 1 ] || on=$(dtrain_run 1 np1_single_eager --set dist.strategy=single \
      --set train.cuda_graph=off) || on="- - - -"
    off=$on
  else
    default=$(dtrain_run "$n" "np${n}_ddp" --set dist.strategy=ddp) || default="- - - -"
    graph_off="- - - -" fp32_grads="- - - -" on="- - - -" off="- - - -"
    if [ "$default_only" != 1 ]; then
      graph_off=$(dtrain_run "$n" "np${n}_graph_overlap_off" --set dist.strategy=ddp \
        --set dist.ddp.overlap=false) || graph_off="- - - -"
      fp32_grads=$(dtrain_run "$n" "np${n}_graph_fp32_grads" --set dist.strategy=ddp \
        --set dist.ddp.reduce_dtype=param) || fp32_grads="- - - -"
      on=$(dtrain_run "$n" "np${n}_eager_overlap_on" --set dist.strategy=ddp \
        --set train.cuda_graph=off --set dist.ddp.overlap=true) || on="- - - -"
      off=$(dtrain_run "$n" "np${n}_eager_overlap_off" --set dist.strategy=ddp \
        --set train.cuda_graph=off --set dist.ddp.overlap=false) || off="- - - -"
    fi
    for run in default graph_off fp32_grads on off; do
      read -r _ exposed_ms comm_ms busbw <<<"${!run}"
      [ "$run" = default ] || [ "$default_only" != 1 ] || continue
      details+=("$n GPUs, $run: comm $comm_ms ms/step at $busbw GB/s busbw, $exposed_ms ms exposed")
    done
  fi
  read -r default_rate default_exposed _ _ <<<"$default"
  read -r graph_off_rate _ _ _ <<<"$graph_off"
  read -r fp32_grads_rate _ _ _ <<<"$fp32_grads"
  read -r on_rate _ _ _ <<<"$on"
  read -r off_rate _ _ _ <<<"$off"
  torch_rate=$(torch_run "$n" "torch_ddp_np$n" $([ "$n" -gt 1 ] || echo --gpu-busy)) || true
  torch_rate=${torch_rate:--}
  if [ "$n" -eq 1 ]; then
    dtrain_base=$default_rate torch_base=$torch_rate
    # What PyTorch's one-GPU step costs without the host's launches: the GPU's busy share of
    # its eager step, and the same step replayed as a CUDA graph.
    torch_graph=$(torch_run 1 torch_graph_np1 --cuda-graph --gpu-busy) || true
    details+=("1 GPU, PyTorch eager: $(grep -h 'gpu busy' "$out/torch_ddp_np1.log" || echo -)")
    graph_busy=$(grep -h 'gpu busy' "$out/torch_graph_np1.log" || echo -)
    details+=("1 GPU, PyTorch as a CUDA graph: ${torch_graph:--} img/s, $graph_busy")
  fi
  rows+=("$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' "$n" \
    "$default_rate" "$(efficiency "$default_rate" "$n" "$dtrain_base")" "$default_exposed" \
    "$graph_off_rate" "$fp32_grads_rate" "$on_rate" "$off_rate" "$torch_rate" \
    "$(efficiency "$torch_rate" "$n" "$torch_base")")")
done

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n 1p)
echo "$model on $gpu ($config): bf16, channels_last, synthetic data"
echo
echo "| GPUs | dtrain default img/s | eff | exposed ms | graph, overlap off img/s | graph, fp32 grads img/s | eager, overlap on img/s | eager, overlap off img/s | torch DDP img/s | eff |"
echo "|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${details[@]}"
