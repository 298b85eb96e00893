#!/usr/bin/env python3
"""Overhead of running a build step inside `nix develop` (warm), against running it directly.

Builds a throwaway repository whose flake's dev shell is a raw derivation (no nixpkgs, so it
works offline), warms the shell and the store, then times each case as a fresh process.

Usage: python3 benches/nix_overhead.py [--repro PATH] [--runs N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

FLAKE = """{
  outputs = { self }: {
    devShells.x86_64-linux.default = derivation {
      name = "bench-shell"; system = "x86_64-linux"; builder = "/bin/bash"; outputs = [ "out" ];
      args = [ "-c" "echo > $out" ];
      KERNEL_TAG = "42";
    };
  };
}
"""
RECIPE = """schema = 1
[build]
kind = "nvrtc"
source = "kernels/k.cu"
entries = ["k"]
target = "sm_90"
[build.defines]
TAG = { env = "KERNEL_TAG", default = 7 }
"""


def timed(argv, cwd, runs):
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default=os.path.join(here, "target/release/repro"))
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-nix-bench-")
    try:
        root = os.path.join(base, "repo")
        os.makedirs(os.path.join(root, "kernels"))
        os.makedirs(os.path.join(root, "recipes"))
        open(os.path.join(root, "flake.nix"), "w").write(FLAKE)
        open(os.path.join(root, "kernels/k.cu"), "w").write('extern "C" __global__ void k(int* a) { a[0] = TAG; }\n')
        open(os.path.join(root, "recipes/k.toml"), "w").write(RECIPE)
        env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"]):
            subprocess.run(["git", *args], cwd=root, env=env, check=True)
        reg = os.path.join(base, "registry.json")
        open(reg, "w").write('{"flakes":[],"version":2}')
        os.environ["REPRO_NIX_FLAGS"] = f"--offline --option flake-registry {reg}"
        os.environ["XDG_CACHE_HOME"] = os.path.join(base, "cache")
        nix = ["nix", "--extra-experimental-features", "nix-command flakes", "--offline", "--option", "flake-registry", reg]
        cases = [
            ("repro build k (host, cache hit)", [repro, "build", "k"]),
            ("repro build k --nix (in the shell, cache hit)", [repro, "build", "k", "--nix"]),
            ("nix develop --command true", nix + ["develop", f"{root}#default", "--command", "true"]),
            ("nix eval --raw ...drvPath", nix + ["eval", "--raw", f"{root}#devShells.x86_64-linux.default.drvPath"]),
        ]
        print(f"{'case':48} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8}")
        meds = []
        for name, argv in cases:
            s = timed(argv, root, a.runs)
            meds.append(statistics.median(s))
            print(f"{name:48} {len(s):>4} {meds[-1]:10.1f} {min(s):8.1f} {max(s):8.1f}")
        print(f"\noverhead of --nix over a host build (medians): {meds[1] - meds[0]:.1f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
