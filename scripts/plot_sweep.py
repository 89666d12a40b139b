#!/usr/bin/env python3
"""Draws scripts/sweep_strategies.sh's sweep.csv, one bar per strategy and rank count: images
per second (the median run, with a bar from the slowest to the fastest run), and step time
split into what communication left exposed and the rest (compute and framework).

    scripts/plot_sweep.py OUT_DIR/sweep.csv OUT.png

OUT_DIR alone stands for its sweep.csv. Needs matplotlib (Debian: python3-matplotlib).
"""
import csv
import os
import statistics
import sys

NUMBERS = ["step_ms", "img_per_s", "exposed_ms"]  # what is drawn, besides ranks and strategy


def fail(message):
    """A mistake in the arguments or the input: one line, exit 2, as for a bad option."""
    print(f"plot_sweep.py: {message}", file=sys.stderr)
    sys.exit(2)


def output_path(path):
    """The image to write, checked before any work: matplotlib would add .png to a name
    without a suffix, and fail with a traceback on a missing directory."""
    if os.path.isdir(path):
        fail(f"{path}: not an image to write (the image comes second: "
             "plot_sweep.py SWEEP_CSV OUT.png)")
    if not os.path.splitext(path)[1]:
        path += ".png"
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        fail(f"{folder}: no such directory (for {path})")
    return path


def read_points(path):
    """{(ranks, strategy): [row, ...]} of the completed runs (those with a step time)."""
    if os.path.isdir(path):
        path = os.path.join(path, "sweep.csv")
    if not os.path.isfile(path):
        fail(f"{path}: no such file")

    def not_sweep(column):
        fail(f"{path}: not a sweep CSV (no {column} column); made by scripts/sweep_strategies.sh")

    points = {}
    try:
        with open(path, newline="") as lines:
            rows = csv.DictReader(lines)
            for column in NUMBERS + ["ranks", "strategy"]:
                if column not in (rows.fieldnames or []):
                    not_sweep(column)
            for row in rows:
                if not row["step_ms"]:  # a run without figures: too few steps
                    continue
                try:
                    for column in NUMBERS:
                        float(row[column] or 0.0)
                    key = (int(row["ranks"]), row["strategy"])
                except (TypeError, ValueError):
                    fail(f"{path}:{rows.line_num}: not a number where one belongs")
                points.setdefault(key, []).append(row)
    except UnicodeDecodeError:
        not_sweep("step_ms")  # a PNG given first, say
    except (OSError, csv.Error) as error:
        fail(f"{path}: {getattr(error, 'strerror', None) or error}")
    if not points:
        fail(f"{path}: no completed runs")
    return points


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = output_path(sys.argv[2])
    points = read_points(sys.argv[1])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_sweep.py needs matplotlib: apt-get install python3-matplotlib "
                 "(and run it with the Python that has it, e.g. /usr/bin/python3)")
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
    try:
        fig.savefig(out, dpi=120)
    except (OSError, ValueError) as error:  # unwritable; a suffix matplotlib has no format for
        fail(f"{out}: {getattr(error, 'strerror', None) or error}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
