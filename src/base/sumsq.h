/* The sum of squares of a float32 range in double, in a fixed order: what the model's gradient
 * norm (strata_sumsq, src/model/optim.c) and a pool node's SUMSQ (src/pool/kernels.c) both run, so
 * a norm from the pool equals the rank's. Header-only: each caller compiles it with its own
 * vectorisation flags. */
#ifndef ST_BASE_SUMSQ_H
#define ST_BASE_SUMSQ_H

#include <stddef.h>

/* The fixed order is by blocks of ST_SUMSQ_BLOCK floats from x: each block summed in four
 * accumulators, the blocks' sums added in order. So the blocks may be computed side by side
 * (strata_sumsq does, on the model's threads) and the total is the same. */
#define ST_SUMSQ_BLOCK ((size_t)1 << 16)

static inline double st_sumsq_f32_block(const float *x, size_t n)
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

static inline double st_sumsq_f32(const float *x, size_t n)
{
    double total = 0;
    for (size_t b = 0; b < n; b += ST_SUMSQ_BLOCK)
        total += st_sumsq_f32_block(x + b, n - b < ST_SUMSQ_BLOCK ? n - b : ST_SUMSQ_BLOCK);
    return total;
}

#endif
