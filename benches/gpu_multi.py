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
4. What one benchmark process costs (`repro bench` of the same build, `--procs` in a row):
   one card busy or both at once, each process seeing every GPU or only its own through
   CUDA_VISIBLE_DEVICES (what repro's GPU child sees). `--parts` picks parts (default 1,2,3).

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
import threading
import time

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
    ap.add_argument("--histories", default=",".join(map(str, CULPRITS)),
                    help="part 1's histories, by the commit that makes them slower (23, 58, 81)")
    ap.add_argument("--trace", action="store_true",
                    help="part 1: print every step of every run (processes, wall time, cached)")
    ap.add_argument("--procs", type=int, default=8, help="part 4: processes per card")
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
            for culprit in [int(c) for c in a.histories.split(",")]:
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
                        if a.trace and out:
                            print(f"   run {run} on {devices}: {secs:.1f} s, steps (index verdict processes ms cached):", flush=True)
                            for st in out.get("steps", []):
                                print(f"     {st['index']:3} {st['verdict']:5} {st['attempts']:3} {st['ms']:8.0f} {st['cached']}")
                            print(f"     sum of step ms {sum(st['ms'] for st in out.get('steps', [])):.0f}; recheck {out.get('recheck')}", flush=True)
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
        if 4 in parts:
            print("4. one benchmark process at a time per card: wall time per process, one card busy or both,")
            print("   each process seeing every GPU or only its own (CUDA_VISIBLE_DEVICES)")
            one = os.path.join(base, "h23")
            if not os.path.isdir(one):
                history(23)
            # A store per card: the two series share nothing but the machine.
            store = lambda card: os.path.join(base, f"store-procs-{card}")
            cmd = lambda dev, card: [repro, "-C", one, "--store", store(card), "bench", "spin", "--json", "--device", str(dev),
                                     "--min-time", "150ms"]
            for card in [0, 1]:
                subprocess.run(cmd(card, card), capture_output=True, env=ENV)  # the build, once per store
            n = a.procs

            def series(dev, visible):
                env = dict(ENV)
                if visible is not None:
                    env["CUDA_VISIBLE_DEVICES"] = visible
                for _ in range(n):
                    subprocess.run(cmd(dev, int(visible or dev)), capture_output=True, env=env)

            print(f"{'cards busy':10} {'each sees':10} {'s/process':>9}")
            for isolate in [False, True]:
                for both in [False, True]:
                    t = time.time()
                    devs = [0, 1] if both else [0]
                    threads = [threading.Thread(target=series, args=(0 if isolate else d, str(d) if isolate else None))
                               for d in devs]
                    for th in threads:
                        th.start()
                    for th in threads:
                        th.join()
                    per = (time.time() - t) / n
                    print(f"{'0 and 1' if both else '0':10} {'its own' if isolate else 'both':10} {per:9.3f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
