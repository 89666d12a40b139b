#!/usr/bin/env bash
# Runs a command where the machine has at least N GPUs; elsewhere exits 77, which CTest reports
# as a skip (SKIP_RETURN_CODE), with the reason.
#   usage: with_gpus.sh N COMMAND [ARG ...]
set -uo pipefail
needed=$1
shift
found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$found" -lt "$needed" ]; then
  echo "skipped: needs $needed GPUs, this machine has $found"
  exit 77
fi
exec "$@"
