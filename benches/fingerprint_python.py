#!/usr/bin/env python3
"""What describing a PyTorch environment adds to a fingerprint (issue 27's budget: 5 ms).

`repro env capture --json` runs as a fresh process, interleaved A/B/C over three Python
environments: an interpreter that does not exist (no python.* fields beyond the reason),
a bare venv (no packages), and a venv with PyTorch (about 25 distributions, torch's
version.py, its CMake config and the fat-binary headers of libtorch_cuda.so). For each it
gives the median wall time of the whole capture and the median of the `python` probe's own
time (`probe-ms.python` in the JSON: the probe runs in its own thread beside the others),
then the median paired difference against the bare venv. Usage:

    python3 benches/fingerprint_python.py --torch-python VENV/bin/python3 \\
        [--repro target/release/repro] [--runs 40]

The torch tests' venvs serve: target/tmp/repro-test-deps/venv-torch-*/bin/python3.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def capture(repro, python, cwd):
    start = time.perf_counter()
    out = subprocess.run(
        [repro, "--python", python, "env", "capture", "--json"],
        capture_output=True,
        cwd=cwd,
        check=True,
    )
    wall = (time.perf_counter() - start) * 1e3
    probe = json.loads(out.stdout)["probe-ms"].get("python", float("nan"))
    return wall, probe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--torch-python", required=True)
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    repro = os.path.abspath(args.repro)
    with tempfile.TemporaryDirectory() as tmp:
        bare = os.path.join(tmp, "bare")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True)
        cases = [
            ("no interpreter", os.path.join(tmp, "none/bin/python3")),
            ("bare venv", os.path.join(bare, "bin/python3")),
            ("venv with PyTorch", os.path.abspath(args.torch_python)),
        ]
        for _, py in cases:  # warm-up: page cache, per-boot device cache
            capture(repro, py, tmp)
        walls = {n: [] for n, _ in cases}
        probes = {n: [] for n, _ in cases}
        for _ in range(args.runs):
            for name, py in cases:
                w, p = capture(repro, py, tmp)
                walls[name].append(w)
                probes[name].append(p)
    base = "bare venv"
    print(f"{'environment':20} {'runs':>4} {'capture ms':>11} {'python probe ms':>16} {'paired diff ms':>15}")
    for name, _ in cases:
        diffs = [a - b for a, b in zip(walls[name], walls[base])]
        print(
            f"{name:20} {args.runs:>4} {statistics.median(walls[name]):>11.1f} "
            f"{statistics.median(probes[name]):>16.2f} {statistics.median(diffs):>15.1f}"
        )


if __name__ == "__main__":
    main()
