/* The arithmetic of the pool: elementwise add of float32 and bfloat16 (fp32 math, round to
 * nearest even), the sum of squares, and the zero test of the zero filter. Plain loops the compiler
 * vectorises. (The ADAMW update is base/adamw.h, the model's own formula.) */
#ifndef ST_POOL_KERNELS_H
#define ST_POOL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void pk_add_f32(float *restrict dst, const float *restrict src, size_t n);
void pk_add_bf16(uint16_t *restrict dst, const uint16_t *restrict src, size_t n);
/* dst += src for bytes / element size elements of dtype (strata_pool_dtype_t). */
void pk_add(uint8_t dtype, void *dst, const void *src, size_t bytes);
/* The sum of squares of n float32 in double, in four fixed accumulators (vectorised, and the
 * same sum whichever build runs it). */
double pk_sumsq_f32(const float *x, size_t n);
/* True when every element satisfies |x| <= threshold (dtype 0: every byte is zero). */
bool pk_is_zero(uint8_t dtype, const void *p, size_t bytes, float threshold);

#endif
