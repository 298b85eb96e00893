// Row-wise softmax of a rows x cols fp32 matrix (row-major, contiguous rows):
//   out[r][c] = exp(in[r][c] - max_r) / sum_c' exp(in[r][c'] - max_r)
//
// Entry points
//
//   softmax_rows(const float* in, float* out, int rows, int cols)
//     fast kernel: one block per row. Pass 1 reads the row once, keeping a per-thread running
//     (max, sum of exp) pair (online softmax), combined across the block with warp shuffles and
//     shared memory; pass 2 reads the row again and writes exp(x - max) / sum. 16-byte float4
//     accesses when cols % 4 == 0 and both pointers are 16-byte aligned. Any cols >= 1.
//     launch: grid  = (rows, 1, 1)
//             block = (256, 1, 1)              [a multiple of 32, at most 256]
//             dynamic shared memory = 0 bytes  (64 floats of static shared memory)
//
//   softmax_rows_ref(const float* in, float* out, int rows, int cols)
//     reference: one thread per row, three passes (max, sum of exp, normalize).
//     launch: grid  = (ceil(rows / 128), 1, 1)
//             block = (128, 1, 1)
//             dynamic shared memory = 0 bytes
//
// Check: out from softmax_rows against out from softmax_rows_ref, inputs uniform in [-10, 10)
// (any finite inputs), cols <= 65536.
//   tolerance: atol = 1e-6, rtol = 1e-5.
#include "common.cuh"

#define SM_THREADS 256

// Merges the running pair (m, s) with (m2, s2): the result is the max and the sum of exp
// relative to that max. A pair with m == -inf has s == 0 and contributes nothing (no NaN from
// (-inf) - (-inf)).
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    const float a = (m == mn) ? s : s * expf(m - mn);
    const float b = (m2 == mn) ? s2 : s2 * expf(m2 - mn);
    m = mn;
    s = a + b;
}

// Adds one element x to the running pair (m, s).
__device__ __forceinline__ void softmax_push(float& m, float& s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;  // m may be -inf: expf(-inf) == 0
        m = x;
    } else if (x != neg_inf()) {
        s += expf(x - m);  // x <= m, both finite (a NaN x propagates into s)
    }
}

extern "C" __global__ void __launch_bounds__(SM_THREADS)
softmax_rows(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float sh_m[32];
    __shared__ float sh_s[32];
    const int row = blockIdx.x;
    if (row >= rows) return;  // uniform across the block

    const float* x = in + (long long)row * cols;
    float* y = out + (long long)row * cols;
    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;
    const bool vec = (cols & 3) == 0 &&
                     ((((unsigned long long)x) | ((unsigned long long)y)) & 15ull) == 0;

    // Pass 1: per-thread running max and sum of exp.
    float m = neg_inf();
    float s = 0.0f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        for (int i = tid; i < (cols >> 2); i += nthreads) {
            const float4 v = x4[i];
            softmax_push(m, s, v.x);
            softmax_push(m, s, v.y);
            softmax_push(m, s, v.z);
            softmax_push(m, s, v.w);
        }
    } else {
        for (int i = tid; i < cols; i += nthreads) softmax_push(m, s, x[i]);
    }

    // Warp combine (fixed butterfly order), then across warps through shared memory.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_merge(m, s, m2, s2);
    }
    const int lane = tid & 31;
    const int warp = tid >> 5;
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
    }
    __syncthreads();
    // Every warp reduces the per-warp pairs identically, so all threads hold the same result.
    const int nwarps = nthreads >> 5;
    m = (lane < nwarps) ? sh_m[lane] : neg_inf();
    s = (lane < nwarps) ? sh_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        softmax_merge(m, s, m2, s2);
    }

    // Pass 2: normalize.
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (int i = tid; i < (cols >> 2); i += nthreads) {
            const float4 v = x4[i];
            float4 r;
            r.x = expf(v.x - m) / s;
            r.y = expf(v.y - m) / s;
            r.z = expf(v.z - m) / s;
            r.w = expf(v.w - m) / s;
            y4[i] = r;
        }
    } else {
        for (int i = tid; i < cols; i += nthreads) y[i] = expf(x[i] - m) / s;
    }
}

extern "C" __global__ void softmax_rows_ref(const float* in, float* out, int rows, int cols) {
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (long long)rows) return;
    const float* x = in + row * cols;
    float* y = out + row * cols;
    float m = neg_inf();
    for (int c = 0; c < cols; ++c) m = fmaxf(m, x[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(x[c] - m);
    for (int c = 0; c < cols; ++c) y[c] = expf(x[c] - m) / s;
}
