/* Optimizers over a flat range of the parameter arena (a ZeRO shard is an offset and a count):
 * AdamW and two-phase LAMB, the double-precision sum of squares for the global gradient norm, the
 * clipping factor and the learning-rate schedule. Every update is elementwise within a tensor, so
 * updating a range at once or in pieces gives bit-identical parameters. */
#include <math.h>
#include <stdlib.h>

#include "base/adamw.h"
#include "base/base.h"
#include "base/sumsq.h"
#include "model/parallel_range.h"
#include "model/vecmath.h"
#include "strata/model.h"

strata_optim_config_t strata_optim_config_default(void)
{
    return (strata_optim_config_t){.kind = STRATA_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f,
                                   .eps = 1e-8f, .weight_decay = 0.01f};
}

/* The part of tensor ti inside [offset, offset + count): *lo = its first element relative to
 * offset, *n = its length (0 when the tensor lies outside). */
static size_t piece(const strata_gpt_t *m, int ti, size_t offset, size_t count, size_t *lo)
{
    const strata_tensor_info_t *t = strata_model_tensor(m, ti);
    size_t s = t->offset, e = t->offset + t->count;
    if (e <= offset || s >= offset + count)
        return 0;
    *lo = s > offset ? s - offset : 0;
    return ST_MIN(e, offset + count) - offset - *lo;
}

#define FOR_PIECES(m, offset, count, ti, lo, n)                                                    \
    for (int ti = 0; ti < strata_model_ntensors(m); ti++)                                          \
        for (size_t lo = 0, n = piece(m, ti, offset, count, &lo); n > 0; n = 0)

static strata_status_t check_range(const strata_gpt_t *m, size_t offset, size_t count)
{
    size_t P = strata_model_nparams(m);
    if (offset > P || count > P - offset)
        return st_error(STRATA_ERR_INVALID_ARG, "optimizer: range [%zu, %zu) outside the %zu "
                        "parameters", offset, offset + count, P);
    return STRATA_OK;
}

typedef struct adamw_job {
    st_adamw_t k;
    float *p, *m, *v;
    const float *g;
} adamw_job_t;

ST_VEC_CLONES
static void adamw_piece(void *ctx, size_t b, size_t e)
{
    adamw_job_t *j = ctx;
    st_adamw_apply(&j->k, j->p + b, j->m + b, j->v + b, j->g + b, e - b);
}

strata_status_t strata_adamw_update(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                    float *params, const float *grads, float *mstate,
                                    float *vstate, size_t offset, size_t count, float lr,
                                    int64_t step, float grad_scale)
{
    ST_TRY(check_range(m, offset, count));
    FOR_PIECES(m, offset, count, ti, lo, n)
    {
        float wd = strata_model_tensor(m, ti)->decay ? oc->weight_decay : 0.f;
        adamw_job_t j = {st_adamw_make(lr, oc->beta1, oc->beta2, oc->eps, wd, step, grad_scale),
                         params + lo, mstate + lo, vstate + lo, grads + lo};
        st_parallel_range(n, 16384, adamw_piece, &j);
    }
    return STRATA_OK;
}

ST_VEC_CLONES
strata_status_t strata_lamb_partial(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                    const float *params, const float *grads, float *mstate,
                                    float *vstate, size_t offset, size_t count, int64_t step,
                                    float grad_scale, double *wsq, double *usq)
{
    ST_TRY(check_range(m, offset, count));
    float b1 = oc->beta1, b2 = oc->beta2, eps = oc->eps;
    float c1 = 1.f - powf(b1, (float)step), c2 = 1.f - powf(b2, (float)step);
    FOR_PIECES(m, offset, count, ti, lo, n)
    {
        float wd = strata_model_tensor(m, ti)->decay ? oc->weight_decay : 0.f;
        const float *p = params + lo, *g = grads + lo;
        float *mm = mstate + lo, *vv = vstate + lo;
        double ws = 0, us = 0;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * grad_scale;
            float mi = b1 * mm[i] + (1.f - b1) * gi;
            float vi = b2 * vv[i] + (1.f - b2) * gi * gi;
            mm[i] = mi;
            vv[i] = vi;
            float u = (mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i];
            ws += (double)p[i] * p[i];
            us += (double)u * u;
        }
        wsq[ti] += ws;
        usq[ti] += us;
    }
    return STRATA_OK;
}

ST_VEC_CLONES
strata_status_t strata_lamb_apply(const strata_gpt_t *m, const strata_optim_config_t *oc,
                                  float *params, const float *mstate, const float *vstate,
                                  size_t offset, size_t count, float lr, int64_t step,
                                  const double *wsq, const double *usq)
{
    ST_TRY(check_range(m, offset, count));
    float b1 = oc->beta1, b2 = oc->beta2, eps = oc->eps;
    float c1 = 1.f - powf(b1, (float)step), c2 = 1.f - powf(b2, (float)step);
    FOR_PIECES(m, offset, count, ti, lo, n)
    {
        float wd = strata_model_tensor(m, ti)->decay ? oc->weight_decay : 0.f;
        double wn = sqrt(wsq[ti]), un = sqrt(usq[ti]);
        float trust = (wn > 0 && un > 0) ? (float)(wn / un) : 1.f;
        float *p = params + lo;
        const float *mm = mstate + lo, *vv = vstate + lo;
        for (size_t i = 0; i < n; i++) {
            float u = (mm[i] / c1) / (sqrtf(vv[i] / c2) + eps) + wd * p[i];
            p[i] -= lr * trust * u;
        }
    }
    return STRATA_OK;
}

typedef struct sumsq_job {
    const float *x;
    size_t n;
    double *part;
} sumsq_job_t;

ST_VEC_CLONES
static void sumsq_blocks(void *ctx, size_t b0, size_t b1)
{
    const sumsq_job_t *j = ctx;
    for (size_t b = b0; b < b1; b++) {
        size_t at = b * ST_SUMSQ_BLOCK, len = j->n - at;
        j->part[b] = st_sumsq_f32_block(j->x + at, len < ST_SUMSQ_BLOCK ? len : ST_SUMSQ_BLOCK);
    }
}

/* st_sumsq_f32's blocks on the threads, added in its order: the same total (a pool node's SUMSQ
 * runs it serially). */
double strata_sumsq(const float *x, size_t n)
{
    size_t nb = (n + ST_SUMSQ_BLOCK - 1) / ST_SUMSQ_BLOCK;
    double *part = nb > 1 && st_parallel_threads() > 1 ? malloc(nb * sizeof *part) : NULL;
    if (!part)
        return st_sumsq_f32(x, n);
    st_parallel_range(nb, 1, sumsq_blocks, &(sumsq_job_t){x, n, part});
    double total = 0;
    for (size_t b = 0; b < nb; b++)
        total += part[b];
    free(part);
    return total;
}

float strata_clip_scale(double global_sumsq, float max_norm)
{
    double norm = sqrt(global_sumsq);
    if (max_norm <= 0.f || !(norm > max_norm))
        return 1.f;
    return (float)(max_norm / (norm + 1e-6));
}

float strata_lr_at(const strata_lr_schedule_t *s, int64_t step)
{
    if (s->warmup > 0 && step <= s->warmup)
        return s->lr * (float)step / (float)s->warmup;
    if (step >= s->total || s->total <= s->warmup)
        return step >= s->total ? s->min_lr : s->lr;
    double frac = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    double cosv = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(s->min_lr + (s->lr - s->min_lr) * cosv);
}
