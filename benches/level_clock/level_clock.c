/* #29 goal 3: does a small kernel's level follow the SM clock it ran at? (outside repro)
 *
 * One process times level_clock/kernel.cu's vector add (1M floats, about 2.6 us on an H200)
 * in a CUDA graph of 512 launches, as stream_state's programs do, in WINDOWS windows of
 * SAMPLES samples each. Around and during each window it reads the SM clock in MHz from the
 * kernel `spin` (clock64 cycles over the global timer's nanoseconds):
 *
 *   before   a 10 ms spin on every SM, right after the window's warm graphs
 *   during   one warp spinning on a second stream for as long as the window's samples take
 *   after    a 10 ms spin on every SM, right after the samples
 *
 * Prints one line per window: the median per launch (us), the three clocks (MHz), and the
 * time the window ended (seconds since the epoch).
 * Usage: level_clock WINDOWS SAMPLES   (in the folder that holds kernel.cubin)
 */
#include "ck.h"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int N = 1 << 20;
enum { BATCH = 512 };

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over blocks of the clock in MHz from spin's output. */
static double clock_mhz(CUdeviceptr out, int blocks) {
    unsigned long long *h = malloc(sizeof(unsigned long long) * 2 * blocks);
    double *f = malloc(sizeof(double) * blocks);
    CK(cuMemcpyDtoH(h, out, sizeof(unsigned long long) * 2 * blocks));
    for (int i = 0; i < blocks; i++)
        f[i] = h[2 * i + 1] ? (double)h[2 * i] * 1000.0 / (double)h[2 * i + 1] : 0;
    qsort(f, blocks, sizeof f[0], by_double);
    double m = f[blocks / 2];
    free(h);
    free(f);
    return m;
}

static void launch_spin(CUfunction spin, CUstream s, unsigned long long cycles, CUdeviceptr out,
                        int blocks) {
    void *args[] = {&cycles, &out};
    CK(cuLaunchKernel(spin, blocks, 1, 1, 32, 1, 1, 0, s, args, 0));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: level_clock WINDOWS SAMPLES\n");
        return 2;
    }
    int windows = atoi(argv[1]), samples = atoi(argv[2]);
    CUdevice dev = primary_context();
    int sms;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CUmodule mod;
    CUfunction vadd, spin;
    CK(cuModuleLoad(&mod, "kernel.cubin"));
    CK(cuModuleGetFunction(&vadd, mod, "vadd"));
    CK(cuModuleGetFunction(&spin, mod, "spin"));
    CUdeviceptr buf[3], out_all, out_one;
    ones_buffers(buf, N);
    CK(cuMemAlloc(&out_all, 16 * (size_t)sms));
    CK(cuMemAlloc(&out_one, 16));
    CUstream s, side;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    CUgraphExec ge = vadd_graph(vadd, s, buf, &N, BATCH);
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    float *xs = malloc(sizeof(float) * samples);
    /* About 200 ms of graphs to warm the GPU before the first window. */
    for (int i = 0; i < 150; i++)
        CK(cuGraphLaunch(ge, s));
    CK(cuStreamSynchronize(s));
    for (int w = 0; w < windows; w++) {
        for (int i = 0; i < 20; i++)
            CK(cuGraphLaunch(ge, s));
        launch_spin(spin, s, 20000000ull, out_all, sms);
        CK(cuStreamSynchronize(s));
        double before = clock_mhz(out_all, sms);
        for (int i = 0; i < 5; i++)
            CK(cuGraphLaunch(ge, s));
        CK(cuStreamSynchronize(s));
        /* The side warp spins for about as long as the samples take (1.35 ms each). */
        launch_spin(spin, side, (unsigned long long)(samples * 1.3e-3 * 1.98e9), out_one, 1);
        for (int i = 0; i < samples; i++) {
            CK(cuEventRecord(e0, s));
            CK(cuGraphLaunch(ge, s));
            CK(cuEventRecord(e1, s));
            CK(cuEventSynchronize(e1));
            CK(cuEventElapsedTime(&xs[i], e0, e1));
            xs[i] = xs[i] * 1000.0f / BATCH;
        }
        CK(cuStreamSynchronize(side));
        double during = clock_mhz(out_one, 1);
        launch_spin(spin, s, 20000000ull, out_all, sms);
        CK(cuStreamSynchronize(s));
        double after = clock_mhz(out_all, sms);
        qsort(xs, samples, sizeof xs[0], by_value);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        printf("%.4f %.2f %.2f %.2f %.3f\n", xs[samples / 2], before, during, after,
               now.tv_sec + now.tv_nsec * 1e-9);
        fflush(stdout);
    }
    return 0;
}
