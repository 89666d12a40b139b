#!/usr/bin/env bash
# mpirun with what dtrain's CPU jobs need everywhere: allowed as root (CI and containers run as
# root) and shared-memory transport without cross-memory attach (often barred in containers).
#   usage: scripts/mpirun.sh -np N COMMAND...
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
exec mpirun "$@"
