#!/usr/bin/env python3
"""#29 goal 3 on the GPU machine: how graph mode's choice of a buffer placement spreads a small
kernel's median between invocations.

For each variant (a binary, and a number of placements, REPRO_TIMING_PLACEMENTS), N separate
invocations of `repro bench vector_add --param n=1048576 --mode graph`, the variants taken in
turn invocation by invocation; each job writes its figures to REPRO_TIMING_DIAG. Prints per
variant the median and the CV of the medians (goal 3: at most 0.2%), the medians in order,
and for the first invocations which placement the settling warm-up chose and the fastest of
its placements' pilot medians (sorted).

Usage: python3 benches/gpu_placement_choice.py --variant LABEL=PATH[:PLACEMENTS] [--variant ...]
       [--runs N] [--show K]
e.g. --variant old=OLD --variant new=NEW --variant new48=NEW:48. Each variant runs in a
throwaway project holding only vector_add (NVRTC from the machine's CUDA or REPRO_NVRTC) with
a store and a cache directory of its own.
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
    ap.add_argument("--variant", action="append", required=True, help="LABEL=PATH[:PLACEMENTS]")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--show", type=int, default=6, help="invocations whose choice is printed")
    a = ap.parse_args()
    if a.runs < 2:
        sys.exit("gpu_placement_choice.py: at least 2 runs, for a CV")
    variants = []
    for spec in a.variant:
        label, _, rest = spec.partition("=")
        path, _, placements = rest.partition(":")
        if not label or not path:
            sys.exit(f"gpu_placement_choice.py: --variant {spec!r} is not LABEL=PATH[:PLACEMENTS]")
        variants.append((label, os.path.abspath(path), placements))
    d = tempfile.mkdtemp(prefix="repro-placement-")
    try:
        root = project(d)
        meds = {v[0]: [] for v in variants}
        for _ in range(a.runs):
            for label, binary, placements in variants:
                env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache-" + label),
                           REPRO_TIMING_DIAG=os.path.join(d, f"diag-{label}.jsonl"))
                if placements:
                    env["REPRO_TIMING_PLACEMENTS"] = placements
                r = subprocess.run([binary, "-C", root, "--store", os.path.join(d, "store-" + label),
                                    "bench", "vector_add", "--json", "--param", "n=1048576",
                                    "--mode", "graph"], capture_output=True, text=True, env=env)
                if r.returncode:
                    sys.exit(f"{label}: repro bench failed ({r.returncode}):\n{r.stderr[-2000:]}")
                meds[label].append(json.loads(r.stdout)["results"][0]["summary"]["median"])
        print(f"vector_add, n = 1M, graph mode: {a.runs} invocations of each variant, taken in turn")
        print(f"{'variant':10} {'placements':>10} {'median us':>10} {'CV':>7}")
        for label, _, placements in variants:
            xs = meds[label]
            print(f"{label:10} {placements or 'default':>10} {st.median(xs):10.4f} "
                  f"{100 * st.stdev(xs) / st.mean(xs):6.3f}%")
        for label, _, _ in variants:
            print(f"\n{label}: medians in order: " + " ".join(f"{x:.4f}" for x in meds[label]))
            path = os.path.join(d, f"diag-{label}.jsonl")
            lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
            for l in lines[:a.show]:
                pm = sorted(l.get("placement-medians") or [])
                print(f"  median {l['median']:.4f}, chose placement {l['chosen-placement']} after "
                      f"{l['settle-samples']} settling samples; fastest pilots: "
                      + " ".join(f"{x:.3f}" for x in pm[:8]))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
