/* Configuration values of the planner: defaults, names and parsers of the enums, and validation of
 * models, accelerators, problems and parallel configurations with messages that name the violated
 * constraint. The search uses st_plan_check_fast(), which answers the same question without
 * formatting text. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <string.h>

strata_model_t strata_model_gpt(const char *name, int layers, int hidden, int heads, int vocab,
                                int seq)
{
    strata_model_t m = {.layers = layers,
                        .hidden = hidden,
                        .heads = heads,
                        .kv_heads = heads,
                        // 0 for a hidden size out of range (validation names hidden): no overflow
                        .ffn = hidden <= STRATA_MODEL_MAX_HIDDEN ? 4 * hidden : 0,
                        .vocab = vocab,
                        .seq = seq,
                        .mlp = STRATA_MLP_GELU,
                        .bias = true,
                        .tied_embeddings = true,
                        .learned_pos = true,
                        .dropout = true};
    snprintf(m.name, sizeof m.name, "%s", name ? name : "gpt");
    return m;
}

strata_status_t strata_model_validate(const strata_model_t *m)
{
    const char *n = m->name[0] ? m->name : "model";
#define RANGE(field, max)                                                                          \
    if (m->field < 1 || m->field > (max))                                                          \
    return st_error(STRATA_ERR_INVALID_ARG, "%s: expected " #field " from 1 to %d, got %d", n,     \
                    (max), m->field)
    RANGE(layers, STRATA_MODEL_MAX_LAYERS);
    RANGE(hidden, STRATA_MODEL_MAX_HIDDEN);
    RANGE(heads, m->hidden);
    RANGE(kv_heads, m->heads);
    RANGE(ffn, STRATA_MODEL_MAX_FFN);
    RANGE(vocab, STRATA_MODEL_MAX_VOCAB);
    RANGE(seq, STRATA_MODEL_MAX_SEQ);
#undef RANGE
    if (m->hidden % m->heads)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: expected heads (%d) to divide hidden (%d)", n,
                        m->heads, m->hidden);
    if (m->heads % m->kv_heads)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: expected kv_heads (%d) to divide heads (%d)",
                        n, m->kv_heads, m->heads);
    if ((unsigned)m->mlp > STRATA_MLP_SWIGLU)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: expected mlp gelu or swiglu", n);
    return STRATA_OK;
}

strata_training_t strata_training_default(void)
{
    return (strata_training_t){.global_batch = 512,
                               .micro_batch = 1,
                               .precision = STRATA_PREC_BF16,
                               .optimizer = STRATA_OPT_ADAMW,
                               .recompute = STRATA_RECOMPUTE_SELECTIVE,
                               .sequence_parallel = true,
                               .flash_attention = true};
}

strata_parallel_t strata_parallel_default(void)
{
    strata_parallel_t p = {.tp = 1,
                           .cp = 1,
                           .pp = 1,
                           .vp = 1,
                           .dp = 1,
                           .zero = 1,
                           .zero_secondary = 1,
                           .schedule = STRATA_SCHED_1F1B};
    p.overlap[STRATA_DIM_DP] = true;
    p.overlap[STRATA_DIM_PP] = true;
    for (int i = 0; i < STRATA_DIM_COUNT; i++)
        p.order[i] = (strata_dim_t)i;
    return p;
}

/* ---- names -------------------------------------------------------------------------------------
 */

static const char *const opt_names[] = {"adam", "adamw", "lamb"};
static const char *const rc_names[] = {"none", "selective", "full"};

#define NAME_OR(arr, i) ((unsigned)(i) < sizeof arr / sizeof arr[0] ? arr[i] : "?")

const char *strata_optimizer_name(strata_optimizer_t o)
{
    return NAME_OR(opt_names, o);
}
const char *strata_recompute_name(strata_recompute_t r)
{
    return NAME_OR(rc_names, r);
}

static strata_status_t parse_enum(const char *s, const char *const *names, int n, const char *what,
                                  int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return STRATA_OK;
        }
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= sizeof list - used)
            break;
        used += (size_t)w;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "expected %s (one of: %s), got '%s'", what, list, s);
}

strata_status_t strata_optimizer_parse(const char *s, strata_optimizer_t *out)
{
    int v = 0;
    ST_TRY(parse_enum(s, opt_names, 3, "optimizer", &v));
    *out = (strata_optimizer_t)v;
    return STRATA_OK;
}

strata_status_t strata_recompute_parse(const char *s, strata_recompute_t *out)
{
    int v = 0;
    ST_TRY(parse_enum(s, rc_names, 3, "recompute", &v));
    *out = (strata_recompute_t)v;
    return STRATA_OK;
}

static int dim_index(const char *s, size_t len)
{
    for (int i = 0; i < STRATA_DIM_COUNT; i++)
        if (strlen(strata_dim_name(i)) == len && !strncmp(s, strata_dim_name(i), len))
            return i;
    return -1;
}

strata_status_t strata_overlap_parse(const char *s, bool overlap[STRATA_DIM_COUNT])
{
    for (int i = 0; i < STRATA_DIM_COUNT; i++)
        overlap[i] = !strcmp(s, "all");
    if (!strcmp(s, "all") || !strcmp(s, "none") || !*s)
        return STRATA_OK;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",+ ");
        int d = dim_index(p, len);
        if (d < 0)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected overlap 'none', 'all' or a list of "
                            "tp,cp,pp,dp joined by '+', got '%s'",
                            s);
        overlap[d] = true;
        p += len;
        while (*p == ',' || *p == '+' || *p == ' ')
            p++;
    }
    return STRATA_OK;
}

const char *strata_parallel_format(const strata_parallel_t *p, char *buf, size_t size)
{
    char z2[24] = "";
    if (p->zero == 3 && p->zero_secondary > 1)
        snprintf(z2, sizeof z2, "/hpz%d", p->zero_secondary);
    snprintf(buf, size, "tp%d cp%d pp%d vp%d dp%d zero%d%s%s%s %s", p->tp, p->cp, p->pp, p->vp,
             p->dp, p->zero, z2, p->zero_keep_params ? "+keep" : "",
             p->zero_reduce_once ? "+once" : "", strata_schedule_name(p->schedule));
    return buf;
}

/* ---- accelerators and problems -----------------------------------------------------------------
 */

strata_status_t strata_accel_validate(const strata_accel_t *a)
{
    const char *n = a->name[0] ? a->name : "accelerator";
    if (!(a->peak_flops_16 > 0) || !(a->peak_flops_32 > 0))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: expected positive peak FLOP/s", n);
    if (!(a->mem_bytes > 0) || !(a->mem_bw_Bps > 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: expected positive memory capacity and bandwidth", n);
    if (!(a->gemm_eff > 0 && a->gemm_eff <= 1))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: expected gemm efficiency in (0, 1], got %g", n,
                        a->gemm_eff);
    if (!(a->gemm_dim0 >= 0) || !(a->reserved_bytes >= 0) || !(a->kernel_floor_s >= 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: expected non-negative gemm_dim0, reserved "
                        "memory and kernel floor",
                        n);
    if (a->reserved_bytes >= a->mem_bytes)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: reserved memory exceeds capacity", n);
    if (!(a->peak_flops_8 >= 0) || !(a->gemm_eff_8 >= 0 && a->gemm_eff_8 <= 1))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: expected non-negative FP8 peak and FP8 gemm efficiency in [0, 1]", n);
    if (a->sms < 0 || (a->sms > 0 && (a->tile_m < 1 || a->tile_n < 1)))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s: expected sms >= 0 and, with sms, a GEMM tile of at least 1 x 1, got "
                        "sms %d tile %d x %d",
                        n, a->sms, a->tile_m, a->tile_n);
    return STRATA_OK;
}

int st_seq(const strata_plan_problem_t *pb)
{
    return pb->train.seq > 0 ? pb->train.seq : pb->model.seq;
}

long long st_gpus(const strata_plan_problem_t *pb)
{
    return pb->gpus > 0 ? pb->gpus : strata_topo_capacity(&pb->topo);
}

strata_status_t strata_plan_problem_validate(const strata_plan_problem_t *pb)
{
    ST_TRY(strata_model_validate(&pb->model));
    ST_TRY(strata_accel_validate(&pb->accel));
    ST_TRY(strata_topo_validate(&pb->topo));
    const strata_training_t *t = &pb->train;
    if (t->global_batch < 1 || t->micro_batch < 1)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "training: expected global_batch and micro_batch >= 1, "
                        "got %d and %d",
                        t->global_batch, t->micro_batch);
    if (t->seq < 0 || t->seq > STRATA_MODEL_MAX_SEQ)
        return st_error(STRATA_ERR_INVALID_ARG, "training: expected seq from 0 to %d, got %d",
                        STRATA_MODEL_MAX_SEQ, t->seq);
    if ((unsigned)t->precision > STRATA_PREC_FP8 || (unsigned)t->optimizer > STRATA_OPT_LAMB ||
        (unsigned)t->recompute > STRATA_RECOMPUTE_FULL)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "training: precision, optimizer or recompute out of "
                        "range");
    if (t->grad_bytes != 0 && t->grad_bytes != 2 && t->grad_bytes != 4)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "training: expected grad_bytes 0 (default), 2 or 4, "
                        "got %d",
                        t->grad_bytes);
    if (t->precision == STRATA_PREC_FP8 && !(pb->accel.peak_flops_8 > 0))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "training: precision fp8 needs an accelerator with FP8 matrix units; %s "
                        "has no peak_tflops_8",
                        pb->accel.name[0] ? pb->accel.name : "the accelerator");
    long long cap = strata_topo_capacity(&pb->topo);
    if (pb->gpus < 0 || pb->gpus > cap)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected 1 to %lld accelerators on cluster %s, got "
                        "%lld",
                        cap, pb->topo.name, pb->gpus);
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++) {
        double v = *strata_calib_param((strata_calib_t *)&pb->calib, i), lo, hi;
        strata_calib_param_range(i, &lo, &hi);
        if (!(v >= lo && v <= hi))
            return st_error(STRATA_ERR_INVALID_ARG, "calibration: expected %s in [%g, %g], got %g",
                            strata_calib_param_name(i), lo, hi, v);
    }
    return STRATA_OK;
}

/* ---- parallel configuration checks --------------------------------------------------------------
 */

enum {
    CK_OK = 0,
    CK_SIZES,
    CK_PRODUCT,
    CK_TP_HEADS,
    CK_TP_FFN,
    CK_CP_SEQ,
    CK_PP_LAYERS,
    CK_VP,
    CK_BATCH,
    CK_INTERLEAVE_M,
    CK_ZERO,
    CK_ZERO2ND,
    CK_ZERO_VARIANT,
    CK_ORDER,
    CK_SCHED,
};

/* tp x cp x pp x dp, saturated (a validation table may give each up to 2^30). */
static long long par_world(const strata_parallel_t *par)
{
    return st_mul_sat(st_mul_sat(par->tp, par->cp), st_mul_sat(par->pp, par->dp));
}

int st_plan_check_fast(const strata_plan_problem_t *pb, const strata_parallel_t *par)
{
    const strata_model_t *m = &pb->model;
    if (par->tp < 1 || par->cp < 1 || par->pp < 1 || par->vp < 1 || par->dp < 1)
        return CK_SIZES;
    if (par_world(par) != st_gpus(pb))
        return CK_PRODUCT;
    if (m->heads % par->tp || m->kv_heads % par->tp)
        return CK_TP_HEADS;
    if (m->ffn % par->tp)
        return CK_TP_FFN;
    int s = st_seq(pb);
    if (par->cp > 1 && s % (2LL * par->cp))
        return CK_CP_SEQ;
    if (par->pp > m->layers)
        return CK_PP_LAYERS;
    if ((unsigned)par->schedule >= STRATA_SCHED_COUNT)
        return CK_SCHED;
    if (par->schedule == STRATA_SCHED_INTERLEAVED || par->schedule == STRATA_SCHED_ZB_V
            ? !strata_schedule_chunks_ok(par->schedule, par->vp) || par->pp < 2
            : par->vp != 1)
        return CK_VP;
    if ((long long)par->pp * par->vp > m->layers)
        return CK_VP;
    long long per_replica =
        pb->train.global_batch % par->dp ? -1 : pb->train.global_batch / par->dp;
    if (per_replica < 1 || per_replica % pb->train.micro_batch)
        return CK_BATCH;
    long long mb = per_replica / pb->train.micro_batch;
    if (par->schedule == STRATA_SCHED_INTERLEAVED && mb % par->pp)
        return CK_INTERLEAVE_M;
    if (par->zero < 0 || par->zero > 3)
        return CK_ZERO;
    if (par->zero_secondary < 1 || (par->zero_secondary > 1 && par->zero != 3) ||
        ((long long)par->dp * par->cp) % par->zero_secondary)
        return CK_ZERO2ND;
    if ((par->zero_keep_params && par->zero != 3) || (par->zero_reduce_once && par->zero < 2))
        return CK_ZERO_VARIANT;
    unsigned seen = 0;
    for (int i = 0; i < STRATA_DIM_COUNT; i++) {
        if ((unsigned)par->order[i] >= STRATA_DIM_COUNT || (seen & (1u << par->order[i])))
            return CK_ORDER;
        seen |= 1u << par->order[i];
    }
    return CK_OK;
}

strata_status_t strata_plan_check(const strata_plan_problem_t *pb, const strata_parallel_t *par)
{
    ST_TRY(strata_plan_problem_validate(pb));
    const strata_model_t *m = &pb->model;
    const strata_training_t *t = &pb->train;
    int s = st_seq(pb);
    switch (st_plan_check_fast(pb, par)) {
    case CK_OK:
        return STRATA_OK;
    case CK_SIZES:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected tp, cp, pp, vp and dp >= 1, got tp=%d "
                        "cp=%d pp=%d vp=%d dp=%d",
                        par->tp, par->cp, par->pp, par->vp, par->dp);
    case CK_PRODUCT:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected tp*cp*pp*dp = %lld accelerators, got "
                        "%d*%d*%d*%d = %lld",
                        st_gpus(pb), par->tp, par->cp, par->pp, par->dp, par_world(par));
    case CK_TP_HEADS:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected tp=%d to divide the attention heads (%d) "
                        "and key/value heads (%d)",
                        par->tp, m->heads, m->kv_heads);
    case CK_TP_FFN:
        return st_error(STRATA_ERR_INVALID_ARG, "expected tp=%d to divide the FFN size %d", par->tp,
                        m->ffn);
    case CK_CP_SEQ:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected the sequence (%d) to split into 2*cp=%lld "
                        "equal chunks (load-balanced causal context parallelism)",
                        s, 2LL * par->cp);
    case CK_PP_LAYERS:
        return st_error(STRATA_ERR_INVALID_ARG, "expected pp=%d <= layers=%d", par->pp, m->layers);
    case CK_SCHED:
        return st_error(STRATA_ERR_INVALID_ARG, "unknown pipeline schedule %d",
                        (int)par->schedule);
    case CK_VP:
        if (par->schedule == STRATA_SCHED_INTERLEAVED && (par->vp < 2 || par->pp < 2))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected the interleaved schedule to have pp >= 2 "
                            "and vp >= 2, got pp=%d vp=%d",
                            par->pp, par->vp);
        if (par->schedule == STRATA_SCHED_ZB_V && (par->vp != 2 || par->pp < 2))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected the zb-v schedule to have pp >= 2 and vp=2 (two chunks per "
                            "stage, in a V), got pp=%d vp=%d",
                            par->pp, par->vp);
        if (par->schedule != STRATA_SCHED_INTERLEAVED && par->schedule != STRATA_SCHED_ZB_V &&
            par->vp != 1)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected vp=1 for the %s schedule (virtual stages "
                            "need 'interleaved' or 'zb-v'), got vp=%d",
                            strata_schedule_name(par->schedule), par->vp);
        return st_error(STRATA_ERR_INVALID_ARG, "expected pp*vp = %lld model chunks <= layers=%d",
                        (long long)par->pp * par->vp, m->layers);
    case CK_BATCH:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected global_batch=%d to divide into dp=%d "
                        "replicas of whole micro-batches of %d",
                        t->global_batch, par->dp, t->micro_batch);
    case CK_INTERLEAVE_M:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected the interleaved schedule's micro-batches "
                        "per pipeline (%d) to be a multiple of pp=%d",
                        t->global_batch / par->dp / t->micro_batch, par->pp);
    case CK_ZERO:
        return st_error(STRATA_ERR_INVALID_ARG, "expected ZeRO stage 0 to 3, got %d", par->zero);
    case CK_ZERO2ND:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected the ZeRO secondary partition (%d) to be 1, "
                        "or with ZeRO-3 to divide the data x context parallel size %lld",
                        par->zero_secondary, (long long)par->dp * par->cp);
    case CK_ZERO_VARIANT:
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected keeping parameters with ZeRO-3 and reducing gradients once with "
                        "ZeRO-2 or 3, got ZeRO-%d%s%s",
                        par->zero, par->zero_keep_params ? " keeping parameters" : "",
                        par->zero_reduce_once ? " reducing once" : "");
    case CK_ORDER:
        return st_error(STRATA_ERR_INVALID_ARG, "expected the order to name tp, cp, pp and dp once "
                                                "each");
    }
    return st_error(STRATA_ERR_INTERNAL, "unknown configuration check");
}
