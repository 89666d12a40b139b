#!/usr/bin/env bash
# The threads' stacks that a rank which timed out wrote to its log (common/thread_stacks.h):
# of the first LOG that holds them, each thread and its frames in dtrain, NCCL and the CUDA
# libraries, for the output of a device call (whose files may not all come back).
#   usage: scripts/stack_frames.sh LOG...   (prints nothing where no LOG holds stacks)
for log in "$@"; do
  grep -q "^stacks of" "$log" 2>/dev/null || continue
  echo "== stacks in $log"
  awk '/^stacks of/{on=1} on && /^thread |dtrain::|nccl|libcuda|libcudnn|libcublas/' "$log" |
    cut -c1-160 | head -40
  break
done
