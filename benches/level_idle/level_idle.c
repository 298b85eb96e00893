/* #29 goal 3: is a small kernel's level the process's, or the GPU's state since it last
 * went idle? (outside repro)
 *
 * One process, one context, one graph of 512 launches of stream_state/kernel.cu's vector add
 * (1M floats), captured once: ROUNDS rounds of SAMPLES samples each (exec_median: 20 warm-up
 * launches of the graph, then the median per launch in us), with IDLE_MS of idle GPU (the
 * context kept, nothing queued) before every round after the first. Prints the rounds'
 * medians on one line. gpu_level_idle.sh runs it in several processes and compares the spread
 * of rounds inside a process with the spread between processes.
 *
 * Usage: level_idle ROUNDS IDLE_MS SAMPLES   (in the folder that holds kernel.cubin)
 */
#include "ck.h"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { BATCH = 512 };

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: level_idle ROUNDS IDLE_MS SAMPLES\n");
        return 2;
    }
    int rounds = atoi(argv[1]), idle_ms = atoi(argv[2]), samples = atoi(argv[3]);
    int n = 1 << 20;
    CUdevice dev = primary_context();
    CUdeviceptr buf[3];
    ones_buffers(buf, n);
    CUmodule mod;
    CUfunction f;
    CK(cuModuleLoad(&mod, "kernel.cubin"));
    CK(cuModuleGetFunction(&f, mod, "vadd"));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraphExec ge = vadd_graph(f, s, buf, &n, BATCH);
    for (int r = 0; r < rounds; r++) {
        if (r > 0 && idle_ms > 0) {
            struct timespec t = {idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L};
            nanosleep(&t, NULL);
        }
        printf("%s%.4f", r ? " " : "", exec_median(ge, s, BATCH, 20, samples));
        fflush(stdout);
    }
    printf("\n");
    CK(cuGraphExecDestroy(ge));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    for (int i = 0; i < 3; i++)
        CK(cuMemFree(buf[i]));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
