#!/usr/bin/env bash
# Stragglers on demand under DDP on 2 ranks: with debug.slow_ranks = [1] and slow_factor = 3,
# rank 1's timeline has one "straggler pause" per step, between backward and the optimizer
# step, at least twice as long as the step's forward and backward; rank 0's has none. A slowed
# rank outside the world stops the run at setup: exit code 2 and one line naming it.
#   usage: straggler.sh TRAINER SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
fail() { echo "FAIL: $*"; exit 1; }
train() {  # NAME, then --set overrides; output in $work/NAME.log
  local name=$1
  shift
  "$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
    --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
    --set run.name="$name" --set train.max_steps=4 --set data.batch_size=8 \
    --set train.keep_checkpoints=0 "$@" >"$work/$name.log" 2>&1
}

train slowed --set run.trace=true --set "debug.slow_ranks=[1]" --set debug.slow_factor=3 ||
  { tail "$work/slowed.log"; fail "the slowed run"; }
grep -qF "debug: rank(s) 1 slowed 3x" "$work/slowed.log" || fail "no start-up line on rank 0"
python3 - "$work/slowed/timeline.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
def spans(rank, name):
    return sorted((e for e in events if e["pid"] == rank and e["name"] == name),
                  key=lambda e: e["ts"])
assert not spans(0, "straggler pause"), "rank 0 was paused"
pauses = spans(1, "straggler pause")
assert len(pauses) == 4, f"rank 1: {len(pauses)} pauses in 4 steps"
for pause, forward, backward, update in zip(pauses, spans(1, "forward"), spans(1, "backward"),
                                            spans(1, "optimizer step")):
    assert backward["ts"] + backward["dur"] <= pause["ts"], "a pause before backward ended"
    assert pause["ts"] + pause["dur"] <= update["ts"], "a pause after the update began"
    # It lasts (3 - 1) x the time from before forward to after backward (1 us: JSON rounding).
    assert pause["dur"] >= 2 * (forward["dur"] + backward["dur"]) - 1, (pause, forward, backward)
print(f"straggler: rank 1 paused {len(pauses)} times, rank 0 never")
PY

code=0
train outside --set "debug.slow_ranks=[5]" || code=$?
[ "$code" -eq 2 ] ||
  { tail "$work/outside.log"; fail "slow_ranks = [5] on 2 ranks: exit code $code, expected 2"; }
grep -qF "debug.slow_ranks: rank 5 is not in this world of 2 rank(s)" "$work/outside.log" ||
  { tail "$work/outside.log"; fail "no line naming debug.slow_ranks and rank 5"; }
echo "ok: a rank outside the world is refused with exit code 2"
