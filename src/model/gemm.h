/* The model's matrix products on oneDNN (gemm_onednn.c): float32, and bfloat16 at STRATA_PREC_BF16,
 * behind st_sgemm. Internal to the model part. */
#ifndef ST_MODEL_GEMM_H
#define ST_MODEL_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether oneDNN runs here (its CPU engine could be made). */
bool st_gemm_onednn_ready(void);

/* "amx", "avx512_bf16" or NULL: the CPU's bf16 units as oneDNN finds them (strata_blas_bf16_units). */
const char *st_gemm_bf16_units(void);

/* st_sgemm's contract (row-major C = alpha op(A) op(B) + beta C) in float32 on oneDNN's kernels for
 * this CPU, plus bias (N floats, NULL for none; with one, alpha is 1 and beta 0) added to every
 * row. 0 on success; -1 when it cannot run (no oneDNN engine, out of memory, a oneDNN error), C
 * then untouched: the caller computes it with OpenBLAS instead. M, N, K > 0. */
int st_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, const float *bias, float *C, int ldc);

/* The same with A and B rounded to bf16 and the products accumulated in float32; -1 also without
 * bf16 units (the caller computes in float32 instead). */
int st_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, const float *bias, float *C, int ldc);

/* The same on operands already in bf16 and packed: op(A)'s storage is M x K (K x M when ta) with no
 * padding, likewise B's K x N (N x K when tb). For the peak measurement. */
int st_gemm_bf16_packed(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                        const uint16_t *B, float beta, float *C, int ldc);

/* Holding a matrix several products read: its rows x cols (leading dimension ld) rounded once into
 * a copy of this thread's, which every st_gemm_bf16 on this thread whose operand lies inside the
 * matrix reads instead of rounding it again, until st_gemm_bf16_release(x). x must not change
 * meanwhile. round false leaves the copy (rows x cols, packed) for the caller to fill before the
 * next product, as it writes x (st_gemm_bf16_round). Holding a matrix already held counts once
 * more. Returns the copy, or NULL (no bf16 units, out of memory, every slot taken: products then
 * round x themselves; with round false the caller fills nothing). */
uint16_t *st_gemm_bf16_hold(const float *x, int rows, int cols, int ld, bool round);
void st_gemm_bf16_release(const float *x); /* a held matrix, copy or weight */

/* Holding x's n floats with the caller's copy (n bf16, rounded from x first when round), which
 * stays the caller's: every st_gemm_bf16 on this thread whose operand's storage lies inside x
 * reads the copy at the same offset, whatever its shape, until st_gemm_bf16_release(x). For a
 * model's parameters, rounded once in the forward and read again by the backward. Holding x again
 * with the same copy counts once more. false (nothing held) without bf16 units, when every slot
 * is taken or x is held with another copy. */
bool st_gemm_bf16_hold_copy(const float *x, size_t n, uint16_t *copy, bool round);

/* A layer's weight w (rows x cols, row-major: its forward is y = x w^T, its input gradient
 * dx = dy w) packed for the bf16 products that read it whole as B, in the blocked layouts their
 * kernels read fastest (gemm_blocked.h), B = w^T first and B = w after it: rounded once a step,
 * where the kernels would otherwise copy B into those layouts inside every product. The elements
 * the packed copy takes; 0 where the products cannot read such a copy (no bf16 units, a layout
 * st_blocked_pack_weight does not write). */
size_t st_gemm_bf16_weight_size(int rows, int cols);

/* Holds w with its packed copy (st_gemm_bf16_weight_size(rows, cols) elements, the caller's,
 * 64-byte aligned: it is written with streaming stores), packed from w first when pack: every
 * st_gemm_bf16 on this thread whose A is stored as is and whose B is w, whole, reads the copy,
 * until st_gemm_bf16_release(w). w must not change meanwhile. Holding w again with the same copy
 * counts once more. false (nothing held) where st_gemm_bf16_weight_size is 0, when every slot is
 * taken or w is held with another copy. */
bool st_gemm_bf16_hold_weight(const float *w, int rows, int cols, uint16_t *packed, bool pack);

/* dst (rows x cols, packed) = x (rows x cols, leading dimension ld) rounded to bf16. */
void st_gemm_bf16_round(uint16_t *dst, const float *x, int rows, int cols, int ld);

#endif
