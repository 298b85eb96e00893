#!/usr/bin/env python3
"""Cold and cached build times of every shipped recipe: in-process NVRTC, the pinned nvcc
(installed by `repro toolchain install nvcc@13.0` from NVIDIA's wheels), and plain
`nvcc -cubin` with that same nvcc on the same source. Prints a table of medians.

Each kernel is built three ways, cold (`--force`, so the compiler runs every time):
  nvrtc     `repro build R --force` of the recipe as shipped (kind = "nvrtc"; PTX and CUBIN
            from one compile)
  nvcc      `repro build R_nvcc --force`, the same source as kind = "nvcc" with
            toolchain = "nvcc@13.0" and outputs = ["cubin"]
  nvcc -cubin   the pinned nvcc binary run directly: nvcc -cubin -arch=sm_90 --std=c++17
and cached: `repro build R` when the store has the key (the whole process). Ratios are
against NVRTC's cold build. The WMMA recipe includes <cuda_runtime.h>, which NVRTC cannot
compile, so it has no NVRTC column.

Split compilation: NVRTC and nvcc both take `-split-compile=N` (0: as many threads as the
machine has), which runs the optimizer over a translation unit's functions in parallel. The
machine code is the same; the cubin's symbol order and its recorded command line differ, so a
recipe opts in through its `options` (the option is part of the build key). Each NVRTC recipe
is built both ways ("serial": the option removed; "split": the option added), and plain nvcc
both ways too; the ratio the README quotes is `nvcc -cubin` / NVRTC split.

Usage: python3 benches/toolchain_build.py (--wheels DIR | --nvcc PATH) [--nvrtc PATH]
       [--repro PATH] [--runs N] [--hit-runs N]
--wheels DIR installs the pinned nvcc 13.0 from its wheels (as a user would); --nvcc PATH uses
that nvcc instead (a machine that reaches no package index, such as the GPU box), through
`repro build --toolchain system`. --nvrtc PATH is the libnvrtc.so to use (else REPRO_NVRTC,
else the usual search).
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


def run(argv, cwd, env):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def timed(argv, cwd, env, runs):
    run(argv, cwd, env)  # warm-up (page cache, the store), untimed
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        run(argv, cwd, env)
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def text_targets(root, r):
    text = open(os.path.join(root, "recipes", f"{r}.toml")).read()
    t = recipe_field(text, "targets")
    return t.count('"') // 2 if t else 1


def lookup_ms(recipe, cwd, env, runs, via=()):
    """The store lookup of a cache hit as repro itself times it (`duration-ms`, summed over
    targets), without process start-up."""
    samples = []
    for _ in range(runs):
        out = json.loads(run([REPRO, "--json", "build", *via, recipe], cwd, env).stdout)
        samples.append(sum(b["duration-ms"] for b in out["builds"]))
    return statistics.median(samples)


REPRO = None


def git(cwd, *args):
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def split_off(text):
    """The recipe text without the split-compilation option."""
    return text.replace(', "-split-compile=0"', "").replace('"-split-compile=0", ', "").replace(
        'options = ["-split-compile=0"]\n', "")


def recipe_field(text, key):
    for line in text.splitlines():
        if line.startswith(f"{key} = "):
            return line.split("=", 1)[1].strip()
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default=os.path.join(HERE, "target/release/repro"))
    ap.add_argument("--wheels", help="directory holding the nvcc 13.0 wheels")
    ap.add_argument("--nvcc", help="an nvcc binary to use instead of installing the pinned one")
    ap.add_argument("--nvrtc", help="the libnvrtc.so NVRTC builds use (REPRO_NVRTC)")
    ap.add_argument("--runs", type=int, default=5, help="cold builds per cell")
    ap.add_argument("--hit-runs", type=int, default=20, help="cache-hit builds per cell")
    a = ap.parse_args()
    if not a.wheels and not a.nvcc:
        ap.error("give --wheels DIR (the pinned nvcc's wheels) or --nvcc PATH")
    global REPRO
    repro = REPRO = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-tcbench-")
    try:
        root = os.path.join(base, "repo")
        os.makedirs(root)
        for d in ["kernels", "recipes"]:
            shutil.copytree(os.path.join(HERE, d), os.path.join(root, d))
        shutil.copy(os.path.join(HERE, "repro.toml"), root)
        recipes = sorted(f[:-5] for f in os.listdir(os.path.join(root, "recipes")) if f.endswith(".toml"))
        rows = []
        for r in recipes:
            text = open(os.path.join(root, "recipes", f"{r}.toml")).read()
            kind = recipe_field(text, "kind").strip('"')
            source = recipe_field(text, "source").strip('"')
            entries = recipe_field(text, "entries")
            rows.append((r, kind, source))
            if kind == "nvrtc":
                with open(os.path.join(root, "recipes", f"{r}_nvcc.toml"), "w") as f:
                    f.write(f'schema = 1\n[build]\nkind = "nvcc"\nsource = "{source}"\nentries = {entries}\n'
                            'toolchain = "nvcc@13.0"\ntarget = "sm_90"\noutputs = ["cubin"]\noptions = ["--std=c++17"]\n')
                serial = split_off(text)
                split = serial.replace('options = ["--std=c++17"', 'options = ["--std=c++17", "-split-compile=0"', 1)
                if split == serial:
                    split = serial.replace("[build]\n", '[build]\noptions = ["-split-compile=0"]\n', 1)
                for name, t in ((f"{r}_serial", serial), (f"{r}_split", split)):
                    with open(os.path.join(root, "recipes", f"{name}.toml"), "w") as f:
                        f.write(t)
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "bench")
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(base, "cache"), NO_COLOR="1")
        if a.nvrtc:
            env["REPRO_NVRTC"] = os.path.abspath(a.nvrtc)
        via = []
        if a.nvcc:
            nvcc = os.path.abspath(a.nvcc)
            env["REPRO_NVCC"] = nvcc
            via = ["--toolchain", "system"]
            print(f"nvcc: {nvcc} (through `repro build --toolchain system`)")
        else:
            t = time.perf_counter()
            run([repro, "toolchain", "install", "nvcc@13.0", "--wheels", a.wheels], root, env)
            install_s = time.perf_counter() - t
            nvcc = os.path.join(base, "cache/repro/toolchains/nvcc-13.0/nvidia/cu13/bin/nvcc")
            print(f"repro toolchain install nvcc@13.0 from a wheel directory: {install_s:.1f} s (once)")
        out = os.path.join(base, "out.cubin")
        which = run([repro, "toolchain", "which"], root, env).stdout.strip().replace("\n", "; ")
        print(f"compilers: {which}")
        print(f"medians: cold builds of {a.runs} runs, cache hits of {a.hit_runs} runs, ms; ratio = time / NVRTC cold\n")
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print("cache hits: whole process / the lookup inside it (repro's own duration-ms)\n")
        print("| recipe | NVRTC cold, serial | NVRTC cold, split | nvcc cold (repro) | `nvcc -cubin` | "
              "`nvcc -cubin --split-compile=0` | NVRTC cache hit | nvcc cache hit |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r, kind, source in rows:
            cubin = [nvcc, "-cubin", "-arch=sm_90", "--std=c++17", "-o", out, source]
            if kind == "nvrtc":
                cold = timed([repro, "build", "--force", f"{r}_serial"], root, env, a.runs)
                scold = timed([repro, "build", "--force", f"{r}_split"], root, env, a.runs)
                ncold = timed([repro, "build", "--force", *via, f"{r}_nvcc"], root, env, a.runs)
                plain = timed(cubin, root, env, a.runs)
                splain = timed(cubin + ["--split-compile=0"], root, env, a.runs)
                hit = timed([repro, "build", r], root, env, a.hit_runs)
                nhit = timed([repro, "build", *via, f"{r}_nvcc"], root, env, a.hit_runs)
                look = lookup_ms(r, root, env, a.hit_runs)
                nlook = lookup_ms(f"{r}_nvcc", root, env, a.hit_runs, via)
                print(f"| {r} | {cold:.0f} | {scold:.0f} | {ncold:.0f} | {plain:.0f} ({plain / cold:.2f}x serial, "
                      f"{plain / scold:.2f}x split) | {splain:.0f} ({splain / scold:.2f}x split) "
                      f"| {hit:.1f} / {look:.1f} | {nhit:.1f} / {nlook:.1f} |")
            else:
                targets = text_targets(root, r)
                ncold = timed([repro, "build", "--force", *via, r], root, env, a.runs)
                plain = timed(cubin, root, env, a.runs)
                splain = timed(cubin + ["--split-compile=0"], root, env, a.runs)
                nhit = timed([repro, "build", *via, r], root, env, a.hit_runs)
                nlook = lookup_ms(r, root, env, a.hit_runs, via)
                label = f"{r} (nvcc, {targets} targets)" if targets > 1 else f"{r} (nvcc)"
                note = " (one target)" if targets > 1 else ""
                print(f"| {label} | n/a | n/a | {ncold:.0f} | {plain:.0f}{note} | {splain:.0f}{note} | n/a "
                      f"| {nhit:.1f} / {nlook:.1f} |")
        print("\nratios: `nvcc -cubin` time / NVRTC time (higher: NVRTC faster)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
