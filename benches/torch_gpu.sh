#!/usr/bin/env bash
# GPU-machine run for issue 27: a CUDA attention extension built by repro as a
# `kind = "torch-extension"` recipe, imported, checked against PyTorch's SDPA and timed
# against it (CUDA events, L2 flushed before each launch), and the cost of a second build
# (a cache hit) set against torch.utils.cpp_extension.load_inline on the same sources.
#
# Usage (on the H200 machine, from the repository root, after `cargo build --release`):
#   PY=python3 benches/torch_gpu.sh   (REPRO_NVCC defaults to the nvcc on the PATH, else /usr/local/cuda*/bin/nvcc)
# PY is the interpreter whose PyTorch (with CUDA) the extension builds against; ninja must
# be installed for load_inline. Prints a table; exits non-zero if a step fails.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
repro="${REPRO:-$src/target/release/repro}"
PY="${PY:-python3}"
PY="$(command -v "$PY")"
export REPRO_NVCC="${REPRO_NVCC:-$(command -v nvcc || ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null | tail -1)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/repro-torch-gpu.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
git init -q -b main repo && cd repo
mkdir -p ext recipes

cat > ext/attn_kernel.cu <<'EOF'
// Naive attention, one block per (batch*head, query row): scores in shared memory, a
// block-wide max and sum for the softmax, then the weighted sum of V. float32, D <= 256.
#include <cuda_runtime.h>
#include <math.h>
__device__ float block_reduce(float v, float* red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffff, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x >> 5) ? red[lane] : (is_max ? -INFINITY : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_xor_sync(0xffffffff, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  float r = red[0];
  __syncthreads();
  return r;
}
__global__ void attention_kernel(const float* q, const float* k, const float* v, float* o,
                                 int n, int d, float scale) {
  extern __shared__ float smem[];
  float* s = smem;        // n scores
  float* red = smem + n;  // 32 partials
  const int bh = blockIdx.x, i = blockIdx.y;
  const float* qi = q + ((size_t)bh * n + i) * d;
  const float* kb = k + (size_t)bh * n * d;
  const float* vb = v + (size_t)bh * n * d;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += qi[c] * kb[(size_t)j * d + c];
    s[j] = acc * scale;
    mx = fmaxf(mx, s[j]);
  }
  mx = block_reduce(mx, red, true);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    s[j] = __expf(s[j] - mx);
    sum += s[j];
  }
  sum = block_reduce(sum, red, false);
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < n; ++j) acc += s[j] * vb[(size_t)j * d + c];
    o[((size_t)bh * n + i) * d + c] = acc / sum;
  }
}
void launch_attention(const float* q, const float* k, const float* v, float* o, int bh, int n,
                      int d, cudaStream_t stream) {
  dim3 grid(bh, n);
  size_t smem = (n + 32) * sizeof(float);
  attention_kernel<<<grid, 128, smem, stream>>>(q, k, v, o, n, d, 1.f / sqrtf((float)d));
}
EOF

cat > ext/attn.cpp <<'EOF'
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
void launch_attention(const float*, const float*, const float*, float*, int, int, int, cudaStream_t);
torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kFloat32, "q must be float32 on CUDA");
  q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
  auto o = torch::empty_like(q);
  const int d = q.size(-1), n = q.size(-2), bh = q.numel() / (n * d);
  launch_attention(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), o.data_ptr<float>(),
                   bh, n, d, at::cuda::getCurrentCUDAStream());
  return o;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("attention", &attention); }
EOF

cat > recipes/attn.toml <<'EOF'
schema = 1
[build]
kind = "torch-extension"
module = "attn_ext"
sources = ["ext/attn.cpp", "ext/attn_kernel.cu"]
entries = ["attention"]
targets = ["sm_90"]
toolchain = "system"
EOF
git add -A && git -c user.name=b -c user.email=b@b commit -qm attention

echo "== environment"
"$repro" --python "$PY" env capture | grep -E "^python|torch\.|numpy\.|abi-tag" || true

ms() { echo $(( $(date +%s%N) / 1000000 )); }
t0=$(ms); "$repro" --python "$PY" build attn; t1=$(ms)
"$repro" --python "$PY" build attn; t2=$(ms)
cold=$((t1 - t0)); hit=$((t2 - t1))
so="$("$repro" --python "$PY" --json build attn | "$PY" -c 'import json,sys; b=json.load(sys.stdin)["builds"][0]; print(next(o["path"] for n,o in b["outputs"].items() if n.endswith(".so")))')"
"$repro" --python "$PY" env why-import attn

"$PY" - "$so" "$cold" "$hit" <<'EOF'
import importlib.machinery, importlib.util, os, shutil, statistics, sys, tempfile, time
import torch
import torch.nn.functional as F
so, cold_ms, hit_ms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
# The stored module is named by its digest: load it under its module name.
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "attn_ext" + importlib.machinery.EXTENSION_SUFFIXES[0])
shutil.copy(so, path)
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("attn_ext", path)
ext = importlib.util.module_from_spec(spec); spec.loader.exec_module(ext)
load_ms = (time.perf_counter() - t) * 1e3

flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
def bench(fn, reps=50):
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    m = statistics.median(times)
    lo, hi = times[int(len(times) * 0.25)], times[int(len(times) * 0.75)]
    return m, lo, hi

print(f"{'shape (B,H,N,D)':>18} {'max |err|':>10} {'ext ms':>8} {'sdpa ms':>8} {'speedup (IQR)':>22}")
for shape in [(1, 8, 512, 64), (4, 16, 1024, 64), (2, 16, 2048, 128)]:
    q, k, v = (torch.randn(*shape, device="cuda") for _ in range(3))
    out, ref = ext.attention(q, k, v), F.scaled_dot_product_attention(q, k, v)
    err = (out - ref).abs().max().item()
    assert err < 1e-3, f"extension differs from SDPA by {err}"
    e, elo, ehi = bench(lambda: ext.attention(q, k, v))
    r, rlo, rhi = bench(lambda: F.scaled_dot_product_attention(q, k, v))
    print(f"{str(shape):>18} {err:>10.2e} {e:>8.3f} {r:>8.3f} {r / e:>8.2f}x ({rlo / ehi:.2f}-{rhi / elo:.2f})")

from torch.utils.cpp_extension import load_inline
here = os.getcwd()
cpp = open(os.path.join(here, "ext/attn.cpp")).read().replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"attention\", &attention); }", "")
cu = open(os.path.join(here, "ext/attn_kernel.cu")).read()
build_dir = tempfile.mkdtemp()
t = time.perf_counter()
load_inline("attn_inline", cpp_sources=[cpp], cuda_sources=[cu], functions=["attention"],
            build_directory=build_dir, extra_cuda_cflags=["-gencode=arch=compute_90,code=sm_90"])
jit_ms = (time.perf_counter() - t) * 1e3
print()
print(f"{'build':38} {'ms':>10}")
print(f"{'repro build, cold (compile + import check)':38} {cold_ms:>10.0f}")
print(f"{'repro build, cache hit':38} {hit_ms:>10.0f}")
print(f"{'import of the stored module':38} {load_ms:>10.1f}")
print(f"{'load_inline, cold (ninja, same sources)':38} {jit_ms:>10.0f}")
EOF

# Part 4: the same extension benched by repro against SDPA in one command (a Python call
# in the recipe's [run], checked in [check], both timed with CUDA events and L2 flushed).
cat >> recipes/attn.toml <<'EOF'

[params]
n = [512, 2048]

[run]
function = "attn_ext.attention"
device = "cuda"
args = [
  { name = "q", tensor = "f32", shape = [2, 16, "n", 64], init = "normal" },
  { name = "k", tensor = "f32", shape = [2, 16, "n", 64], init = "normal" },
  { name = "v", tensor = "f32", shape = [2, 16, "n", 64], init = "normal" },
]

[check]
function = "torch.nn.functional.scaled_dot_product_attention"
atol = 1e-4
rtol = 1e-3
EOF
git add -A && git -c user.name=b -c user.email=b@b commit -qm "bench against SDPA"
echo
echo "== repro bench attn (against SDPA)"
"$repro" --python "$PY" bench attn --budget 5s

# A generated history with a planted slowdown: the scores are computed SLOW times over,
# then a neutral commit. A performance bisection must name the planted commit.
"$PY" - <<'EOF'
p = "ext/attn_kernel.cu"
s = open(p).read()
s = s.replace("    for (int c = 0; c < d; ++c) acc += qi[c] * kb[(size_t)j * d + c];",
              "    for (int rep = 0; rep < 6; ++rep) { acc = 0.f; for (int c = 0; c < d; ++c) acc += qi[c] * kb[(size_t)j * d + c]; }", 1)
open(p, "w").write(s)
EOF
git -c user.name=b -c user.email=b@b commit -qam "plant a slowdown: scores computed six times"
echo "// neutral" >> ext/attn.cpp
git -c user.name=b -c user.email=b@b commit -qam "a neutral change"
echo
echo "== repro bisect --mode bench over 3 commits (planted slowdown in HEAD~1)"
t0=$(ms)
"$repro" --python "$PY" bisect --recipe attn --good HEAD~2 --bad HEAD --mode bench --param n=2048 --attempts 10 --min-time 100ms | tee "$work/bisect.txt"
t1=$(ms)
grep -q "plant a slowdown" "$work/bisect.txt" || { echo "FAILED: the bisection did not name the planted commit"; exit 1; }
echo "bisection took $(( (t1 - t0) / 1000 )) s"
