// The kernels of benches/level_clock: the vector add of stream_state/kernel.cu (included
// here, the same code), and a probe that reads the SM clock (clock64) against the GPU's
// global timer (nanoseconds), to tell the SM clock the kernel actually ran at from what NVML
// reports.
#include "../stream_state/kernel.cu"

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
