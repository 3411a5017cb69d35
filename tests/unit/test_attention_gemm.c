/* Attention's bf16 kernel (attention_gemm.c) against references: the product against double
 * sums of the same bf16 values, with A read along its rows and down its columns, alpha and beta,
 * edges of every size, and each causal skip (which must leave every sum's bits as the dense
 * product's); the packings against their definitions; and attention's forward and backward on
 * the kernel (bf16 precision) against the same attention in float32 on the same bf16 values, with
 * odd lengths, a window and grouped-query heads. Skipped where the CPU has no AVX512-BF16. */
#include "harness/random.h"
#include "harness/st_test.h"
#include "base/bf16.h"
#include "model/attention_gemm.h"
#include "model/layers.h"
#include "strata/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 11; /* the random data's state (harness/random.h) */

/* The tests of the bf16 kernel and its packings need AVX512-BF16; of the float32 one, AVX-512. */
static void need(bool bf16)
{
    if (bf16 ? !st_att16_ready() : !st_att32_ready()) {
        print_message("no %s here: the kernel is not used, nothing to check\n",
                      bf16 ? "AVX512-BF16" : "AVX-512");
        skip();
    }
}

/* Where the product reads A's element (i, k) and B's (k, j): bf16 pairs or floats. */
static size_t a_index(bool bf16, int lda, int step, int i, int k)
{
    return bf16 ? (size_t)i * lda + (size_t)(k / 2) * step + k % 2 : (size_t)i * lda + (size_t)k * step;
}

static size_t b_index(bool bf16, int ldb, int k, int j)
{
    return bf16 ? (size_t)(k / 2) * ldb + 2 * j + k % 2 : (size_t)k * ldb + j;
}

/* One product (bf16: units pairs; float32: units elements) against the reference; A zero where
 * `causal` says (UPTO / FROM), and then its bits equal to the dense product's. */
static void check_gemm(bool bf16, int M, int N, int units, bool cols_form, float alpha, float beta,
                       st_att_causal_t causal, int diag)
{
    int per = bf16 ? 2 : 1, K = per * units;
    int lda = cols_form ? per : per * units + 6, step = cols_form ? per * M + 4 : per;
    int ldb = per * N + 2, ldc = N + 3;
    size_t na = (cols_form ? (size_t)units * step : (size_t)M * lda) + 1;
    size_t nb = (size_t)units * ldb + 1;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
    uint16_t *A16 = malloc(na * sizeof *A16), *B16 = malloc(nb * sizeof *B16);
    for (size_t i = 0; i < na; i++)
        A[i] = st_bf16_to_f32(A16[i] = st_f32_to_bf16(st_test_uniform(&rs)));
    for (size_t i = 0; i < nb; i++)
        B[i] = st_bf16_to_f32(B16[i] = st_f32_to_bf16(st_test_uniform(&rs)));
    for (int i = 0; i < M; i++) // the zeros the causal skip relies on
        for (int k = 0; k < K; k++)
            if ((causal == ST_ATT_UPTO && k > i + diag) || (causal == ST_ATT_FROM && k < i + diag))
                A[a_index(bf16, lda, step, i, k)] = A16[a_index(bf16, lda, step, i, k)] = 0;
    float *C = malloc((size_t)M * ldc * sizeof *C), *D = malloc((size_t)M * ldc * sizeof *D);
    float *C0 = malloc((size_t)M * ldc * sizeof *C0);
    for (int i = 0; i < M * ldc; i++)
        C[i] = D[i] = C0[i] = st_test_uniform(&rs);
    for (int dense = 0; dense < 2; dense++) {
        float *out = dense ? D : C;
        st_att_causal_t how = dense ? ST_ATT_DENSE : causal;
        if (bf16)
            st_att16_gemm(M, N, units, alpha, A16, lda, step, B16, ldb, beta, out, ldc, how, diag);
        else
            st_att32_gemm(M, N, units, alpha, A, lda, step, B, ldb, beta, out, ldc, how, diag);
    }
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double ref = beta * (double)C0[(size_t)i * ldc + j];
            for (int k = 0; k < K; k++)
                ref += alpha * (double)A[a_index(bf16, lda, step, i, k)] *
                       B[b_index(bf16, ldb, k, j)];
            float got = C[(size_t)i * ldc + j];
            if (causal == ST_ATT_COLS && j > i + diag)
                continue; // not wanted: left unwritten or computed, either may be
            assert_true(fabs(got - ref) <= 1e-5 * (K + 1));
            if (causal != ST_ATT_COLS)
                assert_memory_equal(&got, &D[(size_t)i * ldc + j], sizeof got);
        }
        for (int j = N; j < ldc; j++) // the padding between rows is never written
            assert_memory_equal(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof(float));
    }
    free(A), free(B), free(A16), free(B16), free(C), free(D), free(C0);
}

static void gemm_shapes(bool bf16)
{
    need(bf16);
    int shapes[][3] = {{1, 1, 1},  {8, 32, 16}, {64, 128, 16}, {64, 32, 64}, {13, 47, 9},
                       {9, 17, 3}, {7, 15, 1},  {33, 65, 33},  {64, 64, 0},  {3, 100, 20}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], units = shapes[s][2];
        for (int form = 0; form < 2; form++) {
            check_gemm(bf16, M, N, units, form, 1.f, 0.f, ST_ATT_DENSE, 0);
            check_gemm(bf16, M, N, units, form, 0.125f, 1.f, ST_ATT_DENSE, 0);
            for (int diag = -20; diag <= 70; diag += 9) {
                check_gemm(bf16, M, N, units, form, 0.5f, 0.f, ST_ATT_COLS, diag);
                check_gemm(bf16, M, N, units, form, 0.5f, 1.f, ST_ATT_UPTO, diag);
                check_gemm(bf16, M, N, units, form, 1.f, 1.f, ST_ATT_FROM, diag);
            }
        }
    }
}

static void test_gemm_bf16(void **state)
{
    (void)state;
    gemm_shapes(true);
}

static void test_gemm_f32(void **state)
{
    (void)state;
    gemm_shapes(false);
}

static void test_packings(void **state)
{
    (void)state;
    need(true);
    int sizes[][2] = {{1, 1}, {2, 2}, {5, 7}, {16, 16}, {17, 33}, {64, 32}, {129, 31}, {31, 48}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int rows = sizes[s][0], cols = sizes[s][1], ldx = cols + (cols & 1) + 4; // even: pairs
        int ldd = 2 * cols + 4;
        int even = cols + (cols & 1);
        float *x = malloc((size_t)rows * ldx * sizeof *x);
        uint16_t *x16 = malloc((size_t)rows * ldx * sizeof *x16);
        for (int i = 0; i < rows * ldx; i++)
            x16[i] = st_f32_to_bf16(x[i] = st_test_uniform(&rs) * 1e3f);
        size_t nd = (size_t)(rows + 1) * ldd + (size_t)cols * (rows + 2);
        uint16_t *d = malloc(nd * sizeof *d), *e = malloc(nd * sizeof *e);
        // rounding: each element as st_f32_to_bf16, an odd row's pad zero, nothing after it
        memset(d, 0xab, nd * sizeof *d);
        st_att16_round(d, ldd, x, ldx, rows, cols);
        for (int i = 0; i < rows; i++) {
            for (int c = 0; c < cols; c++)
                assert_int_equal(d[(size_t)i * ldd + c], x16[(size_t)i * ldx + c]);
            if (cols & 1)
                assert_int_equal(d[(size_t)i * ldd + cols], 0);
            assert_int_equal(d[(size_t)i * ldd + even], 0xabab);
        }
        // pair columns, from bf16 and from float32: the same, zero past an odd count's last row
        memset(d, 0xab, nd * sizeof *d);
        memset(e, 0xab, nd * sizeof *e);
        st_att16_pair_cols(d, ldd, x16, ldx, rows, cols);
        st_att16_pair_cols_f32(e, ldd, x, ldx, rows, cols);
        assert_memory_equal(d, e, nd * sizeof *d);
        for (int p = 0; p < (rows + 1) / 2; p++)
            for (int c = 0; c < cols; c++)
                for (int t = 0; t < 2; t++) {
                    uint16_t want = 2 * p + t < rows ? x16[(size_t)(2 * p + t) * ldx + c] : 0;
                    assert_int_equal(d[(size_t)p * ldd + 2 * c + t], want);
                }
        // pairs transposed: rows of `pairs` pairs into pairs rows of `rows` pairs
        int pairs = cols / 2, ldt = 2 * rows + 2;
        if (pairs > 0) {
            memset(d, 0xab, nd * sizeof *d);
            st_att_transpose32(d, ldt / 2, x16, ldx / 2, rows, pairs);
            for (int p = 0; p < pairs; p++) {
                for (int r = 0; r < rows; r++)
                    for (int t = 0; t < 2; t++)
                        assert_int_equal(d[(size_t)p * ldt + 2 * r + t],
                                         x16[(size_t)r * ldx + 2 * p + t]);
                assert_int_equal(d[(size_t)p * ldt + 2 * rows], 0xabab);
            }
        }
        free(x), free(x16), free(d), free(e);
    }
}

/* Attention by its definition, in double: out and dqkv (written) for qkv and dout. */
static void reference(double *out, double *dqkv, const float *qkv, const float *dout, int B, int T,
                      int NH, int NKV, int hs, int window)
{
    int C = NH * hs, ld = C + 2 * NKV * hs, G = NH / NKV;
    double scale = 1.0 / sqrt(hs), *p = malloc((size_t)T * sizeof *p);
    memset(dqkv, 0, (size_t)B * T * ld * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *x = qkv + (size_t)b * T * ld, *q = x + (size_t)i * ld + h * hs;
                size_t ko = C + (size_t)(h / G) * hs, vo = ko + (size_t)NKV * hs;
                int lo = window > 0 && i >= window ? i - window + 1 : 0;
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int j = lo; j <= i; j++) {
                    p[j] = 0;
                    for (int d = 0; d < hs; d++)
                        p[j] += scale * q[d] * x[(size_t)j * ld + ko + d];
                    mx = fmax(mx, p[j]);
                }
                for (int j = lo; j <= i; j++)
                    sum += p[j] = exp(p[j] - mx);
                const float *g = dout + ((size_t)b * T + i) * C + h * hs;
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int d = 0; d < hs; d++)
                    o[d] = 0;
                for (int j = lo; j <= i; j++) {
                    p[j] /= sum;
                    double dp = 0;
                    for (int d = 0; d < hs; d++) {
                        o[d] += p[j] * x[(size_t)j * ld + vo + d];
                        dp += g[d] * x[(size_t)j * ld + vo + d];
                    }
                    dot += p[j] * dp;
                }
                double *dx = dqkv + (size_t)b * T * ld;
                for (int j = lo; j <= i; j++) {
                    double dp = 0;
                    for (int d = 0; d < hs; d++)
                        dp += g[d] * x[(size_t)j * ld + vo + d];
                    double dsj = p[j] * (dp - dot);
                    for (int d = 0; d < hs; d++) {
                        dx[(size_t)i * ld + h * hs + d] += scale * dsj * x[(size_t)j * ld + ko + d];
                        dx[(size_t)j * ld + ko + d] += scale * dsj * q[d];
                        dx[(size_t)j * ld + vo + d] += p[j] * g[d];
                    }
                }
            }
    free(p);
}

/* The largest difference from the reference against the reference's largest magnitude. */
static double rel_error(const float *got, const double *want, size_t n)
{
    double worst = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(isfinite(got[i]));
        worst = fmax(worst, fabs(got[i] - want[i]));
        top = fmax(top, fabs(want[i]));
    }
    return worst / top;
}

/* Attention's forward and backward on the kernels, in float32 and at bf16 precision, against the
 * reference on the same bf16 values (so the inputs' rounding is no error): float32 to its
 * rounding, bf16 to the probabilities and dS its products read rounded (8 bits). */
static void attention_case(int B, int T, int NH, int NKV, int hs, int window)
{
    int C = NH * hs, KV = NKV * hs, ld = C + 2 * KV, band = st_attention_band(T, window);
    size_t nqkv = (size_t)B * T * ld, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * band;
    float *qkv = malloc(nqkv * sizeof *qkv), *dout = malloc(nout * sizeof *dout);
    for (size_t i = 0; i < nqkv; i++)
        qkv[i] = st_bf16_to_f32(st_f32_to_bf16(2.f * st_test_uniform(&rs)));
    for (size_t i = 0; i < nout; i++)
        dout[i] = st_bf16_to_f32(st_f32_to_bf16(st_test_uniform(&rs)));
    double *rout = malloc(nout * sizeof *rout), *rdqkv = malloc(nqkv * sizeof *rdqkv);
    reference(rout, rdqkv, qkv, dout, B, T, NH, NKV, hs, window);
    float *out = malloc(nout * sizeof *out), *att = malloc(natt * sizeof *att);
    float *dqkv = malloc(nqkv * sizeof *dqkv), *scratch = malloc((size_t)T * band * sizeof(float));
    uint16_t *qkv16 = malloc(nqkv * sizeof *qkv16), *dout16 = malloc(nout * sizeof *dout16);
    bool units = st_att16_ready() && strata_blas_set_precision(STRATA_PREC_BF16, NULL) == STRATA_OK;
    for (int bf16 = 0; bf16 < 1 + units; bf16++) {
        assert_int_equal(strata_blas_set_precision(bf16 ? STRATA_PREC_BF16 : STRATA_PREC_FP32,
                                                   NULL),
                         STRATA_OK);
        for (size_t i = 0; i < natt; i++) // the kernel may leave the skipped entries as they were
            att[i] = NAN;
        bool r = st_attention_forward(out, att, qkv, bf16 ? qkv16 : NULL, B, T, C, NH, NKV, window);
        st_attention_backward(dqkv, scratch, 1, dout, qkv, att, bf16 ? qkv16 : NULL, r,
                              bf16 ? dout16 : NULL, B, T, C, NH, NKV, window);
        double tol = bf16 ? 2e-2 : 2e-5;
        assert_true(rel_error(out, rout, nout) <= tol);
        assert_true(rel_error(dqkv, rdqkv, nqkv) <= tol);
    }
    strata_blas_set_precision(STRATA_PREC_FP32, NULL);
    free(qkv), free(dout), free(rout), free(rdqkv), free(out), free(att), free(dqkv);
    free(scratch), free(qkv16), free(dout16);
}

static void test_attention(void **state)
{
    (void)state;
    need(false);
    if (!st_att16_ready() || strata_blas_set_precision(STRATA_PREC_BF16, NULL) != STRATA_OK)
        print_message("no AVX512-BF16 or no bf16 units: attention checked in float32 only\n");
    attention_case(2, 128, 4, 4, 32, 0);  // the 3.3M model's blocks
    attention_case(1, 130, 2, 2, 6, 0);   // a block of 2 rows, an odd head count of pairs
    attention_case(1, 131, 4, 2, 8, 0);   // odd T: the last pair half zero; grouped-query heads
    attention_case(2, 200, 2, 1, 16, 40); // a window: runs of blocks, keys from k0 > 0
    attention_case(1, 7, 3, 3, 4, 3);     // shorter than a tile
    attention_case(1, 70, 2, 2, 5, 0);    // an odd head size: bf16 goes through st_sgemm
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_f32),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_packings),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
