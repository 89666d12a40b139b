#!/usr/bin/env bash
# Launching as on a cluster, on this one machine: scripts/mpirun.sh oversubscribes when asked
# for more ranks than cores; a hostfile gives the slots; two simulated "nodes"
# (DTRAIN_RANKS_PER_NODE=1) train and report their layout; and mpirun inside a (simulated)
# Slurm allocation takes its slots from there.
#   usage: launch.sh TRAINER SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
run() {  # NAME MPIRUN_ARGS... -- extra trainer args
  local name=$1
  shift
  "$@" "$trainer" --config "$source_dir/configs/fashion_mnist.toml" \
    --set run.out_dir="$work" --set run.name="$name" --set train.max_steps=3 \
    --set data.batch_size=8 --set run.log_every=1 >"$work/$name.log" 2>&1 ||
    { echo "FAIL: $name"; tail -20 "$work/$name.log"; exit 1; }
}

# More ranks than cores: a note, not Open MPI's slot error.
ranks=$(($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) + 1))
run oversubscribed "$source_dir/scripts/mpirun.sh" -np "$ranks"
grep -q "oversubscribing" "$work/oversubscribed.log" || { echo "FAIL: no oversubscription note"; exit 1; }
grep -q "$ranks rank(s) on 1 node(s)" "$work/oversubscribed.log" ||
  { echo "FAIL: banner"; grep "rank(s)" "$work/oversubscribed.log"; exit 1; }

# A hostfile, as on a cluster (here with this machine only), and two simulated nodes.
echo "localhost slots=2" >"$work/hosts"
run two_nodes "$source_dir/scripts/mpirun.sh" --hostfile "$work/hosts" -np 2 \
  -x DTRAIN_RANKS_PER_NODE=1
grep -q "2 rank(s) on 2 node(s)" "$work/two_nodes.log" ||
  { echo "FAIL: two nodes"; grep "rank(s)" "$work/two_nodes.log"; exit 1; }
grep -q '"accuracy/test"' "$work/two_nodes/metrics.jsonl" || { echo "FAIL: no result"; exit 1; }
# mpirun inside a Slurm allocation (salloc ... mpirun): Open MPI takes the nodes and slots from
# the allocation's environment, here this machine with more slots than cores, and
# scripts/mpirun.sh adds nothing. (srun itself needs Slurm's daemons, which CI has not.)
host=$(hostname)
run slurm_allocation env SLURM_JOB_ID=1 SLURM_JOBID=1 SLURM_NODELIST="$host" \
  SLURM_JOB_NODELIST="$host" SLURM_NNODES=1 SLURM_JOB_NUM_NODES=1 \
  SLURM_TASKS_PER_NODE="$ranks" SLURM_JOB_CPUS_PER_NODE="$ranks" \
  "$source_dir/scripts/mpirun.sh" -np "$ranks"
if grep -q "oversubscribing" "$work/slurm_allocation.log"; then
  echo "FAIL: scripts/mpirun.sh oversubscribed inside an allocation"; exit 1
fi
grep -q "$ranks rank(s) on 1 node(s)" "$work/slurm_allocation.log" ||
  { echo "FAIL: Slurm allocation banner"; grep "rank(s)" "$work/slurm_allocation.log"; exit 1; }
echo "launch: oversubscribed $ranks ranks, hostfile with 2 simulated nodes, $ranks ranks in a \
Slurm allocation's slots"
