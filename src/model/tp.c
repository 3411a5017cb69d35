/* The tensor-parallel layers of the GPT (Megatron-LM): column- and row-parallel linear layers, the
 * vocabulary-parallel embedding and cross-entropy, each with the collectives over the TP group that
 * its cut needs, and sequence parallelism's gathers and scatters of the residual stream. At tp 1
 * every function is the plain kernel with no collective.
 *
 * Overlap. A collective over B*T rows is cut in K row blocks (st_tp_chunks): the product of block
 * k+1 computes while block k's collective is in flight; backward, the input gradient's collective
 * runs while the weight gradient's product computes (and, with sp, the re-gather of the layer's
 * input while the input gradient's product computes), as Megatron-LM's asynchronous TP does.
 *
 * Row blocks under sp. Block k holds rows [k N/K, (k+1) N/K); rank r's share of it is the r-th of
 * its tp equal pieces, so rank r's residual stream is those pieces of every block, in block order.
 * Every row-wise layer (LayerNorm, bias, residual add) is indifferent to which rows a rank holds,
 * and every gather and scatter below uses the same blocks, so the layout is consistent. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "model/gpt_internal.h"
#include "model/layers.h"

int st_tp_chunks(const strata_gpt_t *m, int N)
{
    if (m->shard.tp <= 1)
        return 1;
    int want = m->shard.chunks > 0 ? m->shard.chunks : 2, unit = m->shard.sp ? m->shard.tp : 1;
    for (int k = want; k > 1; k--)
        if (N % (k * unit) == 0)
            return k;
    return 1;
}

static strata_status_t start(strata_gpt_t *m, strata_tp_coll_t coll, const float *in, float *out,
                             size_t n, void **h)
{
    return m->shard.ops.start(m->shard.ops.ctx, coll, in, out, n, h);
}

/* Waits for every handle of hs[0..k) (all of them, even after an error: each is waited on once). */
static strata_status_t wait_all(strata_gpt_t *m, void **hs, int k)
{
    strata_status_t rc = STRATA_OK;
    for (int i = 0; i < k; i++) {
        if (!hs[i])
            continue;
        strata_status_t r = m->shard.ops.wait(m->shard.ops.ctx, hs[i]);
        hs[i] = NULL;
        if (rc == STRATA_OK)
            rc = r;
    }
    return rc;
}

/* Starts, block by block, the gather of the residual-stream rows x[R, C] into full[N, C] (sp). */
static strata_status_t gather_start(strata_gpt_t *m, const float *x, float *full, int N, int C,
                                    void **hs, int K)
{
    size_t piece = (size_t)(N / K / m->shard.tp) * C, block = (size_t)(N / K) * C;
    for (int k = 0; k < K; k++)
        ST_TRY(start(m, STRATA_TP_ALLGATHER, x + k * piece, full + k * block, piece, &hs[k]));
    return STRATA_OK;
}

/* Gathers the residual-stream rows x[R, C] into full[N, C] and waits (sp); returns full. */
static strata_status_t gather_rows(strata_gpt_t *m, const float *x, float *full, int N, int C)
{
    int K = st_tp_chunks(m, N);
    void *hs[ST_TP_MAX_CHUNKS] = {0};
    strata_status_t rc = gather_start(m, x, full, N, C, hs, K);
    strata_status_t r2 = wait_all(m, hs, K);
    return rc < 0 ? rc : r2;
}

/* ---- column-parallel ---------------------------------------------------------------------------- */

strata_status_t st_tp_column_forward(strata_gpt_t *m, float *y, const float *x, const float *w,
                                     const float *bias, int N, int C, int OC, bool gathered)
{
    if (!m->shard.sp) { // x holds every row already
        st_matmul_forward(y, x, w, bias, N, C, OC);
        return STRATA_OK;
    }
    int K = st_tp_chunks(m, N), Nb = N / K;
    void *hs[ST_TP_MAX_CHUNKS] = {0};
    strata_status_t rc = gathered ? STRATA_OK : gather_start(m, x, m->full, N, C, hs, K);
    for (int k = 0; k < K && rc == STRATA_OK; k++) {
        rc = wait_all(m, &hs[k], 1);
        if (rc == STRATA_OK)
            st_matmul_forward(y + (size_t)k * Nb * OC, m->full + (size_t)k * Nb * C, w, bias, Nb, C,
                              OC);
    }
    strata_status_t rc2 = wait_all(m, hs, K);
    return rc < 0 ? rc : rc2;
}

/* st_tp_column_backward's products and collectives (dy held by it at bf16). */
static strata_status_t column_backward(strata_gpt_t *m, float *dx, float *dw, float *dbias,
                                       const float *dy, const float *x, const float *w, int N,
                                       int C, int OC, bool gathered)
{
    if (m->shard.tp <= 1) {
        st_matmul_backward_input(dx, dy, w, N, C, OC);
        if (dw)
            st_matmul_backward_weight(dw, dbias, dy, x, N, C, OC, m->wgrad_beta);
        return STRATA_OK;
    }
    int K = st_tp_chunks(m, N), Nb = N / K;
    void *gh[ST_TP_MAX_CHUNKS] = {0}, *rh[ST_TP_MAX_CHUNKS] = {0};
    strata_status_t rc = STRATA_OK;
    const float *xf = x;
    if (m->shard.sp && dw) { // the input again, gathered while the input gradient computes
        if (!gathered)
            rc = gather_start(m, x, m->full, N, C, gh, K);
        xf = m->full;
    }
    // The input gradient block by block, each block's sum started as soon as it is computed.
    float *part = m->shard.sp ? m->dpart : dx;
    size_t piece = (size_t)(Nb / m->shard.tp) * C;
    for (int k = 0; k < K && rc == STRATA_OK; k++) {
        float *pk = part + (size_t)k * Nb * C;
        st_matmul_backward_input(pk, dy + (size_t)k * Nb * OC, w, Nb, C, OC);
        if (m->shard.sp)
            rc = start(m, STRATA_TP_REDUCE_SCATTER, pk, dx + k * piece, piece, &rh[k]);
        else
            rc = start(m, STRATA_TP_ALLREDUCE_SUM, pk, pk, (size_t)Nb * C, &rh[k]);
    }
    if (rc == STRATA_OK)
        rc = wait_all(m, gh, K);
    if (rc == STRATA_OK && dw) // the weight gradient while the input gradient's sums run
        st_matmul_backward_weight(dw, dbias, dy, xf, N, C, OC, m->wgrad_beta);
    strata_status_t r1 = wait_all(m, gh, K), r2 = wait_all(m, rh, K);
    return rc < 0 ? rc : r1 < 0 ? r1 : r2;
}

strata_status_t st_tp_column_backward(strata_gpt_t *m, float *dx, float *dw, float *dbias,
                                      const float *dy, const float *x, const float *w, int N,
                                      int C, int OC, bool gathered)
{
    // dy feeds both products: rounded once at bf16 (a no-op in fp32).
    if (dw)
        st_operand_hold(dy, N, OC, OC, true);
    strata_status_t rc = column_backward(m, dx, dw, dbias, dy, x, w, N, C, OC, gathered);
    if (dw)
        st_operand_release(dy);
    return rc;
}

strata_status_t st_tp_column_weight(strata_gpt_t *m, float *dw, float *dbias, const float *dy,
                                    const float *x, int N, int C, int OC, bool gathered)
{
    const float *xf = x;
    if (m->shard.sp) { // the layer's input, gathered again
        if (!gathered)
            ST_TRY(gather_rows(m, x, m->full, N, C));
        xf = m->full;
    }
    st_matmul_backward_weight(dw, dbias, dy, xf, N, C, OC, m->wgrad_beta);
    return STRATA_OK;
}

/* ---- row-parallel -------------------------------------------------------------------------------- */

/* y[R, OC] += bias (each row) and residual. */
static void bias_residual(float *y, const float *bias, const float *residual, int R, int OC)
{
    for (int n = 0; n < R; n++) {
        float *row = y + (size_t)n * OC;
        if (bias)
            st_add_inplace(row, bias, (size_t)OC);
        if (residual)
            st_add_inplace(row, residual + (size_t)n * OC, (size_t)OC);
    }
}

strata_status_t st_tp_row_forward(strata_gpt_t *m, float *y, const float *a, const float *w,
                                  const float *bias, const float *residual, int N, int K, int OC)
{
    if (m->shard.tp <= 1) {
        st_matmul_forward(y, a, w, bias, N, K, OC);
        if (residual)
            st_add_inplace(y, residual, (size_t)N * OC);
        return STRATA_OK;
    }
    int nb = st_tp_chunks(m, N), Nb = N / nb;
    void *hs[ST_TP_MAX_CHUNKS] = {0};
    float *part = m->shard.sp ? m->dpart : y;
    size_t piece = (size_t)(Nb / m->shard.tp) * OC;
    strata_status_t rc = STRATA_OK;
    for (int k = 0; k < nb && rc == STRATA_OK; k++) {
        float *pk = part + (size_t)k * Nb * OC;
        st_matmul_forward(pk, a + (size_t)k * Nb * K, w, NULL, Nb, K, OC);
        if (m->shard.sp)
            rc = start(m, STRATA_TP_REDUCE_SCATTER, pk, y + k * piece, piece, &hs[k]);
        else
            rc = start(m, STRATA_TP_ALLREDUCE_SUM, pk, pk, (size_t)Nb * OC, &hs[k]);
    }
    strata_status_t r2 = wait_all(m, hs, nb);
    ST_TRY(rc);
    ST_TRY(r2);
    bias_residual(y, bias, residual, st_model_rows(m, N), OC);
    return STRATA_OK;
}

strata_status_t st_tp_row_backward(strata_gpt_t *m, float *da, float *dw, float *dbias,
                                   const float *dy, const float *a, const float *w, int N, int K,
                                   int OC, float *keep)
{
    const float *dyf = dy;
    if (m->shard.sp) { // the output gradient of every row
        ST_TRY(gather_rows(m, dy, m->dfull, N, OC));
        dyf = m->dfull;
    }
    // da[N, K] = dy w, with w [OC, K]: the input gradient of y = a w^T. With dw, dy feeds both
    // products: rounded once at bf16.
    if (dw)
        st_operand_hold(dyf, N, OC, OC, true);
    st_matmul_backward_input(da, dyf, w, N, K, OC);
    if (dw) {
        st_matmul_backward_weight(dw, NULL, dyf, a, N, K, OC, m->wgrad_beta);
        st_operand_release(dyf);
    } else
        memcpy(keep, dyf, (size_t)N * OC * sizeof(float));
    if (dbias) // the bias was added on this rank's rows only
        st_bias_backward(dbias, dy, st_model_rows(m, N), OC);
    return STRATA_OK;
}

/* ---- vocabulary-parallel embedding ---------------------------------------------------------------- */

strata_status_t st_tp_embed_forward(strata_gpt_t *m, float *out, const int32_t *tokens,
                                    const float *wte, const float *wpe, int B, int T)
{
    int C = m->cfg.d_model, N = B * T, v0 = m->shard.tp_rank * m->Vl;
    if (m->shard.tp <= 1) {
        st_encoder_forward(out, tokens, wte, 0, m->Vl, wpe, B, T, C);
        return STRATA_OK;
    }
    // Each rank embeds the tokens of its slice (zeros for the others), one rank adds the positions,
    // and the sum over the group is the embedding: the same pattern as a row-parallel output.
    float *part = m->shard.sp ? m->dpart : out;
    st_encoder_forward(part, tokens, wte, v0, v0 + m->Vl, m->shard.tp_rank == 0 ? wpe : NULL, B, T,
                       C);
    int nb = st_tp_chunks(m, N), Nb = N / nb;
    size_t piece = (size_t)(Nb / m->shard.tp) * C;
    void *hs[ST_TP_MAX_CHUNKS] = {0};
    strata_status_t rc = STRATA_OK;
    for (int k = 0; k < nb && rc == STRATA_OK; k++) {
        float *pk = part + (size_t)k * Nb * C;
        if (m->shard.sp)
            rc = start(m, STRATA_TP_REDUCE_SCATTER, pk, out + k * piece, piece, &hs[k]);
        else
            rc = start(m, STRATA_TP_ALLREDUCE_SUM, pk, pk, (size_t)Nb * C, &hs[k]);
    }
    strata_status_t r2 = wait_all(m, hs, nb);
    return rc < 0 ? rc : r2;
}

strata_status_t st_tp_embed_backward(strata_gpt_t *m, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T)
{
    int C = m->cfg.d_model, N = B * T, v0 = m->shard.tp_rank * m->Vl;
    const float *d = dout;
    if (m->shard.sp) { // every row's gradient: the slice's tokens may be anywhere
        ST_TRY(gather_rows(m, dout, m->dfull, N, C));
        d = m->dfull;
    }
    // wpe's gradient comes from every row on every rank: the same everywhere, nothing to sum.
    st_encoder_backward(dwte, v0, v0 + m->Vl, dwpe, d, tokens, B, T, C);
    return STRATA_OK;
}

/* ---- vocabulary-parallel cross-entropy ------------------------------------------------------------- */

strata_status_t st_tp_xent_forward(strata_gpt_t *m, slot_t *sl, float *loss, int N)
{
    if (m->shard.tp <= 1) {
        *loss = st_xent_forward(sl->lse, sl->logits, sl->targets, N, m->Vl);
        return STRATA_OK;
    }
    // The row max over the group, then the sums of exps and the target logits in one sum.
    float *mx = m->xent, *sums = m->xent + N;
    int v0 = m->shard.tp_rank * m->Vl;
    void *h = NULL;
    st_xent_rowmax(mx, sl->logits, N, m->Vl);
    strata_status_t rc = start(m, STRATA_TP_ALLREDUCE_MAX, mx, mx, (size_t)N, &h);
    if (rc == STRATA_OK)
        rc = wait_all(m, &h, 1);
    if (rc == STRATA_OK) {
        st_xent_slice(sums, sums + N, sl->logits, mx, sl->targets, v0, N, m->Vl);
        rc = start(m, STRATA_TP_ALLREDUCE_SUM, sums, sums, 2 * (size_t)N, &h);
    }
    if (rc == STRATA_OK)
        rc = wait_all(m, &h, 1);
    ST_TRY(rc);
    double total = 0;
    for (int n = 0; n < N; n++) {
        sl->lse[n] = mx[n] + logf(sums[n]);
        total += (double)(sl->lse[n] - sums[N + n]);
    }
    *loss = (float)(total / N);
    return STRATA_OK;
}

/* ---- sequence parallelism: the replicated tensors' partial gradients ------------------------------ */

strata_status_t st_tp_reduce_replicated(strata_gpt_t *m, int seg)
{
    // The embeddings' replicated tensor (wpe) sees every row on every rank (st_tp_embed_backward).
    if (!m->shard.sp || (m->has_embed && seg == 0))
        return STRATA_OK;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) { // pack, sum, unpack
        size_t at = 0;
        for (int i = 0; i < m->ntensors; i++) {
            const strata_tensor_info_t *t = &m->tensors[i];
            if (t->segment != seg || t->split_dim >= 0)
                continue;
            float *g = m->grads + t->offset;
            if (pass == 0)
                memcpy(m->packed + at, g, t->count * sizeof(float));
            else
                memcpy(g, m->packed + at, t->count * sizeof(float));
            at += t->count;
        }
        if (pass == 0) {
            n = at;
            void *h = NULL;
            strata_status_t rc = start(m, STRATA_TP_ALLREDUCE_SUM, m->packed, m->packed, n, &h);
            if (rc == STRATA_OK)
                rc = wait_all(m, &h, 1);
            ST_TRY(rc);
        }
    }
    return STRATA_OK;
}
