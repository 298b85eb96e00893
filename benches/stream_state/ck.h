/* What the C programs of benches/ share: a driver call that must succeed, and a float
 * comparison for qsort. */
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

#endif
