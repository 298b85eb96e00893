// Shared device helpers for the example kernels in kernels/.
//
// These kernels are compiled by NVRTC with no CUDA toolkit headers on the include path, so
// nothing here includes <cuda_fp16.h>, <cstdint> or <cuda_runtime.h>. fp16 values are carried
// as `unsigned short` bit patterns and converted with inline PTX. Built-in vector types
// (float4, uint4) and device math functions (expf, exp2f, fmaxf, ...) are provided by NVRTC
// itself. Include it as `#include "common.cuh"`.
#ifndef REPRO_KERNELS_COMMON_CUH
#define REPRO_KERNELS_COMMON_CUH

// fp16 bits -> fp32 (exact).
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// fp32 -> fp16 bits, round to nearest even.
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Two fp32 -> packed f16x2 (round to nearest even): `lo` in bits 0..15, `hi` in bits 16..31,
// i.e. `lo` is the element at the lower address / lower index.
__device__ __forceinline__ unsigned pack_f2h2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two fp16 bit patterns -> packed f16x2 (`lo` in bits 0..15).
__device__ __forceinline__ unsigned pack_h2(unsigned short lo, unsigned short hi) {
    return (unsigned)lo | ((unsigned)hi << 16);
}

// -infinity without <cmath>/<math_constants.h>.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Sum / max over the 32 lanes of a full warp; every lane gets the result. The butterfly order
// is fixed, so the result is deterministic.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sum; every thread gets the result. Requires blockDim.x to be a multiple of 32 and
// at most 1024, blockDim.y == blockDim.z == 1, all threads of the block to call it, and
// `scratch` to point at >= 32 floats of shared memory. The leading __syncthreads makes it safe
// to call repeatedly with the same scratch buffer. Deterministic: every warp reduces the same
// partials in the same order.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < nwarps) ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

#endif  // REPRO_KERNELS_COMMON_CUH
