#!/usr/bin/env python3
"""#29 goal 3 on the GPU machine: does a small kernel's level move inside one invocation, or
is it held for the whole process? Runs `repro bench vector_add --param n=1048576 --mode
graph` RUNS times, each sampling for at least MIN_TIME (default 6s; the noise stop is set
out of reach, so the time decides), and prints per invocation the median and the medians of
its samples in chunks of CHUNK (default 100, about 0.13 s of a 2.6 us kernel), in the order
taken, with their range after the first two chunks.

Usage: python3 benches/gpu_long_run.py --repro BIN [--runs 2] [--min-time 6s] [--chunk 100]
The project holds only vector_add (NVRTC from the machine's CUDA or REPRO_NVRTC); its store
and cache are thrown away afterwards.
"""
import argparse
import json
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile

from gpu_bench_phases import project


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--min-time", default="6s")
    ap.add_argument("--chunk", type=int, default=100)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="repro-long-")
    try:
        root = project(d)
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache"))
        levels = []
        for run in range(a.runs):
            r = subprocess.run(
                [os.path.abspath(a.repro), "-C", root, "--store", os.path.join(d, "store"),
                 "bench", "vector_add", "--param", "n=1048576", "--mode", "graph",
                 "--min-time", a.min_time, "--budget", "60s", "--max-samples", "50000",
                 "--max-noise", "0.0001", "--json"],
                capture_output=True, text=True, env=env)
            if r.returncode:
                sys.exit(f"repro bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
            res = json.loads(r.stdout)["results"][0]
            xs, k = res["samples"], a.chunk
            chunks = [st.median(xs[i:i + k]) for i in range(0, len(xs) - k + 1, k)]
            rest = chunks[2:] or chunks
            levels.append(res["summary"]["median"])
            print(f"run {run + 1}: {len(xs)} samples, median {levels[-1]:.4f} us; chunks after"
                  f" the first two {min(rest):.4f}-{max(rest):.4f} us"
                  f" ({100 * (max(rest) - min(rest)) / st.median(rest):.3f}% apart)")
            print("  medians of chunks of", k, "samples:", " ".join(f"{c:.4f}" for c in chunks))
        if len(levels) >= 2:
            print(f"invocations' medians {min(levels):.4f}-{max(levels):.4f} us"
                  f" ({100 * (max(levels) - min(levels)) / st.median(levels):.3f}% apart)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
