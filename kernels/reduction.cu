// Sum reduction out[0] = sum(in[0..n)) (fp32).
//
// Entry points
//
//   reduce_sum(const float* in, float* out, int n)
//     fast kernel: each thread accumulates a grid-stride slice in fp32 (16-byte float4 loads
//     when `in` is 16-byte aligned), then a warp-shuffle + shared-memory tree reduction per
//     block, then one atomicAdd of the block's partial into out[0]. The CALLER MUST ZERO out[0]
//     before the launch (e.g. cuMemsetD32(out, 0, 1)); the kernel only adds to it.
//     launch: grid  = (ceil(n / 4096), 1, 1)   [any grid >= 1 is correct: grid-stride loop]
//             block = (256, 1, 1)              [a multiple of 32, at most 256]
//             dynamic shared memory = 0 bytes  (32 floats of static shared memory)
//
//   reduce_sum_ref(const float* in, float* out, int n)
//     reference: a single block; thread t sums in[t], in[t + blockDim], ... in fp64, then thread
//     0 adds the per-thread partials in thread order in fp64 and stores the fp32-rounded total
//     to out[0] (overwrites; needs no zeroing). Fully deterministic.
//     launch: grid  = (1, 1, 1)
//             block = (256, 1, 1)              [any size up to 1024]
//             dynamic shared memory = 0 bytes  (8 KiB of static shared memory)
//
// Check: out[0] from reduce_sum against out[0] from reduce_sum_ref, with inputs uniform in
// [0, 1) (non-negative, so the sum has no cancellation and a relative bound is meaningful).
//   tolerance: atol = 1e-3, rtol = 1e-4 (valid for n up to 2^26 with that input). The fast
//   kernel's blocks add their partials with atomicAdd in an unspecified order, so its result can
//   differ in the last bits from run to run; the reference is exact to within fp32 rounding.
//   For signed inputs uniform in [-1, 1) use atol = 1e-6 * n, rtol = 1e-4 instead.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256)
reduce_sum(const float* __restrict__ in, float* __restrict__ out, int n) {
    __shared__ float scratch[32];
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;

    float acc = 0.0f;
    long long done = 0;  // elements handled by the vector loop
    if ((((unsigned long long)in) & 15ull) == 0) {
        const long long n4 = (long long)n / 4;
        const float4* in4 = reinterpret_cast<const float4*>(in);
        for (long long i = tid; i < n4; i += stride) {
            const float4 v = in4[i];
            acc += (v.x + v.y) + (v.z + v.w);
        }
        done = n4 * 4;
    }
    for (long long i = done + tid; i < (long long)n; i += stride) acc += in[i];

    const float block_total = block_sum(acc, scratch);
    if (threadIdx.x == 0) atomicAdd(out, block_total);
}

extern "C" __global__ void reduce_sum_ref(const float* in, float* out, int n) {
    __shared__ double partial[1024];
    if (blockIdx.x != 0) return;  // launched as a single block; extra blocks do nothing
    double acc = 0.0;
    for (long long i = threadIdx.x; i < (long long)n; i += blockDim.x) acc += (double)in[i];
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (unsigned t = 0; t < blockDim.x; ++t) total += partial[t];
        out[0] = (float)total;
    }
}
