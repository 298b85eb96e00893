/* #29 goal 2: how long graph mode's set-up takes to capture and instantiate its graphs, one
 * thread against several (outside repro).
 *
 * repro's graph mode builds, for every job, K graphs of BATCH launches of the kernel (one per
 * placement of the buffers) and an empty graph: 17 graphs of 512 launches for a 2.6 us kernel,
 * 30 to 46 ms of a 0.28 s job. This program times that work for stream_state/kernel.cu's
 * vector add (1M floats): capture alone, instantiation alone and both, with the graphs split
 * over T threads (each thread makes the primary context current and captures on a stream of
 * its own, in CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, as repro does), for each T given.
 * Prints one line per T: the median over REPS repetitions of the whole, the capture and the
 * instantiation (ms), and a check that a graph built on a helper thread runs and times like
 * one built on the main thread (the median per launch, us).
 *
 * Usage: graph_build K BATCH REPS T...   (in the folder that holds kernel.cubin; build it with
 *        stream_state/build.sh's build_program, as gpu_graph_build.sh does)
 */
#include "ck.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int N = 1 << 20;
static CUcontext ctx;
static CUfunction fn;
static CUdeviceptr buf[3];
static int batch;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

typedef struct {
    int from, to;           /* graphs [from, to) */
    CUgraphExec *out;
    double capture_ms, inst_ms;
} work;

static void *build(void *p) {
    work *w = p;
    CK(cuCtxSetCurrent(ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    void *args[] = {&buf[0], &buf[1], &buf[2], &N};
    w->capture_ms = w->inst_ms = 0;
    for (int i = w->from; i < w->to; i++) {
        double t0 = now_ms();
        CUgraph g;
        CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (int j = 0; j < batch; j++)
            CK(cuLaunchKernel(fn, N / 1024, 1, 1, 256, 1, 1, 0, s, args, 0));
        CK(cuStreamEndCapture(s, &g));
        double t1 = now_ms();
        CK(cuGraphInstantiate(&w->out[i], g, 0));
        CK(cuGraphDestroy(g));
        w->capture_ms += t1 - t0;
        w->inst_ms += now_ms() - t1;
    }
    CK(cuStreamDestroy(s));
    return NULL;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *xs, int n) {
    qsort(xs, n, sizeof xs[0], by_double);
    return xs[n / 2];
}

/* The median per launch (us) of graph g over 200 samples on a stream of its own. */
static float per_launch(CUgraphExec g) {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    float m = exec_median(g, s, batch, 50, 200);
    CK(cuStreamDestroy(s));
    return m;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: graph_build K BATCH REPS T...\n");
        return 2;
    }
    int k = atoi(argv[1]), reps = atoi(argv[3]);
    batch = atoi(argv[2]);
    CUmodule mod;
    primary_context();
    /* The threads make the same context current. */
    CK(cuCtxGetCurrent(&ctx));
    CK(cuModuleLoad(&mod, "kernel.cubin"));
    CK(cuModuleGetFunction(&fn, mod, "vadd"));
    for (int i = 0; i < 3; i++)
        CK(cuMemAlloc(&buf[i], sizeof(float) * N));
    CUgraphExec *graphs = calloc(k, sizeof *graphs);
    printf("%d graphs of %d launches, %d repetitions (ms: medians; us: per launch)\n", k, batch,
           reps);
    printf("%8s %10s %12s %12s %14s %14s\n", "threads", "whole", "capture*", "inst*",
           "main-built", "helper-built");
    for (int a = 4; a < argc; a++) {
        int t = atoi(argv[a]);
        if (t < 1 || t > 64)
            continue;
        double *whole = calloc(reps, sizeof(double)), *cap = calloc(reps, sizeof(double)),
               *ins = calloc(reps, sizeof(double));
        float main_us = 0, helper_us = 0;
        for (int r = 0; r < reps; r++) {
            work w[64];
            pthread_t th[64];
            double t0 = now_ms();
            for (int i = 0; i < t; i++) {
                w[i] = (work){.from = k * i / t, .to = k * (i + 1) / t, .out = graphs};
                if (i > 0)
                    pthread_create(&th[i], NULL, build, &w[i]);
            }
            build(&w[0]);
            for (int i = 1; i < t; i++)
                pthread_join(th[i], NULL);
            whole[r] = now_ms() - t0;
            cap[r] = ins[r] = 0;
            for (int i = 0; i < t; i++) {
                cap[r] += w[i].capture_ms;
                ins[r] += w[i].inst_ms;
            }
            if (r == reps - 1) {
                main_us = per_launch(graphs[0]);
                helper_us = per_launch(graphs[k - 1]);
            }
            for (int i = 0; i < k; i++)
                CK(cuGraphExecDestroy(graphs[i]));
        }
        printf("%8d %10.2f %12.2f %12.2f %14.3f %14.3f\n", t, median(whole, reps),
               median(cap, reps), median(ins, reps), main_us, helper_us);
        free(whole);
        free(cap);
        free(ins);
    }
    printf("* summed over the threads\n");
    return 0;
}
