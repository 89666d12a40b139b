#!/usr/bin/env bash
# scripts/sweep_strategies.sh end to end: every strategy at 1 and 2 ranks completes (the
# parameter server also under SSP on a dedicated server rank), each point is repeated, and the
# synchronous strategies agree: at one rank count they train the same job to the same loss.
#   usage: ... TRAINER SOURCE_DIR
set -euo pipefail
trainer=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$source/scripts/sweep_strategies.sh" "$(dirname "$trainer")" "$tmp" --ranks "1 2" --steps 20 \
  --repeat 2 --strategies "single ddp zero ps ps:ssp1+dedicated1" \
  --set data.batch_size=16 --set model.width=8 --set schedule.warmup_epochs=0 >"$tmp/table.md"
cat "$tmp/table.md"
python3 - "$tmp/sweep.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs = sorted((r["ranks"], r["strategy"], r["repeat"]) for r in rows if r["step_ms"])
points = [("1", "single"), ("1", "ddp"), ("1", "zero"), ("1", "ps"), ("2", "ddp"), ("2", "zero"),
          ("2", "ps"), ("1", "ps:ssp1+dedicated1"), ("2", "ps:ssp1+dedicated1")]
expected = sorted((ranks, strategy, repeat) for ranks, strategy in points for repeat in "12")
assert runs == expected, f"runs {runs}, expected {expected}"
for ranks in ("1", "2"):
    # SSP trains on older parameters: not expected to match.
    losses = {r["strategy"]: float(r["loss"]) for r in rows
              if r["ranks"] == ranks and "ssp" not in r["strategy"]}
    assert max(losses.values()) - min(losses.values()) < 1e-3, f"{ranks} rank(s): {losses}"
print("ok: every strategy ran, and at each rank count they reached the same loss")
PY
