#!/usr/bin/env python3
"""Bundle benchmarks: creation and verification throughput (MB/s of unpacked content) and
bundle sizes for the example kernels' builds, with the whole source tree and inputs only.

Usage: python3 benches/bundle.py [--repro PATH] [--runs N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="b",
           GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(argv, cwd):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        raise SystemExit(f"{argv} failed: {r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default=os.path.join(HERE, "target/release/repro"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-bundle-bench-")
    try:
        root = os.path.join(base, "repo")
        # The project itself (sources, kernels, recipes, docs) is the repository bundled.
        shutil.copytree(HERE, root, ignore=shutil.ignore_patterns("target", ".repro", ".dev", ".git", ".whl"))
        run(["git", "init", "-q"], root)
        run(["git", "add", "-A"], root)
        run(["git", "commit", "-q", "-m", "snapshot"], root)
        keys = []
        for r in ["vector_add", "reduction", "sgemm", "softmax", "flash_attention"]:
            out = json.loads(run([repro, "build", "--json", r], root))
            keys.append(out["builds"][0]["key"])
        print(f"{'bundle':14} {'files':>6} {'unpacked KiB':>13} {'bundle KiB':>11} {'create MB/s':>12} {'verify MB/s':>12}")
        for label, extra in [("whole tree", []), ("inputs only", ["--inputs-only"])]:
            create, verify = [], []
            for i in range(a.runs):
                path = os.path.join(base, f"b-{label.replace(' ', '-')}-{i}.tar.zst")
                t = time.perf_counter()
                info = json.loads(run([repro, "bundle", "create", *keys, "-o", path, "--json", *extra], root))
                create.append(time.perf_counter() - t)
                t = time.perf_counter()
                run([repro, "bundle", "verify", path], root)
                verify.append(time.perf_counter() - t)
            mb = info["bytes-in"] / 1e6
            print(f"{label:14} {info['files']:>6} {info['bytes-in'] / 1024:13.1f} {info['bytes'] / 1024:11.1f} "
                  f"{mb / statistics.median(create):12.2f} {mb / statistics.median(verify):12.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
