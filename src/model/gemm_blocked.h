/* The blocked layout oneDNN's brgemm kernels read a bf16 B operand in, and packing a layer's
 * weight into it (gemm_blocked.c). Handed a plain B, those kernels copy it into this layout
 * themselves, block by block, on every thread and for every block of A's rows; packed once a step,
 * a weight is read as it is (gemm.h's st_gemm_bf16_hold_weight says by how much faster). Internal
 * to the model part. */
#ifndef ST_MODEL_GEMM_BLOCKED_H
#define ST_MODEL_GEMM_BLOCKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A K x N matrix in blocks of ST_BLOCKED_KB rows by nb columns (oneDNN's "BA16a<nb>b2a"): block
 * (i, j) starts at i * k_stride + j * n_stride elements; inside it, row pair p's nb columns are
 * 2 nb elements from p * 2 nb on, each column's two rows side by side (k even first), as the
 * dot-product instructions read them. K and N are padded with zeros to whole blocks. */
#define ST_BLOCKED_KB 32
typedef struct st_blocked {
    int K, N;
    int nb;                       /* a block's columns: a multiple of 16 */
    size_t k_stride, n_stride;    /* elements from one block to the next along K, along N */
    size_t size;                  /* elements in all, the padding included */
} st_blocked_t;

/* Where B(k, n) lies in the layout. */
static inline size_t st_blocked_offset(const st_blocked_t *b, int k, int n)
{
    return (size_t)(k / ST_BLOCKED_KB) * b->k_stride + (size_t)(n / b->nb) * b->n_stride +
           (size_t)(k % ST_BLOCKED_KB / 2) * 2 * (size_t)b->nb + (size_t)(n % b->nb) * 2 +
           (size_t)(k % 2);
}

/* A layer's weight w (rows x cols, row-major) rounded to bf16 into two layouts at once, padding
 * zero: fdst in fwd, the layout of B = w^T (a forward's: K = cols, N = rows), and bdst in bwd, the
 * layout of B = w (an input gradient's: K = rows, N = cols). Rounds to nearest even as
 * st_gemm_bf16_round does. Spread over the model's threads. */
void st_blocked_pack_weight(const st_blocked_t *fwd, uint16_t *fdst, const st_blocked_t *bwd,
                            uint16_t *bdst, const float *w, int rows, int cols);

#endif
