#!/usr/bin/env bash
# run.trace = true under DDP on 2 ranks: timeline.json is one Chrome trace (what Perfetto
# opens) with both ranks, the host phases of every step and each bucket's all-reduce on the
# communication track, the latter starting before its step's backward ends when it overlaps.
#   usage: timeline.sh TRAINER SOURCE_DIR
set -euo pipefail
. "$(dirname "$0")/lib/fashion_mnist.sh"
"$source_dir/scripts/mpirun.sh" -np 2 --oversubscribe "$trainer" \
  --config "$source_dir/configs/fashion_mnist.toml" --set run.out_dir="$work" \
  --set run.name=traced --set run.trace=true --set train.max_steps=5 --set data.batch_size=8 \
  --set dist.ddp.bucket_mb=0.1 --set dist.ddp.first_bucket_mb=0.1 >"$work/out.log" 2>&1 ||
  { echo "FAIL: the traced run"; tail "$work/out.log"; exit 1; }
python3 - "$work/traced/timeline.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
ranks = {e["pid"] for e in events}
assert ranks == {0, 1}, f"ranks in the timeline: {ranks}"
for rank in ranks:
    names = [e["name"] for e in events if e["pid"] == rank]
    for phase in ("data wait", "forward", "backward", "optimizer step"):
        assert names.count(phase) == 5, f"rank {rank}: {names.count(phase)} x {phase}"
    reduces = [e for e in events if e["pid"] == rank and e["name"].startswith("all_reduce")]
    assert len(reduces) >= 5 * 2, f"rank {rank}: {len(reduces)} all-reduces for 5 steps"
    assert all(e["tid"] == 1 and e["dur"] >= 0 for e in reduces), "communication track"
    backwards = [e for e in events if e["pid"] == rank and e["name"] == "backward"]
    overlapped = [r for r in reduces
                  if any(b["ts"] <= r["ts"] < b["ts"] + b["dur"] for b in backwards)]
    assert overlapped, f"rank {rank}: no all-reduce starts inside a backward"
print(f"timeline: {len(events)} events from ranks {sorted(ranks)}")
PY
