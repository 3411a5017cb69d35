/* The sum of squares of a float32 range in double, in a fixed order: what the model's gradient
 * norm (strata_sumsq, src/model/optim.c) and a pool node's SUMSQ (src/pool/kernels.c) both run, so
 * a norm from the pool equals the rank's. Header-only: each caller compiles it with its own
 * vectorisation flags. */
#ifndef ST_BASE_SUMSQ_H
#define ST_BASE_SUMSQ_H

#include <stddef.h>

static inline double st_sumsq_f32(const float *x, size_t n)
{
    // Four independent accumulators vectorise without -ffast-math and keep a fixed order.
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += (double)x[i] * x[i];
        a1 += (double)x[i + 1] * x[i + 1];
        a2 += (double)x[i + 2] * x[i + 2];
        a3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        a0 += (double)x[i] * x[i];
    return (a0 + a1) + (a2 + a3);
}

#endif
