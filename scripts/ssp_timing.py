#!/usr/bin/env python3
"""When SSP(k) workers start each step, with one of them slowed: the step rate against BSP's,
and how much of the recent gradient a read lacks when a server answers reads with every push
that has arrived (docs/PERFORMANCE.md, "Applying the on-time pushes first").

A worker's step takes 1 time unit, or SLOW units on the slowed worker: the same one every step
(--fixed) or the next one each step. Worker i may start clock t once it has finished clock
t - 1 and every worker has finished clock t - k - 1 (the bound). A read at the start of clock
t lacks the pushes of clocks before t that finish after it starts.
  --latency L   a push reaches the readers L time units after it finishes (the server's
                preview and the links); by default 0, where a read at the very moment a
                push finishes still finds it
  --wait W      a read first waits, up to W time units, for the round just pushed with every
                push but one in (dist.ps.partial_wait as a share of a step), and its step
                starts only then
  usage: ssp_timing.py [--workers 4] [--slow 1.5] [--k 2] [--fixed] [--steps 400]
                       [--latency L] [--wait W]
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--slow", type=float, default=1.5)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--wait", type=float, default=0.0)
    a = p.parse_args()
    n, steps = a.workers, a.steps
    start = [[0.0] * steps for _ in range(n)]
    finish = [[0.0] * steps for _ in range(n)]
    for t in range(steps):
        bound = max(finish[j][t - a.k - 1] for j in range(n)) if t > a.k else 0.0
        for i in range(n):
            start[i][t] = max(finish[i][t - 1] if t else 0.0, bound)
            if a.wait > 0 and t > 0:  # for all pushes of clock t - 1 but one to reach it
                arrived = sorted(finish[j][t - 1] for j in range(n))[n - 2] + a.latency
                start[i][t] = min(max(start[i][t], arrived), start[i][t] + a.wait)
            slowed = i == 1 if a.fixed else i == t % n
            finish[i][t] = start[i][t] + (a.slow if slowed else 1.0)
    # Reads in the middle of the run, away from the start and the end.
    lacking, ages = 0, []
    window = range(steps // 8, steps - steps // 8)
    for t in window:
        for i in range(n):
            for j in range(n):
                for c in range(max(0, t - a.k - 1), t):
                    if finish[j][c] + a.latency > start[i][t] + 1e-9:
                        lacking += 1
                        ages.append(t - c)
    per_step = max(finish[i][-1] for i in range(n)) / steps
    print(f"{n} workers, SSP({a.k}), {'one' if a.fixed else 'a moving'} worker slowed "
          f"{a.slow}x: {per_step:.3f} time units a step against BSP's {a.slow:.3f} "
          f"({a.slow / per_step:.2f}x); a read lacks {lacking / (len(window) * n):.2f} of "
          f"{n} pushes, {sum(ages) / max(1, len(ages)):.2f} steps old on average")


if __name__ == "__main__":
    main()
