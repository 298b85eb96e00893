#!/usr/bin/env python3
"""Where a bench-mode bisection's time goes, binaries side by side (#29 goal 2). On the GPU
machine:

    python3 benches/gpu_bisect_steps.py --binary before=OLD --binary after=NEW [--seed S]

(`--binary LABEL=PATH,VAR=VALUE` runs that binary with the variable set, e.g. one of the
runner's REPRO_TIMING_* settings.)

One slow history per kernel from `gpu_bisect.py --acceptance`'s generator (90 to 110 commits,
a random culprit whose kernel does 4% (small) or 3% (big) more iterations, measured 2.5 to 3%
slower, against a 2% threshold; broken builds two commits either side, every commit a
distinct build): the small kernel in `--timing graph`, the big one cold. Each binary bisects
the same histories (`-v`, `--min-time 100ms`, a fresh store each), in the order given for
the small kernel and the reverse for the big one, so that neither always goes first. Prints per binary and kernel: the culprit
found, the commits evaluated, the runs its steps measured and their mean time, the time of
the culprit's re-check against its parent (from its start to the end of the process, the
report included), and the wall time;
with `--keep DIR` it writes each bisection's `-v` lines there, each with its second since
the start (each step's wait, build and measure times).
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bisect as gb  # noqa: E402  (the history generator)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True,
                    help="LABEL=PATH[,VAR=VALUE...] (the binary, run with those environment variables), in order")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--keep", help="a folder for each bisection's -v lines")
    a = ap.parse_args()
    bins = []
    for b in a.binary:
        label, _, rest = b.partition("=")
        path, *envs = rest.split(",")
        bins.append((label, os.path.abspath(path), dict(e.split("=", 1) for e in envs)))
    rng = random.Random(a.seed)
    base = tempfile.mkdtemp(prefix="repro-bisect-steps-")
    print(f"{'kernel':6} {'N':>4} {'culprit':>7} {'binary':8} {'found':12} {'evals':>5} {'runs':>4} {'s/run':>6} {'recheck s':>8} {'wall s':>7}")
    try:
        for turn, (label, iters, slow, extra) in enumerate([("small", 400, 416, ["--timing", "graph"]),
                                                           ("big", 20000, 20600, [])]):
            n = rng.randint(90, 110)
            culprit = rng.randint(4, n - 3)
            broken = {culprit - 2, culprit + 2}

            def files(i, iters=iters, slow=slow, culprit=culprit, broken=broken):
                text = gb.SPIN.format(i=i, iters=slow if i >= culprit else iters, comment="")
                if i in broken:
                    text += gb.BROKEN
                return {"kernels/spin.cu": text, "recipes/spin.toml": gb.SPIN_RECIPE}
            root = gb.make_fast(base, label, n, files)
            for name, repro, env in (bins if turn % 2 == 0 else bins[::-1]):
                store = os.path.join(base, f"store-{label}-{name}")
                args = [repro, "-v", "-C", root, "--store", store, "bisect", "--good", f"HEAD~{n - 1}",
                        "--bad", "HEAD", "--recipe", "spin", "--mode", "bench", "--threshold", "2%",
                        "--min-time", "100ms", *extra]
                start = time.time()
                p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, **env))
                lines = [f"{time.time() - start:8.3f} {line}" for line in p.stdout]
                p.wait()
                wall = time.time() - start
                text = "".join(lines)
                if a.keep:
                    os.makedirs(a.keep, exist_ok=True)
                    with open(os.path.join(a.keep, f"{label}-{name}.txt"), "w") as f:
                        f.write(f"N={n} culprit=commit {culprit} exit {p.returncode}\n{text}")
                found = re.search(r"subject\s+(commit \d+)", text)
                evals = re.search(r"\((\d+) of \d+ commits evaluated", text)
                measured = [(float(m), int(r)) for m, r in re.findall(r"measure ([\d.]+) s in (\d+) runs", text)]
                runs = sum(r for _, r in measured)
                measure = sum(m for m, _ in measured)
                recheck = re.search(r"^\s*([\d.]+) bisect: re-checking", text, re.M)
                recheck_s = wall - float(recheck.group(1)) if recheck else 0.0
                print(f"{label:6} {n:4} {culprit:7} {name:8} {found.group(1) if found else '-':12} "
                      f"{evals.group(1) if evals else '-':>5} {runs:4} {measure / runs if runs else float('nan'):6.3f} "
                      f"{recheck_s:8.1f} {wall:7.1f}", flush=True)
                shutil.rmtree(store, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
