/* Serial reference for collectives: deterministic per-rank inputs, the expected result computed
 * from all ranks' inputs in one process, and a comparison with a documented tolerance.
 *
 * A multi-rank test fills its send buffer with st_ref_fill(dtype, buf, count, rank, seed), runs the
 * collective, computes st_ref_allreduce(...) for the same (dtype, op, nranks, count, seed) and
 * checks with st_ref_compare(...). Blocks of the allreduce result are the expected reduce_scatter
 * blocks; st_ref_fill for rank r (or st_ref_input) gives what allgather/bcast/gather must deliver
 * from r.
 *
 * Inputs (element i of rank r is a pure function of (dtype, seed, r, i)):
 * - floats (f32 f64 f16 bf16): multiples of 1/64 in [0.5, 2), exact in every float type; sums and
 *   products of up to 16 ranks stay well inside f16's range and away from cancellation.
 * - i32: nonzero in [-3, 3] (|prod| <= 3^16 < 2^31); i64: nonzero in [-15, 15] (15^16 < 2^63).
 * - u8: 1, except for the ranks r with (r + i) % 8 == 0 (at most 2 of 16), which give 0..15, so sum
 *   <= 44 and prod <= 225 for up to 16 ranks.
 * Integer results beyond 16 ranks may wrap; the reference wraps exactly as the kernels do, so
 * comparisons stay exact.
 */
#ifndef ST_TEST_REF_H
#define ST_TEST_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/comm.h"

/* Fills buf[0..count) with rank `rank`'s input for `seed`. */
void st_ref_fill(strata_dtype_t dtype, void *buf, size_t count, int rank, uint64_t seed);

/* Element `index` of rank `rank`'s input, as a double (exact for every dtype). */
double st_ref_input(strata_dtype_t dtype, int rank, uint64_t seed, size_t index);

/* out[0..count) = the reduction with `op` of the inputs of ranks 0..nranks-1, in dtype. Floats
 * accumulate in double in rank order and are rounded once at the end; AVG divides the sum by
 * nranks. Integers use the kernels' wrapping arithmetic and truncating AVG division. */
void st_ref_allreduce(strata_dtype_t dtype, strata_op_t op, int nranks, size_t count, uint64_t seed,
                      void *out);

/* The tolerance st_ref_compare allows around an expected float value `expected`:
 *   min, max, and every integer type: 0 (exact)
 *   sum, avg, prod:  nranks * (rel * |expected| + abs) with
 *     f64  rel 1e-12   abs 1e-300
 *     f32  rel 1e-5    abs 1e-37
 *     f16  rel 2^-10   abs 2^-24 (the smallest subnormal)
 *     bf16 rel 2^-7    abs 1e-37
 * The nranks factor covers one rounding per combining step (16-bit types round back after every
 * step), in whatever order the algorithm combines. */
double st_ref_tolerance(strata_dtype_t dtype, strata_op_t op, int nranks, double expected);

/* True when got[0..count) matches expected[0..count) (exactly for integers and min/max, within
 * st_ref_tolerance for float sum/avg/prod; NaN matches only NaN). Otherwise false, and `why` (if
 * not NULL) names the first mismatching index with the expected and got values. */
bool st_ref_compare(strata_dtype_t dtype, strata_op_t op, int nranks, const void *expected,
                    const void *got, size_t count, char *why, size_t whylen);

#endif
