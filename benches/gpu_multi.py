#!/usr/bin/env python3
"""Several GPUs of one machine (run on a machine with two GPUs of one model, e.g. 2x H200).

1. Speed-up: three 100-commit histories around a compute-bound kernel of about 160 us in
   which every commit is a distinct build (so every step is measured) and one commit
   (23, 58 or 81) makes it 3% slower. Each history is bisected `--runs` times with
   `--devices 0` and with `--devices 0,1`, every run with a fresh store. On several GPUs a
   performance step spreads its processes over the devices at once and each device judges
   its own samples against its own baseline of the good end.
2. A/A across two devices: a 32-commit history in which the kernel's code never changes
   (commits only edit a comment), bisected `--aa-runs` times with `--devices 0,1`: every run
   must end with "the bad end is not bad" (no culprit), whatever the two cards' clocks.
3. The two cards against each other: the same build timed on GPU 0 and on GPU 1 and
   compared with `repro compare`: how far apart two cards of one model are, which is what a
   comparison across cards would have taken for a regression.

Prints one table per part. Usage:
    cargo build --release --locked
    python3 benches/gpu_multi.py --repro target/release/repro [--runs 3] [--aa-runs 10]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bisect import SPIN, SPIN_RECIPE, ENV, bisect, make  # noqa: E402

CULPRITS = [23, 58, 81]
ARGS = ["--recipe", "spin", "--mode", "bench", "--threshold", "3%", "--min-time", "150ms"]


def short(text, n=70):
    """The error line of repro's stderr (or its last line)."""
    lines = (text or "").strip().splitlines()
    errors = [l for l in lines if l.startswith("error:")]
    return (errors[-1] if errors else lines[-1] if lines else "-")[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--aa-runs", type=int, default=10)
    ap.add_argument("--devices", default="0,1")
    ap.add_argument("--parts", default="1,2,3",
                    help="which parts to run, e.g. 1 or 2,3 (a device command is limited to 10 minutes)")
    a = ap.parse_args()
    parts = {int(p) for p in a.parts.split(",")}
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-gpu-multi-")
    history = lambda culprit: make(base, f"h{culprit}", 100, lambda i, c=culprit: {
        "kernels/spin.cu": SPIN.format(i=i, iters=20600 if i >= c else 20000, comment=""),
        "recipes/spin.toml": SPIN_RECIPE})
    try:
        if 1 in parts:
            print(f"1. speed-up of a bench bisection, 100 commits, every commit a distinct build ({a.runs} runs each)")
            print(f"{'history':10} {'devices':8} {'right':>6} {'evaluated':>10} {'median s':>9} {'speed-up':>9}")
            total = {"0": 0.0, a.devices: 0.0}
            for culprit in CULPRITS:
                hist = history(culprit)
                med = {}
                for devices in ["0", a.devices]:
                    times, right, evals = [], 0, []
                    for run in range(a.runs):
                        store = os.path.join(base, f"store-{culprit}-{devices}-{run}")
                        code, out, err, secs = bisect(repro, hist, store, ["--good", "HEAD~99", "--bad", "HEAD", *ARGS, "--devices", devices])
                        got = out["culprit"]["subject"] if out and out.get("culprit") else None
                        right += got == f"commit {culprit}"
                        evals.append(str(out["evaluated"]) if out else "-")
                        times.append(secs)
                        if got != f"commit {culprit}":
                            print(f"   run {run} on {devices}: exit {code}, {got or short(err)}", flush=True)
                        shutil.rmtree(store, ignore_errors=True)
                    med[devices] = statistics.median(times)
                    total[devices] += med[devices]
                    print(f"{'commit ' + str(culprit):10} {devices:8} {right:>3}/{a.runs:<2} {'/'.join(evals):>10} {med[devices]:9.1f} "
                          f"{med['0'] / med[devices]:8.2f}x", flush=True)
            print(f"all three: {total['0']:.1f} s on GPU 0, {total[a.devices]:.1f} s on {a.devices}: "
                  f"speed-up {total['0'] / total[a.devices]:.2f}x (goal: 1.8x or more)\n")

        if 2 in parts:
            print(f"2. A/A across two devices: 32 commits, identical code ({a.aa_runs} runs, --devices {a.devices})")
            print(f"{'run':>3} {'exit':>4} {'verdict':40} {'seconds':>8}")
            aa = make(base, "aa", 32, lambda i: {
                "kernels/spin.cu": SPIN.format(i=0, iters=20000, comment=f" // tidied {i}" if i > 1 else ""),
                "recipes/spin.toml": SPIN_RECIPE})
            nothing = 0
            for run in range(a.aa_runs):
                store = os.path.join(base, f"store-aa-{run}")
                code, out, err, secs = bisect(repro, aa, store, ["--good", "HEAD~31", "--bad", "HEAD", *ARGS, "--devices", a.devices])
                found_nothing = code == 1 and "is not bad" in err
                nothing += found_nothing
                verdict = "nothing found" if found_nothing else (out["culprit"]["subject"] if out and out.get("culprit") else short(err, 40))
                print(f"{run:3} {code:4} {verdict:40} {secs:8.1f}", flush=True)
                shutil.rmtree(store, ignore_errors=True)
            print(f"nothing found in {nothing} of {a.aa_runs} A/A runs on {a.devices} (goal: all)\n")

        if 3 in parts:
            print("3. one build timed on each card, compared directly (what a cross-card comparison would see)")
            one = os.path.join(base, "h23")
            if not os.path.isdir(one):
                history(23)
            ids = []
            for dev in a.devices.split(",")[:2]:
                r = subprocess.run([repro, "-C", one, "--store", os.path.join(base, "store-cards"), "bench", "spin", "--json",
                                    "--device", dev, "--min-time", "1s"], capture_output=True, text=True, env=ENV)
                try:
                    ids.append(json.loads(r.stdout)["results"][0]["id"])
                except (json.JSONDecodeError, KeyError, IndexError, TypeError):
                    m = re.search(r"\b([0-9a-f]{12})\b", r.stdout)
                    ids.append(m.group(1) if m else None)
                    if not m:
                        print(f"   repro bench on GPU {dev} failed: {short(r.stderr)}")
            if all(ids) and len(ids) == 2:
                r = subprocess.run([repro, "-C", one, "--store", os.path.join(base, "store-cards"), "compare", ids[0], ids[1]],
                                   capture_output=True, text=True, env=ENV)
                print(r.stdout.strip() or short(r.stderr))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
