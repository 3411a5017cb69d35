/* Attention's per-head matrix products on AVX-512, in float32 and in bf16 with float32
 * accumulation (AVX512-BF16's pair dot product, vdpbf16ps), and the packings they read
 * (attention_gemm.c). A head's products are small (at T = 128 and head size 32, 64 x 128 x 32): a
 * library call there costs about as much as its arithmetic, cannot skip what lies past the causal
 * diagonal inside a block, and at bf16 rounds its float32 operands again. Internal to the model
 * part.
 *
 * bf16 layouts, in bf16 elements (uint16_t) with leading dimensions in elements:
 *  - pair rows: row i holds the K reduction elements of A's row i, consecutive, so the 32 bits at
 *    2p are the pair (A[i][2p], A[i][2p+1]); K padded to even with a zero;
 *  - pair columns ("VNNI"): element 2j + t of row p holds B[2p + t][j], so the 32 bits at 2j are
 *    the pair (B[2p][j], B[2p+1][j]); a missing last row of an odd K is zero. */
#ifndef ST_MODEL_ATTENTION_GEMM_H
#define ST_MODEL_ATTENTION_GEMM_H
#include <stdbool.h>
#include <stdint.h>

/* Whether this CPU runs the float32 products (AVX-512 F, BW, VL, DQ), and the bf16 ones (those
 * and AVX512-BF16), with a compiler that emits them. */
bool st_att32_ready(void);
bool st_att16_ready(void);

/* What of a product's work a causal block can skip, with its diagonal's offset diag: */
typedef enum st_att_causal {
    ST_ATT_DENSE, /* nothing */
    ST_ATT_COLS,  /* C[i][j] is wanted for j <= i + diag only (the rest may be left unwritten) */
    ST_ATT_UPTO,  /* A[i][k] is zero for k > i + diag */
    ST_ATT_FROM,  /* A[i][k] is zero for k < i + diag */
} st_att_causal_t;

/* C[M x N] (ldc) = alpha * A B + beta * C in float32: A's element (i, k) at A + i * lda + k * step
 * (row-major: step 1; A read down its columns, the transpose of a row-major matrix: lda 1, step
 * its leading dimension), B row-major (K x N, ldb). beta 0 never reads C. The zeros `causal`
 * names are skipped by tiles of 8 rows and 32 columns, which leaves every sum's bits as they are. */
void st_att32_gemm(int M, int N, int K, float alpha, const float *A, int lda, int step,
                   const float *B, int ldb, float beta, float *C, int ldc, st_att_causal_t causal,
                   int diag);
/* The same in bf16, reducing over kp pairs: A's pair (i, p), the pair (A[i][2p], A[i][2p+1]), at
 * A + i * lda + p * step (pair rows: step 2; read down its pair columns, the transpose of one: lda
 * 2, step the columns' leading dimension); B as pair columns (kp rows of N pairs, ldb). */
void st_att16_gemm(int M, int N, int kp, float alpha, const uint16_t *A, int lda, int step,
                   const uint16_t *B, int ldb, float beta, float *C, int ldc,
                   st_att_causal_t causal, int diag);

/* dst (rows x cols, ldd) = x rounded to bf16, and a zero after each row's last element when cols
 * is odd (so its pairs are whole). */
void st_att16_round(uint16_t *dst, int ldd, const float *x, int ldx, int rows, int cols);

/* dst's pair columns of x (rows x cols): dst row p, element 2j + t = x[2p + t][j] (zero past the
 * last row), for (rows + 1) / 2 rows of 2 cols elements; from bf16 or from float32 rounded. Read
 * down its columns, also the pair rows of x's transpose. */
void st_att16_pair_cols(uint16_t *dst, int ldd, const uint16_t *x, int ldx, int rows, int cols);
void st_att16_pair_cols_f32(uint16_t *dst, int ldd, const float *x, int ldx, int rows, int cols);

/* The transpose of a matrix of 32-bit elements (floats, or bf16 pairs): dst's (c, r) = x's (r,
 * c) for rows x cols of x; leading dimensions in 32-bit elements. */
void st_att_transpose32(void *dst, int ldd, const void *x, int ldx, int rows, int cols);
#endif
