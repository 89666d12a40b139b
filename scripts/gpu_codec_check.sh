#!/usr/bin/env bash
# On a multi-GPU machine, the gradient codecs over NCCL: build, their multi-rank tests on the
# GPUs, PowerSGD's encode + decode on one GPU against its per-matrix form
# (scripts/bench_powersgd.cpp), then ResNet-50 (configs/resnet50_synthetic.toml, bf16, batch
# 128 per GPU) under DDP on up to 4 GPUs with each codec: img/s against no codec, encode and
# decode ms and their share of the uncompressed step, and the ms each codec adds to the step
# in all (docs/PERFORMANCE.md's "Gradient compression" table); then the same under ZeRO
# stage 2, where each rank decodes only its shard (codecs_zero2_LINK.md beside
# codecs_LINK.md). STRATEGIES="ps" or "ps_ssp" runs the parameter server over collectives
# (colocated bsp, or ssp(2) with newest reads; codecs_ps_LINK.md) with PS_CHUNK_MB MiB chunks
# (default 4, the config's default; a codec's cost is per bucket, and ps's buckets are its
# chunks). STRATEGIES="ps_async" (colocated async) and "ps_dedicated" (bsp, one CPU server
# rank beside the GPU workers: ranks + 1 processes) run the parameter server's messages
# transport, where each worker encodes every pushed chunk on its GPU and copies only the
# messages to the host (dist/ps/push_codec.h); PowerSGD has no messages form and is skipped
# there (codecs_ps_async_LINK.md, codecs_ps_dedicated_LINK.md). On NCCL, PowerSGD's second
# round (orthogonalisation, Q = M^T P) runs in the bucket's wait(): after backward under DDP,
# when bucket b + 2 launches under ZeRO-2;
# it is in the added and exposed ms, not in encode ms.
# LINKS="nvlink slow" repeats the runs with NCCL kept off NVLink, shared memory and
# InfiniBand (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1: its socket transport
# through the host), a link where compression has something to win. Each table gives, per
# codec, the bus bandwidth below which it pays: the bus bytes it saves per step over its
# encode + decode time (an upper bound on the link: it counts every byte as exposed, where
# overlap hides some).
#   usage: scripts/gpu_codec_check.sh OUT_DIR  (after scripts/prepare_gpu_deps.sh brought .deps)
#   STEPS (default 40), CODECS (default "none fp16 bf16 topk powersgd onebit"), LINKS
#   (default "nvlink") and STRATEGIES (default "ddp zero2") override.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi -L | tee "$out/gpus.txt"
gpus=$(nvidia-smi -L | wc -l)
ranks=$((gpus < 4 ? gpus : 4))

gpu_build dist_tests trainer bench_powersgd
echo "== codec tests over NCCL, 2 ranks (ZeRO-2's and the parameter server's codecs on 2 and 4)"
(cd build-gpu && ctest --output-on-failure \
  -R '^dist\.((codec|reducer_codec|ddp_codec|powersgd)_nccl\.np2|(zero2|ps|push)_codec_nccl\.np)' \
  -j 1) >"$out/ctest.log" 2>&1
grep -E "Test +#|tests passed|FAILED|Failed" "$out/ctest.log" | tail -10

echo "== PowerSGD encode + decode on one GPU, batched against per matrix"
mpirun -np 1 --bind-to none -x LD_LIBRARY_PATH build-gpu/bench_powersgd cuda 20 2>&1 |
  tee "$out/bench_powersgd.txt"

steps=${STEPS:-40}
codecs=${CODECS:-"none fp16 bf16 topk powersgd onebit"}
for strategy in ${STRATEGIES:-ddp zero2}; do
for link in ${LINKS:-nvlink}; do
  runs="$out/$link" settings=(--set dist.strategy=ddp) table="$out/codecs_$link.md"
  np=$ranks messages=""
  if [ "$strategy" = zero2 ]; then
    runs="$out/zero2_$link" table="$out/codecs_zero2_$link.md"
    settings=(--set dist.strategy=zero --set dist.zero.stage=2)
  fi
  if [ "$strategy" = ps ] || [ "$strategy" = ps_ssp ]; then
    runs="$out/${strategy}_$link" table="$out/codecs_${strategy}_$link.md"
    settings=(--set dist.strategy=ps --set dist.ps.transport=collectives
      --set dist.ps.chunk_mb="${PS_CHUNK_MB:-4}")
    [ "$strategy" = ps_ssp ] &&
      settings+=(--set dist.ps.consistency=ssp --set dist.ps.staleness=2)
  fi
  if [ "$strategy" = ps_async ] || [ "$strategy" = ps_dedicated ]; then
    runs="$out/${strategy}_$link" table="$out/codecs_${strategy}_$link.md" messages=1
    settings=(--set dist.strategy=ps --set dist.ps.transport=messages --set dist.ps.consistency=async)
    if [ "$strategy" = ps_dedicated ]; then
      np=$((ranks + 1))
      settings=(--set dist.strategy=ps --set dist.ps.placement=dedicated --set dist.ps.servers=1
        --set dist.ps.consistency=bsp)
    fi
  fi
  rm -rf "$runs"  # the trainer never writes into another run's directory
  mkdir -p "$runs"
  slow=()
  [ "$link" = slow ] && slow=(-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x NCCL_IB_DISABLE=1)
  echo "== ResNet-50 bf16 $strategy on $ranks GPUs over $link, $steps steps: $codecs"
  ran=""
  for codec in $codecs; do
    [ -n "$messages" ] && [ "$codec" = powersgd ] && continue  # refused over messages
    ran="$ran $codec"
    mpirun -np "$np" --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "${slow[@]}" \
      build-gpu/trainer --config configs/resnet50_synthetic.toml "${settings[@]}" \
      --set dist.compression.kind="$codec" --set train.max_steps="$steps" \
      --set run.out_dir="$runs" --set run.name="$codec" >"$runs/$codec.log" 2>&1 ||
      { echo "$codec failed:"; tail -5 "$runs/$codec.log"; }
  done
  python3 - "$runs" $ran <<'PY' | tee "$table"
import json, os, sys
runs, codecs = sys.argv[1], sys.argv[2:]
def means(codec):
    path = os.path.join(runs, codec, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    steps = [r for r in map(json.loads, open(path)) if r["kind"] == "step"][1:]
    keys = ["throughput/img_per_s", "time/step_ms", "comm/encode_ms", "comm/decode_ms",
            "comm/compression_ratio", "comm/ms", "comm/exposed_ms", "comm/busbw_gbps"]
    return {k: sum(s.get(k, 0.0) for s in steps) / max(len(steps), 1) for k in keys}
def bus_gb(m):  # bus bytes a step moves, from the bus bandwidth its collectives reached
    return m["comm/busbw_gbps"] * m["comm/ms"] * 1e-3
base = means("none") or means(codecs[0])
base_ms = base["time/step_ms"]
print(f"| codec | img/s | vs none | encode ms | decode ms | encode + decode, of a "
      f"{base_ms:.1f} ms step | step ms | added ms | bytes ratio | comm ms | exposed ms | "
      f"busbw GB/s | pays below GB/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for codec in codecs:
    m = means(codec)
    if m is None:
        print(f"| {codec} | failed |"); continue
    coding = m["comm/encode_ms"] + m["comm/decode_ms"]
    saved = bus_gb(base) - bus_gb(m)
    pays = f"{saved / (coding * 1e-3):.1f}" if coding > 0 and saved > 0 else "-"
    print(f"| {codec} | {m['throughput/img_per_s']:,.0f} | "
          f"{m['throughput/img_per_s'] / base['throughput/img_per_s']:.3f} | "
          f"{m['comm/encode_ms']:.2f} | {m['comm/decode_ms']:.2f} | "
          f"{100 * coding / base_ms:.1f}% | {m['time/step_ms']:.1f} | "
          f"{m['time/step_ms'] - base_ms:.1f} | {m['comm/compression_ratio']:.1f} | "
          f"{m['comm/ms']:.2f} | {m['comm/exposed_ms']:.2f} | {m['comm/busbw_gbps']:.1f} | "
          f"{pays} |")
PY
done
done
