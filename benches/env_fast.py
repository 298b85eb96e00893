#!/usr/bin/env python3
"""`repro env check` and a warm `repro build` cache hit, two repro binaries side by side.

Each case runs as a fresh process, the binaries interleaved run by run (so load drifts hit
both alike), after warm-up runs that fill the per-boot caches; prints medians, min and max
in ms, and each binary's `env check -v` probe line (where the time goes). Usage:

    python3 benches/env_fast.py --before OLD_BINARY --after NEW_BINARY [--lock FILE] [--runs N]

The build case builds recipes/vector_add.toml into a temporary store once (untimed), then
times `repro build vector_add` hits; it is left out where the build fails (no NVRTC).
Two floor rows follow: `/bin/true` (what this script's fork, exec and wait cost) and
`repro --version` (repro's own start-up: loading and relocating the binary, parsing the
command line).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def once(argv, env=None):
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - t) * 1e3, r.returncode


def interleaved(cases, runs):
    """cases: {name: argv}; returns {name: [ms]} with the cases alternating each run."""
    for argv in cases.values():
        for _ in range(3):
            once(argv)
    out = {k: [] for k in cases}
    for _ in range(runs):
        for k, argv in cases.items():
            out[k].append(once(argv)[0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--lock", default="lockfiles/h200.toml")
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    bins = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    for label, b in bins.items():
        r = subprocess.run([b, "-v", "env", "check", "--lock", a.lock], capture_output=True, text=True)
        line = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("checked in")]
        print(f"{label}: {line[-1] if line else '(no -v line)'}")
    rows = interleaved({f"repro env check ({k})": [b, "env", "check", "--lock", a.lock]
                        for k, b in bins.items()}, a.runs)
    store = tempfile.mkdtemp(prefix="repro-env-fast-")
    try:
        built = all(subprocess.run([b, "--store", os.path.join(store, k), "build", "vector_add"],
                                   capture_output=True).returncode == 0 for k, b in bins.items())
        if built:
            rows.update(interleaved({f"repro build vector_add, cache hit ({k})":
                                     [b, "--store", os.path.join(store, k), "build", "vector_add"]
                                     for k, b in bins.items()}, a.runs))
        else:
            print("repro build vector_add failed here (no NVRTC?): build rows left out")
    finally:
        shutil.rmtree(store, ignore_errors=True)
    # What starting any process costs from here (Python's fork, exec and wait are in every
    # row above), and what starting repro itself costs: the floor under every repro row.
    rows.update(interleaved({"/bin/true (process start-up)": ["/bin/true"],
                             "repro --version (after; repro's start-up)": [bins["after"], "--version"]},
                            a.runs))
    print(f"\n{'case':48} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8}")
    for name, xs in rows.items():
        print(f"{name:48} {len(xs):>4} {statistics.median(xs):10.1f} {min(xs):8.1f} {max(xs):8.1f}")


if __name__ == "__main__":
    main()
