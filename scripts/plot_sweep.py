#!/usr/bin/env python3
"""Draws scripts/sweep_strategies.sh's sweep.csv: step time per strategy and rank count, split
into what communication left exposed and the rest (compute and framework).

    scripts/plot_sweep.py OUT_DIR/sweep.csv OUT.png

Needs matplotlib (Debian: python3-matplotlib).
"""
import csv
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_sweep.py needs matplotlib: apt-get install python3-matplotlib")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["step_ms"]]
    if not rows:
        sys.exit(f"{sys.argv[1]}: no completed runs")
    labels = [f"{r['strategy']}\n{r['ranks']} rank(s)" for r in rows]
    step = [float(r["step_ms"]) for r in rows]
    exposed = [float(r["exposed_ms"] or 0.0) for r in rows]
    rest = [s - e for s, e in zip(step, exposed)]

    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(rows)), 4.0))
    ax.bar(labels, rest, label="compute and framework")
    ax.bar(labels, exposed, bottom=rest, label="exposed communication")
    for x, s in enumerate(step):
        ax.annotate(f"{s:.1f}", (x, s), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ms per step")
    ax.set_title("Step time by strategy (scripts/sweep_strategies.sh)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
