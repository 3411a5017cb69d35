/* zlib's crc32 (polynomial 0xEDB88320, reflected) of the checkpoint files: slicing-by-8 tables on
 * any CPU, and on x86-64 with PCLMULQDQ the folding method of Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ Instruction" (2009), as in Chromium's zlib (crc32_simd.c):
 * four 128-bit lanes folded 64 bytes at a time, then one lane, then a Barrett reduction to 32 bits.
 * The folded path runs ~8x faster than the tables (a memory checkpoint checksums its whole shard
 * every step); both give the same value, which tests/unit/test_train_ckpt.c checks against a
 * bitwise reference. */
#include <stdint.h>

#include "train/ckpt_internal.h"

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    if (crc_table[0][1])
        return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            crc_table[s][i] = (crc_table[s - 1][i] >> 8) ^ crc_table[0][crc_table[s - 1][i] & 0xff];
}

/* Slicing-by-8 on the inverted state (crc = ~value). */
static uint32_t crc_tables(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^
              crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdatomic.h>
#define ST_CRC_FOLD 1

/* The folded crc of n bytes (n >= 64, a multiple of 16) on the inverted state. The constants are
 * x^k mod P in the bit-reflected domain (the paper's k1..k5, mu and P'). */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t crc, const uint8_t *p,
                                                                   size_t n)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
    // Four lanes, 64 bytes at a time: each lane times x^(512) (k1, k2) plus the next 16 bytes.
    for (; n >= 64; p += 64, n -= 64) {
        __m128i x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
    }
    // The four lanes into one (times x^128: k3, k4), then 16 bytes at a time.
    const __m128i *rest[3] = {&x2, &x3, &x4};
    for (int i = 0; i < 3; i++) {
        __m128i x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, *rest[i]), x5);
    }
    for (; n >= 16; p += 16, n -= 16) {
        __m128i x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, _mm_loadu_si128((const __m128i *)p)), x5);
    }
    // 128 bits to 64, then 64 to 32 (k5), then the Barrett reduction (mu, P').
    __m128i r = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), r);
    r = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00), r);
    r = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    r = _mm_clmulepi64_si128(_mm_and_si128(r, low32), poly, 0x00);
    x1 = _mm_xor_si128(x1, r);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

/* PCLMULQDQ and SSE4.1, probed once (a relaxed atomic: racing probes store the same value). */
static bool have_fold(void)
{
    static atomic_int cached = -1;
    int f = atomic_load_explicit(&cached, memory_order_relaxed);
    if (f < 0) {
        f = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        atomic_store_explicit(&cached, f, memory_order_relaxed);
    }
    return f;
}
#endif

uint32_t st_crc32(uint32_t crc, const void *buf, size_t n)
{
    crc_init();
    const uint8_t *p = buf;
    crc = ~crc;
#ifdef ST_CRC_FOLD
    if (n >= 64 && have_fold()) {
        size_t m = n & ~(size_t)15;
        crc = crc_fold(crc, p, m);
        p += m;
        n -= m;
    }
#endif
    return ~crc_tables(crc, p, n);
}
