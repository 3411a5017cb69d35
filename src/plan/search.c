/* `strata plan search`: every parallel configuration of a problem, ranked by predicted step time.
 * Loops are nested so that work is shared: the per-layer cost depends only on (order, tp, cp, SP,
 * recompute, micro-batch) and is computed once per combination, then pp x schedule x vp x ZeRO are
 * assembled from it in closed form; memory is checked before time, so configurations that cannot
 * fit cost a few dozen flops. Nothing is allocated inside the loops. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <stdlib.h>
#include <string.h>

strata_search_opts_t strata_search_opts_default(void)
{
    strata_search_opts_t o = {.top = 10,
                              .max_vp = 8,
                              .zero_mask = 0xF,
                              .sched_mask = (1u << STRATA_SCHED_COUNT) - 1,
                              .recompute_mask = 0x7,
                              .sp_mask = 0x3,
                              .zero_variants = true};
    o.overlap[STRATA_DIM_DP] = true;
    o.overlap[STRATA_DIM_PP] = true;
    o.overlap[STRATA_DIM_CP] = true;
    return o;
}

void strata_search_result_free(strata_search_result_t *r)
{
    free(r->top);
    r->top = NULL;
    r->ntop = 0;
}

static int divisors(long long n, long long *out, int cap)
{
    int k = 0;
    for (long long d = 1; d <= n && k < cap; d++)
        if (n % d == 0)
            out[k++] = d;
    return k;
}

/* True when a ranks ahead of b: configurations that fit first, then by step time. */
static bool better(const strata_prediction_t *a, const strata_prediction_t *b)
{
    if (a->mem.fits != b->mem.fits)
        return a->mem.fits;
    return a->step_s < b->step_s;
}

static void keep(strata_search_result_t *r, int cap, const strata_parallel_t *par,
                 const strata_training_t *train, const strata_prediction_t *pred)
{
    if (r->ntop == cap && !better(pred, &r->top[cap - 1].pred))
        return;
    int i = r->ntop < cap ? r->ntop++ : cap - 1;
    while (i > 0 && better(pred, &r->top[i - 1].pred)) {
        r->top[i] = r->top[i - 1];
        i--;
    }
    r->top[i].par = *par;
    r->top[i].train = *train;
    r->top[i].pred = *pred;
}

/* Permutations of the four dimensions, tp,cp,pp,dp first. */
static int orders(bool all, strata_dim_t out[24][STRATA_DIM_COUNT])
{
    int n = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 4; d++) {
                    if (a == b || a == c || a == d || b == c || b == d || c == d)
                        continue;
                    out[n][0] = (strata_dim_t)a;
                    out[n][1] = (strata_dim_t)b;
                    out[n][2] = (strata_dim_t)c;
                    out[n][3] = (strata_dim_t)d;
                    n++;
                    if (!all)
                        return n;
                }
    return n;
}

strata_status_t strata_plan_search(const strata_plan_problem_t *pb, const strata_search_opts_t *o,
                                   strata_search_result_t *out)
{
    memset(out, 0, sizeof *out);
    ST_TRY(strata_plan_problem_validate(pb));
    const int cap = o->top > 0 ? o->top : 10;
    out->top = calloc((size_t)cap, sizeof *out->top);
    if (!out->top)
        return st_error(STRATA_ERR_NO_MEMORY, "search: out of memory");
    const uint64_t t0 = st_now_ns();
    const strata_model_t *m = &pb->model;
    const long long N = st_gpus(pb), B = pb->train.global_batch;
    const int seq = st_seq(pb);
    long long dv[256], bv[256];
    int ndv = divisors(N, dv, 256), nbv = divisors(B, bv, 256);
    strata_dim_t ord[24][STRATA_DIM_COUNT];
    int nord = orders(o->all_orders, ord);
    strata_plan_problem_t local;
    st_plan_effective(pb, &local); /* ECMP-slowed fabric, once */
    const double straggler = st_plan_straggler_frac(&local);
    strata_parallel_t par = strata_parallel_default();
    memcpy(par.overlap, o->overlap, sizeof par.overlap);
    strata_prediction_t pred;
    st_layer_cost_t lc;

    for (int oi = 0; oi < nord; oi++) {
        memcpy(par.order, ord[oi], sizeof par.order);
        for (int ti = 0; ti < ndv; ti++) {
            int tp = (int)dv[ti];
            if ((o->max_tp && tp > o->max_tp) || m->heads % tp || m->kv_heads % tp || m->ffn % tp)
                continue;
            for (int ci = 0; ci < ndv; ci++) {
                int cp = (int)dv[ci];
                if ((long long)tp * cp > N || N % ((long long)tp * cp) ||
                    (o->max_cp && cp > o->max_cp))
                    continue;
                if (cp > 1 && seq % (2 * cp))
                    continue;
                for (int sp = 0; sp < 2; sp++) {
                    // SP is meaningless without TP: tp=1 is tried once, as "no SP".
                    if (tp == 1 ? sp == 1 : !(o->sp_mask & (1u << sp)))
                        continue;
                    for (int rc = 0; rc < 3; rc++) {
                        if (!(o->recompute_mask & (1u << rc)))
                            continue;
                        // With flash attention, selective recomputation is what flash already does.
                        if (rc == STRATA_RECOMPUTE_SELECTIVE && pb->train.flash_attention &&
                            (o->recompute_mask & 1u))
                            continue;
                        for (int bi = 0; bi < nbv; bi++) {
                            int b = (int)bv[bi];
                            if (o->max_micro_batch && b > o->max_micro_batch)
                                break;
                            local.train.micro_batch = b;
                            local.train.sequence_parallel = sp;
                            local.train.recompute = (strata_recompute_t)rc;
                            par.tp = tp;
                            par.cp = cp;
                            bool have_lc = false;
                            long long rest = N / ((long long)tp * cp);
                            for (int pi = 0; pi < ndv; pi++) {
                                int pp = (int)dv[pi];
                                if (pp > rest)
                                    break;
                                if (rest % pp || pp > m->layers)
                                    continue;
                                long long dp = rest / pp;
                                if (B % dp || (B / dp) % b)
                                    continue;
                                long long mbs = B / dp / b;
                                par.pp = pp;
                                par.dp = (int)dp;
                                if (!have_lc) {
                                    ST_TRY(st_plan_layer_cost(&local, &par, &lc));
                                    lc.straggler_frac = straggler;
                                    have_lc = true;
                                }
                                for (int s = 0; s < STRATA_SCHED_COUNT; s++) {
                                    if (!(o->sched_mask & (1u << s)))
                                        continue;
                                    // Without a pipeline every schedule is the same: count it once.
                                    if (pp == 1 && s != STRATA_SCHED_1F1B &&
                                        (o->sched_mask & (1u << STRATA_SCHED_1F1B)))
                                        continue;
                                    int vmin = 1, vmax = 1;
                                    if (s == STRATA_SCHED_INTERLEAVED) {
                                        vmin = 2;
                                        vmax = o->max_vp;
                                        if (mbs % pp)
                                            vmax = 0;
                                    } else if (s == STRATA_SCHED_ZB_V) {
                                        vmin = vmax = 2; /* two chunks per stage, in a V */
                                    }
                                    for (int vp = vmin; vp <= vmax; vp++) {
                                        if ((long long)pp * vp > m->layers)
                                            break;
                                        for (int z = 0; z < 4; z++) {
                                            if (!(o->zero_mask & (1u << z)))
                                                continue;
                                            if (dp * cp == 1 && z > 0)
                                                break;
                                            // ZeRO-3 variants: 0 plain, 1 keeping parameters,
                                            // 2 reducing once (both at once is ZeRO-1 with
                                            // more memory; ZeRO-2 reducing once is ZeRO-1).
                                            int nvar = z == 3 && o->zero_variants ? 3 : 1;
                                            for (int zs = 0; zs < 2 * nvar; zs++) {
                                                int z2 = zs % 2 ? o->zero_secondary : 1;
                                                if (zs % 2 && (z != 3 || z2 <= 1 || zs / 2 == 1 ||
                                                               (dp * cp) % z2 || z2 >= dp * cp))
                                                    continue;
                                                par.schedule = (strata_schedule_t)s;
                                                par.vp = vp;
                                                par.zero = z;
                                                par.zero_secondary = z2;
                                                par.zero_keep_params = zs / 2 == 1;
                                                par.zero_reduce_once = zs / 2 == 2;
                                                out->enumerated++;
                                                if (st_plan_check_fast(&local, &par))
                                                    continue;
                                                out->valid++;
                                                ST_TRY(st_plan_assemble(&local, &par, &lc,
                                                                        !o->allow_no_fit, &pred));
                                                if (pred.mem.fits)
                                                    out->fitting++;
                                                else if (!o->allow_no_fit)
                                                    continue;
                                                out->evaluated++;
                                                keep(out, cap, &par, &local.train, &pred);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out->seconds = (double)(st_now_ns() - t0) / 1e9;
    out->configs_per_s = out->seconds > 0 ? (double)out->enumerated / out->seconds : 0;
    if (!out->ntop) {
        strata_status_t rc = st_error(STRATA_ERR_INVALID_ARG,
                                      "search: no valid configuration%s of %s on %lld "
                                      "accelerators (%lld enumerated, %lld valid)",
                                      o->allow_no_fit ? "" : " fits in memory", m->name, N,
                                      out->enumerated, out->valid);
        strata_search_result_free(out); // on error nothing is held (strata plan leaked it)
        return rc;
    }
    return STRATA_OK;
}
