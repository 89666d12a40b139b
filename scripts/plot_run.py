#!/usr/bin/env python3
"""Draws one or several runs from their metrics.jsonl: training loss, test accuracy,
throughput and communication (time per step and exposed time) against the step, one line per
run, so runs of different strategies or settings can be compared at a glance.

    scripts/plot_run.py OUT.png RUN_DIR_OR_METRICS [RUN_DIR_OR_METRICS ...]

A run is named by its directory. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_run.py needs matplotlib: apt-get install python3-matplotlib "
             "(and run it with the Python that has it, e.g. /usr/bin/python3)")

PANELS = [  # (record kind, metrics key, axis label)
    ("step", "loss/train", "training loss"),
    ("eval", "accuracy/test", "test accuracy"),
    ("step", "throughput/img_per_s", "images / s"),
    ("step", "comm/ms", "communication ms / step"),
    ("step", "comm/exposed_ms", "exposed communication ms / step"),
]


def load(path):
    """(name, records) of a run directory or a metrics.jsonl file."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"{path}: no such metrics file (give a run directory or its metrics.jsonl)")
    records = []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                sys.exit(f"{path}:{number}: not a JSON record ({error.msg})")
    name = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return name, records


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = [load(path) for path in sys.argv[2:]]
    panels = [p for p in PANELS
              if any(p[1] in r for _, records in runs for r in records if r.get("kind") == p[0])]
    if not panels:
        sys.exit("no step or evaluation records in the given runs")
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 2.4 * len(panels)), sharex=True,
                             squeeze=False)
    for ax, (kind, key, label) in zip(axes[:, 0], panels):
        for name, records in runs:
            points = [(r["step"], r[key]) for r in records if r.get("kind") == kind and key in r]
            if points:
                ax.plot(*zip(*points), marker="o" if kind == "eval" else None, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)
    print(f"wrote {sys.argv[1]}: {len(runs)} run(s), {len(panels)} panel(s)")


if __name__ == "__main__":
    main()
