#!/usr/bin/env python3
"""GPU time per step from Kineto traces (trainer run.profile_steps), by kernel, side by side.

    scripts/trace_summary.py STEPS TRACE [TRACE ...]

For each trace: the kernels, copies and memsets, summed per profiled step, the span from the
first to the last GPU activity, and the idle gaps of the busiest (compute) stream; then the kernels whose time per step differs most between
the first trace and each other one. Used to find what a strategy adds to a step.
"""
import collections
import json
import re
import sys


def gpu_events(path):
    with open(path) as f:
        trace = json.load(f)
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]


def short(name):
    name = re.sub(r"<.*", "", name)  # template arguments
    name = re.sub(r"\(.*", "", name)
    return name[:70]


def idle_gaps(events, steps):
    """Idle time on the busiest stream between its kernels, by the kernels around each gap."""
    by_stream = collections.defaultdict(list)
    for e in events:
        by_stream[e.get("args", {}).get("stream")].append(e)
    stream = max(by_stream, key=lambda s: sum(e["dur"] for e in by_stream[s]))
    ordered = sorted(by_stream[stream], key=lambda e: e["ts"])
    gaps = collections.defaultdict(lambda: [0.0, 0])
    total = 0.0
    for before, after in zip(ordered, ordered[1:]):
        gap = after["ts"] - (before["ts"] + before["dur"])
        if gap <= 5:  # µs: back-to-back launches
            continue
        total += gap
        entry = gaps[(short(before["name"])[:35], short(after["name"])[:35])]
        entry[0] += gap / 1e3 / steps
        entry[1] += 1 / steps
    return stream, total / 1e3 / steps, gaps


def summarize(path, steps):
    events = gpu_events(path)
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        entry = by_name[(e["cat"], short(e["name"]))]
        entry[0] += e["dur"] / 1e3 / steps
        entry[1] += 1 / steps
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3 / steps
    busy = sum(v[0] for v in by_name.values())
    return by_name, span, busy


def host_calls(path, steps):
    """CUDA runtime calls and operators on the host, per step, by name (the host's side)."""
    with open(path) as f:
        trace = json.load(f)
    calls = collections.defaultdict(lambda: [0.0, 0])
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver", "cpu_op"):
            entry = calls[(e["cat"], short(e["name"]))]
            entry[0] += e["dur"] / 1e3 / steps
            entry[1] += 1 / steps
    return calls


def print_diff(title, base, other, rows):
    print(title)
    keys = set(base) | set(other)
    diff = {k: (other.get(k, [0, 0])[0] - base.get(k, [0, 0])[0],
                other.get(k, [0, 0])[1] - base.get(k, [0, 0])[1]) for k in keys}
    for (cat, name), (ms, n) in sorted(diff.items(), key=lambda kv: -abs(kv[1][0]))[:rows]:
        print(f"  {ms:+8.3f} ms {n:+7.1f}x  {cat:12s} {name}")


def main():
    try:
        steps = float(sys.argv[1])
        paths = sys.argv[2:]
        assert steps > 0 and paths
    except (IndexError, ValueError, AssertionError):
        sys.exit("usage: scripts/trace_summary.py STEPS TRACE [TRACE ...]  (STEPS: the profiled "
                 "steps, run.profile_steps)")
    summaries = [summarize(p, steps) for p in paths]
    for path, (by_name, span, busy) in zip(paths, summaries):
        count = sum(v[1] for v in by_name.values())
        print(f"== {path}: per step {span:.3f} ms span, {busy:.3f} ms summed GPU time, "
              f"{count:.0f} kernels/copies")
        for (cat, name), (ms, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"  {ms:8.3f} ms {n:6.0f}x  {cat:10s} {name}")
        stream, idle, gaps = idle_gaps(gpu_events(path), steps)
        print(f"  stream {stream}: {idle:.3f} ms idle per step in gaps over 5 us; the largest:")
        for (before, after), (ms, n) in sorted(gaps.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"  {ms:8.3f} ms {n:6.1f}x  after {before} / before {after}")
    base = summaries[0][0]
    base_host = host_calls(paths[0], steps)
    for path, (by_name, _, _) in zip(paths[1:], summaries[1:]):
        print_diff(f"== GPU: {path} minus {paths[0]}, per step", base, by_name, 15)
        print_diff(f"== host (inclusive times, profiler overhead included): {path} minus "
                   f"{paths[0]}, per step", base_host, host_calls(path, steps), 25)


if __name__ == "__main__":
    main()
