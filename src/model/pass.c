/* The forward and backward drivers of the GPT: the layer sequence of the model (embedding, blocks,
 * final norm, tied head, loss) over this rank's part of the parameters, with the parameter hooks of
 * a ZeRO engine around every segment and the tensor-parallel layers of tp.c (plain kernels at tp 1).
 * Names of trace spans: embed/blockN/head .fwd/.bwd. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/bf16.h"
#include "model/gpt_internal.h"
#include "model/layers.h"
#include "model/parallel_range.h"
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

/* How a segment's parameters meet the bf16 products: not at all (PARAMS_PLAIN: the embeddings'
 * lookup, the norms), copied for the forward's products (PARAMS_ROUND), or that copy read again
 * by the backward's (PARAMS_REUSE): each weight is rounded once per forward, not again for its
 * input gradient. The parameters do not change between a micro-batch's forward and its backward
 * (the optimizer runs after both), so the copy the last forward made is the backward's, whichever
 * buffer an acquire hook hands out; evaluation forwards in between copy the same values again.
 * The copy is the segment's weights packed for their products (st_operand_hold_weight: the
 * layouts their kernels read fastest, rounded once from the float32 values), or, where the
 * products cannot read those, the whole segment rounded as it lies. */
typedef enum { PARAMS_PLAIN, PARAMS_ROUND, PARAMS_REUSE } params_use_t;

/* What holds a segment's parameters for the products: nothing, the flat copy, its packed weights
 * (m->w16_held, and what hold_params returns for release_params). */
enum { COPY_NONE, COPY_FLAT, COPY_PACKED };

/* The weights seg's products read whole, as B of a forward (y = x w^T) and of an input gradient
 * (dx = dy w): a block's four, the head's. Offsets relative to the segment. */
typedef struct seg_weight {
    size_t off;
    int rows, cols;
} seg_weight_t;
#define SEG_WEIGHTS 5

static int seg_weights(const strata_gpt_t *m, int seg, seg_weight_t *w)
{
    int n = 0, C = m->cfg.d_model;
    if (seg >= m->seg_block0 && seg < m->seg_block0 + m->nblocks) {
        const block_layout_t *o = &m->bl;
        w[n++] = (seg_weight_t){o->qkvw, st_qkv_width(m), C};
        w[n++] = (seg_weight_t){o->projw, C, m->Cl};
        w[n++] = (seg_weight_t){o->fcw, m->Gl, C};
        w[n++] = (seg_weight_t){o->fc2w, C, m->Fl};
    }
    if (seg == m->head_seg)
        w[n++] = (seg_weight_t){m->headw, m->Vl, C};
    return n;
}

/* m->wpk with room for every segment's packed weights; false where the products cannot read them
 * or without the memory (the flat copy serves then). */
static bool packed_ready(strata_gpt_t *m)
{
    if (m->wpk || m->wpk_none)
        return m->wpk != NULL;
    m->wpk_none = true; // unless all is ready below
    m->wpk_off = malloc((size_t)m->nseg * sizeof *m->wpk_off);
    if (!m->wpk_off)
        return false;
    size_t total = 0;
    for (int seg = 0; seg < m->nseg; seg++) {
        seg_weight_t w[SEG_WEIGHTS];
        int n = seg_weights(m, seg, w);
        m->wpk_off[seg] = total;
        for (int i = 0; i < n; i++) {
            size_t size = st_operand_weight_size(w[i].rows, w[i].cols);
            if (!size)
                return false;
            total += size;
        }
    }
    // Cache-line aligned: the packing writes, and the products read, whole lines (each weight's
    // layouts are whole 4 KB blocks, so every one starts on a line too).
    m->wpk = aligned_alloc(64, (total ? total : 32) * sizeof *m->wpk);
    m->wpk_none = m->wpk == NULL;
    return m->wpk != NULL;
}

/* Holds seg's weights (at p) with their packed copies, packed first when `pack`; false (none
 * held) where that cannot be. */
static bool hold_weights(strata_gpt_t *m, int seg, const float *p, bool pack)
{
    seg_weight_t w[SEG_WEIGHTS];
    int n = seg_weights(m, seg, w), held = 0;
    if (!n || !packed_ready(m))
        return false;
    uint16_t *at = m->wpk + m->wpk_off[seg];
    for (; held < n; held++) {
        if (!st_operand_hold_weight(p + w[held].off, w[held].rows, w[held].cols, at, pack))
            break;
        at += st_operand_weight_size(w[held].rows, w[held].cols);
    }
    if (held == n)
        return true;
    while (held-- > 0) // one could not be held: none is
        st_operand_release(p + w[held].off);
    return false;
}

/* Holds seg's parameters p for the products as `use` says; returns the copy held (COPY_*). */
static int hold_params(strata_gpt_t *m, int seg, const float *p, params_use_t use)
{
    bool round = use == PARAMS_ROUND;
    if (round && m->w16_held)
        m->w16_held[seg] = COPY_NONE; // until copied below
    if (use == PARAMS_PLAIN || m->no_copies || strata_blas_precision() != STRATA_PREC_BF16)
        return COPY_NONE;
    if (!m->w16_held && !(m->w16_held = calloc((size_t)m->nseg, sizeof *m->w16_held)))
        return COPY_NONE; // the products round the weights themselves
    int have = round ? COPY_NONE : m->w16_held[seg];
    if ((round || have == COPY_PACKED) && hold_weights(m, seg, p, round))
        have = COPY_PACKED;
    else if ((round || have == COPY_FLAT) &&
             (m->w16 || (m->w16 = malloc(m->P * sizeof *m->w16))) &&
             st_operand_hold_copy(p, m->seg_cnt[seg], m->w16 + m->seg_off[seg], round))
        have = COPY_FLAT;
    else
        have = COPY_NONE;
    if (round)
        m->w16_held[seg] = (uint8_t)have;
    return have;
}

/* Undoes hold_params, which returned `held`. */
static void release_params(const strata_gpt_t *m, int seg, const float *p, int held)
{
    if (held == COPY_FLAT)
        st_operand_release(p);
    seg_weight_t w[SEG_WEIGHTS];
    for (int i = held == COPY_PACKED ? seg_weights(m, seg, w) : 0; i-- > 0;)
        st_operand_release(p + w[i].off);
}

/* Runs `body` (a status expression) between acquire and release of `seg`, its parameters held for
 * the products as `use` says; a failing body still releases. */
#define WITH_SEG(m, seg, bwd, use, p, body)                                                        \
    do {                                                                                           \
        ST_TRY(acquire(m, seg, bwd, &p));                                                          \
        int held_ = hold_params(m, seg, p, use);                                                   \
        strata_status_t body_rc_ = (body);                                                         \
        release_params(m, seg, p, held_);                                                          \
        strata_status_t rel_rc_ = release(m, seg, bwd);                                            \
        ST_TRY(body_rc_);                                                                          \
        ST_TRY(rel_rc_);                                                                           \
    } while (0)

/* ---- activations kept at bf16 ------------------------------------------------------------------ */

/* The slot's kept activation copies (block_acts_t.h16), allocated at its first bf16 forward; false
 * at fp32 or without the memory (the products then round the activations themselves). */
static bool slot_a16(strata_gpt_t *m, slot_t *sl)
{
    if (m->no_copies || strata_blas_precision() != STRATA_PREC_BF16)
        return false;
    if (sl->a16)
        return true;
    size_t N = (size_t)m->max_batch * m->cfg.max_seq, C = m->cfg.d_model;
    // Under sp the column layers read ln1's and ln2's gathered rows, never these: none kept.
    size_t ln = m->shard.sp ? 0 : N * C;
    size_t each[ACT_KINDS] = {ln, m->cfg.parallel ? 0 : ln, N * m->Cl, N * m->Fl,
                              N * (size_t)st_qkv_width(m)};
    size_t per = 0;
    for (int k = 0; k < ACT_KINDS; k++)
        per += each[k];
    if (!(sl->a16 = malloc(per * (size_t)m->nblocks * sizeof *sl->a16)))
        return false;
    uint16_t *at = sl->a16;
    for (int l = 0; l < m->nblocks; l++)
        for (int k = 0; k < ACT_KINDS; k++) {
            sl->ba[l].h16[k] = each[k] ? at : NULL;
            at += each[k];
        }
    return true;
}

/* The attention's operand copies (qkv16 where the block keeps none of its own, and the backward's
 * dout16), allocated at the first bf16 pass; NULL at fp32, with no_copies, or without the memory
 * (each attention product then rounds its operands). One pair serves every block. */
static uint16_t *att_copies(strata_gpt_t *m)
{
    if (m->no_copies || strata_blas_precision() != STRATA_PREC_BF16)
        return NULL;
    if (!m->att16) {
        size_t N = (size_t)m->max_batch * m->cfg.max_seq;
        m->att16 = malloc(N * (size_t)(st_qkv_width(m) + m->Cl) * sizeof *m->att16);
    }
    return m->att16;
}

/* The activations a block holds for its products: released together (held_release). */
typedef struct held_acts {
    const float *x[ACT_KINDS];
} held_acts_t;

/* Holds a's activation `kind` (x, n floats) for the products: in the forward rounded into its kept
 * copy (round), in the backward that copy read again by the weight gradient's product. When the
 * forward left the copy alone holding the values (h16_only) and it cannot be held now, the values
 * are widened into x, so the products read them from x to the same bits. */
static void hold_act(strata_gpt_t *m, block_acts_t *a, held_acts_t *h, int kind, float *x,
                     size_t n, bool round)
{
    unsigned bit = 1u << kind;
    if (round)
        a->h16_ok &= ~bit, a->h16_only &= ~bit;
    bool kept = round || (a->h16_ok & bit);
    if (!a->h16[kind] || m->no_copies || !kept ||
        !st_operand_hold_copy(x, n, a->h16[kind], round)) {
        if (!round && (a->h16_only & bit)) {
            for (size_t i = 0; i < n; i++)
                x[i] = st_bf16_to_f32(a->h16[kind][i]);
            a->h16_only &= ~bit;
        }
        return;
    }
    if (round)
        a->h16_ok |= bit;
    h->x[kind] = x;
}

/* Holds a's activation `kind` (x, n floats) with its kept copy for the kernel about to compute x to
 * fill instead of x: returns the copy, or NULL when none is held (the kernel writes x then). */
static uint16_t *hold_act_out(strata_gpt_t *m, block_acts_t *a, held_acts_t *h, int kind,
                              float *x, size_t n)
{
    unsigned bit = 1u << kind;
    a->h16_ok &= ~bit;
    a->h16_only &= ~bit;
    if (!a->h16[kind] || m->no_copies || !st_operand_hold_copy(x, n, a->h16[kind], false))
        return NULL;
    a->h16_ok |= bit;
    a->h16_only |= bit;
    h->x[kind] = x;
    return a->h16[kind];
}

static void held_release(held_acts_t *h)
{
    for (int k = 0; k < ACT_KINDS; k++)
        if (h->x[k])
            st_operand_release(h->x[k]);
}

/* ---- forward ----------------------------------------------------------------------------------- */

static const char *const fwd_names[] = {"block1.fwd", "block2.fwd", "block3.fwd", "block4.fwd",
                                        "block5.fwd", "block6.fwd", "block7.fwd", "block8.fwd"};
static const char *const bwd_names[] = {"block1.bwd", "block2.bwd", "block3.bwd", "block4.bwd",
                                        "block5.bwd", "block6.bwd", "block7.bwd", "block8.bwd"};
static const char *const wgt_names[] = {"block1.wgt", "block2.wgt", "block3.wgt", "block4.wgt",
                                        "block5.wgt", "block6.wgt", "block7.wgt", "block8.wgt"};
#define NAMED(arr, l, dflt) ((l) < 8 ? arr[l] : (dflt))

/* Segment of global block l (held). */
static int block_seg(const strata_gpt_t *m, int l)
{
    return m->seg_block0 + m->blk[l];
}

/* The configured norm (LayerNorm or RMSNorm; b ST_AT's NULL for RMSNorm) of R rows of x into out;
 * with res not NULL, x += res first in the same pass (the residual add a block's output leaves to
 * its reader). */
static void norm_forward(const strata_gpt_t *m, float *out, float *mean, float *rstd, float *x,
                         const float *res, const float *w, const float *b, int R)
{
    const strata_gpt_config_t *c = &m->cfg;
    bool rms = c->norm == STRATA_GPT_NORM_RMSNORM;
    if (res && rms)
        st_add_rmsnorm_forward(out, rstd, x, res, w, R, c->d_model, c->ln_eps);
    else if (res)
        st_add_layernorm_forward(out, mean, rstd, x, res, w, b, R, c->d_model, c->ln_eps);
    else if (rms)
        st_rmsnorm_forward(out, rstd, x, w, R, c->d_model, c->ln_eps);
    else
        st_layernorm_forward(out, mean, rstd, x, w, b, R, c->d_model, c->ln_eps);
}

static void norm_backward(const strata_gpt_t *m, float *dx, float *dw, float *db, const float *dout,
                          const float *x, const float *w, const float *mean, const float *rstd,
                          int R)
{
    if (m->cfg.norm == STRATA_GPT_NORM_RMSNORM)
        st_rmsnorm_backward(dx, dw, dout, x, w, rstd, R, m->cfg.d_model);
    else
        st_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, R, m->cfg.d_model);
}

/* RoPE on the q and k heads of qkv (N rows, this rank's heads: q's then k's, adjacent), or its
 * backward on their gradients. The k/v heads are fewer under grouped-query attention. */
static void rope(const strata_gpt_t *m, float *qkv, int B, int T, bool backward)
{
    if (m->cfg.pos != STRATA_GPT_POS_ROPE)
        return;
    int hs = m->cfg.d_model / m->cfg.n_head;
    if (backward)
        st_rope_backward(qkv, st_qkv_width(m), m->rope_cos, m->rope_sin, B, T, m->NHl + m->NKVl,
                         hs);
    else
        st_rope_forward(qkv, st_qkv_width(m), m->rope_cos, m->rope_sin, B, T, m->NHl + m->NKVl,
                        hs);
}

/* The MLP's input: ln2's output, or ln1's in the parallel block. */
static const float *mlp_input(const strata_gpt_t *m, const block_acts_t *a)
{
    return m->cfg.parallel ? a->ln1 : a->ln2;
}

/* The block's input is x + xres: with xres not NULL (the previous block's res1, whose residual add
 * that block left to its reader) ln1's pass completes x in place. The block leaves res2 without
 * its residual res1 in turn, for the next norm to add: the residual add rides every norm's pass
 * (st_add_layernorm_forward). */
static strata_status_t block_forward_held(strata_gpt_t *m, block_acts_t *a, held_acts_t *h,
                                          const float *p, float *x, const float *xres, int B,
                                          int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    int N = B * T, R = st_model_rows(m, N), C = c->d_model, Cl = m->Cl, Fl = m->Fl;
    norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, xres, p + o->ln1w, ST_AT(p, o->ln1b), R);
    hold_act(m, a, h, ACT_LN1, a->ln1, (size_t)R * C, true);
    ST_TRY(st_tp_column_forward(m, a->qkv, a->ln1, p + o->qkvw, ST_AT(p, o->qkvb), N, C,
                                st_qkv_width(m), false));
    rope(m, a->qkv, B, T, false);
    st_model_progress(m);
    // qkv rounded into the block's kept copy, which the backward's products read again.
    uint16_t *q16 = a->h16[ACT_QKV] && !m->no_copies ? a->h16[ACT_QKV] : att_copies(m);
    bool kept = st_attention_forward(a->atty, a->att, a->qkv, q16, B, T, Cl, m->NHl, m->NKVl,
                                     c->window);
    if (kept && q16 == a->h16[ACT_QKV])
        a->h16_ok |= 1u << ACT_QKV;
    else
        a->h16_ok &= ~(1u << ACT_QKV);
    st_model_progress(m);
    hold_act(m, a, h, ACT_ATTY, a->atty, (size_t)N * Cl, true);
    // The parallel block's MLP reads ln1 too and adds to res1 = x + attn: no norm reads res1, so
    // it takes its residual here. Otherwise ln2's pass adds it.
    ST_TRY(st_tp_row_forward(m, a->res1, a->atty, p + o->projw, ST_AT(p, o->projb),
                             c->parallel ? x : NULL, N, Cl, C));
    if (!c->parallel) {
        norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, x, p + o->ln2w,
                     ST_AT(p, o->ln2b), R);
        hold_act(m, a, h, ACT_LN2, a->ln2, (size_t)R * C, true);
    }
    // GeLU with a bias: the bias rides the GeLU's pass (st_bias_gelu_forward), not the product's.
    const float *fcb = ST_AT(p, o->fcb);
    bool fused = c->mlp != STRATA_GPT_MLP_SWIGLU && fcb;
    // The parallel block's MLP reads ln1 as the attention did: under sp its rows are gathered
    // already (the attention's and the row layer's collectives use other buffers).
    ST_TRY(st_tp_column_forward(m, a->fch, mlp_input(m, a), p + o->fcw, fused ? NULL : fcb, N, C,
                                m->Gl, c->parallel));
    st_model_progress(m);
    // At bf16 the activation's kernel rounds it straight into its kept copy, which the row layer's
    // product reads: no float32 values are written, and no pass rounds them.
    uint16_t *a16 = hold_act_out(m, a, h, ACT_MLP, a->fch_gelu, (size_t)N * Fl);
    if (c->mlp == STRATA_GPT_MLP_SWIGLU)
        st_swiglu_forward(a->fch_gelu, a16, a->fch, N, Fl);
    else
        st_bias_gelu_forward(a->fch, a->fch_gelu, a16, fused ? fcb : NULL, N, Fl);
    return st_tp_row_forward(m, a->res2, a->fch_gelu, p + o->fc2w, ST_AT(p, o->fc2b), NULL, N, Fl,
                             C);
}

/* block_forward_held with every activation it held released, whatever the outcome. */
static strata_status_t block_forward(strata_gpt_t *m, block_acts_t *a, const float *p, float *x,
                                     const float *xres, int B, int T)
{
    held_acts_t h = {0};
    strata_status_t rc = block_forward_held(m, a, &h, p, x, xres, B, T);
    held_release(&h);
    return rc;
}

static strata_status_t final_norm_forward(strata_gpt_t *m, slot_t *sl, const float *p, float *x,
                                          const float *xres, int R)
{
    norm_forward(m, sl->lnf, sl->lnf_mean, sl->lnf_rstd, x, xres, p + m->lnfw, ST_AT(p, m->lnfb),
                 R);
    return STRATA_OK;
}

static strata_status_t head_forward(strata_gpt_t *m, slot_t *sl, const float *p, int N)
{
    return st_tp_column_forward(m, sl->logits, sl->lnf, p + m->headw, NULL, N, m->cfg.d_model, m->Vl,
                                false);
}

static strata_status_t check_slot(const strata_gpt_t *m, int slot)
{
    if (slot < 0 || slot >= m->nslots)
        return st_error(STRATA_ERR_INVALID_ARG, "model: activation slot %d outside [0, %d)", slot,
                        m->nslots);
    return STRATA_OK;
}

strata_status_t strata_model_forward_chunk(strata_gpt_t *m, int chunk, int slot,
                                           const int32_t *tokens, const float *input,
                                           const int32_t *targets, int B, int T, float *loss)
{
    const strata_gpt_config_t *c = &m->cfg;
    ST_TRY(check_slot(m, slot));
    if (chunk < 0 || chunk >= m->ch.n)
        return st_error(STRATA_ERR_INVALID_ARG, "model: chunk %d outside the %d held", chunk,
                        m->ch.n);
    int l0 = m->ch.begin[chunk], l1 = m->ch.end[chunk];
    bool embed = l0 == 0, head = l1 == c->n_layer;
    if (B < 1 || B > m->max_batch || T < 1 || T > c->max_seq)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "model: batch %d x %d outside the model's %d x %d", B, T, m->max_batch,
                        c->max_seq);
    int N = B * T, V = c->vocab, R = st_model_rows(m, N), C = c->d_model;
    if (m->shard.sp && N % m->shard.tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: sequence parallelism over %d ranks needs "
                        "the batch's %d x %d tokens divisible by %d", m->shard.tp, B, T,
                        m->shard.tp);
    if (embed ? !tokens : !input)
        return st_error(STRATA_ERR_INVALID_ARG, "model: the chunk of layers [%d, %d) reads %s", l0,
                        l1, embed ? "tokens" : "the previous chunk's activations");
    slot_t *sl = &m->slot[slot];
    sl->chunk = chunk;
    for (int i = 0; i < N; i++) {
        if (tokens && (tokens[i] < 0 || tokens[i] >= V))
            return st_error(STRATA_ERR_INVALID_ARG, "model: token %d at position %d outside "
                            "[0, %d)", tokens[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            return st_error(STRATA_ERR_INVALID_ARG, "model: target %d at position %d outside "
                            "[0, %d)", targets[i], i, V);
    }
    if (tokens)
        memcpy(sl->tokens, tokens, (size_t)N * sizeof(int32_t));
    if (targets)
        memcpy(sl->targets, targets, (size_t)N * sizeof(int32_t));
    sl->B = B;
    sl->T = T;
    sl->have_targets = false;
    sl->logits_valid = false;
    const float *p = NULL;

    if (embed) {
        strata_trace_begin("compute", "embed.fwd");
        WITH_SEG(m, 0, false, PARAMS_PLAIN, p,
                 st_tp_embed_forward(m, sl->encoded, sl->tokens, p + m->wte, ST_AT(p, m->wpe), B, T));
        strata_trace_end("compute", "embed.fwd");
    } else {
        memcpy(sl->encoded, input, (size_t)R * C * sizeof(float));
    }
    slot_a16(m, sl);
    float *x = sl->encoded;
    const float *xres = NULL; // the residual x still lacks (block_forward)
    for (int l = l0; l < l1; l++) {
        const char *nm = NAMED(fwd_names, l, "block.fwd");
        block_acts_t *a = &sl->ba[m->blk[l]];
        strata_trace_begin("compute", nm);
        WITH_SEG(m, block_seg(m, l), false, PARAMS_ROUND, p,
                 block_forward(m, a, p, x, xres, B, T));
        strata_trace_end("compute", nm);
        x = a->res2;
        xres = a->res1;
    }
    if (!head) { // the chunk's output, whole for the next stage
        if (xres)
            st_add_inplace(x, xres, (size_t)R * C);
        return STRATA_OK;
    }
    strata_trace_begin("compute", "head.fwd");
    WITH_SEG(m, m->seg_final, false, PARAMS_PLAIN, p, final_norm_forward(m, sl, p, x, xres, R));
    WITH_SEG(m, m->head_seg, false, PARAMS_ROUND, p, head_forward(m, sl, p, N));
    st_model_progress(m);
    sl->logits_valid = true;
    if (targets) {
        float l = 0;
        ST_TRY(st_tp_xent_forward(m, sl, &l, N));
        if (loss)
            *loss = l;
        sl->have_targets = true;
    }
    strata_trace_end("compute", "head.fwd");
    return STRATA_OK;
}

const float *strata_model_chunk_output(const strata_gpt_t *m, int slot)
{
    if (slot < 0 || slot >= m->nslots)
        return NULL;
    const slot_t *sl = &m->slot[slot];
    int end = m->ch.end[sl->chunk];
    return end == m->cfg.n_layer ? NULL : sl->ba[m->blk[end - 1]].res2;
}

strata_status_t strata_model_forward(strata_gpt_t *m, const int32_t *tokens, const int32_t *targets,
                                     int B, int T, float *loss)
{
    if (m->ch.n != 1 || !m->has_embed || !m->has_head)
        return st_error(STRATA_ERR_INVALID_ARG, "model: a model of pipeline chunks runs "
                        "strata_model_forward_chunk");
    return strata_model_forward_chunk(m, 0, 0, tokens, NULL, targets, B, T, loss);
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* dres holds d(res2) on entry and d(x) on return. With split_backward the linear layers' weight
 * gradients are left for block_weights, their output gradients kept in the slot. */
static strata_status_t block_backward(strata_gpt_t *m, block_acts_t *a, float *g, const float *p,
                                      const float *x, int B, int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    bool split = m->shard.split_backward;
    int N = B * T, R = st_model_rows(m, N), C = c->d_model, Cl = m->Cl, Fl = m->Fl, Gl = m->Gl;
    // d(res2) flows unchanged into d(res1) through the residual; the MLP adds to it.
    ST_TRY(st_tp_row_backward(m, m->dact, split ? NULL : g + o->fc2w, ST_AT(g, o->fc2b), m->dres,
                              a->fch_gelu, p + o->fc2w, N, Fl, C, a->dfc2));
    st_model_progress(m);
    // GeLU with a bias: its gradient is summed in the GeLU's pass (st_gelu_bias_backward).
    float *dfcb = ST_AT(g, o->fcb);
    bool fused = c->mlp != STRATA_GPT_MLP_SWIGLU && dfcb;
    if (c->mlp == STRATA_GPT_MLP_SWIGLU)
        st_swiglu_backward(m->dfch, a->fch, m->dact, N, Fl);
    else // a->fch holds GeLU's derivative (st_bias_gelu_forward)
        st_gelu_bias_backward(m->dfch, dfcb, a->fch, m->dact, N, Fl);
    if (split)
        memcpy(a->dfc, m->dfch, (size_t)N * Gl * sizeof(float));
    // The parallel block keeps the MLP's d(ln1) for after the attention's; else d(ln2) -> dres.
    float *dmlp = c->parallel ? m->dln : m->dbuf;
    ST_TRY(st_tp_column_backward(m, dmlp, split ? NULL : g + o->fcw, fused ? NULL : dfcb, m->dfch,
                                 mlp_input(m, a), p + o->fcw, N, C, Gl, false));
    st_model_progress(m);
    if (!c->parallel)
        norm_backward(m, m->dres, g + o->ln2w, ST_AT(g, o->ln2b), m->dbuf, a->res1, p + o->ln2w,
                      a->ln2_mean, a->ln2_rstd, R);
    // dres now holds d(res1); it flows unchanged into d(x), the attention adds to it.
    ST_TRY(st_tp_row_backward(m, m->dbuf, split ? NULL : g + o->projw, ST_AT(g, o->projb), m->dres,
                              a->atty, p + o->projw, N, Cl, C, a->dproj));
    st_model_progress(m);
    uint16_t *shared16 = att_copies(m);
    uint16_t *d16 = shared16 ? shared16 + (size_t)N * st_qkv_width(m) : NULL;
    bool kept = (a->h16_ok & (1u << ACT_QKV)) && !m->no_copies;
    st_attention_backward(m->dqkv, m->dscratch, m->nscratch, m->dbuf, a->qkv, a->att,
                          kept ? a->h16[ACT_QKV] : shared16, kept, d16, B, T, Cl, m->NHl, m->NKVl,
                          c->window);
    rope(m, m->dqkv, B, T, true);
    st_model_progress(m);
    if (split)
        memcpy(a->dqkv, m->dqkv, (size_t)N * st_qkv_width(m) * sizeof(float));
    // The parallel block: the MLP's weight gradient above re-gathered ln1 already under sp.
    ST_TRY(st_tp_column_backward(m, m->dbuf, split ? NULL : g + o->qkvw, ST_AT(g, o->qkvb), m->dqkv,
                                 a->ln1, p + o->qkvw, N, C, st_qkv_width(m), c->parallel));
    st_model_progress(m);
    if (c->parallel)
        st_add_inplace(m->dbuf, m->dln, (size_t)R * C);
    norm_backward(m, m->dres, g + o->ln1w, ST_AT(g, o->ln1b), m->dbuf, x, p + o->ln1w, a->ln1_mean,
                  a->ln1_rstd, R);
    return STRATA_OK;
}

/* The kept copies of a's activations held for the weight gradients' products (none kept: none
 * held, the products round them). */
static void hold_kept(strata_gpt_t *m, block_acts_t *a, held_acts_t *h, int B, int T)
{
    int N = B * T, R = st_model_rows(m, N), C = m->cfg.d_model;
    hold_act(m, a, h, ACT_LN1, a->ln1, (size_t)R * C, false);
    hold_act(m, a, h, ACT_LN2, a->ln2, (size_t)R * C, false); // none kept in the parallel block
    hold_act(m, a, h, ACT_ATTY, a->atty, (size_t)N * m->Cl, false);
    hold_act(m, a, h, ACT_MLP, a->fch_gelu, (size_t)N * m->Fl, false);
}

/* The weight gradients' products of segment seg's block, about to run, overwrite the gradients
 * while they are fresh (zeroed and unwritten: not read back, a twentieth of such a product's time
 * at bf16); after them, and for every other product, they add (wgrad_done). */
static void wgrad_begin(strata_gpt_t *m, int seg)
{
    m->wgrad_beta = m->wgrad_fresh[seg] ? 0.f : 1.f;
}

static void wgrad_done(strata_gpt_t *m, int seg)
{
    m->wgrad_fresh[seg] = false;
    m->wgrad_beta = 1.f;
}

/* block_backward of segment seg's block with the kept activations held. */
static strata_status_t block_backward_kept(strata_gpt_t *m, int seg, block_acts_t *a,
                                           const float *p, const float *x, int B, int T)
{
    held_acts_t h = {0};
    hold_kept(m, a, &h, B, T);
    bool weights = !m->shard.split_backward; // else block_weights computes them later
    if (weights)
        wgrad_begin(m, seg);
    strata_status_t rc = block_backward(m, a, m->grads + m->seg_off[seg], p, x, B, T);
    if (weights)
        wgrad_done(m, seg);
    held_release(&h);
    return rc;
}

/* block_weights' products. */
static strata_status_t block_weights_held(strata_gpt_t *m, block_acts_t *a, float *g, int B, int T)
{
    const block_layout_t *o = &m->bl;
    int N = B * T, C = m->cfg.d_model, Cl = m->Cl, Fl = m->Fl;
    st_matmul_backward_weight(g + o->fc2w, NULL, a->dfc2, a->fch_gelu, N, Fl, C, m->wgrad_beta);
    // GeLU with a bias: block_backward summed its gradient already (st_gelu_bias_backward).
    float *fcb_grad = m->cfg.mlp == STRATA_GPT_MLP_SWIGLU ? ST_AT(g, o->fcb) : NULL;
    ST_TRY(st_tp_column_weight(m, g + o->fcw, fcb_grad, a->dfc, mlp_input(m, a), N, C,
                               m->Gl, false));
    st_model_progress(m);
    st_matmul_backward_weight(g + o->projw, NULL, a->dproj, a->atty, N, Cl, C, m->wgrad_beta);
    // The parallel block's ln1, re-gathered for the MLP's weight gradient above (sp).
    return st_tp_column_weight(m, g + o->qkvw, ST_AT(g, o->qkvb), a->dqkv, a->ln1, N, C,
                               st_qkv_width(m), m->cfg.parallel);
}

/* The weight gradients block_backward left (split_backward) for segment seg's block, with the kept
 * activations held. */
static strata_status_t block_weights(strata_gpt_t *m, int seg, block_acts_t *a, int B, int T)
{
    held_acts_t h = {0};
    hold_kept(m, a, &h, B, T);
    wgrad_begin(m, seg);
    strata_status_t rc = block_weights_held(m, a, m->grads + m->seg_off[seg], B, T);
    wgrad_done(m, seg);
    held_release(&h);
    return rc;
}

static strata_status_t head_backward(strata_gpt_t *m, slot_t *sl, const float *p, int N)
{
    return st_tp_column_backward(m, m->dbuf, m->grads + m->seg_off[m->head_seg] + m->headw, NULL,
                                 sl->logits, sl->lnf, p + m->headw, N, m->cfg.d_model, m->Vl,
                                 false);
}

/* head_backward between its segment's acquire and release. */
static strata_status_t head_backward_seg(strata_gpt_t *m, slot_t *sl, int N)
{
    const float *p = NULL;
    WITH_SEG(m, m->head_seg, true, PARAMS_REUSE, p, head_backward(m, sl, p, N));
    return STRATA_OK;
}

static strata_status_t final_norm_backward(strata_gpt_t *m, slot_t *sl, const float *p,
                                           const float *x, int R)
{
    float *g = m->grads + m->seg_off[m->seg_final];
    memset(m->dres, 0, (size_t)R * m->cfg.d_model * sizeof(float));
    norm_backward(m, m->dres, g + m->lnfw, ST_AT(g, m->lnfb), m->dbuf, x, p + m->lnfw, sl->lnf_mean,
                  sl->lnf_rstd, R);
    return STRATA_OK;
}

/* The backward of slot's micro-batch, adding to the gradients; grad_ready per segment when
 * `ready` (the whole-model backward: one micro-batch per step). */
static strata_status_t backward(strata_gpt_t *m, int slot, const float *dout, float loss_scale,
                                bool ready)
{
    slot_t *sl = &m->slot[slot];
    int B = sl->B, T = sl->T, N = B * T, R = st_model_rows(m, N), C = m->cfg.d_model;
    int l0 = m->ch.begin[sl->chunk], l1 = m->ch.end[sl->chunk];
    const float *p = NULL;
    if (l1 == m->cfg.n_layer) {
        if (!sl->have_targets)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "model: backward needs a forward pass with targets first");
        sl->have_targets = false; // the logits buffer becomes dlogits
        sl->logits_valid = false;
        strata_trace_begin("compute", "head.bwd");
        // The head's two products read dlogits at bf16 from the copy the cross-entropy's pass
        // rounds (NULL in fp32).
        uint16_t *dh = st_operand_hold(sl->logits, N, m->Vl, m->Vl, false);
        st_xent_backward(sl->logits, dh, sl->logits, sl->lse, sl->targets,
                         m->shard.tp_rank * m->Vl, N, m->Vl, loss_scale / (float)N);
        strata_status_t head_rc = head_backward_seg(m, sl, N);
        st_operand_release(sl->logits); // whatever the outcome: a stale copy must not stay held
        ST_TRY(head_rc);
        st_model_progress(m);
        const float *xl = sl->ba[m->blk[l1 - 1]].res2;
        WITH_SEG(m, m->seg_final, true, PARAMS_PLAIN, p, final_norm_backward(m, sl, p, xl, R));
        strata_trace_end("compute", "head.bwd");
        if (ready)
            ST_TRY(grad_ready(m, m->seg_final));
    } else {
        if (!dout)
            return st_error(STRATA_ERR_INVALID_ARG, "model: the chunk of layers [%d, %d) needs "
                            "its output's gradient", l0, l1);
        memcpy(m->dres, dout, (size_t)R * C * sizeof(float));
    }
    for (int l = l1 - 1; l >= l0; l--) {
        const char *nm = NAMED(bwd_names, l, "block.bwd");
        int li = m->blk[l], seg = block_seg(m, l);
        strata_trace_begin("compute", nm);
        const float *x = l > l0 ? sl->ba[li - 1].res2 : sl->encoded;
        WITH_SEG(m, seg, true, PARAMS_REUSE, p,
                 block_backward_kept(m, seg, &sl->ba[li], p, x, B, T));
        strata_trace_end("compute", nm);
        if (ready)
            ST_TRY(grad_ready(m, seg));
    }
    sl->wgt_pending = m->shard.split_backward;
    if (l0 != 0)
        return STRATA_OK; // dres: the gradient of the chunk's input
    strata_trace_begin("compute", "embed.bwd");
    WITH_SEG(m, 0, true, PARAMS_PLAIN, p,
             st_tp_embed_backward(m, m->grads + m->wte, ST_AT(m->grads, m->wpe), m->dres,
                                  sl->tokens, B, T));
    strata_trace_end("compute", "embed.bwd");
    if (ready)
        ST_TRY(grad_ready(m, 0));
    return STRATA_OK;
}

strata_status_t strata_model_backward_chunk(strata_gpt_t *m, int slot, const float *dout,
                                            float loss_scale)
{
    ST_TRY(check_slot(m, slot));
    return backward(m, slot, dout, loss_scale, false);
}

const float *strata_model_chunk_input_grad(const strata_gpt_t *m)
{
    return m->dres; // after the first chunk's backward: the embedding's output gradient
}

strata_status_t strata_model_backward_weights(strata_gpt_t *m, int slot)
{
    ST_TRY(check_slot(m, slot));
    slot_t *sl = &m->slot[slot];
    if (!sl->wgt_pending)
        return st_error(STRATA_ERR_INVALID_ARG, "model: slot %d has no weight gradient pending "
                        "(split backward: after its backward, once)", slot);
    const float *p = NULL;
    for (int l = m->ch.end[sl->chunk] - 1; l >= m->ch.begin[sl->chunk]; l--) {
        int li = m->blk[l], seg = block_seg(m, l);
        const char *nm = NAMED(wgt_names, l, "block.wgt");
        strata_trace_begin("compute", nm);
        WITH_SEG(m, seg, true, PARAMS_PLAIN, p,
                 block_weights(m, seg, &sl->ba[li], sl->B, sl->T));
        strata_trace_end("compute", nm);
    }
    (void)p;
    sl->wgt_pending = false;
    return STRATA_OK;
}

/* Clears the gradients but for a block's four weights (seg_weights, in arena order): the first
 * product to reach those after this overwrites them (wgrad_begin), so clearing them first would
 * be a pass over most of the arena for nothing (0.34% of the 85M bf16 step at 2 threads). */
void strata_model_zero_grads(strata_gpt_t *m)
{
    for (int seg = 0; seg < m->nseg; seg++) {
        float *g = m->grads + m->seg_off[seg];
        size_t at = 0;
        seg_weight_t w[SEG_WEIGHTS];
        bool block = seg >= m->seg_block0 && seg < m->seg_block0 + m->nblocks;
        for (int i = 0, n = block ? seg_weights(m, seg, w) : 0; i < n; i++) {
            st_parallel_zero(g + at, w[i].off - at);
            at = w[i].off + (size_t)w[i].rows * (size_t)w[i].cols;
        }
        st_parallel_zero(g + at, m->seg_cnt[seg] - at);
        m->wgrad_fresh[seg] = true;
    }
}

strata_status_t strata_model_grads_done(strata_gpt_t *m)
{
    for (int seg = m->nseg - 1; seg >= 0; seg--)
        ST_TRY(grad_ready(m, seg));
    return STRATA_OK;
}

strata_status_t strata_model_backward(strata_gpt_t *m)
{
    if (m->ch.n != 1 || !m->has_embed || !m->has_head || m->shard.split_backward)
        return st_error(STRATA_ERR_INVALID_ARG, "model: a model of pipeline chunks or with a split "
                        "backward runs strata_model_backward_chunk");
    // The kernels accumulate, so the arena is zeroed once here; the blocks' weight gradients'
    // products overwrite theirs instead of adding (wgrad_begin): reading them back costs more.
    strata_model_zero_grads(m);
    return backward(m, 0, NULL, 1.f, true);
}
