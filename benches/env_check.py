#!/usr/bin/env python3
"""Median wall time of `repro env check` against other environment reporters.

Each command runs as a fresh process N times (after one untimed warm-up run); the table
gives the median, min and max in milliseconds and the ratio of each median to repro's.
Commands that are not installed are reported as such. Usage:

    python3 benches/env_check.py [--repro PATH] [--runs N] [--lock FILE] [--slow-runs N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def time_runs(argv, runs, env=None):
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--slow-runs", type=int, default=5, help="runs for commands slower than 1 s")
    ap.add_argument("--lock", default=None)
    args = ap.parse_args()

    check = [args.repro, "env", "check"] + (["--lock", args.lock] if args.lock else [])
    cases = [
        ("repro env check", check, args.runs),
        ("repro env capture", [args.repro, "env", "capture"], args.runs),
        ("nvidia-smi -q", ["nvidia-smi", "-q"], args.runs),
        ("nvidia-smi -q -x", ["nvidia-smi", "-q", "-x"], args.runs),
        ("python3 -m torch.utils.collect_env", [sys.executable, "-m", "torch.utils.collect_env"], args.slow_runs),
    ]
    rows = []
    for name, argv, runs in cases:
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            rows.append((name, None, "not installed"))
            continue
        if argv[1:3] == ["-m", "torch.utils.collect_env"]:
            probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
            if probe.returncode != 0:
                rows.append((name, None, "torch not installed"))
                continue
        samples = time_runs(argv, runs)
        rows.append((name, samples, ""))

    base = statistics.median(rows[0][1]) if rows[0][1] else None
    print(f"{'command':38} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8} {'x repro':>8}")
    for name, samples, note in rows:
        if samples is None:
            print(f"{name:38} {'-':>4} {note}")
            continue
        med = statistics.median(samples)
        ratio = f"{med / base:8.1f}" if base else ""
        print(f"{name:38} {len(samples):>4} {med:10.1f} {min(samples):8.1f} {max(samples):8.1f} {ratio}")


if __name__ == "__main__":
    main()
