/* Pieces the model's AVX-512 kernels share (gemm_blocked.c, attention_gemm.c): lane masks and the
 * 16 x 16 transposition of 32-bit words (floats, or pairs of bf16). Include only where
 * <immintrin.h> and the GNU target attribute exist (x86-64, GCC or Clang); a caller's own target
 * must include avx512f. Internal to the model part. */
#ifndef ST_MODEL_AVX512_WORDS_H
#define ST_MODEL_AVX512_WORDS_H
#include <immintrin.h>
#include <string.h>

/* The first n of 16 lanes (none for n <= 0, all for n >= 16). */
static inline __mmask16 st_lanes16(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* The first n of 32 lanes. */
static inline __mmask32 st_lanes32(int n)
{
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* r[q] = word q of every row: the 16 x 16 transposition of 32-bit words (within each 128-bit
 * lane first, then across the lanes). */
__attribute__((target("avx512f"))) static inline void st_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // r[4 i + c]'s lane L: word 4 L + c of rows 4 i .. 4 i + 3.
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i a = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44); // lanes 0, 1 of each
        __m512i b = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE); // lanes 2, 3
        __m512i x = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        __m512i y = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_i32x4(a, x, 0x88);
        t[4 + c] = _mm512_shuffle_i32x4(a, x, 0xDD);
        t[8 + c] = _mm512_shuffle_i32x4(b, y, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(b, y, 0xDD);
    }
    memcpy(r, t, sizeof t);
}
#endif
