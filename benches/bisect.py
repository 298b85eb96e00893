#!/usr/bin/env python3
"""Bisection benchmarks on the CPU (no GPU needed); prints tables.

1. Evaluations: for N commits with one transition, the worst case over the transition's
   position of the evaluations `repro bisect --script` makes (ends included), against
   ceil(log2 N) + 2.
2. A finished bisection over 1,000 commits run again with everything in the store.
3. Per-step overhead with known inputs (build mode, builds already in the store, step answers
   not): repositories of 1,000 and 50,000 files, against script mode (whole tree).

Usage: python3 benches/bisect.py [--repro PATH]
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time

RECIPE = 'schema = 1\n[build]\nkind = "nvrtc"\nsource = "kernels/k.cu"\nentries = ["k"]\ntarget = "sm_90"\n'
ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")


def fast_import(root, commits, base_files=None):
    """Creates a repository with git fast-import: `commits` is a list of {path: text} changes."""
    os.makedirs(root)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, env=ENV, check=True)
    lines = []
    mark = 0
    for i, files in enumerate(commits):
        if i == 0 and base_files:
            files = {**base_files, **files}
        mark += 1
        msg = f"commit {i + 1}".encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"mark :{mark}\n".encode())
        lines.append(b"committer b <b@b> 1700000000 +0000\n")
        lines.append(f"data {len(msg)}\n".encode() + msg + b"\n")
        for path, text in files.items():
            data = text.encode()
            lines.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, env=ENV, input=b"".join(lines), check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, env=ENV, check=True)


def bisect(repro, root, args, store=None):
    extra = ["--store", store] if store else []
    t = time.perf_counter()
    r = subprocess.run([repro, "-C", root, *extra, "bisect", "--json", "-q", *args], capture_output=True, text=True)
    secs = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"bisect failed: {r.stderr}")
    return json.loads(r.stdout), secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-bisect-bench-")
    try:
        print("1. evaluations for N commits with one transition (worst case over its position)")
        print(f"{'N':>6} {'positions tried':>16} {'worst evaluations':>18} {'ceil(log2 N) + 2':>17}")
        for n in [10, 100, 1000]:
            root = os.path.join(base, f"hist{n}")
            fast_import(root, [{"state.txt": f"{i}\n"} for i in range(n)])
            positions = sorted({1, 2, n // 3, n // 2, n - 2, n - 1} | {max(1, n * k // 7) for k in range(1, 7)})
            worst = 0
            for f in positions:
                out, _ = bisect(repro, root, ["--good", "HEAD~%d" % (n - 1), "--bad", "HEAD", "--script", f"test $(cat state.txt) -lt {f}"],
                                store=os.path.join(base, f"store-{n}-{f}"))
                worst = max(worst, out["evaluated"])
            print(f"{n:>6} {len(positions):>16} {worst:>18} {math.ceil(math.log2(n)) + 2:>17}")

        print("\n2. re-running a finished bisection over 1,000 commits")
        root = os.path.join(base, "hist1000")
        store = os.path.join(base, "store-rerun")
        args = ["--good", "HEAD~999", "--bad", "HEAD", "--script", "test $(cat state.txt) -lt 617"]
        _, first = bisect(repro, root, args, store)
        reruns = [bisect(repro, root, args, store)[1] for _ in range(10)]
        print(f"first run {first:.3f} s; re-run with everything in the store: median {statistics.median(reruns) * 1e3:.1f} ms of 10")

        print("\n3. per-step overhead with known inputs (build mode; builds in the store, step answers not)")
        print(f"{'files':>7} {'steps':>5} {'median ms/step':>15} {'process total ms':>17}")
        for files in [1000, 50000]:
            bulk = {f"data/d{i // 500:03}/f{i:05}.txt": f"file {i}\n" for i in range(files)}
            broken = os.path.join(base, f"broken{files}")
            commits_b = [{"kernels/k.cu": f'// v{i}\nextern "C" __global__ void k(float* a) {{ a[0] = 1{";" if i < 20 else ""} }}\n',
                          "recipes/k.toml": RECIPE, "NOTES.md": f"{i}\n"} for i in range(32)]
            fast_import(broken, commits_b, bulk)
            s = os.path.join(base, f"store-build-{files}")
            bargs = ["--good", "HEAD~31", "--bad", "HEAD", "--recipe", "k", "--mode", "build"]
            bisect(repro, broken, bargs, s)
            per_step, totals = [], []
            for _ in range(5):
                shutil.rmtree(os.path.join(s, "bisect"), ignore_errors=True)
                out, secs = bisect(repro, broken, bargs, s)
                per_step.extend(st["ms"] for st in out["steps"])
                totals.append(secs * 1e3)
            print(f"{files:>7} {out['evaluated']:>5} {statistics.median(per_step):15.2f} {statistics.median(totals):17.1f}")
        print("(script mode and Nix builds materialise the whole tree instead: the cost of writing every file)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
