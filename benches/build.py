#!/usr/bin/env python3
"""Build benchmarks for `repro build`; prints tables of medians.

1. Warm cache hit: the whole `repro build RECIPE` process when the store has the key.
2. Cold FlashAttention build: `repro build flash_attention --force` (in-process NVRTC), the
   same recipe as kind = "nvcc", and plain `nvcc -cubin` on the same source (if nvcc exists).
3. Key computation in a repository of 10,000 unrelated files, against an empty one: warm
   `repro build` of an NVRTC recipe (include closure) and of command recipes whose input
   glob starts in kernels/ or walks the whole tree.

Usage: python3 benches/build.py [--repro PATH] [--runs N] [--cold-runs N]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(argv, cwd, check=True):
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def timed(argv, cwd, runs):
    run(argv, cwd)  # warm-up, untimed
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        run(argv, cwd)
        samples.append((time.perf_counter() - t) * 1e3)
    return samples


def git(cwd, *args):
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_repo(base, name, extra_files):
    root = os.path.join(base, name)
    os.makedirs(root)
    for d in ["kernels", "recipes"]:
        shutil.copytree(os.path.join(HERE, d), os.path.join(root, d))
    with open(os.path.join(root, "recipes", "fa_nvcc.toml"), "w") as f:
        f.write('schema = 1\n[build]\nkind = "nvcc"\nsource = "kernels/flash_attention.cu"\n'
                'entries = ["flash_attn_fwd", "flash_attn_ref"]\ntarget = "sm_90"\noutputs = ["cubin"]\n'
                'options = ["--std=c++17"]\n')
    for glob, name_ in [("kernels/*.cu", "cmd_prefix"), ("**/*.cu", "cmd_whole_tree")]:
        with open(os.path.join(root, "recipes", f"{name_}.toml"), "w") as f:
            f.write(f'schema = 1\n[build]\nkind = "command"\nargv = ["cp", "kernels/vector_add.cu", "out.cu"]\n'
                    f'inputs = ["{glob}"]\noutputs = ["out.cu"]\n')
    for i in range(extra_files):
        d = os.path.join(root, "data", f"d{i // 100:03}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05}.txt"), "w") as f:
            f.write(f"unrelated file {i}\n" * 8)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bench")
    return root


def row(name, samples, base=None):
    med = statistics.median(samples)
    ratio = f"{med / base:8.2f}" if base else ""
    print(f"{name:58} {len(samples):>4} {med:10.2f} {min(samples):8.2f} {max(samples):8.2f} {ratio}")
    return med


def header(title):
    print(f"\n{title}\n{'case':58} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8} {'ratio':>8}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default=os.path.join(HERE, "target/release/repro"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cold-runs", type=int, default=10)
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-bench-")
    os.environ["XDG_CACHE_HOME"] = os.path.join(base, "cache")
    try:
        small = make_repo(base, "small", 0)
        big = make_repo(base, "big", 10_000)

        header("warm cache hit (whole process)")
        for recipe in ["vector_add", "flash_attention"]:
            run([repro, "build", recipe], small)
            row(f"repro build {recipe} (cached)", timed([repro, "build", recipe], small, a.runs))

        header("cold FlashAttention build (sm_90 cubin)")
        nv = row("repro build flash_attention --force (NVRTC, in-process)",
                 timed([repro, "build", "flash_attention", "--force"], small, a.cold_runs))
        inner = []
        for _ in range(a.cold_runs):
            r = run([repro, "build", "flash_attention", "--force", "--json"], small)
            inner.append(json.loads(r.stdout)["builds"][0]["duration-ms"])
        row("  of which inside repro (key, compile, store)", inner)
        nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
        if nvcc:
            row("repro build fa_nvcc --force (nvcc, child process)",
                timed([repro, "build", "fa_nvcc", "--force"], small, a.cold_runs), nv)
            row("nvcc -cubin -arch=sm_90 kernels/flash_attention.cu",
                timed([nvcc, "-cubin", "-arch=sm_90", "--std=c++17", "-o", os.path.join(base, "fa.cubin"),
                       "kernels/flash_attention.cu"], small, a.cold_runs), nv)
        else:
            print("nvcc: not installed here (run on the GPU machine for the comparison)")

        header("key computation, 10,000 unrelated files vs none (warm builds)")
        for recipe in ["vector_add", "cmd_prefix", "cmd_whole_tree"]:
            for repo, label in [(small, "0 files"), (big, "10,000 files")]:
                run([repro, "build", recipe], repo)
                row(f"repro build {recipe} ({label})", timed([repro, "build", recipe], repo, a.runs))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
