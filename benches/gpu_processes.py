#!/usr/bin/env python3
"""#29 goal 3 on the GPU machine: a small kernel's median between invocations when each
invocation takes its samples in one worker process or pools several (the timing setting
REPRO_TIMING_PROCESSES=N; the default is 1), or in some number of bursts (any other timing
setting, e.g. REPRO_TIMING_BURSTS=1), and what that costs in wall time.

For each variant (a binary and a process count), N separate invocations of `repro bench
vector_add --param n=1048576 --mode graph`, the variants taken in turn invocation by
invocation. Prints per variant the median, the CV of the medians (goal 3: at most 0.2%),
the median wall time of an invocation and of its time beyond the kernel's own timed runs
(goal 1: at most 1 s), and the medians in order; with --phases, one `-v` phase table per
variant. Before the table, one untimed invocation per variant builds the kernel and fills
the per-boot caches.

Usage: python3 benches/gpu_processes.py --variant LABEL=PATH[:SETTINGS] [--variant ...]
       [--runs N] [--phases] [--bursts]
SETTINGS is a process count, or timing settings NAME=VALUE joined by commas: e.g.
--variant one=BIN --variant four=BIN:4 --variant oneburst=BIN:REPRO_TIMING_BURSTS=1
(none: the binary's defaults). Each variant
runs in a throwaway project holding only vector_add (NVRTC from the machine's CUDA or
REPRO_NVRTC), with a store and a cache directory of its own.
"""
import argparse
import json
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

from gpu_bench_phases import project
from gpu_placement_choice import cv, gpu_identity


def invoke(binary, root, d, label, processes, verbose=False):
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache-" + label))
    for k in [k for k in env if k.startswith("REPRO_TIMING_")]:
        del env[k]
    if processes and "=" in processes:
        env.update(kv.split("=", 1) for kv in processes.split(","))
    elif processes:
        env["REPRO_TIMING_PROCESSES"] = processes
    args = [binary, "-C", root, "--store", os.path.join(d, "store-" + label), "bench", "vector_add",
            "--param", "n=1048576", "--mode", "graph"]
    args += ["-v"] if verbose else ["--json"]
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"{label}: repro bench failed ({r.returncode}):\n{r.stderr[-2000:]}")
    if verbose:
        return r.stdout + r.stderr
    res = json.loads(r.stdout)["results"][0]
    kernel = sum(res["samples"]) * (res.get("launches-per-sample") or 1) / 1e6
    xs = res["samples"]
    cuts = [0] + res.get("burst-starts", []) + [len(xs)]
    bursts = [st.median(xs[a:b]) for a, b in zip(cuts, cuts[1:])]
    return res["summary"]["median"], wall, wall - kernel, len(bursts), bursts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="LABEL=PATH[:PROCESSES]")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--phases", action="store_true", help="also one -v phase table per variant")
    ap.add_argument("--bursts", action="store_true", help="also each invocation's bursts' medians")
    a = ap.parse_args()
    if a.runs < 2:
        sys.exit("gpu_processes.py: at least 2 runs, for a CV")
    variants = []
    for spec in a.variant:
        label, _, rest = spec.partition("=")
        path, _, processes = rest.partition(":")
        if not label or not path:
            sys.exit(f"gpu_processes.py: --variant {spec!r} is not LABEL=PATH[:SETTINGS]")
        variants.append((label, os.path.abspath(path), processes))
    d = tempfile.mkdtemp(prefix="repro-processes-")
    try:
        root = project(d)
        for label, binary, processes in variants:
            invoke(binary, root, d, label, processes)
        got = {v[0]: [] for v in variants}
        for _ in range(a.runs):
            for label, binary, processes in variants:
                got[label].append(invoke(binary, root, d, label, processes))
        print(f"vector_add, n = 1M, graph mode: {a.runs} invocations of each variant, taken in turn")
        print(f"GPU: {gpu_identity()}")
        print(f"{'variant':10} {'bursts':>9} {'median us':>10} {'CV':>7} {'wall s':>7} {'beyond kernel s':>16}")
        for label, _, _ in variants:
            rows = got[label]
            meds = [r[0] for r in rows]
            bursts = sorted({r[3] for r in rows})
            print(f"{label:10} {','.join(map(str, bursts)):>9} {st.median(meds):10.4f} {cv(meds):6.3f}% "
                  f"{st.median(r[1] for r in rows):7.3f} {st.median(r[2] for r in rows):16.3f}")
        for label, _, _ in variants:
            print(f"\n{label}: medians in order: " + " ".join(f"{r[0]:.4f}" for r in got[label]))
            if a.bursts:
                for r in got[label]:
                    print(f"  {r[0]:.4f} | bursts' medians " + " ".join(f"{m:.4f}" for m in r[4]))
        if a.phases:
            for label, binary, processes in variants:
                print(f"\n{label}: repro -v bench\n" + invoke(binary, root, d, label, processes, True))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
