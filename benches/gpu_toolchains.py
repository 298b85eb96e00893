#!/usr/bin/env python3
"""GPU checks of `repro bisect --toolchains` in check and bench modes; prints a table.

The commit is held fixed and the search runs over NVRTC releases. Each kernel depends on the
compiler release through `__CUDACC_VER_MAJOR__`, which NVRTC defines for the release that
compiles it: a genuine difference between releases (the code each release generates
differs), chosen because a kernel that computes a wrong result only with newer NVRTC
releases is hard to come by.

1. check mode: `scale_k` adds 1 to every element when built by NVRTC 13 or later, and the
   recipe's reference kernel does not: the check fails from the first 13.x release on.
2. bench mode: `spin_k` runs 4x more dependent multiply-adds per element when built by NVRTC
   13 or later: the statistical decision finds the first 13.x release slower than the good
   end, and the re-check confirms it against the release before it.
3. both again: every step is answered from the store.

The GPU machine reaches no package index: give it a directory of NVRTC wheels of at least
two releases on both sides of 13.0 (e.g. nvidia-cuda-nvrtc-cu12 12.8.93 and 12.9.86 and
nvidia-cuda-nvrtc 13.0.88; `python3 -m pip download --no-deps --only-binary=:all: -d DIR
PKG==VERSION` elsewhere).

Usage: python3 benches/gpu_toolchains.py --wheels DIR [--repro PATH]
       [--range nvrtc@12.8.93..nvrtc@13.0.88]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
           GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
ENV.pop("REPRO_NVRTC", None)

CHECK_KERNEL = """// Wrong from NVRTC 13 on: the release is part of what is compiled.
#if __CUDACC_VER_MAJOR__ >= 13
#define EXTRA 1.0f
#else
#define EXTRA 0.0f
#endif
extern "C" __global__ void scale_k(const float* a, float* o, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) o[t] = 2.0f * a[t] + EXTRA;
}
extern "C" __global__ void scale_ref(const float* a, float* o, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) o[t] = 2.0f * a[t];
}
"""

CHECK_RECIPE = """schema = 1
[build]
kind = "nvrtc"
source = "kernels/scale.cu"
entries = ["scale_k", "scale_ref"]
target = "sm_90"
outputs = ["cubin"]

[params]
n = 1048576

[run]
kernel = "scale_k"
grid = "ceil_div(n, 256)"
block = 256
args = [
  { name = "a", buffer = "f32", count = "n", init = "normal" },
  { name = "o", buffer = "f32", count = "n", output = true },
  { name = "n", scalar = "i32", value = "n" },
]

[check]
kernel = "scale_ref"
grid = "ceil_div(n, 256)"
atol = 0.0
rtol = 0.0
"""

BENCH_KERNEL = """// 4x the work per element from NVRTC 13 on.
#if __CUDACC_VER_MAJOR__ >= 13
#define REPS 256
#else
#define REPS 64
#endif
extern "C" __global__ void spin_k(const float* a, float* o, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float x = a[t];
  #pragma unroll 1
  for (int r = 0; r < REPS; ++r) x = x * 0.999f + 0.5f;
  o[t] = x;
}
"""

BENCH_RECIPE = """schema = 1
[build]
kind = "nvrtc"
source = "kernels/spin.cu"
entries = ["spin_k"]
target = "sm_90"
outputs = ["cubin"]

[params]
n = 16777216

[run]
kernel = "spin_k"
grid = "ceil_div(n, 256)"
block = 256
args = [
  { name = "a", buffer = "f32", count = "n", init = "normal" },
  { name = "o", buffer = "f32", count = "n", output = true },
  { name = "n", scalar = "i32", value = "n" },
]
"""


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, env=ENV, check=True, capture_output=True)


def make_repo(tmp):
    root = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(root, "kernels"))
    os.makedirs(os.path.join(root, "recipes"))
    for path, text in [("kernels/scale.cu", CHECK_KERNEL), ("recipes/scale.toml", CHECK_RECIPE),
                       ("kernels/spin.cu", BENCH_KERNEL), ("recipes/spin.toml", BENCH_RECIPE)]:
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "kernels")
    return root


def bisect(repro, root, cache, rng, recipe, mode, wheels):
    env = dict(ENV, XDG_CACHE_HOME=cache)
    argv = [repro, "-C", root, "--json", "bisect", "--toolchains", rng, "--recipe", recipe,
            "--mode", mode, "--wheels", wheels]
    t = time.monotonic()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        doc = None
    return p.returncode, doc, p.stderr, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--wheels", required=True, help="a directory of NVRTC wheels")
    ap.add_argument("--range", default="nvrtc@12.8.93..nvrtc@13.0.88")
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    wheels = os.path.abspath(a.wheels)
    rows = []
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = make_repo(tmp)
        cache = os.path.join(tmp, "cache")
        for attempt in ("first", "again"):
            for recipe, mode in [("scale", "check"), ("spin", "bench")]:
                code, doc, err, wall = bisect(repro, root, cache, a.range, recipe, mode, wheels)
                if doc is None:
                    failures += 1
                    lines = err.strip().splitlines() or ["no output"]
                    why = next((l for l in lines if l.startswith("error:")), lines[-1])
                    rows.append([mode, attempt, str(code), "-", "-", "-", "-", "-", f"{wall:.1f}", why[:100]])
                    continue
                steps = doc.get("steps", [])
                recheck = doc.get("recheck") or {}
                ratio = recheck.get("ratio")
                expected = a.range.split("..")[1].split("@")[-1]
                ok = code == 0 and doc.get("first-bad") == expected
                failures += 0 if ok else 1
                rows.append([
                    mode, attempt, str(code), str(doc.get("first-bad")), str(doc.get("last-good")),
                    f"{len(steps)}/{len(doc.get('releases', []))}",
                    str(sum(1 for s in steps if s.get("cached"))),
                    "-" if ratio is None else f"{ratio:.3f} {'confirmed' if recheck.get('confirmed') else 'NOT confirmed'}",
                    f"{wall:.1f}",
                    "ok" if ok else f"expected first bad {expected}",
                ])
    head = ["MODE", "RUN", "EXIT", "FIRST BAD", "LAST GOOD", "STEPS", "CACHED", "RECHECK", "WALL S", "RESULT"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
