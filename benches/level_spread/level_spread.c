/* #29 goal 3: which of a process's choices sets a small kernel's level? (outside repro)
 *
 * One process times stream_state/kernel.cu's vector add (1M floats, about 2.6 us on an H200)
 * in CUDA graphs of 512 launches, the way repro's graph mode does (a warm-up, then SAMPLES
 * samples between events on the capture stream; the median per launch in us), for every
 * combination of
 *
 *   C contexts    each made with cuCtxCreate and destroyed after its measurements (repro
 *                 uses the device's primary context, one a process)
 *   M modules     kernel.cubin loaded M times into the context (the code at M addresses)
 *   G graphs      the graph captured and instantiated G times per module, each on a new stream
 *
 * with one set of buffers per context. Prints one line per context: its C*M*G medians in
 * order (module-major). Two variants, from the environment, to compare with repro's way:
 * LEVEL_LEGACY=1 launches the graphs and records the events on the legacy default stream
 * (the graph still captured on its own stream), LEVEL_RANDOM=1 fills a and b with
 * pseudo-random floats instead of 1.0. gpu_level_spread.sh runs it in several processes and splits the
 * spread by level. LEVEL_SHOW_VA=1 writes each context's buffer addresses to stderr
 * (gpu_level_aslr.sh counts them).
 *
 * Usage: level_spread C M G SAMPLES   (run in the folder that holds kernel.cubin, built from
 *        stream_state/kernel.cu; gpu_level_spread.sh builds both)
 */
#include "ck.h"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int N = 1 << 20;
enum { BATCH = 512 };

static int legacy;

/* One measurement: a graph captured on a stream of its own, launched there (or on the legacy
 * stream with LEVEL_LEGACY=1). */
static float measure(CUfunction f, CUdeviceptr *buf, int samples) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    float m = graph_median(f, s, legacy ? NULL : s, buf, &N, BATCH, samples);
    CK(cuStreamDestroy(s));
    return m;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: level_spread CONTEXTS MODULES GRAPHS SAMPLES\n");
        return 2;
    }
    int nc = atoi(argv[1]), nm = atoi(argv[2]), ng = atoi(argv[3]), samples = atoi(argv[4]);
    legacy = getenv("LEVEL_LEGACY") && !strcmp(getenv("LEVEL_LEGACY"), "1");
    int random = getenv("LEVEL_RANDOM") && !strcmp(getenv("LEVEL_RANDOM"), "1");
    float *host = malloc(sizeof(float) * N);
    unsigned x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        host[i] = random ? (float)(x >> 8) / 16777216.0f * 2.0f - 1.0f : 1.0f;
    }
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    for (int c = 0; c < nc; c++) {
        CUcontext ctx;
#if CUDA_VERSION >= 13000
        CK(cuCtxCreate(&ctx, NULL, 0, dev));
#else
        CK(cuCtxCreate(&ctx, 0, dev));
#endif
        CUdeviceptr buf[3];
        for (int i = 0; i < 3; i++) {
            CK(cuMemAlloc(&buf[i], (size_t)N * 4));
            CK(cuMemcpyHtoD(buf[i], host, (size_t)N * 4));
        }
        if (getenv("LEVEL_SHOW_VA"))
            fprintf(stderr, "va %llx %llx %llx host %p\n", (unsigned long long)buf[0],
                    (unsigned long long)buf[1], (unsigned long long)buf[2], (void *)host);
        CUmodule *mods = malloc(sizeof(CUmodule) * nm);
        for (int m = 0; m < nm; m++)
            CK(cuModuleLoad(&mods[m], "kernel.cubin"));
        for (int m = 0; m < nm; m++) {
            CUfunction f;
            CK(cuModuleGetFunction(&f, mods[m], "vadd"));
            for (int g = 0; g < ng; g++) {
                printf("%s%.4f", m + g ? " " : "", measure(f, buf, samples));
                fflush(stdout);
            }
        }
        printf("\n");
        for (int m = 0; m < nm; m++)
            CK(cuModuleUnload(mods[m]));
        free(mods);
        for (int i = 0; i < 3; i++)
            CK(cuMemFree(buf[i]));
        CK(cuCtxDestroy(ctx));
    }
    return 0;
}
