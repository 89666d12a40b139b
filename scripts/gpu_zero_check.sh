#!/usr/bin/env bash
# On a multi-GPU machine, ZeRO stages 1, 2 and 3 over NCCL: build, their multi-rank
# equivalence tests on the GPUs, then ResNet-50 (configs/resnet50_synthetic.toml, bf16, batch
# 128 per GPU) on every GPU under ddp and each stage beside PyTorch DDP, with each rank's
# model-state bytes and peak device memory, and a short fp16 run under ddp and stage 3 (loss
# scaling over gradient shards; stages 1 and 2 passed it before).
# RESUME_ONLY=1: after the build, only --resume through the trainer: each stage checkpointed at
# step 10 on every GPU (each rank writes its own optimizer-state file: listed), resumed to step
# 20 (RESUME_TO, default "GPUS:zero 2:zero GPUS:ddp 1:ddp GPUS:zero:1 2:zero:3 GPUS:ps":
# ranks:strategy[:stage], GPUS for every GPU, the stage the writer's if none), and the ZeRO
# checkpoint tests over NCCL.
#   usage: scripts/gpu_zero_check.sh OUT_DIR   (after scripts/prepare_gpu_deps.sh brought .deps)
#   env: STEPS (bf16 steps, default 60), STRATEGIES (default "ddp zero:stage1 zero:stage2
#        zero:stage3"), FP16_STRATEGIES (default "ddp zero:stage3")
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi -L | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)
export NCCL_NVLS_ENABLE=0

gpu_build dist_tests trainer

resume_check() {
  echo "== --resume: each stage checkpointed at step 10 on $gpus GPUs, resumed to 20 three ways"
  local base=(--config configs/resnet50_synthetic.toml --set run.out_dir="$out/resume"
    --set train.checkpoint_every=10 --set train.keep_checkpoints=2 --set run.log_every=5
    --set dist.timeout_s=120)
  local stage to ranks strategy
  for stage in 1 2 3; do
    scripts/mpirun.sh -np "$gpus" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
      build-gpu/trainer "${base[@]}" --set dist.strategy=zero --set dist.zero.stage=$stage \
      --set run.name="s$stage" --set train.max_steps=10 >"$out/resume_s$stage.log" 2>&1 ||
      { echo "FAILED: stage $stage to step 10"; tail -5 "$out/resume_s$stage.log"; continue; }
    echo "s$stage step 10 holds: $(ls "$out/resume/s$stage/checkpoints/step_00000010" | tr '\n' ' ')"
    for to in ${RESUME_TO:-GPUS:zero 2:zero GPUS:ddp 1:ddp GPUS:zero:1 2:zero:3 GPUS:ps}; do
      to=${to//GPUS/$gpus}
      IFS=: read -r ranks strategy to_stage <<<"$to"
      to_stage=${to_stage:-$stage}
      local name="s${stage}_to_${ranks}_${strategy}$to_stage"
      cp -r "$out/resume/s$stage" "$out/resume/$name"
      scripts/mpirun.sh -np "$ranks" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
        build-gpu/trainer "${base[@]}" --set dist.strategy="$strategy" \
        --set dist.zero.stage=$to_stage --set run.name="$name" --set train.max_steps=20 \
        --resume "$out/resume/$name" >"$out/resume_$name.log" 2>&1 ||
        echo "FAILED: $name"
      local log="$out/resume_$name.log"
      echo "$name: $(grep -hE "resumed from" "$log" | tail -1 | sed 's/.*at step/at step/') |" \
        "$(grep -hE "step +(15|20)/20" "$log" | tr '\n' ' ')"
    done
  done
}
if [ "${RESUME_ONLY:-0}" = 1 ]; then
  resume_check
  echo "== ZeRO checkpoint tests over NCCL"
  (cd build-gpu && ctest --output-on-failure -R '^dist\.zero_checkpoint_nccl' -j 1) \
    >"$out/ctest_checkpoint.log" 2>&1
  grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest_checkpoint.log" | tail -4
  exit 0
fi
# A stuck collective ends a test at its communicator's 60 s timeout, and a run below at
# dist.timeout_s, so that the rest of the check still fits in one call.
echo "== ZeRO and strategy tests over NCCL"
(cd build-gpu && ctest --output-on-failure -R '^dist\.(zero|zero2|zero3|zero_checkpoint|strategy)_nccl' -j 1) \
  >"$out/ctest.log" 2>&1
grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest.log" | tail -14

steps=${STEPS:-60}
strategies=${STRATEGIES:-"ddp zero:stage1 zero:stage2 zero:stage3"}
fp16_strategies=${FP16_STRATEGIES:-"ddp zero:stage3"}
echo "== ResNet-50 bf16 on $gpus GPUs, $steps steps: $strategies"
scripts/sweep_strategies.sh build-gpu "$out/bf16" --ranks "$gpus" --steps "$steps" --repeat 1 \
  --config configs/resnet50_synthetic.toml --strategies "$strategies" --set dist.timeout_s=120 |
  tee "$out/bf16.md"
for metrics in "$out"/bf16/*/metrics.jsonl; do  # stage 3's overlap and its units held whole
  python3 -c "
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r['kind'] == 'step']
keys = ('comm/ms', 'comm/exposed_ms', 'comm/collectives', 'memory/max_whole_units')
print(sys.argv[1].split('/')[-2], {k: steps[-1][k] for k in keys if k in steps[-1]})" "$metrics"
done
echo "== PyTorch DDP, the same model and batch (scripts/bench_torch_ddp.py)"
mpirun -np "$gpus" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
  -x MASTER_PORT=29555 python3 scripts/bench_torch_ddp.py --model resnet50 --batch 128 \
  --warmup 20 --steps 60 >"$out/torch_ddp.log" 2>&1 || tail -20 "$out/torch_ddp.log"
grep "img/s" "$out/torch_ddp.log"
echo "== fp16 with loss scaling, 40 steps"
scripts/sweep_strategies.sh build-gpu "$out/fp16" --ranks "$gpus" --steps 40 --repeat 1 \
  --config configs/resnet50_synthetic.toml --strategies "$fp16_strategies" \
  --set train.precision=fp16 --set dist.timeout_s=120 | tee "$out/fp16.md"
for metrics in "$out"/fp16/*/metrics.jsonl; do
  python3 -c "
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r['kind'] == 'step']
print(sys.argv[1].split('/')[-2], {k: v for k, v in steps[-1].items() if k.startswith('amp/')},
      'loss', steps[-1]['loss/train'])" "$metrics"
done
