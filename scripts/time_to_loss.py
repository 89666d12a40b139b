#!/usr/bin/env python3
"""Training time each run took to reach a training loss: for the runs of a sweep
(scripts/sweep_strategies.sh OUT_DIR: OUT_DIR/<run>/metrics.jsonl), the seconds of training
(summed step times of the reports) until a report's mean loss first fell to each target, or
"-" if it never did. The first report's steps are counted at the median step time of the
others: its own holds one-time set-up (cuDNN's algorithm search, NCCL's connections), which
varies from run to run by seconds.

usage: scripts/time_to_loss.py OUT_DIR TARGET [TARGET...]
Prints a Markdown table: one row per run, one column per target, then the steps taken, the
last loss and how the run ended: "done" (its final record is written), "failed: " and the
trainer's error line (a diverged loss, say), "stopped by ..." (a signal: it can be resumed),
"still writing" (a cut last line) or "no final record" (killed, or still running). Exits 2
on a bad argument or metrics file, with one line.
"""
import json
import math
import pathlib
import re
import sys

STEP_KEYS = ("step", "loss/train", "time/step_ms")


def fail(message):
    """A mistake in the arguments or the input: one line, exit 2."""
    print(f"time_to_loss.py: {message}", file=sys.stderr)
    sys.exit(2)


def read_records(path):
    """(records, cut): the JSON records of `path`, and whether its last line was cut short
    (a run still writing it: that line is left out; a bad line elsewhere is an error)."""
    try:
        with path.open() as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        fail(f"{path}: {getattr(error, 'strerror', None) or error}")
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                return records, True
            fail(f"{path}:{number}: not a JSON record ({error.msg})")
        if not isinstance(record, dict):
            fail(f"{path}:{number}: not a metrics record (a JSON object)")
        if record.get("kind") == "step":
            for key in STEP_KEYS:
                if not isinstance(record.get(key), (int, float)):
                    fail(f"{path}:{number}: a step record without a number for \"{key}\"")
        records.append(record)
    return records, False


def outcome(path, records, cut):
    """How the run of metrics file `path` ended, from its records and its logs."""
    if any(r.get("kind") == "final" for r in records):
        return "done"
    # The trainer's own words: its logs in the run directory (train.log, train.rankN.log),
    # and a sweep's log of the run beside it (OUT_DIR/<run>.log).
    run = path.parent
    errors, stops = [], []
    for log in sorted(run.glob("train*.log")) + [run.with_name(run.name + ".log")]:
        try:
            with open(log, errors="replace") as lines:
                for line in map(str.strip, lines):
                    error = re.match(r"(\[rank \d+\] )?error: (.*)", line)
                    if error:
                        errors.append(error[2])
                    elif line.startswith("stopped by "):
                        stops.append(line)
        except OSError:
            continue
    # The first error says why (others follow from it); a resumed run's last stop is its own.
    said = f"failed: {errors[0]}" if errors else stops[-1] if stops else ""
    return (said or ("still writing" if cut else "no final record")).replace("|", "\\|")


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


def target(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        fail(f"target \"{text}\": give a loss, a number such as 0.5")
    return value


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = pathlib.Path(sys.argv[1])
    targets = [target(t) for t in sys.argv[2:]]
    if not out.is_dir():
        fail(f"{out}: no such directory (give a sweep's OUT_DIR)")
    runs = sorted(out.glob("*/metrics.jsonl"))
    if not runs:
        fail(f"no */metrics.jsonl under {out}")
    rows = []  # every file read before the table starts: a bad one leaves no half table
    for path in runs:
        records, cut = read_records(path)
        steps = [r for r in records if r.get("kind") == "step"]
        cells = [path.parent.name]
        for loss in targets:
            reached = seconds_to(steps, loss)
            cells.append(f"{reached[0]:.1f} ({reached[1]})" if reached else "-")
        cells.append(f"{steps[-1]['loss/train']:.3f}" if steps else "-")
        cells.append(outcome(path, records, cut))
        rows.append("| " + " | ".join(cells) + " |")
    print("| run | " + " | ".join(f"s to loss {t:g} (step)" for t in targets) +
          " | last loss | result |")
    print("|---" * (len(targets) + 3) + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
