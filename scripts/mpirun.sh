#!/usr/bin/env bash
# mpirun with what dtrain's CPU jobs need everywhere: allowed as root (CI and containers run as
# root), shared-memory transport without cross-memory attach (often barred in containers), and,
# on one machine, more ranks than cores when asked for (Open MPI otherwise refuses with a
# page-long slot message). With a hostfile, --host or inside a Slurm allocation, the slots come
# from there and nothing is added.
#   usage: scripts/mpirun.sh -np N COMMAND...
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

ranks="" placed="" extra=()
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    -np | -n | --np | -c) ranks=${args[i + 1]:-} ;;
    --oversubscribe | --hostfile | -hostfile | --machinefile | -machinefile | --host | -host | -H | \
      --default-hostfile) placed=1 ;;
  esac
done
[ -n "${SLURM_JOB_ID:-}" ] && placed=1
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone obeys OMP_NUM_THREADS
if [ -z "$placed" ] && [[ "$ranks" =~ ^[0-9]+$ ]] && [ "$ranks" -gt "$cores" ]; then
  echo "mpirun.sh: $ranks ranks on $cores cores: oversubscribing (ranks share cores)" >&2
  extra=(--oversubscribe)
fi
exec mpirun "${extra[@]}" "$@"
