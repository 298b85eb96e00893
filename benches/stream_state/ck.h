/* What the C programs of benches/ share: a driver call that must succeed, and the median
 * time of one launch of kernel.cu's vector add timed in CUDA graphs. */
#ifndef BENCHES_CK_H
#define BENCHES_CK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                               \
    do {                                                                                    \
        CUresult r_ = (x);                                                                  \
        if (r_) {                                                                           \
            const char *s_ = "?";                                                           \
            cuGetErrorString(r_, &s_);                                                      \
            fprintf(stderr, "%s: %s\n", #x, s_);                                            \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static int by_value(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median time of one launch (us) of the graph ge of `batch` launches, over `samples`
 * samples launched and timed between events on `run`, after `warm` launches to warm up. */
static float exec_median(CUgraphExec ge, CUstream run, int batch, int warm, int samples) {
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    for (int i = 0; i < warm; i++)
        CK(cuGraphLaunch(ge, run));
    float *xs = malloc(sizeof(float) * samples);
    for (int i = 0; i < samples; i++) {
        CK(cuEventRecord(e0, run));
        CK(cuGraphLaunch(ge, run));
        CK(cuEventRecord(e1, run));
        CK(cuEventSynchronize(e1));
        CK(cuEventElapsedTime(&xs[i], e0, e1));
        xs[i] = xs[i] * 1000.0f / batch;
    }
    qsort(xs, samples, sizeof xs[0], by_value);
    float m = xs[samples / 2];
    free(xs);
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy(e1));
    return m;
}

/* The median time of one launch (us) over `samples` samples, each a graph of `batch` launches
 * of f (vadd over the n floats of buf[0..3]) captured on `capture` and launched and timed
 * between events on `run`, after 20 launches of the graph to warm up. */
static CUgraphExec vadd_graph(CUfunction f, CUstream capture, CUdeviceptr *buf, int *n, int batch);

static float graph_median(CUfunction f, CUstream capture, CUstream run, CUdeviceptr *buf, int *n,
                          int batch, int samples) {
    CUgraphExec ge = vadd_graph(f, capture, buf, n, batch);
    float m = exec_median(ge, run, batch, 20, samples);
    CK(cuGraphExecDestroy(ge));
    return m;
}

/* Device 0, its primary context made current. */
static CUdevice primary_context(void) {
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    return dev;
}

/* The vector add's three buffers of n floats, each element 1.0f, copied from the host. */
static void ones_buffers(CUdeviceptr *buf, int n) {
    float *host = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++)
        host[i] = 1.0f;
    for (int i = 0; i < 3; i++) {
        CK(cuMemAlloc(&buf[i], (size_t)n * 4));
        CK(cuMemcpyHtoD(buf[i], host, (size_t)n * 4));
    }
    free(host);
}

/* An executable graph of `batch` launches of f (vadd over the n floats of buf[0..3]),
 * captured on `capture`. */
static CUgraphExec vadd_graph(CUfunction f, CUstream capture, CUdeviceptr *buf, int *n, int batch) {
    void *args[] = {&buf[0], &buf[1], &buf[2], n};
    CUgraph g;
    CUgraphExec ge;
    CK(cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < batch; i++)
        CK(cuLaunchKernel(f, *n / 1024, 1, 1, 256, 1, 1, 0, capture, args, 0));
    CK(cuStreamEndCapture(capture, &g));
    CK(cuGraphInstantiate(&ge, g, 0));
    CK(cuGraphDestroy(g));
    return ge;
}

#endif
