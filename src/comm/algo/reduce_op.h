/* Element-wise reduction kernels for every (dtype, op) pair, and the 16-bit float conversions.
 * Algorithms and transports call these through st_reduce(); they never loop over dtypes themselves.
 * float16 and bfloat16 are widened to float32, combined, and rounded back to nearest-even. */
#ifndef ST_REDUCE_OP_H
#define ST_REDUCE_OP_H

#include <stddef.h>
#include <stdint.h>

#include "base/bf16.h" /* st_bf16_to_f32, st_f32_to_bf16 */
#include "strata/comm.h"

/* dst[i] = a[i] op b[i] for i < count. dst may alias a or b (exactly, not partially). AVG combines
 * as SUM; the division is st_reduce_finish_avg()'s job. */
void st_reduce(strata_dtype_t dtype, strata_op_t op, void *dst, const void *a, const void *b,
               size_t count);

/* memcpy(dst, src, bytes) with non-temporal stores of whole 64-byte lines where the CPU has them
 * (x86: the widest of AVX-512, AVX and SSE2): for large outputs that nobody reads soon, the
 * destination's lines are neither read for ownership nor kept in cache. Ends with a store fence,
 * so the bytes are visible before any later store. */
void st_copy_stream(void *dst, const void *src, size_t bytes);

/* st_reduce() of a and b stored into each of the ndst outputs, streamed as st_copy_stream() does:
 * the result is formed a few hundred bytes at a time in L1 and written straight out, so every
 * input byte is read once and every output line written once without being read. The outputs must
 * not overlap a or b (out of place) nor each other. Outputs whose lines fall where the first
 * output's do (the same address modulo 64) get every whole line streamed, others plain stores.
 * Ends with a store fence. */
void st_reduce_stream(strata_dtype_t dtype, strata_op_t op, void *const *dsts, int ndst,
                      const void *a, const void *b, size_t count);

/* Divides every element by n (integer division for integer types), finishing an AVG. */
void st_reduce_finish_avg(strata_dtype_t dtype, void *buf, size_t count, int n);

/* Element i of buf as a double, and a double stored as element i (floats rounded to nearest even,
 * integers converted by C's rules). Slow, per element: for tools and tests, not hot loops. */
double st_dtype_load(strata_dtype_t dtype, const void *buf, size_t i);
void st_dtype_store(strata_dtype_t dtype, void *buf, size_t i, double v);

float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);

#endif
