/* ZeRO engine, multi-rank: 20 AdamW steps of a synthetic model (linear regression over a parameter
 * arena cut into uneven segments, a tied "head" reading segment 0 again, an L2 term read in the
 * backward) under ZeRO 0/1/2/3, flat and hierarchical (hpZ, 3-level), with and without int8
 * quantisation, against the single-process run on the same global batch computed in every rank.
 *
 * Tolerance, unquantised: |p - p_ref| <= 1e-5 * max(1, |p_ref|) for every parameter and the same
 * relative bound on every step's loss. Not bitwise: the reference sums the global batch's gradient
 * in one loop, data parallelism sums per-rank partial means in the collective's order (float
 * addition is not associative), so the gradients differ in the last bits (~1e-7 relative), and
 * AdamW carries that forward. Quantised (qwZ/qgZ, int8 blocks of 256): the loss of every step is
 * within 5e-2 relative of the unquantised reference, the mean loss of the 20 steps within 1e-2, and
 * the parameters within 5e-2 * max(1, |p_ref|). (Adam divides by the running RMS of each gradient, so
 * the int8 noise on small gradient components moves a step's loss by up to ~2.5% on this tiny model;
 * it does not accumulate: the runs track the reference to the end.) bf16 gradient reductions: every
 * step's loss, the 20-step mean and the parameters within 2e-3 relative (observed 4.6e-4: each
 * gradient is off by ~2^-9 relative, Adam's normalised steps carry that into the parameters at about
 * lr x 2^-9 per step); the reduction itself is checked against its bound in test_bf16_bound. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "harness/st_test.h"
#include "strata/parallel.h"
#include "strata/trace.h"

#define STEPS  20
#define GBATCH 24
#define MAXSEG 8

typedef struct run {
    int stage;
    int nseg;
    size_t counts[MAXSEG];
    size_t bucket;
    int ntiers;
    int tier_div[3];   /* tier colour t = rank / tier_div[t] (or rank % -tier_div[t] when < 0) */
    bool qw, qg, prefetch;
    bool bf16;         /* bf16_grads */
    bool expect_secondary;
    bool check_overlap;
    int kill_rank;     /* dies mid-backward at step 3 (-1 = none) */
} run_t;

/* ---- the synthetic model ----------------------------------------------------------------------- */

typedef strata_status_t (*acq_fn)(void *, int, bool, const float **);
typedef strata_status_t (*rel_fn)(void *, int, bool);
typedef strata_status_t (*gr_fn)(void *, int);

typedef struct model {
    int S;
    size_t off[MAXSEG + 1];
    float *grads;
    void *ctx;
    acq_fn acquire;
    rel_fn release;
    gr_fn grad_ready;
    strata_zero_t *z; /* for progress(), NULL in the reference */
} model_t;

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static float xval(int step, int i, size_t j)
{
    uint64_t h = mix64(((uint64_t)step << 40) ^ ((uint64_t)i << 24) ^ j);
    return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

#define LAMBDA 1e-3f

/* bf16 gradient reductions: every step's loss and every parameter within these of the fp32
 * reference (relative, as for the quantised runs; see the top of the file). */
#define BF16_LTOL 2e-3
#define BF16_PTOL 2e-3

/* Forward and backward over samples [i0, i1) of the global batch; returns the local mean loss. */
static strata_status_t fwd_bwd(model_t *m, int step, int i0, int i1, double *loss)
{
    int nb = i1 - i0;
    double y[GBATCH] = {0}, reg = 0.0;
    const float *p;
    for (int s = 0; s < m->S; s++) {
        strata_status_t rc = m->acquire(m->ctx, s, false, &p);
        if (rc)
            return rc;
        strata_trace_begin("compute", "fwd");
        size_t n = m->off[s + 1] - m->off[s];
        for (int i = 0; i < nb; i++) {
            double acc = 0.0;
            for (size_t j = 0; j < n; j++)
                acc += (double)p[j] * xval(step, i0 + i, m->off[s] + j);
            y[i] += acc;
            if (m->z)
                strata_zero_progress(m->z);
        }
        for (size_t j = 0; j < n; j++)
            reg += (double)p[j] * p[j];
        strata_trace_end("compute", "fwd");
        if ((rc = m->release(m->ctx, s, false)))
            return rc;
    }
    // Tied head: the first parameter of segment 0 is a bias.
    strata_status_t rc = m->acquire(m->ctx, 0, false, &p);
    if (rc)
        return rc;
    for (int i = 0; i < nb; i++)
        y[i] += p[0];
    if ((rc = m->release(m->ctx, 0, false)))
        return rc;
    double r[GBATCH], l = 0.0, rmean = 0.0;
    for (int i = 0; i < nb; i++) {
        double t = sin(0.3 * (i0 + i) + 0.1 * step);
        r[i] = y[i] - t;
        l += 0.5 * r[i] * r[i];
        rmean += r[i];
    }
    *loss = l / nb + 0.5 * LAMBDA * reg;
    rmean /= nb;
    memset(m->grads, 0, m->off[m->S] * sizeof(float));
    // Backward: head, then S-1 .. 0.
    if ((rc = m->acquire(m->ctx, 0, true, &p)))
        return rc;
    m->grads[0] += (float)rmean;
    if ((rc = m->release(m->ctx, 0, true)))
        return rc;
    for (int s = m->S - 1; s >= 0; s--) {
        if ((rc = m->acquire(m->ctx, s, true, &p)))
            return rc;
        strata_trace_begin("compute", "bwd");
        size_t n = m->off[s + 1] - m->off[s];
        float *g = m->grads + m->off[s];
        for (size_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int i = 0; i < nb; i++)
                acc += r[i] * xval(step, i0 + i, m->off[s] + j);
            g[j] += (float)(acc / nb + LAMBDA * p[j]);
        }
        strata_trace_end("compute", "bwd");
        if ((rc = m->release(m->ctx, s, true)))
            return rc;
        if ((rc = m->grad_ready(m->ctx, s)))
            return rc;
    }
    return STRATA_OK;
}

/* AdamW on one range, state at state[off]. */
static void adamw(float *p, const float *g, float *mo, float *vo, size_t n, int t, float clip)
{
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * clip;
        mo[i] = b1 * mo[i] + (1 - b1) * gi;
        vo[i] = b2 * vo[i] + (1 - b2) * gi * gi;
        p[i] -= lr * ((mo[i] / c1) / (sqrtf(vo[i] / c2) + eps) + wd * p[i]);
    }
}

static float clip_of(double norm)
{
    return norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
}

static void init_params(float *p, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = 0.1f * xval(-1, 0, j);
}

/* Reference hooks: the arena itself. */
static float *ref_arena;
static size_t *ref_off;
static strata_status_t ref_acquire(void *ctx, int seg, bool bwd, const float **params)
{
    (void)ctx;
    (void)bwd;
    *params = ref_arena + ref_off[seg];
    return STRATA_OK;
}
static strata_status_t ref_release(void *ctx, int seg, bool bwd)
{
    (void)ctx;
    (void)seg;
    (void)bwd;
    return STRATA_OK;
}
static strata_status_t ref_grad_ready(void *ctx, int seg)
{
    (void)ctx;
    (void)seg;
    return STRATA_OK;
}

/* The single-process run on the whole global batch. */
static void reference(const run_t *r, float *params, double *losses)
{
    model_t m = {.S = r->nseg};
    for (int s = 0; s < r->nseg; s++)
        m.off[s + 1] = m.off[s] + r->counts[s];
    size_t P = m.off[r->nseg];
    m.grads = calloc(P, sizeof(float));
    float *mo = calloc(P, sizeof(float)), *vo = calloc(P, sizeof(float));
    init_params(params, P);
    ref_arena = params;
    ref_off = m.off;
    m.acquire = ref_acquire;
    m.release = ref_release;
    m.grad_ready = ref_grad_ready;
    for (int t = 0; t < STEPS; t++) {
        fwd_bwd(&m, t, 0, GBATCH, &losses[t]);
        double ss = 0.0;
        for (size_t j = 0; j < P; j++)
            ss += (double)m.grads[j] * m.grads[j];
        adamw(params, m.grads, mo, vo, P, t + 1, clip_of(sqrt(ss)));
    }
    free(m.grads);
    free(mo);
    free(vo);
}

/* ---- the rank function ------------------------------------------------------------------------- */

static int train(int rank, int n, void *arg)
{
    const run_t *r = arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    strata_zero_segment_t segs[MAXSEG];
    model_t m = {.S = r->nseg};
    for (int s = 0; s < r->nseg; s++) {
        segs[s] = (strata_zero_segment_t){m.off[s], r->counts[s]};
        m.off[s + 1] = m.off[s] + r->counts[s];
    }
    size_t P = m.off[r->nseg];
    float *params = malloc(P * sizeof(float)), *ref = malloc(P * sizeof(float));
    m.grads = malloc(P * sizeof(float));
    double ref_loss[STEPS], loss[STEPS];
    init_params(params, P);
    strata_zero_config_t cfg = strata_zero_config_default();
    cfg.stage = r->stage;
    cfg.nparams = P;
    cfg.nsegments = r->nseg;
    cfg.segments = segs;
    cfg.bucket_count = r->bucket;
    cfg.ntiers = r->ntiers;
    for (int t = 0; t < r->ntiers; t++)
        cfg.tier_colors[t] = r->tier_div[t] > 0 ? rank / r->tier_div[t] : rank % -r->tier_div[t];
    cfg.quant_weights = r->qw;
    cfg.quant_grads = r->qg;
    cfg.bf16_grads = r->bf16;
    cfg.prefetch = r->prefetch;
    strata_zero_t *z;
    ST_RANK_CHECK_OK(strata_zero_create(c, &cfg, params, m.grads, &z));
    strata_zero_hooks_t h = strata_zero_hooks(z);
    m.ctx = h.ctx;
    m.acquire = h.acquire;
    m.release = h.release;
    m.grad_ready = h.grad_ready;
    m.z = z;
    size_t ns = strata_zero_state_count(z);
    float *mo = calloc(ns + 1, sizeof(float)), *vo = calloc(ns + 1, sizeof(float));
    int per = GBATCH / n, i0 = rank * per;
    for (int t = 0; t < STEPS; t++) {
        if (t == 3 && rank == r->kill_rank) {
            const float *p;
            strata_zero_acquire(z, 0, false, &p);
            raise(SIGKILL);
        }
        strata_status_t rc = fwd_bwd(&m, t, i0, i0 + per, &loss[t]);
        const strata_zero_shard_t *sh;
        int k;
        if (rc == STRATA_OK)
            rc = strata_zero_step_begin(z, &sh, &k);
        double norm = 0.0;
        if (rc == STRATA_OK)
            rc = strata_zero_grad_norm(z, &norm);
        if (r->kill_rank >= 0 && rc != STRATA_OK) { // the survivors' error must name the victim
            char want[32];
            snprintf(want, sizeof want, "rank %d", r->kill_rank);
            if (rc != STRATA_ERR_PEER_FAILED || !strstr(strata_last_error(), want))
                return ST_RANK_FAIL("after the death: %s: %s", strata_status_name(rc),
                                    strata_last_error());
            // Broken for good: every later call repeats the error.
            if (strata_zero_progress(z) != rc)
                return ST_RANK_FAIL("engine not broken after %s", strata_status_name(rc));
            strata_zero_destroy(z);
            strata_comm_destroy(c);
            return 0;
        }
        ST_RANK_CHECK_OK(rc);
        for (int i = 0; i < k; i++)
            adamw(sh[i].params, sh[i].grads, mo + sh[i].state_offset, vo + sh[i].state_offset,
                  sh[i].count, t + 1, clip_of(norm));
        ST_RANK_CHECK_OK(strata_zero_step_end(z));
    }
    if (r->kill_rank >= 0)
        return ST_RANK_FAIL("the death of rank %d went unnoticed", r->kill_rank);
    ST_RANK_CHECK_OK(strata_zero_allreduce_f64(z, loss, STEPS));
    float *got = malloc(P * sizeof(float));
    ST_RANK_CHECK_OK(strata_zero_gather_params(z, got));
    reference(r, ref, ref_loss);
    bool quant = r->qw || r->qg;
    double ptol = quant ? 5e-2 : r->bf16 ? BF16_PTOL : 1e-5;
    double ltol = quant ? 5e-2 : r->bf16 ? BF16_LTOL : 1e-5, sum = 0.0, ref_sum = 0.0;
    for (int t = 0; t < STEPS; t++) {
        sum += loss[t] / n;
        ref_sum += ref_loss[t];
    }
    if (fabs(sum - ref_sum) > (quant ? 1e-2 : r->bf16 ? BF16_LTOL : 1e-5) * ref_sum)
        return ST_RANK_FAIL("mean loss over %d steps %.9g, reference %.9g", STEPS, sum / STEPS,
                            ref_sum / STEPS);
    if (getenv("ZERO_PRINT") && rank == 0 && (quant || r->bf16))
        for (int t = 0; t < STEPS; t++)
            fprintf(stderr, "step %d loss %.6f ref %.6f\n", t, loss[t] / n, ref_loss[t]);
    for (int t = 0; t < STEPS; t++) {
        double l = loss[t] / n;
        if (fabs(l - ref_loss[t]) > ltol * fmax(1.0, fabs(ref_loss[t])))
            return ST_RANK_FAIL("stage %d: loss at step %d is %.9g, reference %.9g", r->stage, t, l,
                                ref_loss[t]);
    }
    if (getenv("ZERO_PRINT") && rank == 0 && (quant || r->bf16)) {
        double worst = 0.0;
        for (size_t j = 0; j < P; j++)
            worst = fmax(worst, fabs((double)got[j] - ref[j]) / fmax(1.0, fabs(ref[j])));
        fprintf(stderr, "largest parameter difference %.3g\n", worst);
    }
    for (size_t j = 0; j < P; j++)
        if (!(fabs((double)got[j] - ref[j]) <= ptol * fmax(1.0, fabs(ref[j]))))
            return ST_RANK_FAIL("stage %d: param %zu is %.9g, reference %.9g", r->stage, j, got[j],
                                ref[j]);
    strata_zero_stats_t st = strata_zero_stats(z);
    if (r->expect_secondary && st.gathers_secondary == 0)
        return ST_RANK_FAIL("no backward gather used the secondary partition");
    if (r->check_overlap) {
        if (st.buckets_before_last == 0)
            return ST_RANK_FAIL("no gradient bucket started before the last grad_ready (%llu in all)",
                                (unsigned long long)st.buckets_issued);
        if (r->stage == 3 && (st.gathers_prefetched == 0 || st.max_prefetch_distance != 1))
            return ST_RANK_FAIL("prefetch: %llu prefetched, distance %llu (want 1)",
                                (unsigned long long)st.gathers_prefetched,
                                (unsigned long long)st.max_prefetch_distance);
        size_t biggest = 0;
        for (int s = 0; s < r->nseg; s++)
            biggest = r->counts[s] > biggest ? r->counts[s] : biggest;
        if (r->stage == 3 && st.peak_gathered_floats > 3 * biggest)
            return ST_RANK_FAIL("stage 3 kept %zu floats gathered (largest segment %zu)",
                                st.peak_gathered_floats, biggest);
    }
    free(got);
    free(mo);
    free(vo);
    free(params);
    free(ref);
    free(m.grads);
    strata_zero_destroy(z);
    strata_comm_destroy(c);
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------------- */

/* Uneven segments; one (3) and one (2) smaller than 4 ranks. */
static run_t base_run(int stage, size_t bucket)
{
    run_t r = {.stage = stage, .nseg = 6, .counts = {37, 3, 101, 64, 2, 13}, .bucket = bucket,
               .prefetch = true, .kill_rank = -1};
    return r;
}

static void run(int n, run_t *r, const char *what)
{
    st_ranks_opts_t o = {.deadline_ms = 120000, .expect_fail_rank = r->kill_rank,
                         .extra_env = r->kill_rank >= 0 ? "STRATA_COMM_TIMEOUT_MS=30000" : NULL};
    if (st_test_ranks(n, train, r, &o) != 0)
        fail_msg("%s: %d ranks, stage %d, bucket %zu, tiers %d, qw %d qg %d bf16 %d failed", what,
                 n, r->stage, r->bucket, r->ntiers, r->qw, r->qg, r->bf16);
}

static void test_stages_flat(void **state)
{
    (void)state;
    const int sizes[] = {1, 2, 3, 4};
    const size_t buckets[] = {16, 50, 1000}; // smaller than most segments, between, larger than all
    for (int stage = 0; stage <= 3; stage++)
        for (size_t i = 0; i < 4; i++)
            for (size_t b = 0; b < 3; b++) {
                run_t r = base_run(stage, buckets[b]);
                r.check_overlap = sizes[i] > 1 && buckets[b] == 16;
                run(sizes[i], &r, "flat");
            }
    run_t r = base_run(3, 40);
    r.prefetch = false;
    run(3, &r, "no prefetch");
}

static void test_hier(void **state)
{
    (void)state;
    for (int stage = 1; stage <= 3; stage++) {
        // hpZ: 4 ranks = 2 hosts of 2 (ranks 0,1 | 2,3), then hosts interleaved (0,2 | 1,3).
        run_t r = base_run(stage, 30);
        r.ntiers = 1;
        r.tier_div[0] = 2;
        r.expect_secondary = stage == 3;
        run(4, &r, "hpZ");
        r.tier_div[0] = -2;
        run(4, &r, "hpZ interleaved");
        // 3-level: 8 ranks = 2 nodes x 2 GPUs x 2 GCDs; and 4 = 1 node x 2 x 2.
        r.ntiers = 2;
        r.tier_div[0] = 2;
        r.tier_div[1] = 4;
        run(8, &r, "3-level");
        r.tier_div[1] = 8;
        run(4, &r, "3-level one node");
        // hpZ on 2 and 1 ranks (one host) and 6 = 3 hosts of 2 (odd number of hosts).
        r.ntiers = 1;
        r.tier_div[0] = 2;
        run(2, &r, "hpZ one host");
        run(1, &r, "hpZ one rank");
        run(6, &r, "hpZ 3 hosts");
    }
}

static void test_quant(void **state)
{
    (void)state;
    // Segments of several int8 blocks (256), one not a multiple of a block.
    run_t r = {.stage = 3, .nseg = 4, .counts = {700, 300, 1024, 61}, .bucket = 500,
               .prefetch = true, .kill_rank = -1};
    r.qw = true;
    run(4, &r, "qwZ");
    r.qw = false;
    r.qg = true;
    run(4, &r, "qgZ");
    r.stage = 2;
    run(3, &r, "qgZ stage 2");
    r.stage = 3;
    r.qw = true;
    r.ntiers = 1;
    r.tier_div[0] = 2;
    r.expect_secondary = true;
    run(4, &r, "qwZ+qgZ+hpZ");
    r.ntiers = 2;
    r.tier_div[1] = 4;
    run(8, &r, "qwZ+qgZ 3-level");
}

static void test_dead_peer(void **state)
{
    (void)state;
    for (int stage = 0; stage <= 3; stage += 3) {
        run_t r = base_run(stage, 16);
        r.kill_rank = 2;
        run(3, &r, "dead peer");
    }
}

/* One backward with known gradients g_r[j] = f(r, j) and known parameters: the qgZ-reduced averages
 * and the qwZ-gathered parameters are within the documented bound of the exact ones. Per level of
 * the reduction each of the level's members adds at most (its block's max |value|) / 254, divided by
 * N in the average; the gathered weights are within max|block| / 254 of the master copy. */
static float gval(int r, size_t j)
{
    return (float)(sin(0.37 * (double)j + r) * (1.0 + (double)(j % 7)));
}

/* The engine of the bound tests for this rank: r's segments (into segs, P floats in all),
 * parameters gval(99, .) and gradients gval(rank, .) in fresh arenas *p, *g, r's stage, bucket,
 * tiers and quantisation. */
static strata_zero_config_t bound_config(const run_t *r, int rank, strata_zero_segment_t *segs,
                                         size_t *P, float **p, float **g)
{
    *P = 0;
    for (int s = 0; s < r->nseg; s++) {
        segs[s] = (strata_zero_segment_t){*P, r->counts[s]};
        *P += r->counts[s];
    }
    *p = malloc(*P * sizeof(float));
    *g = malloc(*P * sizeof(float));
    for (size_t j = 0; j < *P; j++) {
        (*p)[j] = gval(99, j);
        (*g)[j] = gval(rank, j);
    }
    strata_zero_config_t cfg = strata_zero_config_default();
    cfg.stage = r->stage;
    cfg.nparams = *P;
    cfg.nsegments = r->nseg;
    cfg.segments = segs;
    cfg.bucket_count = r->bucket;
    cfg.ntiers = r->ntiers;
    for (int t = 0; t < r->ntiers; t++)
        cfg.tier_colors[t] = rank / r->tier_div[t];
    cfg.quant_weights = r->qw;
    cfg.quant_grads = r->qg;
    return cfg;
}

static int quant_bound(int rank, int n, void *arg)
{
    const run_t *r = arg;
    strata_comm_t *c = st_test_comm();
    strata_zero_segment_t segs[MAXSEG];
    size_t P;
    float *p, *g;
    strata_zero_config_t cfg = bound_config(r, rank, segs, &P, &p, &g);
    strata_zero_t *z;
    ST_RANK_CHECK_OK(strata_zero_create(c, &cfg, p, g, &z));
    for (int s = 0; s < r->nseg; s++) {
        const float *w;
        ST_RANK_CHECK_OK(strata_zero_acquire(z, s, false, &w));
        for (size_t j = 0; j < r->counts[s]; j++) {
            size_t at = segs[s].offset + j, b0 = j / STRATA_ZERO_QBLOCK * STRATA_ZERO_QBLOCK;
            double amax = 0.0;
            for (size_t q = b0; q < b0 + STRATA_ZERO_QBLOCK && q < r->counts[s]; q++)
                amax = fmax(amax, fabs(gval(99, segs[s].offset + q)));
            double err = fabs((double)w[j] - gval(99, at));
            (void)amax; // blocks are per piece, so bound by the whole segment's max (>= block max)
            double smax = 0.0;
            for (size_t q = 0; q < r->counts[s]; q++)
                smax = fmax(smax, fabs(gval(99, segs[s].offset + q)));
            if (err > (r->qw ? smax / 254.0 * 1.0001 : 1e-7 * smax))
                return ST_RANK_FAIL("gathered param %zu off by %g (segment max %g)", at, err, smax);
        }
        ST_RANK_CHECK_OK(strata_zero_release(z, s, false));
    }
    for (int s = r->nseg - 1; s >= 0; s--)
        ST_RANK_CHECK_OK(strata_zero_grad_ready(z, s));
    const strata_zero_shard_t *sh;
    int k;
    ST_RANK_CHECK_OK(strata_zero_step_begin(z, &sh, &k));
    double worst = 0.0;
    for (int i = 0; i < k; i++)
        for (size_t j = 0; j < sh[i].count; j++) {
            size_t at = sh[i].offset + j;
            double exact = 0.0, amax = 0.0;
            for (int q = 0; q < n; q++) {
                exact += gval(q, at);
                amax = fmax(amax, 8.0); // |gval| < 8 everywhere
            }
            exact /= n;
            // Levels: the partial sums grow to at most n * 8; every member's contribution is
            // off by at most its block max / 254. Bound: levels * n * (n * 8) / 254 / n.
            double bound = r->qg ? (double)(r->ntiers + 1) * n * 8.0 / 254.0 : 1e-5;
            double err = fabs((double)sh[i].grads[j] - exact);
            worst = fmax(worst, err);
            if (err > bound)
                return ST_RANK_FAIL("reduced gradient %zu off by %g > bound %g", at, err, bound);
        }
    if (r->qg && n > 1 && worst == 0.0)
        return ST_RANK_FAIL("qgZ reduced exactly: quantisation not applied?");
    ST_RANK_CHECK_OK(strata_zero_step_end(z));
    ST_RANK_CHECK_OK(strata_zero_sync(z));
    free(p);
    free(g);
    strata_zero_destroy(z);
    strata_comm_destroy(c);
    return 0;
}

static void test_quant_bound(void **state)
{
    (void)state;
    run_t r = {.stage = 3, .nseg = 3, .counts = {700, 300, 1030}, .bucket = 400, .kill_rank = -1};
    r.qw = r.qg = true;
    const int sizes[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        if (st_test_ranks(sizes[i], quant_bound, &r, NULL) != 0)
            fail_msg("quantisation bound, %d ranks, flat", sizes[i]);
    r.ntiers = 1;
    r.tier_div[0] = 2;
    if (st_test_ranks(4, quant_bound, &r, NULL) != 0)
        fail_msg("quantisation bound, hpZ");
}

/* bf16 gradient reductions (bf16_grads), one backward with known gradients g_r[j] = gval(r, j).
 *
 * (a) The reduced averages against the fp32 reduction of the bf16-rounded inputs x_r = bf16(g_r)
 * (exact in both formats; the reference sums them in double). The collective adds an element's n
 * values pairwise along a tree (a ring: a chain of n-1 hops; tiers: level by level), each addition
 * computed in fp32 and rounded to bf16; the engine widens the sum and multiplies by fl(1/n). One
 * addition's result is off by at most u' = 2^-8 + 2^-23 of its magnitude (bf16 keeps 8 significand
 * bits, round to nearest: 2^-8; the fp32 rounding before it, when the exponents differ by more than
 * 16, adds at most 2^-24 (1 + 2^-8)). No value passes through more than n-1 additions, so
 * (Higham, Accuracy and Stability, 4.2: any summation order) |sum - sum_r x_r| <= g(n-1) sum_r |x_r|,
 * g(k) = k u' / (1 - k u'). The fp32 widening is exact; the scaling by fl(1/n) adds at most 2^-23
 * relative. Bound: |got - sum_r x_r / n| <= (g(n-1) + 2^-23) sum_r |x_r| / n.
 * The wire is bf16, not fp32: for n = 1, 2, 4 the scaling is exact, so got * n is the bf16 sum
 * itself and must be a bf16 value (its low 16 bits zero); for n = 1, got is x_0 exactly.
 * (c) The engine's reduce bytes are exactly half those of the same reduction in fp32. */
static float bf16_round(float f)
{
    return st_bf16_to_f32(st_f32_to_bf16(f)); // the engine's own rounding (base/bf16.h)
}

/* One backward with g_r on a fresh engine; fills got[P] with this rank's reduced ranges (NaN
 * elsewhere) and *bytes with the engine's reduce bytes. */
static int reduce_once(strata_comm_t *c, const run_t *r, bool bf16, float *got, uint64_t *bytes)
{
    int rank = strata_comm_rank(c);
    strata_zero_segment_t segs[MAXSEG];
    size_t P;
    float *p, *g;
    strata_zero_config_t cfg = bound_config(r, rank, segs, &P, &p, &g);
    for (size_t j = 0; j < P; j++)
        got[j] = NAN;
    cfg.bf16_grads = bf16;
    strata_zero_t *z;
    ST_RANK_CHECK_OK(strata_zero_create(c, &cfg, p, g, &z));
    for (int s = r->nseg - 1; s >= 0; s--)
        ST_RANK_CHECK_OK(strata_zero_grad_ready(z, s));
    const strata_zero_shard_t *sh;
    int k;
    ST_RANK_CHECK_OK(strata_zero_step_begin(z, &sh, &k));
    for (int i = 0; i < k; i++)
        memcpy(got + sh[i].offset, sh[i].grads, sh[i].count * sizeof(float));
    ST_RANK_CHECK_OK(strata_zero_step_end(z));
    ST_RANK_CHECK_OK(strata_zero_sync(z));
    *bytes = strata_zero_stats(z).bytes_sent_reduce;
    strata_zero_destroy(z);
    free(p);
    free(g);
    return 0;
}

static int bf16_bound(int rank, int n, void *arg)
{
    (void)rank;
    const run_t *r = arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    size_t P = 0;
    for (int s = 0; s < r->nseg; s++)
        P += r->counts[s];
    float *got = malloc(P * sizeof(float)), *got32 = malloc(P * sizeof(float));
    uint64_t bytes, bytes32;
    int bad = reduce_once(c, r, false, got32, &bytes32);
    if (bad || (bad = reduce_once(c, r, true, got, &bytes)))
        return bad;
    if (n > 1 && (bytes32 == 0 || 2 * bytes != bytes32))
        return ST_RANK_FAIL("reduce bytes: bf16 %llu, fp32 %llu (want half)",
                            (unsigned long long)bytes, (unsigned long long)bytes32);
    const double up = 1.0 / 256 + 1.0 / 8388608, gam = (n - 1) * up / (1 - (n - 1) * up);
    bool pow2 = (n & (n - 1)) == 0;
    size_t seen = 0;
    for (size_t j = 0; j < P; j++) {
        if (isnan(got[j]))
            continue;
        seen++;
        double want = 0.0, mag = 0.0;
        for (int q = 0; q < n; q++) {
            double x = bf16_round(gval(q, j));
            want += x;
            mag += fabs(x);
        }
        double bound = (gam + 1.0 / 8388608) * mag / n, err = fabs(got[j] - want / n);
        if (!(err <= bound))
            return ST_RANK_FAIL("bf16-reduced gradient %zu is %.9g, want %.9g within %.3g (off %.3g)",
                                j, got[j], want / n, bound, err);
        if (pow2 && bf16_round(got[j] * (float)n) != got[j] * (float)n)
            return ST_RANK_FAIL("gradient %zu: %.9g * %d is not a bf16 value: reduced in fp32?", j,
                                got[j], n);
        if (n == 1 && got[j] != bf16_round(gval(0, j)))
            return ST_RANK_FAIL("one rank: gradient %zu is %.9g, want bf16(g) = %.9g", j, got[j],
                                bf16_round(gval(0, j)));
    }
    if (seen == 0 && P >= (size_t)n * 3)
        return ST_RANK_FAIL("no reduced gradient handed out");
    free(got);
    free(got32);
    strata_comm_destroy(c);
    return 0;
}

static void test_bf16_bound(void **state)
{
    (void)state;
    // Buckets of 400 across segments of 700, 300, 1030 floats: partial buckets and pieces.
    run_t r = {.stage = 0, .nseg = 3, .counts = {700, 300, 1030}, .bucket = 400, .kill_rank = -1};
    const int sizes[] = {1, 3, 4};
    for (int stage = 0; stage <= 3; stage++)
        for (int i = 0; i < 3; i++) {
            r.stage = stage;
            if (st_test_ranks(sizes[i], bf16_bound, &r, NULL) != 0)
                fail_msg("bf16 reduction bound, %d ranks, stage %d, flat", sizes[i], stage);
        }
    r.ntiers = 1; // 2 levels: 2 hosts of 2
    r.tier_div[0] = 2;
    for (int stage = 1; stage <= 3; stage++) {
        r.stage = stage;
        if (st_test_ranks(4, bf16_bound, &r, NULL) != 0)
            fail_msg("bf16 reduction bound, 4 ranks, stage %d, hpZ", stage);
    }
}

/* 20 steps with bf16 gradient reductions track the fp32 reference (the stated tolerances), with
 * buckets still issued during the backward (overlap). */
static void test_bf16(void **state)
{
    (void)state;
    for (int stage = 0; stage <= 3; stage++) {
        run_t r = base_run(stage, 16);
        r.bf16 = true;
        r.check_overlap = true;
        run(3, &r, "bf16 grads");
    }
    run_t r = base_run(2, 30);
    r.bf16 = true;
    r.ntiers = 2; // 3-level on 8 = 2 x 2 x 2
    r.tier_div[0] = 2;
    r.tier_div[1] = 4;
    run(8, &r, "bf16 grads 3-level");
}

/* Stage 3 follows the head's segment (head_segment): an untied head reads the final segment again
 * after the forward's last acquire, and first in the backward. The engine keeps that segment
 * gathered from the forward through the backward's own acquires of it (one gather) and prefetches
 * the segment that really comes next. Told the tied head's segment 0 instead, it frees the final
 * one between its uses and gathers it again, and prefetches segment 0 for nothing. */
static int head_order(int rank, int n, void *arg)
{
    (void)n;
    int head = *(const int *)arg;
    strata_comm_t *c = st_test_comm();
    enum { S = 3, CNT = 40 };
    float p[S * CNT], g[S * CNT];
    for (int j = 0; j < S * CNT; j++)
        p[j] = (float)j, g[j] = (float)rank;
    strata_zero_segment_t segs[S] = {{0, CNT}, {CNT, CNT}, {2 * CNT, CNT}};
    strata_zero_config_t cfg = strata_zero_config_default();
    cfg.stage = 3;
    cfg.nparams = S * CNT;
    cfg.nsegments = S;
    cfg.segments = segs;
    cfg.head_segment = head;
    strata_zero_t *z;
    ST_RANK_CHECK_OK(strata_zero_create(c, &cfg, p, g, &z));
    // The model's order for an untied head: forward 0, 1, 2, head 2; backward head 2, then 2, 1, 0.
    static const int order[][2] = {{0, 0}, {1, 0}, {2, 0}, {2, 0}, {2, 1}, {2, 1}, {1, 1}, {0, 1}};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const float *w;
        int s = order[i][0];
        ST_RANK_CHECK_OK(strata_zero_acquire(z, s, order[i][1], &w));
        for (int j = 0; j < CNT; j++)
            if (w[j] != (float)(s * CNT + j))
                return ST_RANK_FAIL("segment %d gathered %g at %d", s, (double)w[j], j);
        ST_RANK_CHECK_OK(strata_zero_release(z, s, order[i][1]));
        if (i >= 5)
            ST_RANK_CHECK_OK(strata_zero_grad_ready(z, s));
    }
    strata_zero_stats_t st = strata_zero_stats(z);
    // Forward 0, 1, 2 (2 kept for the head and the backward), backward 1 and 0: 5. Told wrong, the
    // engine gathers more.
    if (head == S - 1 ? st.gathers_issued != 5 : st.gathers_issued <= 5)
        return ST_RANK_FAIL("head segment %d: %llu gathers (untied head's order: 5)", head,
                            (unsigned long long)st.gathers_issued);
    strata_zero_destroy(z);
    strata_comm_destroy(c);
    return 0;
}

static void test_head_segment(void **state)
{
    (void)state;
    int untied = 2, tied = 0;
    if (st_test_ranks(2, head_order, &untied, NULL) != 0)
        fail_msg("untied head's order");
    if (st_test_ranks(2, head_order, &tied, NULL) != 0)
        fail_msg("the order told wrong");
}

/* Bad configurations are refused with a message, collectively (no rank hangs). */
static int bad_configs(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    float p[8] = {0}, g[8] = {0};
    strata_zero_segment_t segs[2] = {{0, 4}, {5, 4}};
    strata_zero_config_t cfg = strata_zero_config_default();
    cfg.nparams = 8;
    cfg.nsegments = 2;
    cfg.segments = segs;
    strata_zero_t *z = (strata_zero_t *)&cfg;
    if (strata_zero_create(c, &cfg, p, g, &z) != STRATA_ERR_INVALID_ARG || z != NULL)
        return ST_RANK_FAIL("a gap between segments was accepted");
    segs[1].offset = 4;
    cfg.stage = 1;
    cfg.quant_weights = true;
    if (strata_zero_create(c, &cfg, p, g, &z) != STRATA_ERR_INVALID_ARG)
        return ST_RANK_FAIL("qwZ at stage 1 was accepted");
    cfg.quant_weights = false;
    cfg.stage = 2;
    cfg.quant_grads = cfg.bf16_grads = true;
    if (strata_zero_create(c, &cfg, p, g, &z) != STRATA_ERR_INVALID_ARG ||
        !strstr(strata_last_error(), "bf16_grads"))
        return ST_RANK_FAIL("qgZ with bf16 gradients was accepted (or unexplained): %s",
                            strata_last_error());
    cfg.quant_grads = cfg.bf16_grads = false;
    cfg.head_segment = 2;
    if (strata_zero_create(c, &cfg, p, g, &z) != STRATA_ERR_INVALID_ARG ||
        !strstr(strata_last_error(), "head segment 2"))
        return ST_RANK_FAIL("a head segment past the last was accepted");
    cfg.head_segment = 0;
    cfg.stage = 3;
    cfg.ntiers = 1;
    cfg.tier_colors[0] = rank == 0 ? 0 : 1; // groups of 1 and n-1: unequal
    strata_status_t rc = strata_zero_create(c, &cfg, p, g, &z);
    if (n == 3 && (rc != STRATA_ERR_INVALID_ARG || !strstr(strata_last_error(), "equal")))
        return ST_RANK_FAIL("unequal tier groups: %s %s", strata_status_name(rc),
                            strata_last_error());
    strata_comm_destroy(c);
    return 0;
}

static void test_bad_configs(void **state)
{
    (void)state;
    if (st_test_ranks(3, bad_configs, NULL, NULL) != 0)
        fail_msg("bad configurations");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_flat), cmocka_unit_test(test_hier),
        cmocka_unit_test(test_quant_bound), cmocka_unit_test(test_quant),
        cmocka_unit_test(test_bf16_bound), cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dead_peer), cmocka_unit_test(test_head_segment),
        cmocka_unit_test(test_bad_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
