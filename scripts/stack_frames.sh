#!/usr/bin/env bash
# The threads' stacks that ranks which timed out wrote to their logs (common/thread_stacks.h):
# of every LOG that holds them, each thread with frames in dtrain, NCCL, the CUDA libraries or
# libtorch, and those frames (threads with none of these, idle waits, are left out), for the
# output of a device call (whose files may not all come back).
#   usage: scripts/stack_frames.sh LOG...   (prints nothing where no LOG holds stacks)
for log in "$@"; do
  grep -q "^stacks of" "$log" 2>/dev/null || continue
  echo "== stacks in $log"
  awk '/^stacks of/{on=1; next} !on {next}
       /^thread /{thread=$0; shown=0; next}
       /dtrain::|nccl|libcuda|libcudnn|libcublas|c10::|at::/ && !/Watchdog::/ {
         if (!shown) {print thread; shown=1}
         print}' "$log" | cut -c1-160 | head -300
done
