/* The forward and backward drivers of the GPT: the layer sequence of the model (embedding, blocks,
 * final norm, tied head, loss) over this rank's part of the parameters, with the parameter hooks of
 * a ZeRO engine around every segment and the tensor-parallel layers of tp.c (plain kernels at tp 1).
 * Names of trace spans: embed/blockN/head .fwd/.bwd. */
#include <string.h>

#include "base/base.h"
#include "model/gpt_internal.h"
#include "model/layers.h"
#include "strata/trace.h"

void st_model_progress(strata_gpt_t *m)
{
    if (m->progress)
        m->progress(m->progress_ctx);
    if (m->shard.tp > 1 && m->shard.ops.progress)
        m->shard.ops.progress(m->shard.ops.ctx);
}

/* ---- hooks ------------------------------------------------------------------------------------- */

static strata_status_t acquire(strata_gpt_t *m, int seg, bool bwd, const float **p)
{
    if (m->has_hooks && m->hooks.acquire) {
        const float *q = NULL;
        ST_TRY(m->hooks.acquire(m->hooks.ctx, seg, bwd, &q));
        if (!q)
            return st_error(STRATA_ERR_INTERNAL, "model: acquire hook gave no parameters for "
                            "segment %d", seg);
        *p = q;
        return STRATA_OK;
    }
    *p = m->params + m->seg_off[seg];
    return STRATA_OK;
}

static strata_status_t release(strata_gpt_t *m, int seg, bool bwd)
{
    if (m->has_hooks && m->hooks.release)
        return m->hooks.release(m->hooks.ctx, seg, bwd);
    return STRATA_OK;
}

/* The segment's gradients are final: summed over the TP group where partial, then handed over. */
static strata_status_t grad_ready(strata_gpt_t *m, int seg)
{
    ST_TRY(st_tp_reduce_replicated(m, seg));
    if (m->has_hooks && m->hooks.grad_ready)
        return m->hooks.grad_ready(m->hooks.ctx, seg);
    return STRATA_OK;
}

/* Runs `body` (a status expression) between acquire and release of `seg`; a failing body still
 * releases. */
#define WITH_SEG(m, seg, bwd, p, body)                                                             \
    do {                                                                                           \
        ST_TRY(acquire(m, seg, bwd, &p));                                                          \
        strata_status_t body_rc_ = (body);                                                         \
        strata_status_t rel_rc_ = release(m, seg, bwd);                                            \
        ST_TRY(body_rc_);                                                                          \
        ST_TRY(rel_rc_);                                                                           \
    } while (0)

/* ---- forward ----------------------------------------------------------------------------------- */

static const char *const fwd_names[] = {"block1.fwd", "block2.fwd", "block3.fwd", "block4.fwd",
                                        "block5.fwd", "block6.fwd", "block7.fwd", "block8.fwd"};
static const char *const bwd_names[] = {"block1.bwd", "block2.bwd", "block3.bwd", "block4.bwd",
                                        "block5.bwd", "block6.bwd", "block7.bwd", "block8.bwd"};
#define NAMED(arr, l, dflt) ((l) < 8 ? arr[l] : (dflt))

static strata_status_t block_forward(strata_gpt_t *m, int l, const float *p, const float *x, int B,
                                     int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    block_acts_t *a = &m->ba[l];
    int N = B * T, R = st_model_rows(m, N), C = c->d_model, Cl = m->Cl, Fl = m->Fl;
    st_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p + o->ln1w, p + o->ln1b, R, C,
                         c->ln_eps);
    ST_TRY(st_tp_column_forward(m, a->qkv, a->ln1, p + o->qkvw, p + o->qkvb, N, C, 3 * Cl));
    st_model_progress(m);
    st_attention_forward(a->atty, a->att, a->qkv, B, T, Cl, m->NHl);
    st_model_progress(m);
    ST_TRY(st_tp_row_forward(m, a->res1, a->atty, p + o->projw, p + o->projb, x, N, Cl, C));
    st_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, p + o->ln2w, p + o->ln2b, R,
                         C, c->ln_eps);
    ST_TRY(st_tp_column_forward(m, a->fch, a->ln2, p + o->fcw, p + o->fcb, N, C, Fl));
    st_model_progress(m);
    st_gelu_forward(a->fch_gelu, a->fch, (size_t)N * Fl);
    return st_tp_row_forward(m, a->res2, a->fch_gelu, p + o->fc2w, p + o->fc2b, a->res1, N, Fl, C);
}

static strata_status_t head_forward(strata_gpt_t *m, const float *p, int N)
{
    return st_tp_column_forward(m, m->logits, m->lnf, p + m->wte, NULL, N, m->cfg.d_model, m->Vl);
}

static strata_status_t final_norm_forward(strata_gpt_t *m, const float *p, const float *x, int R)
{
    st_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, p + m->lnfw, p + m->lnfb, R,
                         m->cfg.d_model, m->cfg.ln_eps);
    return STRATA_OK;
}

strata_status_t strata_model_forward(strata_gpt_t *m, const int32_t *tokens, const int32_t *targets,
                                     int B, int T, float *loss)
{
    const strata_gpt_config_t *c = &m->cfg;
    if (B < 1 || B > m->max_batch || T < 1 || T > c->max_seq)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "model: batch %d x %d outside the model's %d x %d", B, T, m->max_batch,
                        c->max_seq);
    int N = B * T, V = c->vocab, L = c->n_layer;
    if (m->shard.sp && N % m->shard.tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: sequence parallelism over %d ranks needs "
                        "the batch's %d x %d tokens divisible by %d", m->shard.tp, B, T,
                        m->shard.tp);
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return st_error(STRATA_ERR_INVALID_ARG, "model: token %d at position %d outside "
                            "[0, %d)", tokens[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            return st_error(STRATA_ERR_INVALID_ARG, "model: target %d at position %d outside "
                            "[0, %d)", targets[i], i, V);
    }
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int32_t));
    if (targets)
        memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));
    m->B = B;
    m->T = T;
    m->have_targets = false;
    m->logits_valid = false;
    const float *p = NULL;

    strata_trace_begin("compute", "embed.fwd");
    WITH_SEG(m, 0, false, p, st_tp_embed_forward(m, m->encoded, p + m->wte, p + m->wpe, B, T));
    strata_trace_end("compute", "embed.fwd");
    const float *x = m->encoded;
    for (int l = 0; l < L; l++) {
        const char *nm = NAMED(fwd_names, l, "block.fwd");
        strata_trace_begin("compute", nm);
        WITH_SEG(m, 1 + l, false, p, block_forward(m, l, p, x, B, T));
        strata_trace_end("compute", nm);
        x = m->ba[l].res2;
    }
    strata_trace_begin("compute", "head.fwd");
    WITH_SEG(m, L + 1, false, p, final_norm_forward(m, p, x, st_model_rows(m, N)));
    WITH_SEG(m, 0, false, p, head_forward(m, p, N));
    st_model_progress(m);
    m->logits_valid = true;
    if (targets) {
        float l = 0;
        ST_TRY(st_tp_xent_forward(m, &l, N));
        if (loss)
            *loss = l;
        m->have_targets = true;
    }
    strata_trace_end("compute", "head.fwd");
    return STRATA_OK;
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* dres holds d(res2) on entry and d(x) on return. */
static strata_status_t block_backward(strata_gpt_t *m, int l, const float *p, const float *x, int B,
                                      int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    block_acts_t *a = &m->ba[l];
    float *g = m->grads + m->seg_off[1 + l];
    int N = B * T, R = st_model_rows(m, N), C = c->d_model, Cl = m->Cl, Fl = m->Fl;
    // d(res2) flows unchanged into d(res1) through the residual; the MLP adds to it.
    ST_TRY(st_tp_row_backward(m, m->dfch, g + o->fc2w, g + o->fc2b, m->dres, a->fch_gelu,
                              p + o->fc2w, N, Fl, C));
    st_model_progress(m);
    st_gelu_backward(m->dfch, a->fch, m->dfch, (size_t)N * Fl);
    ST_TRY(st_tp_column_backward(m, m->dbuf, g + o->fcw, g + o->fcb, m->dfch, a->ln2, p + o->fcw,
                                 N, C, Fl));
    st_model_progress(m);
    st_layernorm_backward(m->dres, g + o->ln2w, g + o->ln2b, m->dbuf, a->res1, p + o->ln2w,
                          a->ln2_mean, a->ln2_rstd, R, C);
    // dres now holds d(res1); it flows unchanged into d(x), the attention adds to it.
    ST_TRY(st_tp_row_backward(m, m->dbuf, g + o->projw, g + o->projb, m->dres, a->atty,
                              p + o->projw, N, Cl, C));
    st_model_progress(m);
    st_attention_backward(m->dqkv, m->dscratch, m->dbuf, a->qkv, a->att, B, T, Cl, m->NHl);
    st_model_progress(m);
    ST_TRY(st_tp_column_backward(m, m->dbuf, g + o->qkvw, g + o->qkvb, m->dqkv, a->ln1,
                                 p + o->qkvw, N, C, 3 * Cl));
    st_model_progress(m);
    st_layernorm_backward(m->dres, g + o->ln1w, g + o->ln1b, m->dbuf, x, p + o->ln1w, a->ln1_mean,
                          a->ln1_rstd, R, C);
    return STRATA_OK;
}

static strata_status_t head_backward(strata_gpt_t *m, const float *p, int N)
{
    return st_tp_column_backward(m, m->dbuf, m->grads + m->wte, NULL, m->logits, m->lnf,
                                 p + m->wte, N, m->cfg.d_model, m->Vl);
}

static strata_status_t final_norm_backward(strata_gpt_t *m, const float *p, const float *x, int R)
{
    float *g = m->grads + m->seg_off[m->cfg.n_layer + 1];
    memset(m->dres, 0, (size_t)R * m->cfg.d_model * sizeof(float));
    st_layernorm_backward(m->dres, g + m->lnfw, g + m->lnfb, m->dbuf, x, p + m->lnfw, m->lnf_mean,
                          m->lnf_rstd, R, m->cfg.d_model);
    return STRATA_OK;
}

strata_status_t strata_model_backward(strata_gpt_t *m)
{
    if (!m->have_targets)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "model: backward needs a forward pass with targets first");
    const strata_gpt_config_t *c = &m->cfg;
    int B = m->B, T = m->T, N = B * T, R = st_model_rows(m, N), L = c->n_layer;
    const float *p = NULL;
    // The kernels accumulate, so the arena is zeroed once here. Writing the first contribution with
    // beta = 0 instead would not save a pass: OpenBLAS implements beta = 0 as its own zeroing pass
    // over C before the kernel, and this memset (13 MB at the benchmark size) costs ~0.2 ms of a
    // ~250 ms step.
    memset(m->grads, 0, m->P * sizeof(float));
    m->have_targets = false; // the logits buffer becomes dlogits
    m->logits_valid = false;

    strata_trace_begin("compute", "head.bwd");
    st_xent_backward(m->logits, m->logits, m->lse, m->targets, m->shard.tp_rank * m->Vl, N, m->Vl,
                     1.f / (float)N);
    WITH_SEG(m, 0, true, p, head_backward(m, p, N));
    st_model_progress(m);
    const float *xl = L > 0 ? m->ba[L - 1].res2 : m->encoded;
    WITH_SEG(m, L + 1, true, p, final_norm_backward(m, p, xl, R));
    strata_trace_end("compute", "head.bwd");
    ST_TRY(grad_ready(m, L + 1));
    for (int l = L - 1; l >= 0; l--) {
        const char *nm = NAMED(bwd_names, l, "block.bwd");
        strata_trace_begin("compute", nm);
        const float *x = l > 0 ? m->ba[l - 1].res2 : m->encoded;
        WITH_SEG(m, 1 + l, true, p, block_backward(m, l, p, x, B, T));
        strata_trace_end("compute", nm);
        ST_TRY(grad_ready(m, 1 + l));
    }
    strata_trace_begin("compute", "embed.bwd");
    WITH_SEG(m, 0, true, p,
             st_tp_embed_backward(m, m->grads + m->wte, m->grads + m->wpe, m->dres, B, T));
    strata_trace_end("compute", "embed.bwd");
    ST_TRY(grad_ready(m, 0));
    return STRATA_OK;
}
