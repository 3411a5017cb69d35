/* The optimizer in the pool (`strata train --optimizer-in-pool`; docs/pool.md, "Optimizer state in
 * the pool"): AdamW's fp32 master parameters, m and v live on the pool nodes, in the regions of
 * strata_pool_optim_layout. A step: every rank adds its gradient into the gradient region (the
 * pool sums, exactly once); after a barrier each rank asks the nodes for the sum of squares of
 * its cut, and the ranks add those for the norm; each rank has the nodes apply AdamW to its cut of
 * the arena (the checkpoint's cut: P r / N .. P (r+1) / N), which also zeroes the gradients; after
 * a barrier every rank reads the parameters back. The gradient the nodes see is the ranks' sum:
 * the 1/N of the ordinary run's average goes into ADAMW's gradient scale. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "strata/trace.h"
#include "train/trainer.h"

/* This rank's cut of the arena [*b, *e). */
static void cut(const strata_trainer_t *t, size_t *b, size_t *e)
{
    size_t P = strata_model_nparams(t->model), N = (size_t)t->dp, r = (size_t)t->dp_rank;
    *b = P * r / N;
    *e = P * (r + 1) / N;
}

strata_status_t st_trainer_pool_open(strata_trainer_t *t)
{
    const strata_train_config_t *c = &t->cfg;
    if (c->optim.kind != STRATA_OPTIM_ADAMW)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --optimizer-in-pool runs AdamW on the pool "
                        "nodes; LAMB's trust ratios need every tensor's norms before any update, "
                        "which the nodes do not compute: use --optimizer adamw");
    if (c->zero != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --optimizer-in-pool keeps the optimizer "
                        "state in the pool instead of sharding it over the ranks: use --zero 0 "
                        "(got --zero %d)", c->zero);
    if (c->tp > 1 || c->pp > 1)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --optimizer-in-pool runs data parallel "
                        "only (got --tp %d --pp %d)", c->tp, c->pp);
    strata_status_t rc = strata_pool_open_env(-1, &t->pool);
    if (rc == STRATA_OK)
        rc = strata_pool_optim_layout(t->pool, strata_model_nparams(t->model), &t->pool_layout);
    if (rc != STRATA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", strata_last_error());
        return st_error(rc, "train: --optimizer-in-pool: %s", msg);
    }
    t->pool_stale = true;
    return STRATA_OK;
}

strata_status_t st_trainer_pool_upload(strata_trainer_t *t)
{
    const strata_pool_optim_layout_t *L = &t->pool_layout;
    size_t b, e;
    cut(t, &b, &e);
    size_t bytes = (e - b) * sizeof(float);
    float *grads = strata_model_grad_arena(t->model) + b; // zeros to write (the forward clears it)
    memset(grads, 0, bytes);
    strata_trace_begin("comm", "pool_upload");
    strata_status_t rc = strata_pool_write(t->pool, L->params + 4 * b,
                                           strata_model_param_arena(t->model) + b, bytes);
    if (rc == STRATA_OK)
        rc = strata_pool_write(t->pool, L->m + 4 * b, t->m + b, bytes);
    if (rc == STRATA_OK)
        rc = strata_pool_write(t->pool, L->v + 4 * b, t->v + b, bytes);
    if (rc == STRATA_OK)
        rc = strata_pool_write(t->pool, L->grads + 4 * b, grads, bytes);
    strata_trace_end("comm", "pool_upload");
    ST_TRY(rc);
    ST_TRY(strata_barrier(t->comm));
    t->pool_stale = false;
    return STRATA_OK;
}

strata_status_t st_trainer_pool_push(strata_trainer_t *t)
{
    strata_trace_begin("comm", "pool_push_grads");
    strata_status_t rc = strata_pool_add(t->pool, t->pool_layout.grads,
                                         strata_model_grad_arena(t->model),
                                         strata_model_nparams(t->model), STRATA_POOL_F32);
    strata_trace_end("comm", "pool_push_grads");
    return rc;
}

strata_status_t st_trainer_pool_grad_norm(strata_trainer_t *t, double *norm)
{
    size_t b, e;
    cut(t, &b, &e);
    double ss = 0;
    ST_TRY(strata_pool_sumsq(t->pool, t->pool_layout.grads + 4 * b, e - b, &ss));
    ST_TRY(st_trainer_all_sum(t, &ss, 1));
    *norm = sqrt(ss) / t->dp; // the norm of the ranks' average
    return STRATA_OK;
}

strata_status_t st_trainer_pool_update(strata_trainer_t *t, int64_t step, float scale, float lr)
{
    const strata_train_config_t *c = &t->cfg;
    const strata_pool_optim_layout_t *L = &t->pool_layout;
    size_t b, e;
    cut(t, &b, &e);
    strata_pool_adamw_t op = {.lr = lr, .beta1 = c->optim.beta1, .beta2 = c->optim.beta2,
                              .eps = c->optim.eps, .grad_scale = scale * (1.0f / (float)t->dp),
                              .step = step};
    // One ADAMW per run of adjacent tensors with the same decay, cut to [b, e).
    size_t run_b = b, run_e = b;
    bool run_decay = false;
    strata_status_t rc = STRATA_OK;
    strata_trace_begin("comm", "pool_adamw");
    for (int ti = 0; ti <= strata_model_ntensors(t->model) && rc == STRATA_OK; ti++) {
        const strata_tensor_info_t *ts =
            ti < strata_model_ntensors(t->model) ? strata_model_tensor(t->model, ti) : NULL;
        size_t s = ts ? ST_MAX(ts->offset, b) : e, x = ts ? ST_MIN(ts->offset + ts->count, e) : e;
        if (ts && s >= x)
            continue; // outside the cut
        if (ts && s == run_e && ts->decay == run_decay) {
            run_e = x;
            continue;
        }
        if (run_e > run_b) {
            op.params = L->params + 4 * run_b;
            op.m = L->m + 4 * run_b;
            op.v = L->v + 4 * run_b;
            op.grads = L->grads + 4 * run_b;
            op.count = run_e - run_b;
            op.weight_decay = run_decay ? c->optim.weight_decay : 0.f;
            rc = strata_pool_adamw(t->pool, &op);
        }
        if (ts) {
            run_b = s;
            run_e = x;
            run_decay = ts->decay;
        }
    }
    strata_trace_end("comm", "pool_adamw");
    ST_TRY(rc);
    ST_TRY(strata_barrier(t->comm)); // every cut updated
    strata_trace_begin("comm", "pool_read_params");
    rc = strata_pool_read(t->pool, L->params, strata_model_param_arena(t->model),
                          strata_model_nparams(t->model) * sizeof(float));
    strata_trace_end("comm", "pool_read_params");
    return rc;
}

strata_status_t st_trainer_pool_clear_grads(strata_trainer_t *t)
{
    size_t b, e;
    cut(t, &b, &e);
    float *grads = strata_model_grad_arena(t->model) + b;
    memset(grads, 0, (e - b) * sizeof(float));
    ST_TRY(strata_pool_write(t->pool, t->pool_layout.grads + 4 * b, grads,
                             (e - b) * sizeof(float)));
    return strata_barrier(t->comm); // no rank adds the next step's gradients before
}

strata_status_t st_trainer_pool_pull_state(strata_trainer_t *t)
{
    if (!t->pool || t->pool_stale)
        return STRATA_OK;
    size_t b, e;
    cut(t, &b, &e);
    size_t bytes = (e - b) * sizeof(float);
    ST_TRY(strata_pool_read(t->pool, t->pool_layout.m + 4 * b, t->m + b, bytes));
    return strata_pool_read(t->pool, t->pool_layout.v + 4 * b, t->v + b, bytes);
}
