// Counts the set bits of each word with libcu++'s internal helper
// cuda::std::__cccl_popc, which CCCL 3.0 (CUDA 13.0) has and CCCL 3.1 (CUDA 13.1) removed
// in favour of cuda::std::popcount. Code that reached for the internal name builds with
// nvcc 13.0 and not with 13.1: a genuine difference between releases, for toolchain
// bisection (tests/toolchain/cli.rs).
#include <cuda/std/bit>

extern "C" __global__ void popcount_words(const unsigned* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = cuda::std::__cccl_popc(in[i]);
}
