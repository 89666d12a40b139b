#!/usr/bin/env python3
"""Training time each run took to reach a training loss: for the runs of a sweep
(scripts/sweep_strategies.sh OUT_DIR: OUT_DIR/<run>/metrics.jsonl), the seconds of training
(summed step times of the reports) until a report's mean loss first fell to each target, or
"-" if it never did. The first report's steps are counted at the median step time of the
others: its own holds one-time set-up (cuDNN's algorithm search, NCCL's connections), which
varies from run to run by seconds.

usage: scripts/time_to_loss.py OUT_DIR TARGET [TARGET...]
Prints a Markdown table: one row per run, one column per target, then the steps taken.
"""
import json
import pathlib
import sys


def seconds_to(records, target):
    """(seconds, step) at the first report whose mean loss is at most `target`, or None."""
    later = sorted(r["time/step_ms"] for r in records[1:])
    warm_ms = later[len(later) // 2] if later else None
    elapsed, previous = 0.0, 0
    for i, record in enumerate(records):
        step_ms = warm_ms if i == 0 and warm_ms is not None else record["time/step_ms"]
        elapsed += step_ms / 1e3 * (record["step"] - previous)
        previous = record["step"]
        if record["loss/train"] <= target:
            return elapsed, record["step"]
    return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    targets = [float(t) for t in sys.argv[2:]]
    runs = sorted(out.glob("*/metrics.jsonl"))
    if not runs:
        sys.exit(f"time_to_loss.py: no */metrics.jsonl under {out}")
    print("| run | " + " | ".join(f"s to loss {t:g} (step)" for t in targets) + " | last loss |")
    print("|---" * (len(targets) + 2) + "|")
    for path in runs:
        records = [r for r in map(json.loads, path.open()) if r.get("kind") == "step"]
        cells = []
        for target in targets:
            reached = seconds_to(records, target)
            cells.append(f"{reached[0]:.1f} ({reached[1]})" if reached else "-")
        last = f"{records[-1]['loss/train']:.3f}" if records else "-"
        print(f"| {path.parent.name} | " + " | ".join(cells) + f" | {last} |")


if __name__ == "__main__":
    main()
