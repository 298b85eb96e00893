#!/usr/bin/env python3
"""#29 goal 3: is a small kernel's spread between invocations the buffers' pages, or a level
each process (each CUDA context) gets? Run on the GPU machine.

N invocations of `repro bench vector_add --param n=1048576 --mode graph` with K buffer
placements (REPRO_TIMING_PLACEMENTS=K) and short samples (REPRO_TIMING_GRAPH_US), each job's
figures appended to REPRO_TIMING_DIAG: every placement's median from the settling warm-up.
Prints, per estimator, its coefficient of variation across the invocations (the first
invocation left out: it builds and calibrates) and its values: the reported median (the
fastest placement's samples), and over the placements' medians of each invocation their
minimum, median and mean; then the placements' medians of the first three invocations over
their minimum, sorted. If pages alone moved the median, the mean over K placements would vary
about 1/sqrt(K) as much as one placement does; a level shared by a process's placements
moves every estimator alike.

Usage: python3 benches/gpu_placement_spread.py REPRO [--runs N] [--placements K] [--graph-us US]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench_phases as g  # noqa: E402  (the project and bench helpers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repro")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--placements", default="64")
    ap.add_argument("--graph-us", default="1000")
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-placements-")
    root = g.project(base)
    store = os.path.join(base, "store")
    g.CACHES[repro] = os.path.join(base, "cache")
    diag = os.path.join(base, "diag.jsonl")
    reported = []
    for _ in range(a.runs):
        _, out = g.bench(repro, root, store, "--param", "n=1048576", "--mode", "graph",
                         env={"REPRO_TIMING_PLACEMENTS": a.placements,
                              "REPRO_TIMING_GRAPH_US": a.graph_us, "REPRO_TIMING_DIAG": diag})
        reported.append(out["results"][0]["summary"]["median"])
    with open(diag) as f:
        lines = [json.loads(l) for l in f]
    medians = [[x for x in d["placement-medians"] if x == x and x < 1e9] for d in lines]
    estimators = {
        "reported": reported,
        "min": [min(m) for m in medians],
        "median": [statistics.median(m) for m in medians],
        "mean": [statistics.mean(m) for m in medians],
    }
    print(f"K={a.placements} placements, {a.graph_us} us samples, {a.runs} invocations "
          f"(placements per job: {len(medians[0])}, launches a sample: {lines[0]['launches']})")
    for name, xs in estimators.items():
        rest = xs[1:]
        cv = statistics.stdev(rest) / statistics.mean(rest) if len(rest) > 1 else float("nan")
        print(f"  {name:9} CV {100 * cv:6.3f}%  " + " ".join(f"{x:.4f}" for x in xs))
    for m in medians[:3]:
        lo = min(m)
        print("  sorted over the minimum: " + " ".join(f"{x / lo:.3f}" for x in sorted(m)))


if __name__ == "__main__":
    main()
