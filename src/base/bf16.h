/* bfloat16 <-> float32: what the communicator's bf16 reductions (src/comm/algo/reduce_op.c), the
 * pool's node kernels (src/pool/kernels.c) and the model's bf16 matrix products (src/model/gemm_onednn.c)
 * all convert with, so a value rounds the same way wherever it crosses. Header-only and branch-free:
 * each caller's loops vectorise with its own flags. */
#ifndef ST_BASE_BF16_H
#define ST_BASE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float st_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; a NaN stays a (quiet) NaN; overflow rounds to infinity through
 * the carry, the exponent fields having the same width. The NaN choice is a mask, not a branch:
 * gcc does not speculate float code into a select, and a branch stops the loops vectorising. */
static inline uint16_t st_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    uint32_t m = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((nan & m) | (rounded & ~m));
}

#endif
