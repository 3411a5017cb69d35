/* The cost of the pieces of a transformer on one device: parameter and FLOP counts, the GEMM
 * efficiency curve by matrix shape under the memory-bandwidth roofline, memory-bound kernels
 * (norms, activations, residuals, softmax) at a fraction of memory bandwidth, and the
 * tensor/context-parallel communication of one layer priced by the network model. What a whole
 * step costs (pipeline, data parallelism, ZeRO, optimizer, overlap) is assembled in step.c. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <math.h>

static double n_up(const strata_model_t *m)
{
    return m->mlp == STRATA_MLP_SWIGLU ? 2.0 : 1.0;
}

static double kv_dim(const strata_model_t *m)
{
    return (double)m->hidden / m->heads * m->kv_heads;
}

static double norm_params(const strata_model_t *m)
{
    return m->rmsnorm ? m->hidden : 2.0 * m->hidden;
}

/* Weights, biases and norms of one layer before any sharding. */
static double layer_params(const strata_model_t *m)
{
    double h = m->hidden, f = m->ffn, kv = kv_dim(m);
    double w = h * (h + 2 * kv) + h * h + (n_up(m) + 1) * h * f;
    double b = m->bias ? (h + 2 * kv) + h + n_up(m) * f + h : 0;
    return w + b + 2 * norm_params(m);
}

double strata_model_params(const strata_model_t *m)
{
    double h = m->hidden, v = m->vocab;
    double p = m->layers * layer_params(m) + v * h + norm_params(m);
    if (!m->tied_embeddings)
        p += v * h;
    if (m->learned_pos)
        p += (double)m->seq * h;
    return p;
}

/* Forward FLOPs per token of one layer: projections, attention over all `seq` keys, MLP. */
static double layer_fwd_flops(const strata_model_t *m, int seq)
{
    double h = m->hidden, f = m->ffn, kv = kv_dim(m);
    return 2 * h * (h + 2 * kv) + 2 * h * h + 2 * (n_up(m) + 1) * h * f + 4.0 * seq * h;
}

double strata_model_fwd_flops_per_token(const strata_model_t *m, int seq)
{
    return m->layers * layer_fwd_flops(m, seq) + 2.0 * m->hidden * m->vocab;
}

/* ---- kernels -----------------------------------------------------------------------------------
 */

static double shape_factor(double dim0, double x)
{
    return x / (x + dim0);
}

/* Tiles in waves: a kernel of `tiles` output tiles on `sms` SMs runs ceil(tiles / sms) waves, the
 * last one partly empty. */
static double waves_util(int sms, double tiles)
{
    if (sms <= 0 || tiles <= 0)
        return 1;
    return tiles / (ceil(tiles / sms) * sms);
}

/* Utilisation of `batch` GEMMs with an M x N output: the library picks the tile that fills the SMs
 * best among its large tile and the tiles with one or both sides halved, in either orientation. */
static double wave_util(const strata_accel_t *a, double batch, double M, double N)
{
    if (a->sms <= 0)
        return 1;
    double best = 0;
    for (int h = 0; h < 4; h++) {
        double tm = a->tile_m / (h & 1 ? 2 : 1), tn = a->tile_n / (h & 2 ? 2 : 1);
        double t1 = batch * ceil(M / tm) * ceil(N / tn);
        double t2 = batch * ceil(M / tn) * ceil(N / tm);
        best = fmax(best, fmax(waves_util(a->sms, t1), waves_util(a->sms, t2)));
    }
    return best;
}

double strata_accel_wave_util(const strata_accel_t *a, double M, double N)
{
    return wave_util(a, 1, M, N);
}

typedef struct kctx {
    double peak, eb, eb_out, bw, eff, dim0, floor;
    const strata_accel_t *waves; /* wave quantization on this accelerator; NULL = off */
} kctx_t;

/* Time of `batch` GEMMs of (M x K)(K x N) launched as one kernel: inputs of eb bytes, output of
 * eb_out. */
static double gemm_s(const kctx_t *k, double batch, double M, double N, double K)
{
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0)
        return 0;
    double eff = k->eff * shape_factor(k->dim0, K);
    if (k->waves && k->waves->sms > 0)
        eff *= wave_util(k->waves, batch, M, N);
    else
        eff *= shape_factor(k->dim0, M) * shape_factor(k->dim0, N);
    double tc = batch * 2 * M * N * K / (k->peak * eff);
    double tm = batch * (k->eb * (M * K + K * N) + k->eb_out * M * N) / k->bw;
    return fmax(fmax(tc, tm), k->floor);
}

/* The GEMM context of precision `prec` on `a` (eta: the training-loop factor, bw: the achieved
 * memory bandwidth; waves: whether wave quantization is modelled). */
static kctx_t gemm_ctx(const strata_accel_t *a, strata_precision_t prec, double eta, double bw,
                       bool waves)
{
    kctx_t k = {.peak = a->peak_flops_16,
                .eb = 2,
                .eb_out = 2,
                .bw = bw,
                .eff = a->gemm_eff * eta,
                .dim0 = a->gemm_dim0,
                .floor = a->kernel_floor_s,
                .waves = waves ? a : NULL};
    if (prec == STRATA_PREC_FP32) {
        k.peak = a->peak_flops_32;
        k.eb = k.eb_out = 4;
    } else if (prec == STRATA_PREC_FP8 && a->peak_flops_8 > 0) {
        k.peak = a->peak_flops_8;
        k.eb = 1; /* FP8 inputs, bf16 output */
        k.eff = (a->gemm_eff_8 > 0 ? a->gemm_eff_8 : a->gemm_eff) * eta;
    }
    return k;
}

double strata_accel_gemm_flops(const strata_accel_t *a, strata_precision_t prec, double M, double N,
                               double K)
{
    kctx_t k = gemm_ctx(a, prec, 1.0, a->mem_bw_Bps, true);
    k.floor = 0;
    double t = gemm_s(&k, 1, M, N, K);
    return t > 0 ? 2 * M * N * K / t : 0;
}

/* Time of memory-bound kernels moving `bytes` in `kernels` launches. */
static double mem_s(const kctx_t *k, double bytes, int kernels)
{
    return fmax(bytes / k->bw, kernels * k->floor);
}

double st_act_bytes(const strata_training_t *t)
{
    return t->precision == STRATA_PREC_FP32 ? 4 : 2;
}

double st_gemm_input_bytes(const strata_training_t *t)
{
    return t->precision == STRATA_PREC_FP8 ? 1 : st_act_bytes(t);
}

double st_weight_bytes(const strata_training_t *t)
{
    return t->precision == STRATA_PREC_FP32 ? 4 : 2;
}

double st_grad_bytes(const strata_training_t *t)
{
    if (t->grad_bytes)
        return t->grad_bytes;
    return t->precision == STRATA_PREC_FP16 ? 2 : 4;
}

strata_net_eff_t st_plan_net_eff(const strata_plan_problem_t *pb)
{
    strata_net_eff_t e;
    e.eff[STRATA_LINK_SCALE_UP] = pb->calib.eta_up;
    e.eff[STRATA_LINK_SCALE_OUT] = pb->calib.eta_out;
    // Reducing a byte reads two operands and writes one.
    e.gamma_s_per_b = 3.0 / (pb->accel.mem_bw_Bps * pb->calib.eta_mem);
    return e;
}

strata_group_t st_plan_group(const strata_parallel_t *par, unsigned dims)
{
    const int size[STRATA_DIM_COUNT] = {par->tp, par->cp, par->pp, par->dp};
    strata_group_t g = {0};
    long long stride = 1;
    for (int i = 0; i < STRATA_DIM_COUNT; i++) {
        strata_dim_t d = par->order[i];
        if ((dims & (1u << d)) && size[d] > 1) {
            g.dim[g.ndims].size = size[d];
            g.dim[g.ndims].stride = stride;
            g.ndims++;
        }
        stride *= size[d];
    }
    return g;
}

/* ---- one layer, embedding and head -------------------------------------------------------------
 */

strata_status_t st_plan_layer_cost(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                                   st_layer_cost_t *o)
{
    const strata_model_t *m = &pb->model;
    const strata_training_t *tr = &pb->train;
    const strata_accel_t *ac = &pb->accel;
    const double eb = st_act_bytes(tr), eg = st_gemm_input_bytes(tr);
    const bool fp8 = tr->precision == STRATA_PREC_FP8;
    const bool waves = !(pb->terms_off & STRATA_TERM_HW);
    const double bw = ac->mem_bw_Bps * pb->calib.eta_mem;
    // Attention, the logits and memory-bound kernels run in 16 bits under FP8 too.
    const kctx_t k =
        gemm_ctx(ac, fp8 ? STRATA_PREC_BF16 : tr->precision, pb->calib.eta_gemm, bw, waves);
    const kctx_t kl = gemm_ctx(ac, tr->precision, pb->calib.eta_gemm, bw, waves); /* linear */
    const double t = par->tp, c = par->cp, b = tr->micro_batch, s = st_seq(pb);
    const double h = m->hidden, f = m->ffn, kv = kv_dim(m), dh = h / m->heads, V = m->vocab;
    const double T = b * s / c;                     /* tokens of one micro-batch on this device */
    const double r = tr->sequence_parallel ? t : 1; /* divides the work TP would replicate */
    const double al = m->heads / t, sq = s / c, sk = s;
    const bool flash = tr->flash_attention, drop = m->dropout;
    *o = (st_layer_cost_t){0};

    // Linear layers: QKV, output projection, MLP up (and gate), MLP down.
    double lin = gemm_s(&kl, 1, T, (h + 2 * kv) / t, h) + gemm_s(&kl, 1, T, h, h / t) +
                 gemm_s(&kl, 1, T, n_up(m) * f / t, h) + gemm_s(&kl, 1, T, h, f / t);
    // FP8 casts: each GEMM's input in the forward and its output gradient in the backward are
    // cast and transposed (read 2 bytes, write 1 + 1) before the GEMMs use them.
    double cast_f = 0, cast_b = 0;
    if (fp8) {
        cast_f = mem_s(&k, T * 4 * (h + h / t + h + f / t), 4);
        cast_b = mem_s(&k, T * 4 * ((h + 2 * kv) / t + h + n_up(m) * f / t + h), 4);
    }

    // Attention core. Flash attention skips the masked half of causal attention and recomputes the
    // scores in its backward (5 matmuls against 2: 2.5x the forward).
    double attn_f, attn_b;
    if (flash) {
        double eff =
            k.eff * shape_factor(k.dim0, sq) * shape_factor(k.dim0, sk) * shape_factor(k.dim0, dh);
        attn_f = fmax(0.5 * 4 * b * al * sq * sk * dh / (k.peak * eff), k.floor);
        attn_b = 2.5 * attn_f;
    } else {
        double batch = b * al, E = batch * sq * sk;
        double mm = gemm_s(&k, batch, sq, sk, dh) + gemm_s(&k, batch, sq, dh, sk);
        // softmax reads and writes the scores; dropout reads, writes and keeps a byte mask.
        double ew_f = E * (2 * eb + (drop ? 2 * eb + 1 : 0));
        double ew_b = E * (3 * eb + (drop ? 2 * eb + 1 : 0));
        attn_f = mm + mem_s(&k, ew_f, drop ? 2 : 1);
        attn_b = 2 * mm + mem_s(&k, ew_b, drop ? 2 : 1);
    }

    // Memory-bound kernels per token: two norms, two residual adds (with dropout), the activation
    // function, rotary embedding.
    double ew_tok = 2 * 2 * h * eb / r + 2 * (3 * h * eb + (drop ? h : 0)) / r +
                    (m->mlp == STRATA_MLP_SWIGLU ? 3 : 2) * f * eb / t +
                    (m->learned_pos ? 0 : 2 * (h + kv) * eb / t);
    double ew_f = mem_s(&k, T * ew_tok, 6), ew_b = mem_s(&k, 2 * T * ew_tok, 8);

    o->gemm_fwd_s = lin;
    o->attn_fwd_s = attn_f;
    o->attn_bwd_s = attn_b;
    o->fwd_s = lin + attn_f + ew_f + cast_f;
    o->bwd_s = 2 * lin + attn_b + ew_b + cast_b;
    o->wgrad_s = lin;
    o->recompute_s = tr->recompute == STRATA_RECOMPUTE_FULL                  ? o->fwd_s
                     : tr->recompute == STRATA_RECOMPUTE_SELECTIVE && !flash ? attn_f
                                                                             : 0;

    // Tensor parallelism: two all-reduces per pass, or with sequence parallelism two all-gathers
    // and two reduce-scatters of the same full activation.
    // Collectives are priced by the pricing module for the group that runs them (net.c).
    const double X = T * h * eb;
    double tp_pass = 0, tp_pass_bytes = 0;
    strata_price_table_t tp_ar = {.top = -1}, tp_ag = {.top = -1}, tp_rs = {.top = -1};
    if (par->tp > 1) {
        strata_group_t g = st_plan_group(par, 1u << STRATA_DIM_TP);
        ST_TRY(st_plan_table(pb, &g, STRATA_COLL_ALLREDUCE, &tp_ar));
        ST_TRY(st_plan_table(pb, &g, STRATA_COLL_ALLGATHER, &tp_ag));
        ST_TRY(st_plan_table(pb, &g, STRATA_COLL_REDUCE_SCATTER, &tp_rs));
        o->tp_level = tp_ar.top + 1;
        if (tr->sequence_parallel)
            tp_pass = 2 * st_plan_price_s(&tp_ag, X) + 2 * st_plan_price_s(&tp_rs, X);
        else
            tp_pass = 2 * st_plan_price_s(&tp_ar, X);
        tp_pass_bytes = 4 * (t - 1) / t * X;
    }
    const bool full = tr->recompute == STRATA_RECOMPUTE_FULL;
    o->tp_fwd_s = tp_pass;
    o->tp_bwd_s = tp_pass;
    o->tp_rec_s = full ? tp_pass : 0;
    o->tp_bytes = tp_pass_bytes * (full ? 3 : 2);

    // Context parallelism: gather the keys and values of the whole sequence (this device's heads),
    // reduce-scatter their gradients in the backward.
    if (par->cp > 1) {
        strata_group_t g = st_plan_group(par, 1u << STRATA_DIM_CP);
        strata_price_table_t ag, rs;
        ST_TRY(st_plan_table(pb, &g, STRATA_COLL_ALLGATHER, &ag));
        ST_TRY(st_plan_table(pb, &g, STRATA_COLL_REDUCE_SCATTER, &rs));
        o->cp_level = ag.top + 1;
        double kvb = b * s * 2 * kv / t * eb;
        o->cp_fwd_s = st_plan_price_s(&ag, kvb);
        o->cp_bwd_s = st_plan_price_s(&rs, kvb);
        o->cp_rec_s = full ? o->cp_fwd_s : 0;
        o->cp_bytes = (c - 1) / c * kvb * (full ? 3 : 2);
    }

    // Activations kept per layer (Korthikanti et al. 2022, generalised to GQA, SwiGLU, flash
    // attention, fp32 and FP8): 34 s b h + 5 a s^2 b bytes for GPT in fp16 without parallelism.
    // Attention: the norm's input, the QKV GEMM's input, Q K V, the output projection's input;
    // MLP: the norm's input, the first GEMM's input, its output (the activation's input), the
    // second GEMM's input. Under FP8 the GEMM inputs are kept in FP8 (eg bytes).
    double keep_attn =
        h * eb / r + h * eg / r + (h + 2 * kv) * eb / t + h * eg / t + (drop ? h / r : 0);
    double keep_mlp =
        h * eb / r + h * eg / r + n_up(m) * f * eb / t + f * eg / t + (drop ? h / r : 0);
    double keep_scores = flash ? 4 * al : al * sk * (eb + (drop ? eb + 1 : 0));
    double all = T * (keep_attn + keep_mlp + keep_scores);
    o->act_full_bytes = all;
    if (tr->recompute == STRATA_RECOMPUTE_FULL)
        o->act_bytes = T * h * eb / r;
    else if (tr->recompute == STRATA_RECOMPUTE_SELECTIVE && !flash)
        o->act_bytes = T * (keep_attn + keep_mlp);
    else
        o->act_bytes = all;

    o->max_matrix = fmax(fmax(h * (h + 2 * kv), h * h), n_up(m) * h * f) / t;
    o->params = (h * (h + 2 * kv) + h * h + (n_up(m) + 1) * h * f) / t +
                (m->bias ? (h + 2 * kv) / t + h + n_up(m) * f / t + h : 0) + 2 * norm_params(m);

    // Embedding on the first stage: lookup, positions, and the vocabulary-parallel all-reduce (or
    // reduce-scatter under SP); its gradient is scattered back into the table.
    o->emb_fwd_s = mem_s(&k, T * h * eb * (m->learned_pos ? 3 : 1), 2);
    o->emb_bwd_s = mem_s(&k, 2 * T * h * eb, 2);
    o->emb_tp_s = st_plan_price_s(tr->sequence_parallel ? &tp_rs : &tp_ar, X);
    o->emb_params = V * h / t + (m->learned_pos ? s * h : 0);
    o->emb_act_bytes = drop ? T * h / r : 0;

    // Head on the last stage: final norm, logits (vocabulary-parallel), cross-entropy in fp32.
    double logit = gemm_s(&k, 1, T, V / t, h);
    double ce_f = mem_s(&k, T * V / t * (eb + 8) + T * 4 * h * eb / r, 3);
    double ce_b = mem_s(&k, T * V / t * (eb + 4) + T * 8 * h * eb / r, 2);
    o->head_fwd_s = logit + ce_f;
    o->head_bwd_s = 2 * logit + ce_b;
    o->head_wgrad_s = logit;
    o->head_tp_s = 0;
    if (par->tp > 1) {
        // Three small all-reduces (max, sum of exponentials, target logit) per pass.
        o->head_tp_s = 3 * st_plan_price_s(&tp_ar, T * 4);
        if (tr->sequence_parallel)
            o->head_tp_s += st_plan_price_s(&tp_ag, X) + st_plan_price_s(&tp_rs, X);
    }
    o->head_params = V * h / t + norm_params(m);
    o->head_act_bytes = T * V / t * (eb + 8);
    o->p2p_bytes = par->tp > 1 ? X / t : X;
    o->tp_buffer_bytes = tr->sequence_parallel && par->tp > 1 ? 2 * X : 0;
    return STRATA_OK;
}
