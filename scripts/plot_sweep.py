#!/usr/bin/env python3
"""Draws scripts/sweep_strategies.sh's sweep.csv, one bar per strategy and rank count: images
per second (the median run, with a bar from the slowest to the fastest run), and step time
split into what communication left exposed and the rest (compute and framework).

    scripts/plot_sweep.py OUT_DIR/sweep.csv OUT.png

Needs matplotlib (Debian: python3-matplotlib).
"""
import csv
import statistics
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_sweep.py needs matplotlib: apt-get install python3-matplotlib "
             "(and run it with the Python that has it, e.g. /usr/bin/python3)")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    points = {}
    for row in csv.DictReader(open(sys.argv[1])):
        if row["step_ms"]:
            points.setdefault((int(row["ranks"]), row["strategy"]), []).append(row)
    if not points:
        sys.exit(f"{sys.argv[1]}: no completed runs")
    keys = sorted(points)
    labels = [f"{strategy}\n{ranks} rank(s)" for ranks, strategy in keys]

    def values(key, column):
        return [float(r[column] or 0.0) for r in points[key]]

    rate = [statistics.median(values(k, "img_per_s")) for k in keys]
    low = [r - min(values(k, "img_per_s")) for r, k in zip(rate, keys)]
    high = [max(values(k, "img_per_s")) - r for r, k in zip(rate, keys)]
    step = [statistics.median(values(k, "step_ms")) for k in keys]
    exposed = [statistics.median(values(k, "exposed_ms")) for k in keys]
    rest = [s - e for s, e in zip(step, exposed)]

    width = max(4.0, 1.2 * len(keys))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 7.0), sharex=True)
    top.bar(labels, rate, yerr=[low, high], capsize=4)
    for x, r in enumerate(rate):
        top.annotate(f"{r:.0f}", (x, r), ha="center", va="bottom", fontsize=8)
    runs = max(len(v) for v in points.values())
    top.set_ylabel("images / s")
    top.set_title(f"Throughput by strategy, median of up to {runs} run(s), range as bars")
    bottom.bar(labels, rest, label="compute and framework")
    bottom.bar(labels, exposed, bottom=rest, label="exposed communication")
    for x, s in enumerate(step):
        bottom.annotate(f"{s:.1f}", (x, s), ha="center", va="bottom", fontsize=8)
    bottom.set_ylabel("ms per step (median)")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
