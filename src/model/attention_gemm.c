/* Attention's per-head products on AVX-512 (attention_gemm.h). The kernel keeps a tile of 8 rows
 * by 32 columns of C in 16 registers; each step of the reduction broadcasts one 32-bit unit of A's
 * row (a float, or a pair of bf16) and multiplies it into two vectors of B's row (vfmadd231ps, or
 * AVX512-BF16's vdpbf16ps: 16 lanes, a pair each), so B's panel is read once for all of A's rows.
 * Edges are masked loads and stores. The packings round with vcvtne2ps2bf16, as the held copies
 * are rounded (gemm_onednn.c), so an operand packed from float32 and one packed from its copy are
 * the same bits. */
#include "model/attention_gemm.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "model/avx512_words.h"

#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define MR 8 /* C's rows in a tile */

bool st_att32_ready(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool st_att16_ready(void)
{
    return st_att32_ready() && __builtin_cpu_supports("avx512bf16");
}

/* The 32 bits at p (a float, or a pair of bf16): memcpy keeps the storage's aliasing rules. */
static inline int unit_at(const char *p)
{
    int v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* One tile: mr <= MR rows of C by 32 columns, m0 and m1 masking the two vectors of 16; A's units
 * (i, p) at A + i * lda + p * step, B's row p at B + p * ldb, in bytes. The rows past mr repeat row
 * 0's arithmetic and are not stored: one unrolled body whose 16 accumulators stay in registers (an
 * array of them indexed by a row count spilled to the stack). Inlined with bf16 a constant. */
AVX512_BF16 static inline __attribute__((always_inline)) void
tile(bool bf16, int mr, int p0, int p1, float alpha, const char *A, size_t lda, size_t step,
     const char *B, size_t ldb, float beta, float *C, int ldc, __mmask16 m0, __mmask16 m1)
{
#define ROW_A(r) const char *a##r = A + (size_t)((r) < mr ? (r) : 0) * lda;
    ROW_A(0) ROW_A(1) ROW_A(2) ROW_A(3) ROW_A(4) ROW_A(5) ROW_A(6) ROW_A(7)
#define ZERO(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
    ZERO(0) ZERO(1) ZERO(2) ZERO(3) ZERO(4) ZERO(5) ZERO(6) ZERO(7)
    for (int p = p0; p < p1; p++) {
        const char *b = B + (size_t)p * ldb;
        __m512i b0 = _mm512_maskz_loadu_epi32(m0, b), b1 = _mm512_maskz_loadu_epi32(m1, b + 64);
#define MULADD(c, a, b)                                                                            \
    c = bf16 ? _mm512_dpbf16_ps(c, (__m512bh)(b), (__m512bh)(a))                                   \
             : _mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), c)
#define STEP(r)                                                                                    \
    {                                                                                              \
        __m512i a = _mm512_set1_epi32(unit_at(a##r + (size_t)p * step));                           \
        MULADD(c##r##0, a, b0);                                                                    \
        MULADD(c##r##1, a, b1);                                                                    \
    }
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#define STORE1(c, m, at)                                                                           \
    {                                                                                              \
        __m512 y = _mm512_mul_ps(va, c);                                                           \
        if (beta != 0.f)                                                                           \
            y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, at), y);                              \
        _mm512_mask_storeu_ps(at, m, y);                                                           \
    }
#define STORE(r)                                                                                   \
    if ((r) < mr) {                                                                                \
        STORE1(c##r##0, m0, C + (size_t)(r) * ldc)                                                 \
        STORE1(c##r##1, m1, C + (size_t)(r) * ldc + 16)                                            \
    }
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7)
#undef ROW_A
#undef ZERO
#undef MULADD
#undef STEP
#undef STORE1
#undef STORE
}

AVX512_BF16 static void tile16(int mr, int p0, int p1, float alpha, const char *A, size_t lda,
                               size_t step, const char *B, size_t ldb, float beta, float *C,
                               int ldc, __mmask16 m0, __mmask16 m1)
{
    tile(true, mr, p0, p1, alpha, A, lda, step, B, ldb, beta, C, ldc, m0, m1);
}

AVX512_BF16 static void tile32(int mr, int p0, int p1, float alpha, const char *A, size_t lda,
                               size_t step, const char *B, size_t ldb, float beta, float *C,
                               int ldc, __mmask16 m0, __mmask16 m1)
{
    tile(false, mr, p0, p1, alpha, A, lda, step, B, ldb, beta, C, ldc, m0, m1);
}

static inline int clamp(int x, int lo, int hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* The product by tiles, for either kernel: `per` elements of the reduction a unit (2 for bf16
 * pairs), A's and B's strides in bytes. */
static void gemm(bool bf16, int M, int N, int units, float alpha, const char *A, size_t lda,
                 size_t step, const char *B, size_t ldb, float beta, float *C, int ldc,
                 st_att_causal_t causal, int diag)
{
    int per = bf16 ? 2 : 1;
    for (int j = 0; j < N; j += 32) { // B's panel of 32 columns, read by every row of A
        __mmask16 m0 = st_lanes16(N - j), m1 = st_lanes16(N - j - 16);
        for (int i = 0; i < M; i += MR) {
            int mr = M - i < MR ? M - i : MR, last = i + mr - 1, p0 = 0, p1 = units;
            if (causal == ST_ATT_COLS && j > last + diag)
                continue; // the panel lies wholly past the tile's rows' last wanted column
            if (causal == ST_ATT_UPTO) // A's rows end at element last + diag
                p1 = clamp((last + diag) / per + 1, 0, units);
            if (causal == ST_ATT_FROM) // A's rows start at element i + diag
                p0 = clamp((i + diag) / per, 0, units);
            (bf16 ? tile16 : tile32)(mr, p0, p1, alpha, A + i * lda, lda, step, B + 4 * (size_t)j,
                                     ldb, beta, C + (size_t)i * ldc + j, ldc, m0, m1);
        }
    }
}

void st_att16_gemm(int M, int N, int kp, float alpha, const uint16_t *A, int lda, int step,
                   const uint16_t *B, int ldb, float beta, float *C, int ldc,
                   st_att_causal_t causal, int diag)
{
    gemm(true, M, N, kp, alpha, (const char *)A, 2 * (size_t)lda, 2 * (size_t)step,
         (const char *)B, 2 * (size_t)ldb, beta, C, ldc, causal, diag);
}

void st_att32_gemm(int M, int N, int K, float alpha, const float *A, int lda, int step,
                   const float *B, int ldb, float beta, float *C, int ldc, st_att_causal_t causal,
                   int diag)
{
    gemm(false, M, N, K, alpha, (const char *)A, 4 * (size_t)lda, 4 * (size_t)step,
         (const char *)B, 4 * (size_t)ldb, beta, C, ldc, causal, diag);
}

/* 32 floats (n of them, the rest zero) rounded: x's first 16 in the low half. */
AVX512_BF16 static inline __m512i round32(const float *x, int n)
{
    __m512 lo = _mm512_maskz_loadu_ps(st_lanes16(n), x);
    __m512 hi = _mm512_maskz_loadu_ps(st_lanes16(n - 16), x + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

AVX512_BF16 void st_att16_round(uint16_t *dst, int ldd, const float *x, int ldx, int rows, int cols)
{
    int even = cols + (cols & 1); // an odd row's pad is the zero of the masked load
    for (int r = 0; r < rows; r++) {
        const float *s = x + (size_t)r * ldx;
        uint16_t *d = dst + (size_t)r * ldd;
        for (int c = 0; c < even; c += 32)
            _mm512_mask_storeu_epi16(d + c, st_lanes32(even - c), round32(s + c, cols - c));
    }
}

/* [a's 16 | b's 16] interleaved into pairs (a0 b0 a1 b1 ...). */
AVX512_BF16 static inline __m512i interleave(__m512i ab)
{
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, ab);
}

/* Columns [c, c + 16) of rows a and b (b NULL: zeros), masked by m, as bf16: a's in the low
 * half. From float32 (rounded) or bf16 storage; inlined with f32 a constant. */
AVX512_BF16 static inline __attribute__((always_inline)) __m512i
two_rows(bool f32, const void *a, const void *b, int c, __mmask16 m)
{
    if (f32) {
        __m512 lo = _mm512_maskz_loadu_ps(m, (const float *)a + c);
        __m512 hi = b ? _mm512_maskz_loadu_ps(m, (const float *)b + c) : _mm512_setzero_ps();
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    }
    __m256i lo = _mm256_maskz_loadu_epi16(m, (const uint16_t *)a + c);
    __m256i hi = b ? _mm256_maskz_loadu_epi16(m, (const uint16_t *)b + c) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* st_att16_pair_cols from either storage. */
AVX512_BF16 static inline __attribute__((always_inline)) void
pair_cols(bool f32, uint16_t *dst, int ldd, const char *x, int ldx, int rows, int cols)
{
    size_t row = (size_t)ldx * (f32 ? sizeof(float) : sizeof(uint16_t));
    for (int p = 0; 2 * p < rows; p++) {
        const char *a = x + 2 * (size_t)p * row, *b = 2 * p + 1 < rows ? a + row : NULL;
        for (int c = 0; c < cols; c += 16)
            _mm512_mask_storeu_epi16(dst + (size_t)p * ldd + 2 * c, st_lanes32(2 * (cols - c)),
                                     interleave(two_rows(f32, a, b, c, st_lanes16(cols - c))));
    }
}

AVX512_BF16 void st_att16_pair_cols(uint16_t *dst, int ldd, const uint16_t *x, int ldx, int rows,
                                    int cols)
{
    pair_cols(false, dst, ldd, (const char *)x, ldx, rows, cols);
}

AVX512_BF16 void st_att16_pair_cols_f32(uint16_t *dst, int ldd, const float *x, int ldx, int rows,
                                        int cols)
{
    pair_cols(true, dst, ldd, (const char *)x, ldx, rows, cols);
}

/* Loads the rows x cols block of 32-bit elements at x (ld in 32-bit elements) into r, zero
 * elsewhere, and transposes it. */
AVX512_BF16 static inline void load_transposed(__m512i r[16], const void *x, size_t ld, int rows,
                                               int cols)
{
    __mmask16 m = st_lanes16(cols);
    for (int k = 0; k < 16; k++)
        r[k] = k < rows ? _mm512_maskz_loadu_epi32(m, (const int *)x + k * ld)
                        : _mm512_setzero_si512();
    st_transpose16(r);
}

AVX512_BF16 void st_att_transpose32(void *dst, int ldd, const void *x, int ldx, int rows, int cols)
{
    for (int r = 0; r < rows; r += 16)
        for (int c = 0; c < cols; c += 16) {
            __m512i t[16];
            load_transposed(t, (const int *)x + (size_t)r * ldx + c, (size_t)ldx, rows - r, cols - c);
            __mmask16 m = st_lanes16(rows - r);
            for (int k = 0; k < 16 && c + k < cols; k++)
                _mm512_mask_storeu_epi32((int *)dst + (size_t)(c + k) * ldd + r, m, t[k]);
        }
}

#else /* no AVX-512 here: attention runs its products through st_sgemm */

bool st_att32_ready(void)
{
    return false;
}

bool st_att16_ready(void)
{
    return false;
}

void st_att16_gemm(int M, int N, int kp, float alpha, const uint16_t *A, int lda, int step,
                   const uint16_t *B, int ldb, float beta, float *C, int ldc,
                   st_att_causal_t causal, int diag)
{
    abort();
}
void st_att32_gemm(int M, int N, int K, float alpha, const float *A, int lda, int step,
                   const float *B, int ldb, float beta, float *C, int ldc, st_att_causal_t causal,
                   int diag)
{
    abort();
}
void st_att16_round(uint16_t *dst, int ldd, const float *x, int ldx, int rows, int cols)
{
    abort();
}
void st_att16_pair_cols(uint16_t *dst, int ldd, const uint16_t *x, int ldx, int rows, int cols)
{
    abort();
}
void st_att16_pair_cols_f32(uint16_t *dst, int ldd, const float *x, int ldx, int rows, int cols)
{
    abort();
}
void st_att_transpose32(void *dst, int ldd, const void *x, int ldx, int rows, int cols)
{
    abort();
}
#endif
