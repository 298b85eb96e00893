#!/usr/bin/env python3
"""GPU checks of bisecting a history that never used repro; prints a table.

A throwaway repository of 16 commits whose kernel is a C++ template (launched by its mangled
symbol, whatever the template arguments), with a relative include; commit 9 makes it compute
the wrong result, commit 5 changes its template arguments (a different mangled name, the same
kernel name). The recipe is an uncommitted file. On the GPU machine:

1. `repro bench` of the good end: the check passes and the kernel is timed;
2. `repro bisect --mode check` with the NVRTC recipe: finds commit 9;
3. the same with an nvcc recipe (the CUDA install's nvcc, `--toolchain system` where that
   option exists): finds commit 9.

Usage: python3 benches/gpu_real.py [--repro PATH] [--nvcc PATH]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
           GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

HELPER = "#pragma once\n__device__ inline float twice(float x) { return 2.0f * x; }\n"


def kernel(i):
    s = 64 if i < 5 else 128
    wrong = " + 1.0f" if i >= 9 else ""
    return f"""#include "detail/helper.cuh"
// version {i}
template <int S>
__global__ void scale_k(const float* a, float* o, int n) {{
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) o[t] = twice(a[t]){wrong};
}}
template __global__ void scale_k<{s}>(const float*, float*, int);
extern "C" __global__ void scale_ref(const float* a, float* o, int n) {{
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) o[t] = 2.0f * a[t];
}}
"""


def recipe(kind):
    return f"""schema = 1
[build]
kind = "{kind}"
source = "csrc/scale.cu"
entries = ["scale_k", "scale_ref"]
target = "sm_90"
outputs = ["cubin"]

[params]
n = 16777216

[run]
kernel = "scale_k"
grid = "ceil_div(n, 256)"
block = 256
args = [
  {{ name = "a", buffer = "f32", count = "n", init = "normal" }},
  {{ name = "o", buffer = "f32", count = "n", output = true }},
  {{ name = "n", scalar = "i32", value = "n" }},
]

[check]
kernel = "scale_ref"
grid = "ceil_div(n, 256)"
atol = 0.0
rtol = 0.0
"""


def run(cmd, cwd, env=None):
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True)
    return r, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-gpu-real-")
    rows = []
    try:
        root = os.path.join(base, "repo")
        os.makedirs(os.path.join(root, "csrc/detail"))
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, env=ENV, check=True)
        with open(os.path.join(root, "csrc/detail/helper.cuh"), "w") as f:
            f.write(HELPER)
        for i in range(16):
            with open(os.path.join(root, "csrc/scale.cu"), "w") as f:
                f.write(kernel(i))
            subprocess.run(["git", "add", "-A"], cwd=root, env=ENV, check=True)
            subprocess.run(["git", "commit", "-q", "-m", f"commit {i}"], cwd=root, env=ENV, check=True)
        rec = {}
        for kind in ["nvrtc", "nvcc"]:
            rec[kind] = os.path.join(base, f"scale-{kind}.toml")
            with open(rec[kind], "w") as f:
                f.write(recipe(kind))

        # 1. bench of the good end (HEAD~8 = commit 7), recipe outside the repository.
        subprocess.run(["git", "checkout", "-q", "HEAD~8"], cwd=root, env=ENV, check=True)
        r, secs = run([repro, "bench", "--json", rec["nvrtc"]], root)
        ok = r.returncode == 0
        detail = r.stderr.strip().splitlines()[-1:] if not ok else []
        if ok:
            v = json.loads(r.stdout)
            res = (v.get("results") or [v])[0]
            detail = [f"verdict {res.get('verdict')}, median {(res.get('summary') or {}).get('median')} us"]
        rows.append(("bench of a templated kernel (mangled symbol)", "ok" if ok else f"FAILED ({r.returncode})",
                     f"{secs:.1f}", "; ".join(map(str, detail))[:100]))
        subprocess.run(["git", "checkout", "-q", "main"], cwd=root, env=ENV, check=True)

        # 2. and 3. check-mode bisections.
        for kind in ["nvrtc", "nvcc"]:
            env = dict(ENV, REPRO_NVCC=a.nvcc)
            args = [repro, "bisect", "--json", "--good", "HEAD~15", "--bad", "HEAD", "--recipe", rec[kind],
                    "--mode", "check"]
            r, secs = run(args, root, env)
            if r.returncode == 2 and "toolchain" in r.stderr and kind == "nvcc":
                r, secs = run(args + ["--toolchain", "system"], root, env)
            try:
                v = json.loads(r.stdout)
                got = v["culprit"]["subject"]
                detail = f"{v['evaluated']} evaluations"
            except Exception:
                got, detail = "-", (r.stderr.strip().splitlines() or ["?"])[-1][:100]
            rows.append((f"bisect --mode check, {kind} recipe (uncommitted)",
                         "ok" if got == "commit 9" else f"FAILED: {got}", f"{secs:.1f}", detail))
        # 4. A recipe with two targets: bench picks the artifact for this GPU and says so.
        crate = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
        with open(os.path.join(crate, "recipes/vector_add.toml")) as f:
            text = f.read().replace('target = "sm_90"', 'targets = ["sm_89", "sm_90"]')
        va = os.path.join(base, "va2")
        shutil.copytree(os.path.join(crate, "kernels"), os.path.join(va, "kernels"))
        os.makedirs(os.path.join(va, "recipes"))
        with open(os.path.join(va, "recipes/va.toml"), "w") as f:
            f.write(text)
        subprocess.run(["git", "init", "-q"], cwd=va, env=ENV, check=True)
        r, secs = run([repro, "bench", "va", "--param", "n=67108864"], va)
        said = [l for l in (r.stdout + r.stderr).splitlines() if "sm_9" in l or "target" in l][:1]
        rows.append(("bench of a two-target recipe picks sm_90", "ok" if r.returncode == 0 else f"FAILED ({r.returncode})",
                     f"{secs:.1f}", (said[0] if said else (r.stderr.strip().splitlines() or ["?"])[-1])[:100]))
        print(f"{'check':<48} {'result':<16} {'s':>6}  detail")
        for name, res, secs, detail in rows:
            print(f"{name:<48} {res:<16} {secs:>6}  {detail}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
