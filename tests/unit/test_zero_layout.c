/* The ZeRO engine's pure parts: piece split of a segment, the hierarchical layout (piece indices are a
 * bijection, the blocks each level gathers are contiguous, refusals of unequal or non-nested tiers)
 * and the blockwise int8 quantisation and its error bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"
#include "parallel/zero_internal.h"
#include "strata/parallel.h"

static void test_pieces(void **state)
{
    (void)state;
    const size_t counts[] = {0, 1, 2, 3, 7, 64, 101};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int n = 1; n <= 9; n++) {
            size_t at = 0;
            for (int p = 0; p < n; p++) {
                assert_int_equal(st_zero_piece_off(counts[c], n, p), at);
                size_t k = st_zero_piece_count(counts[c], n, p);
                assert_true(k == counts[c] / n || k == counts[c] / n + 1);
                at += k;
            }
            assert_int_equal(at, counts[c]);
        }
}

/* Checks every rank's layout for colours[n * ntiers]. */
static void check_layout(int n, int ntiers, const int *colors)
{
    int seen[64] = {0};
    st_zero_layout_t l[64];
    for (int r = 0; r < n; r++) {
        assert_int_equal(st_zero_layout(n, ntiers, colors, r, &l[r]), STRATA_OK);
        assert_int_equal(l[r].nlevels, ntiers + 1);
        int prod = 1;
        for (int i = 0; i < l[r].nlevels; i++)
            prod *= l[r].size[i];
        assert_int_equal(prod, n);
        assert_true(l[r].idx >= 0 && l[r].idx < n);
        seen[l[r].idx]++;
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    // Members of one level-i communicator (same colour) differ only in digit i, and their digits
    // are 0..size-1: so the blocks they exchange tile one contiguous span of pieces.
    for (int i = 0; i <= ntiers; i++)
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                if (l[a].color[i] != l[b].color[i])
                    continue;
                for (int d = 0; d <= ntiers; d++)
                    if (d != i)
                        assert_int_equal(l[a].digit[d], l[b].digit[d]);
                if (a != b)
                    assert_int_not_equal(l[a].digit[i], l[b].digit[i]);
                if (i < ntiers) // tier i: the same group
                    assert_int_equal(colors[a * ntiers + i], colors[b * ntiers + i]);
            }
}

static void test_layout(void **state)
{
    (void)state;
    check_layout(5, 0, NULL);
    int hosts[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    check_layout(8, 1, hosts);
    int inter[6] = {7, 9, 7, 9, 7, 9}; // hosts interleaved in rank order, arbitrary colour values
    check_layout(6, 1, inter);
    int three[16 * 2];                 // 16 ranks: GPU = rank / 2, node = rank / 8
    for (int r = 0; r < 16; r++) {
        three[r * 2] = r / 2;
        three[r * 2 + 1] = 100 + r / 8;
    }
    check_layout(16, 2, three);
    int four[8 * 3]; // 3 tiers: 2 x 2 x 2
    for (int r = 0; r < 8; r++) {
        four[r * 3] = r / 2;
        four[r * 3 + 1] = r / 4;
        four[r * 3 + 2] = 0;
    }
    check_layout(8, 3, four);
    st_zero_layout_t l;
    int unequal[3] = {0, 1, 1};
    assert_int_equal(st_zero_layout(3, 1, unequal, 0, &l), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "equal"));
    int split[4 * 2] = {0, 0, 0, 1, 1, 1, 1, 1}; // tier-0 group {0,1} spans two tier-1 groups
    assert_int_equal(st_zero_layout(4, 2, split, 0, &l), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "nest"));
}

static void test_quant(void **state)
{
    (void)state;
    const size_t counts[] = {0, 1, 255, 256, 257, 1000};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t n = counts[c];
        float *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
        unsigned char *q = malloc(strata_zero_qbytes(n) + 1);
        assert_int_equal(strata_zero_qbytes(n), n + 4 * ((n + 255) / 256));
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(sin((double)i * 1.7) * (i % 300 == 5 ? 40.0 : 1.0));
        strata_zero_quantize(x, n, q);
        strata_zero_dequantize(q, n, y, false);
        for (size_t b = 0; b * 256 < n; b++) {
            float amax = 0.0f;
            for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++)
                assert_true(fabsf(x[i] - y[i]) <= amax / 254.0f * 1.0001f);
        }
        strata_zero_dequantize(q, n, y, true); // accumulate: twice the value
        for (size_t i = 0; i < n; i++)
            assert_true(fabsf(y[i] - 2.0f * x[i]) <= 2.0f * 40.0f / 254.0f * 1.0001f);
        free(x);
        free(y);
        free(q);
    }
    float zeros[300] = {0}, back[300];
    unsigned char q[400];
    strata_zero_quantize(zeros, 300, q);
    strata_zero_dequantize(q, 300, back, false);
    for (int i = 0; i < 300; i++)
        assert_true(back[i] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
