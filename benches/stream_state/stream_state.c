/* What ordinary work on a created CUDA stream does to a context's later kernels (#29).
 *
 * One context; each iteration allocates a, b and c (1M floats), does one piece of other work
 * (the mode), then times a CUDA graph of 512 launches of kernel.cu's vector add on a created
 * non-blocking stream (20 launches of the graph to warm up, then 200 samples between events;
 * prints the median per launch in us), and frees everything. Modes, the other work:
 *
 *   none      nothing
 *   stream    one ordinary launch of the kernel on a created non-blocking stream, synchronised
 *   memset    one cuMemsetD8Async of c on a created non-blocking stream, synchronised
 *   legacy    the ordinary launch on the legacy default stream (NULL), synchronised
 *   captured  the ordinary launch captured into a graph on a created stream, then launched
 *
 * Usage: stream_state MODE ITERATIONS   (run in the folder that holds kernel.cubin)
 * Build: nvcc -cubin -arch=sm_90 -O3 -o kernel.cubin kernel.cu
 *        gcc -O2 -o stream_state stream_state.c -I. -I$CUDA_HOME/include -L$CUDA_HOME/lib64/stubs -lcuda
 *        (gpu_stream_state.sh does both)
 */
#include "ck.h"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int N = 1 << 20;
enum { BATCH = 512, SAMPLES = 200 };

/* One ordinary launch over the buffers (the reference check's kind of work). */
static void launch(CUfunction f, CUstream s, CUdeviceptr *buf) {
    void *args[] = {&buf[0], &buf[1], &buf[2], &N};
    CK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, s, args, 0));
}

static void other_work(const char *mode, CUfunction f, CUstream s, CUdeviceptr *buf) {
    if (!strcmp(mode, "stream")) {
        launch(f, s, buf);
        CK(cuStreamSynchronize(s));
    } else if (!strcmp(mode, "memset")) {
        CK(cuMemsetD8Async(buf[2], 0xff, (size_t)N * 4, s));
        CK(cuStreamSynchronize(s));
    } else if (!strcmp(mode, "legacy")) {
        launch(f, NULL, buf);
        CK(cuStreamSynchronize(NULL));
    } else if (!strcmp(mode, "captured")) {
        CUgraph g;
        CUgraphExec ge;
        CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        launch(f, s, buf);
        CK(cuStreamEndCapture(s, &g));
        CK(cuGraphInstantiate(&ge, g, 0));
        CK(cuGraphLaunch(ge, s));
        CK(cuStreamSynchronize(s));
        CK(cuGraphExecDestroy(ge));
        CK(cuGraphDestroy(g));
    } else if (strcmp(mode, "none")) {
        fprintf(stderr, "unknown mode %s (none, stream, memset, legacy, captured)\n", mode);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stream_state MODE ITERATIONS\n");
        return 2;
    }
    const char *mode = argv[1];
    int iterations = atoi(argv[2]);
    CUmodule m;
    CUfunction f;
    primary_context();
    CK(cuModuleLoad(&m, "kernel.cubin"));
    CK(cuModuleGetFunction(&f, m, "vadd"));
    printf("%-9s", mode);
    for (int it = 0; it < iterations; it++) {
        CUstream s;
        CUdeviceptr buf[3];
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        for (int i = 0; i < 3; i++) {
            CK(cuMemAlloc(&buf[i], (size_t)N * 4));
            CK(cuMemsetD32(buf[i], 0x3f800000, N)); /* 1.0f */
        }
        other_work(mode, f, s, buf);
        printf(" %.4f", graph_median(f, s, s, buf, &N, BATCH, SAMPLES));
        fflush(stdout);
        for (int i = 0; i < 3; i++)
            CK(cuMemFree(buf[i]));
        CK(cuStreamDestroy(s));
    }
    printf("\n");
    return 0;
}
