/* Packing a weight into oneDNN's blocked bf16 layouts (gemm_blocked.h), both in one pass over it:
 * 16 of its rows by 32 of its columns at a time, rounded with the AVX512-BF16 conversion (as the
 * products' other operands are).
 *  - B = w^T (a forward's): the tile's 16 rows are 16 columns of B, and each row's 32 values are
 *    one block's 16 row pairs in order already; 16 columns' pairs are a 16 x 16 transposition of
 *    32-bit words.
 *  - B = w (an input gradient's): the tile's rows are 8 row pairs of B, each pair's 16 columns
 *    its two rows' values interleaved (one permutation of the two rounded rows).
 * Padding past the weight's edge reads zeros. Each group of 16 rows is rounded first in one pass
 * over its memory (round_group says why), and the layouts are written with streaming stores: the
 * input gradient's is read a whole forward later, and writing it through the cache evicted what
 * the products were reading (the packing took 1.03% of an 85M step at 2 threads that way, 0.54%
 * streamed). */
#include "model/gemm_blocked.h"

#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "model/parallel_range.h"

/* A layout's rows and columns with their padding. */
static int padded_k(const st_blocked_t *b)
{
    return (b->K + ST_BLOCKED_KB - 1) / ST_BLOCKED_KB * ST_BLOCKED_KB;
}

static int padded_n(const st_blocked_t *b)
{
    return (b->N + b->nb - 1) / b->nb * b->nb;
}

typedef struct pack_job {
    const st_blocked_t *fwd, *bwd; /* B = w^T's layout (K = cols, N = rows), B = w's */
    uint16_t *fdst, *bdst;
    const float *w;
    int rows, cols;
} pack_job_t;

/* Rows [r0, r0 + 16) by columns [c0, c0 + 32) of the weight (zeros past its edge) into both
 * layouts, where each reaches, one value at a time: where the CPU has no AVX-512 (nor bf16
 * units, so no product reads the result). */
static void tile_scalar(const pack_job_t *j, int r0, int c0)
{
    int fk = padded_k(j->fwd), fn = padded_n(j->fwd), bk = padded_k(j->bwd), bn = padded_n(j->bwd);
    for (int r = r0; r < r0 + 16; r++)
        for (int c = c0; c < c0 + ST_BLOCKED_KB; c++) {
            uint16_t v = r < j->rows && c < j->cols ? st_f32_to_bf16(j->w[(size_t)r * j->cols + c])
                                                    : 0;
            if (c < fk && r < fn)
                j->fdst[st_blocked_offset(j->fwd, c, r)] = v;
            if (r < bk && c < bn)
                j->bdst[st_blocked_offset(j->bwd, r, c)] = v;
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "model/avx512_words.h"
#define BLOCKED_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* Rows [r0, r0 + 16) of the weight rounded into g (16 rows of `width` >= cols, zeros past the
 * weight's edge): the weight's rows are contiguous, so this reads one stretch of memory in order,
 * which the tiles below then read from the cache (reading the weight tile by tile, 16 rows 128
 * bytes at a time, ran at a third of the memory's speed). */
BLOCKED_TARGET static void round_group(const pack_job_t *j, int r0, uint16_t *g, int width)
{
    for (int q = 0; q < 16; q++) {
        uint16_t *out = g + (size_t)q * width;
        int r = r0 + q, c = 0;
        if (r < j->rows)
            for (const float *row = j->w + (size_t)r * j->cols; c < j->cols; c += 32) {
                __m512 lo = _mm512_maskz_loadu_ps(st_lanes16(j->cols - c), row + c);
                __m512 hi = _mm512_maskz_loadu_ps(st_lanes16(j->cols - c - 16), row + c + 16);
                _mm512_storeu_si512(out + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
        memset(out + c, 0, (size_t)(width - c) * sizeof *out);
    }
}

/* The tile of tile_scalar from the group's rounded rows g (16 rows of `width`). */
BLOCKED_TARGET static void tile(const pack_job_t *j, int r0, int c0, const uint16_t *g, int width)
{
    // Words i of (x, y) side by side: x0 y0 x1 y1 .. for the first 16 of each, then the last.
    static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                        24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const st_blocked_t *f = j->fwd, *b = j->bwd;
    __m512i v[16]; // row r0 + q's 32 values from c0, in order
    for (int q = 0; q < 16; q++)
        v[q] = _mm512_loadu_si512(g + (size_t)q * width + c0);
    // B = w: rows r0 .. r0 + 15 are B's rows, pairs (r0 % 32) / 2 .. + 7 of block row r0 / 32.
    if (r0 < padded_k(b)) {
        __m512i lo = _mm512_loadu_si512(lo_idx), hi = _mm512_loadu_si512(hi_idx);
        size_t pair = 2 * (size_t)b->nb;
        uint16_t *row = j->bdst + (size_t)(r0 / ST_BLOCKED_KB) * b->k_stride +
                        (size_t)(r0 % ST_BLOCKED_KB / 2) * pair;
        for (int h = 0; h < 2; h++) {
            int n = c0 + 16 * h;
            if (n >= padded_n(b))
                break;
            uint16_t *out = row + (size_t)(n / b->nb) * b->n_stride + 2 * (size_t)(n % b->nb);
            for (int i = 0; i < 8; i++)
                _mm512_stream_si512((void *)(out + i * pair),
                                    _mm512_permutex2var_epi16(v[2 * i], h ? hi : lo, v[2 * i + 1]));
        }
    }
    // B = w^T: rows r0 .. r0 + 15 are B's columns, c0 .. c0 + 31 the rows of block row c0 / 32.
    if (c0 < padded_k(f) && r0 < padded_n(f)) {
        st_transpose16(v);
        size_t pair = 2 * (size_t)f->nb;
        uint16_t *out = j->fdst + (size_t)(c0 / ST_BLOCKED_KB) * f->k_stride +
                        (size_t)(r0 / f->nb) * f->n_stride + 2 * (size_t)(r0 % f->nb);
        for (int p = 0; p < ST_BLOCKED_KB / 2; p++)
            _mm512_stream_si512((void *)(out + p * pair), v[p]);
    }
}

static bool have_avx512(void)
{
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}

/* The tiles' streamed stores ordered before whatever follows (the products, on other threads). */
static void store_fence(void)
{
    _mm_sfence();
}
#else
static bool have_avx512(void)
{
    return false;
}
static void store_fence(void) {}
#define round_group(j, r0, g, width) (void)0
#define tile(j, r0, c0, g, width) (void)0
#endif

/* The extent both layouts cover, in the weight's rows and columns. */
static int all_rows(const pack_job_t *j)
{
    int f = padded_n(j->fwd), b = padded_k(j->bwd);
    return f > b ? f : b;
}

static int all_cols(const pack_job_t *j)
{
    int f = padded_k(j->fwd), b = padded_n(j->bwd);
    return f > b ? f : b;
}

/* Groups [g0, g1) of 16 rows, each across every column. */
static void pack_groups(void *ctx, size_t g0, size_t g1)
{
    const pack_job_t *j = ctx;
    int width = all_cols(j); // a multiple of 16: of 32 once rounded up
    width = (width + ST_BLOCKED_KB - 1) / ST_BLOCKED_KB * ST_BLOCKED_KB;
    uint16_t *g = have_avx512() ? aligned_alloc(64, 16 * (size_t)width * sizeof *g) : NULL;
    for (size_t n = g0; n < g1; n++) {
        int r0 = (int)n * 16;
        if (g)
            round_group(j, r0, g, width);
        for (int c0 = 0; c0 < width; c0 += ST_BLOCKED_KB)
            if (g)
                tile(j, r0, c0, g, width);
            else // no AVX-512, or no memory
                tile_scalar(j, r0, c0);
    }
    free(g);
    store_fence();
}

void st_blocked_pack_weight(const st_blocked_t *fwd, uint16_t *fdst, const st_blocked_t *bwd,
                            uint16_t *bdst, const float *w, int rows, int cols)
{
    pack_job_t j = {fwd, bwd, fdst, bdst, w, rows, cols};
    size_t groups = (size_t)all_rows(&j) / 16;
    st_parallel_range(groups, 16384 / (16 * (size_t)all_cols(&j)) + 1, pack_groups, &j);
}
