#!/usr/bin/env python3
"""Draws one or several runs from their metrics.jsonl: training loss, test accuracy,
throughput and communication (time per step and exposed time) against the step, one line per
run, so runs of different strategies or settings can be compared at a glance.

    scripts/plot_run.py OUT.png RUN_DIR_OR_METRICS [RUN_DIR_OR_METRICS ...]

A run is named by its directory, and runs of the same name (one per sweep, say) by as many of
its parent folders as tell them apart: sweep1/np2_ddp_r1, sweep2/np2_ddp_r1. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import os
import sys

PANELS = [  # (record kind, metrics key, axis label)
    ("step", "loss/train", "training loss"),
    ("eval", "accuracy/test", "test accuracy"),
    ("step", "throughput/img_per_s", "images / s"),
    ("step", "comm/ms", "communication ms / step"),
    ("step", "comm/exposed_ms", "exposed communication ms / step"),
]


def fail(message):
    """A mistake in the arguments or the input: one line, exit 2, as for a bad option."""
    print(f"plot_run.py: {message}", file=sys.stderr)
    sys.exit(2)


def output_path(path):
    """The image to write, checked before any work: matplotlib would add .png to a name
    without a suffix (a run directory given first would be drawn beside itself), and fail
    with a traceback on a missing directory."""
    if os.path.isdir(path) or os.path.basename(path) == "metrics.jsonl":
        fail(f"{path}: not an image to write (the image comes first: plot_run.py OUT.png RUN...)")
    if not os.path.splitext(path)[1]:
        path += ".png"
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        fail(f"{folder}: no such directory (for {path})")
    return path


def load(path):
    """(directory, records) of a run directory or a metrics.jsonl file."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    if not os.path.isfile(path):
        fail(f"{path}: no such metrics file (give a run directory or its metrics.jsonl)")
    records = []
    try:
        with open(path) as lines:
            for number, line in enumerate(lines, 1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    fail(f"{path}:{number}: not a JSON record ({error.msg})")
                if not isinstance(record, dict):
                    fail(f"{path}:{number}: not a metrics record (a JSON object)")
                records.append(record)
    except UnicodeDecodeError:
        fail(f"{path}: not text, so not a metrics.jsonl")
    except OSError as error:
        fail(f"{path}: {error.strerror or error}")
    return os.path.dirname(os.path.abspath(path)), records


def labels(dirs):
    """The name of each run directory in `dirs`: its last folder, with parents added to those
    of the same name until they differ (a directory given twice keeps its short name)."""
    parts = [d.split(os.sep) for d in dirs]
    depth = [1] * len(dirs)
    while True:
        names = [os.sep.join(p[-k:]) for p, k in zip(parts, depth)]
        grow = [i for i, name in enumerate(names) if depth[i] < len(parts[i]) and
                len({d for d, other in zip(dirs, names) if other == name}) > 1]
        if not grow:
            return names
        for i in grow:
            depth[i] += 1


def points(records, kind, key):
    """(step, value) of the records of `kind` that hold `key` and a step."""
    return [(r["step"], r[key]) for r in records
            if r.get("kind") == kind and key in r and "step" in r]


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = output_path(sys.argv[1])
    loaded = [load(path) for path in sys.argv[2:]]
    runs = list(zip(labels([d for d, _ in loaded]), [records for _, records in loaded]))
    panels = [p for p in PANELS if any(points(records, p[0], p[1]) for _, records in runs)]
    if not panels:
        fail("no step or evaluation records in the given runs")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_run.py needs matplotlib: apt-get install python3-matplotlib "
                 "(and run it with the Python that has it, e.g. /usr/bin/python3)")
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 2.4 * len(panels)), sharex=True,
                             squeeze=False)
    for ax, (kind, key, label) in zip(axes[:, 0], panels):
        for name, records in runs:
            line = points(records, kind, key)
            if line:
                ax.plot(*zip(*line), marker="o" if kind == "eval" else None, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except (OSError, ValueError) as error:  # unwritable; a suffix matplotlib has no format for
        fail(f"{out}: {getattr(error, 'strerror', None) or error}")
    print(f"wrote {out}: {len(runs)} run(s) ({', '.join(name for name, _ in runs)}), "
          f"{len(panels)} panel(s)")


if __name__ == "__main__":
    main()
