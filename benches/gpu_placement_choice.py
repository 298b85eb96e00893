#!/usr/bin/env python3
"""#29 goal 3 on the GPU machine: how graph mode's choice of a buffer placement spreads a small
kernel's median between invocations.

For each variant (a binary, and a number of placements, REPRO_TIMING_PLACEMENTS), N separate
invocations of `repro bench vector_add --param n=1048576 --mode graph`, the variants taken in
turn invocation by invocation; each job writes its figures to REPRO_TIMING_DIAG. Prints per
variant the median and the CV of the medians (goal 3: at most 0.2%), the medians in order,
and for the first invocations which placement the settling warm-up chose and the fastest of
its placements' pilot medians (sorted).

Usage: python3 benches/gpu_placement_choice.py --variant LABEL=PATH[:PLACEMENTS[:RANK]] [--variant ...]
       [--runs N] [--show K] [--by-placement]
e.g. --variant old=OLD --variant new=NEW --variant new48=NEW:48 --variant rank3=NEW::3 (RANK sets
REPRO_TIMING_PLACEMENT_RANK: which placement is chosen, by the rank of its settling median). Each variant runs in a
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


def gpu_identity():
    """The card the runs had (calls of the device machine may get another one each time)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid,serial,pci.bus_id,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() or r.stderr.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"


def cv(xs):
    return 100 * st.stdev(xs) / st.mean(xs) if len(xs) > 1 else float("nan")


def by_placement(label, lines):
    """Whether the level follows the placement's index: each index's settling median across
    invocations, the reported medians grouped by the placement chosen, and the spread of the
    pilot median that other choice rules would have sampled (a proxy: the pilots are the
    settling warm-up's few samples)."""
    lines = [l for l in lines if l.get("placement-medians") and l.get("chosen-placement") is not None]
    if len(lines) < 2:
        print(f"  {label}: too few invocations with placements for --by-placement")
        return
    k = min(len(l["placement-medians"]) for l in lines)
    print(f"\n{label}: each placement's settling median across {len(lines)} invocations")
    print(f"  {'index':>5} {'mean us':>9} {'CV':>7} {'chosen':>6} {'reported median, mean':>22} {'CV':>7}")
    for i in range(k):
        xs = [l["placement-medians"][i] for l in lines]
        rep = [l["median"] for l in lines if l["chosen-placement"] == i]
        rep_s = f"{st.mean(rep):22.4f} {cv(rep):6.3f}%" if rep else f"{'':22} {'':7}"
        print(f"  {i:5d} {st.mean(xs):9.4f} {cv(xs):6.3f}% {len(rep):6d} {rep_s}")
    def rule(name, pick):
        xs = [l["placement-medians"][pick(l["placement-medians"][:k])] for l in lines]
        print(f"  {name:44} CV of the pilot it picks {cv(xs):6.3f}%")
    print(f"  {'reported medians (the rule in use)':44} CV {cv([l['median'] for l in lines]):6.3f}%")
    rule("fastest (argmin, the rule in use)", lambda p: min(range(len(p)), key=p.__getitem__))
    for d in (0.1, 0.2, 0.3, 0.5):
        rule(f"lowest index within {d}% of the fastest",
             lambda p, d=d: min(i for i in range(len(p)) if p[i] <= min(p) * (1 + d / 100)))
    for i in (0, k // 2, k - 1):
        rule(f"always index {i}", lambda p, i=i: i)
    means = [st.mean(l["placement-medians"][:k]) for l in lines]
    meds = [st.median(l["placement-medians"][:k]) for l in lines]
    print(f"  {'mean of all placements':44} CV {cv(means):6.3f}%")
    print(f"  {'median of all placements':44} CV {cv(meds):6.3f}%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="LABEL=PATH[:PLACEMENTS[:RANK]]")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--show", type=int, default=6, help="invocations whose choice is printed")
    ap.add_argument("--by-placement", action="store_true",
                    help="also: each placement's level across invocations, and choice rules")
    a = ap.parse_args()
    if a.runs < 2:
        sys.exit("gpu_placement_choice.py: at least 2 runs, for a CV")
    variants = []
    for spec in a.variant:
        label, _, rest = spec.partition("=")
        path, _, placements = rest.partition(":")
        placements, _, rank = placements.partition(":")
        if not label or not path:
            sys.exit(f"gpu_placement_choice.py: --variant {spec!r} is not LABEL=PATH[:PLACEMENTS[:RANK]]")
        variants.append((label, os.path.abspath(path), placements, rank))
    d = tempfile.mkdtemp(prefix="repro-placement-")
    try:
        root = project(d)
        meds = {v[0]: [] for v in variants}
        for _ in range(a.runs):
            for label, binary, placements, rank in variants:
                env = dict(os.environ, XDG_CACHE_HOME=os.path.join(d, "cache-" + label),
                           REPRO_TIMING_DIAG=os.path.join(d, f"diag-{label}.jsonl"))
                if placements:
                    env["REPRO_TIMING_PLACEMENTS"] = placements
                if rank:
                    env["REPRO_TIMING_PLACEMENT_RANK"] = rank
                r = subprocess.run([binary, "-C", root, "--store", os.path.join(d, "store-" + label),
                                    "bench", "vector_add", "--json", "--param", "n=1048576",
                                    "--mode", "graph"], capture_output=True, text=True, env=env)
                if r.returncode:
                    sys.exit(f"{label}: repro bench failed ({r.returncode}):\n{r.stderr[-2000:]}")
                meds[label].append(json.loads(r.stdout)["results"][0]["summary"]["median"])
        print(f"vector_add, n = 1M, graph mode: {a.runs} invocations of each variant, taken in turn")
        print(f"GPU: {gpu_identity()}")
        print(f"{'variant':10} {'placements':>10} {'median us':>10} {'CV':>7}")
        for label, _, placements, _ in variants:
            xs = meds[label]
            print(f"{label:10} {placements or 'default':>10} {st.median(xs):10.4f} "
                  f"{100 * st.stdev(xs) / st.mean(xs):6.3f}%")
        for label, _, _, _ in variants:
            print(f"\n{label}: medians in order: " + " ".join(f"{x:.4f}" for x in meds[label]))
            path = os.path.join(d, f"diag-{label}.jsonl")
            lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
            for l in lines[:a.show]:
                pm = sorted(l.get("placement-medians") or [])
                print(f"  median {l['median']:.4f}, chose placement {l['chosen-placement']} after "
                      f"{l['settle-samples']} settling samples; fastest pilots: "
                      + " ".join(f"{x:.3f}" for x in pm[:8]))
            if a.by_placement:
                by_placement(label, lines)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
