/* The AdamW update of a float32 range, elementwise: the one formula both the model's optimizer
 * (src/model/optim.c) and a pool node's ADAMW operation (src/pool/node.c) run, so an update on a
 * pool node gives the same bits as the same update in a rank (`strata train --optimizer-in-pool`).
 * Header-only: each caller compiles the loop with its own vectorisation flags. ISO C mode implies
 * -ffp-contract=off, so no clone fuses a multiply-add and every build rounds alike. */
#ifndef ST_BASE_ADAMW_H
#define ST_BASE_ADAMW_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* The hyper-parameters of one step, with the bias corrections and the decay factor folded in. */
typedef struct st_adamw {
    float beta1, beta2, eps, lr, grad_scale;
    float c1, c2; /* bias corrections 1 - beta^step */
    float decay;  /* decoupled weight decay: 1 - lr * weight_decay (1 for a tensor without decay) */
} st_adamw_t;

static inline st_adamw_t st_adamw_make(float lr, float beta1, float beta2, float eps,
                                       float weight_decay, int64_t step, float grad_scale)
{
    return (st_adamw_t){.beta1 = beta1, .beta2 = beta2, .eps = eps, .lr = lr,
                        .grad_scale = grad_scale, .c1 = 1.f - powf(beta1, (float)step),
                        .c2 = 1.f - powf(beta2, (float)step),
                        .decay = weight_decay != 0.f ? 1.f - lr * weight_decay : 1.f};
}

/* p, m, v updated in place from the gradient g (times grad_scale), n elements. */
static inline void st_adamw_apply(const st_adamw_t *k, float *restrict p, float *restrict m,
                                  float *restrict v, const float *restrict g, size_t n)
{
    float b1 = k->beta1, b2 = k->beta2, eps = k->eps, lr = k->lr, gs = k->grad_scale;
    float c1 = k->c1, c2 = k->c2, decay = k->decay;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.f - b1) * gi;
        float vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / c1, vhat = vi / c2;
        p[i] = p[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
    }
}

#endif
