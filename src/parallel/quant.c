/* Blockwise symmetric int8 quantisation for the ZeRO engine (ZeRO++ qwZ/qgZ): per block of
 * STRATA_ZERO_QBLOCK values one float scale = max|x| / 127, then round(x / scale) as int8. The
 * representation is [scales of all blocks][int8 of all values], byte-addressed (no alignment). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "strata/parallel.h"

static size_t nblocks(size_t count)
{
    return (count + STRATA_ZERO_QBLOCK - 1) / STRATA_ZERO_QBLOCK;
}

size_t strata_zero_qbytes(size_t count)
{
    return nblocks(count) * sizeof(float) + count;
}

void strata_zero_quantize(const float *x, size_t count, void *out)
{
    unsigned char *scales = out;
    int8_t *q = (int8_t *)(scales + nblocks(count) * sizeof(float));
    for (size_t b = 0; b * STRATA_ZERO_QBLOCK < count; b++) {
        size_t lo = b * STRATA_ZERO_QBLOCK, hi = lo + STRATA_ZERO_QBLOCK;
        if (hi > count)
            hi = count;
        float amax = 0.0f;
        for (size_t i = lo; i < hi; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        memcpy(scales + b * sizeof(float), &scale, sizeof scale);
        for (size_t i = lo; i < hi; i++) {
            float v = nearbyintf(x[i] * inv);
            q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
}

void strata_zero_dequantize(const void *in, size_t count, float *y, bool accumulate)
{
    const unsigned char *scales = in;
    const int8_t *q = (const int8_t *)(scales + nblocks(count) * sizeof(float));
    for (size_t b = 0; b * STRATA_ZERO_QBLOCK < count; b++) {
        size_t lo = b * STRATA_ZERO_QBLOCK, hi = lo + STRATA_ZERO_QBLOCK;
        if (hi > count)
            hi = count;
        float scale;
        memcpy(&scale, scales + b * sizeof(float), sizeof scale);
        if (accumulate)
            for (size_t i = lo; i < hi; i++)
                y[i] += (float)q[i] * scale;
        else
            for (size_t i = lo; i < hi; i++)
                y[i] = (float)q[i] * scale;
    }
}
