/* Spreading a loop of independent pieces over the model's threads (the --threads count, through
 * OpenMP, whose pool oneDNN's products use too). Internal to the model part. */
#ifndef ST_MODEL_PARALLEL_RANGE_H
#define ST_MODEL_PARALLEL_RANGE_H

#include <stdbool.h>
#include <stddef.h>

/* Calls fn(ctx, begin, end) on contiguous pieces covering [0, n), one per thread, the threads
 * running them at once; in one piece on the calling thread when n < 2 * grain or there is one
 * thread. fn must write nothing another piece reads or writes: then the result is the serial
 * loop's, bit for bit, whatever the thread count. */
void st_parallel_range(size_t n, size_t grain, void (*fn)(void *ctx, size_t begin, size_t end),
                       void *ctx);

/* Rows per thread at the least for a row-wise loop over rows of `width` floats: about 16K
 * elements, below which starting the threads costs more than it saves. */
#define ST_ROW_GRAIN(width) ((size_t)(16384 / (width) + 1))

/* x[0, n) = 0 in pieces over the threads (a large arena's clearing is a pass over memory that one
 * core cannot saturate). */
void st_parallel_zero(float *x, size_t n);

/* The threads st_parallel_range may use (1 in a forked child and under ThreadSanitizer), and,
 * inside a piece's fn, the index of the thread running it: below the number of pieces, so a
 * piece may use per-thread scratch. */
int st_parallel_threads(void);
int st_parallel_index(void);

/* Call before any use of OpenMP (the products' oneDNN, the thread count): false in a child forked
 * after the process used it, where OpenMP must keep to one thread (parallel_range.c says why). */
bool st_omp_guard(void);

#endif
