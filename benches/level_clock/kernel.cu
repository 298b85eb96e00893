// The kernels of benches/level_clock: the vector add of stream_state/kernel.cu, and a probe
// that reads the SM clock (clock64) against the GPU's global timer (nanoseconds), to tell
// the SM clock the kernel actually ran at from what NVML reports.
extern "C" __global__ void __launch_bounds__(256)
vadd(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n4 = n / 4;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 x = ((const float4*)a)[i], y = ((const float4*)b)[i];
        ((float4*)c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Each block's thread 0 spins for `cycles` SM cycles and writes the cycles and nanoseconds
// it took to out[2 * block] and out[2 * block + 1].
extern "C" __global__ void spin(unsigned long long cycles, unsigned long long* out) {
    if (threadIdx.x != 0) return;
    const unsigned long long t0 = global_ns();
    const long long c0 = clock64();
    long long c1 = c0;
    while ((unsigned long long)(c1 - c0) < cycles) c1 = clock64();
    const unsigned long long t1 = global_ns();
    out[2 * blockIdx.x] = (unsigned long long)(c1 - c0);
    out[2 * blockIdx.x + 1] = t1 - t0;
}
