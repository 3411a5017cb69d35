/* Elementwise add and zero test for the pool (kernels.h). */
#include <math.h>
#include <string.h>

#include "strata/pool.h"
#include "base/bf16.h"
#include "base/sumsq.h"
#include "pool/kernels.h"

void pk_add_f32(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void pk_add_bf16(uint16_t *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = st_f32_to_bf16(st_bf16_to_f32(dst[i]) + st_bf16_to_f32(src[i]));
}

void pk_add(uint8_t dtype, void *dst, const void *src, size_t bytes)
{
    if (dtype == STRATA_POOL_F32)
        pk_add_f32(dst, src, bytes / 4);
    else if (dtype == STRATA_POOL_BF16)
        pk_add_bf16(dst, src, bytes / 2);
}

double pk_sumsq_f32(const float *x, size_t n)
{
    return st_sumsq_f32(x, n);
}

bool pk_is_zero(uint8_t dtype, const void *p, size_t bytes, float threshold)
{
    if (dtype == STRATA_POOL_F32 || dtype == STRATA_POOL_BF16) {
        size_t n = bytes / (dtype == STRATA_POOL_F32 ? 4 : 2);
        int over = 0;
        for (size_t i = 0; i < n; i++) {
            float x = dtype == STRATA_POOL_F32 ? ((const float *)p)[i]
                                               : st_bf16_to_f32(((const uint16_t *)p)[i]);
            over |= !(fabsf(x) <= threshold); // NaN is not zero
        }
        return !over;
    }
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < bytes; i++)
        acc |= b[i];
    return acc == 0;
}
