#!/usr/bin/env bash
# The parameter server's p2p transport over real NCCL on a machine with one GPU: every rank
# shares it, each on an emulated node of its own (NCCL_HOSTID per rank and
# DTRAIN_RANKS_PER_NODE=1; NCCL then links the ranks over sockets on lo, through its proxy
# threads, where GPUs of one machine would use NVLink). Kernels of different processes take
# turns on the GPU, so the figures say nothing of speed; what this shows is whether the links,
# the server thread and the trainer around them finish or deadlock.
# Links: "auto" (shared memory here, dist/comm/shared_link.h; R50_SET="--set
# dist.ps.p2p_links=communicator" for NCCL's).
# Builds build-gpu, then runs the BatchNorm tests (cuDNN's kernels, and ATen's beside standing
# communication), the shared-memory suites and the p2p suite at np2 and np4 and the trainer
# on Fashion-MNIST (FASHION_MNIST, default .cache/fashion-mnist): ResNet-50 bf16 at np4 with
# its config's 25 MiB chunks and the loader's workers; SimpleCNN under SSP(2) with partial
# reads and a 1.5x straggler in turn at np4, in fp32 and in bf16 channels-last; ResNet-50 with
# 0.1 MiB chunks; BSP with checkpoints and a resume at np3. Each run is bounded (RUN_S, default 150 s) and the whole stops starting runs after
# DEADLINE_S (default 540 s), inside a device call. Each rank takes its share of the cores:
# on an emulated node of its own it would take them all. Runs write under RUNS (default
# /tmp/p2p_runs); OUT_DIR gets each run's output and, for a run that timed out, its ranks'
# stacks in one file (a device call brings back only a few files). ONLY (an extended regex)
# keeps the runs whose names match it ("p2p_np2", "ssp2_partial", "resnet50", "bsp", ...).
#   usage: scripts/gpu_p2p_one_gpu.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1
mkdir -p "$out"
t0=$(date +%s)
. scripts/gpu_build.sh  # gpu_build; the GPU environment (scripts/gpu_env.sh)
nvidia-smi -L | tee "$out/gpus.txt"
gpu_build dist_tests models_tests trainer
build-gpu/tests/models_tests "[batch_norm]" 2>&1 | tail -2
runs=${RUNS:-/tmp/p2p_runs}
rm -rf "$runs"
export DTRAIN_RANKS_PER_NODE=1 NCCL_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
# As tests/CMakeLists.txt sets them for the NCCL suites (the trainer sets its own).
export CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER
mpi=(mpirun --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE
  -x DTRAIN_RANKS_PER_NODE -x NCCL_SOCKET_IFNAME -x OMP_NUM_THREADS -x CUDA_DEVICE_MAX_CONNECTIONS
  -x CUDA_MODULE_LOADING -x DTRAIN_TEST_DEVICE=cuda)
per_rank=(bash -c 'export NCCL_HOSTID=emulated-node-$OMPI_COMM_WORLD_RANK; exec "$@"' _)
data=${FASHION_MNIST:-.cache/fashion-mnist}
read -ra r50_set <<<"${R50_SET:-}"  # more options for the ResNet-50 run: "--set dist.ps.chunk_mb=1"

wanted() { [[ -z "${ONLY:-}" || $1 =~ ${ONLY} ]]; }
left() { echo $((${DEADLINE_S:-540} - ($(date +%s) - t0))); }
bounded() {  # LOG COMMAND...: runs COMMAND under the run's bound, its output into LOG
  local log=$1 limit
  shift
  limit=$(left)
  [ "$limit" -gt "${RUN_S:-150}" ] && limit=${RUN_S:-150}
  timeout "$limit" "$@" >"$log" 2>&1
}
suite() {  # NP SUITE
  local np=$1 name=$2 start rc
  wanted "${name}_np$np" || return 0
  [ "$(left)" -gt 40 ] || { echo "not run: $name at np$np (out of time)"; return; }
  start=$(date +%s)
  bounded "$out/${name}_np$np.log" "${mpi[@]}" -np "$np" "${per_rank[@]}" \
    build-gpu/tests/dist_tests -# "[#${name}_test]"
  rc=$?
  echo "$name np$np: exit $rc, $(($(date +%s) - start)) s: $(grep -E 'All tests passed|test cases:' "$out/${name}_np$np.log" | tail -1)"
  [ $rc = 0 ] || grep -E "FAILED|error" "$out/${name}_np$np.log" | head -6
}
train() {  # NP NAME CONFIG [--set ...]
  local np=$1 name=$2 config=$3 start rc
  shift 3
  wanted "$name" || return 0
  [ "$(left)" -gt 40 ] || { echo "not run: trainer $name (out of time)"; return; }
  start=$(date +%s)
  bounded "$out/train_$name.log" "${mpi[@]}" -np "$np" "${per_rank[@]}" \
    build-gpu/trainer --config "$config" --set run.device=cuda --set data.path="$data" \
    --set run.out_dir="$runs" --set run.name="$name" --set run.log_every=12 \
    --set dist.ps.transport=p2p --set dist.timeout_s=60 \
    --set run.num_threads=$(( $(nproc) / np > 0 ? $(nproc) / np : 1 )) "$@"
  rc=$?
  echo "trainer $name: exit $rc, $(($(date +%s) - start)) s"
  grep -E "step [0-9]+/[0-9]+ |resumed|final test|error" "$out/train_$name.log" | tail -3
  [ $rc = 0 ] || scripts/stack_frames.sh "$runs/$name"/train*.log >"$out/stacks_$name.txt"
}

suite 2 shared_regions
suite 2 shared_link
suite 2 p2p
straggler=(--set dist.ps.ssp_reads=partial --set debug.slow_factor=1.5
  --set "debug.slow_ranks=[0,1,2,3]" --set debug.slow_pattern=rotating)
r50=(--set dist.ps.ssp_reads=partial --set data.dataset=fashion_mnist --set data.augment=false
  --set train.max_steps=36 --set train.epochs=1)
# ResNet-50 bf16 with the loader's workers, the case that deadlocked over NCCL's links.
train 4 resnet50 configs/resnet50_ps.toml "${r50[@]}" "${r50_set[@]}"
train 4 ssp2_partial configs/fashion_mnist_ps.toml --set train.max_steps=96 "${straggler[@]}"
train 4 ssp2_partial_bf16 configs/fashion_mnist_ps.toml --set train.max_steps=96 \
  --set train.precision=bf16 --set train.channels_last=true "${straggler[@]}"
train 4 resnet50_small_chunks configs/resnet50_ps.toml "${r50[@]}" --set dist.ps.chunk_mb=0.1
train 3 bsp configs/fashion_mnist_ps.toml --set train.max_steps=24 \
  --set dist.ps.consistency=bsp --set train.checkpoint_every=12
train 3 bsp configs/fashion_mnist_ps.toml --set train.max_steps=48 \
  --set dist.ps.consistency=bsp --set train.checkpoint_every=12 --resume
suite 4 p2p
suite 4 shared_link
echo "total $(($(date +%s) - t0)) s"
