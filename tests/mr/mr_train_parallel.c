/* Tensor and pipeline parallelism in the trainer, multi-rank: every layout of TP (1, 2, 4), with and
 * without sequence parallelism, times data parallelism with ZeRO stages 0-3 that fits 8 ranks, and
 * pipelines of 2 and 4 stages with every schedule (gpipe, 1f1b, interleaved, zb-h1, zb-v) times TP
 * and DP, trains 20 steps of the same global batch as the one-process run, and
 *   - the loss of every step matches the one-process run's within 1e-4;
 *   - every parameter after 20 steps, assembled from the run's final sharded checkpoint into the
 *     whole model, matches within 2e-4 * max(1, |p|) (AdamW divides each update by the running RMS of
 *     its gradient, so last-bit differences of the TP sums move a parameter by up to ~1e-5 here),
 *     and every parameter's total change over the 20 steps matches the one-process change within
 *     2e-3 of the largest change (LAMB's updates are ~50x smaller than AdamW's here: a trust ratio
 *     computed from one TP rank's part of a tensor instead of the whole moves them by ~1%);
 *   - every shard of that checkpoint records what it holds tensor by tensor (strata_ckpt_piece_t):
 *     names and shapes of the whole model's tensors, values equal to the assembled ones, every
 *     element of every tensor held exactly once over the shards (ZeRO ranges, TP parts, stages);
 *   - a run that checkpoints at step 10 in one layout and resumes in another (another TP, DP and
 *     ZeRO stage) reproduces the uninterrupted run's losses of steps 11-20 and its parameters.
 * Plus LAMB under TP (its per-tensor norms count a replicated tensor once), the model options under
 * ZeRO 3, TP 2 and PP 2, and the refusals. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/pipeline.h"
#include "strata/train.h"

#define STEPS 20
#define ST_PP(x) ((x) > 0 ? (x) : 1)

typedef struct layout {
    int n, tp, zero;
    bool sp, lamb;
    int resume_n, resume_tp, resume_zero; /* resume_n 0: no resume */
    int pp, vp, resume_pp;                /* 0: 1 */
    strata_schedule_t schedule;
    int layers;                           /* 0: 2 */
    const strata_gpt_config_t *opts;      /* the model options (NULL: GPT-2's shape) */
} layout_t;

typedef struct ctx {
    const layout_t *lay;
    char dir[256];
    const float *ref_losses;
    const float *ref_params;
    const float *init_params;
    size_t P;
    bool resuming;
} ctx_t;

static char data_path[256];

static strata_train_config_t config(bool lamb, int layers, const strata_gpt_config_t *opts)
{
    strata_train_config_t c = strata_train_config_default();
    c.model = opts ? *opts : strata_gpt_config_default();
    c.model.vocab = 256;
    c.model.max_seq = 16;
    c.model.n_layer = layers ? layers : 2;
    c.model.n_head = 4;
    c.model.d_model = 32;
    snprintf(c.data, sizeof c.data, "%s", data_path);
    c.batch = 8;
    c.seq = 16;
    c.steps = STEPS;
    c.lr = 3e-3f;
    c.warmup = 2;
    c.grad_clip = 1.0f;
    c.progress = false;
    c.straggler_window = 0;
    c.optim.kind = lamb ? STRATA_OPTIM_LAMB : STRATA_OPTIM_ADAMW;
    return c;
}

/* Parameters and their change since the start against the one-process run. */
static int compare_params(const float *p, const ctx_t *x)
{
    const float *ref = x->ref_params, *p0 = x->init_params;
    float big = 0;
    for (size_t i = 0; i < x->P; i++)
        big = fmaxf(big, fabsf(ref[i] - p0[i]));
    for (size_t i = 0; i < x->P; i++) {
        if (!(fabsf(p[i] - ref[i]) <= 2e-4f * fmaxf(1.f, fabsf(ref[i]))))
            return ST_RANK_FAIL("after 20 steps: parameter %zu is %.8g, one process %.8g", i,
                                (double)p[i], (double)ref[i]);
        float d = p[i] - p0[i], dr = ref[i] - p0[i];
        if (!(fabsf(d - dr) <= 2e-3f * big))
            return ST_RANK_FAIL("after 20 steps: parameter %zu changed by %.6g, one process by "
                                "%.6g (largest change %.3g)", i, (double)d, (double)dr,
                                (double)big);
    }
    return 0;
}

/* The element of the whole tensor (row-major in p->shape) that element j of p's part is: the part
 * holds, of each of split_groups blocks along split_dim, the tp_rank-th of tp equal cuts. */
static int64_t whole_index(const strata_ckpt_piece_t *p, int64_t j)
{
    int64_t cols = p->ndim > 1 ? p->shape[1] : 1, pcols = p->ndim > 1 ? p->part_shape[1] : 1;
    int64_t r = j / pcols, c = j % pcols;
    if (p->split_dim < 0)
        return r * cols + c;
    int64_t len = p->shape[p->split_dim] / p->split_groups, cut = len / p->tp;
    int64_t *x = p->split_dim == 0 ? &r : &c;
    *x = *x / cut * len + (int64_t)p->tp_rank * cut + *x % cut;
    return r * cols + c;
}

/* Every shard of step `step` in dir records what it holds ("tensors" in its metadata): each piece
 * names a tensor of the whole model with its shape, its values are that tensor's in the assembled
 * arena `params`, and the pieces of all shards cover every element of every tensor exactly once
 * (copies aside: a pipeline's tied copy of wte, a TP-replicated tensor on TP ranks > 0). */
static int check_pieces(const char *dir, int64_t step, int nranks, const strata_gpt_config_t *cfg,
                        const float *params)
{
    strata_gpt_t *w = NULL;
    ST_RANK_CHECK_OK(strata_model_create(cfg, 1, 0, &w));
    size_t P = strata_model_nparams(w);
    unsigned char *seen = calloc(P, 1);
    int rc = seen ? 0 : ST_RANK_FAIL("out of memory"), pieces = 0;
    for (int r = 0; rc == 0 && r < nranks; r++) {
        char path[512], name[64];
        strata_ckpt_path(dir, step, r, nranks, path, sizeof path);
        strata_ckpt_t *ck = NULL;
        if (strata_ckpt_open(path, &ck) < 0) {
            rc = ST_RANK_FAIL("%s", strata_last_error());
            break;
        }
        if (strata_ckpt_npieces(ck) == 0)
            rc = ST_RANK_FAIL("%s records no tensors", path);
        for (int i = 0; rc == 0 && i < strata_ckpt_npieces(ck); i++) {
            const strata_ckpt_piece_t *p = strata_ckpt_piece(ck, i);
            int k = strata_model_find_tensor(w, p->name);
            const strata_tensor_info_t *t = strata_model_tensor(w, k);
            snprintf(name, sizeof name, "params@%lld", (long long)p->range);
            const float *data = strata_ckpt_find(ck, name, NULL, NULL);
            if (!t || t->ndim != p->ndim || t->shape[0] != p->shape[0] ||
                (t->ndim > 1 && t->shape[1] != p->shape[1]) || !data) {
                rc = ST_RANK_FAIL("%s: piece %d names '%s' [%lld, %lld], not a tensor of the "
                                  "model", path, i, p->name, (long long)p->shape[0],
                                  (long long)(p->ndim > 1 ? p->shape[1] : 0));
                break;
            }
            if (p->tied_copy || (p->split_dim < 0 && p->tp_rank > 0)) // copies
                continue;
            pieces++;
            for (int64_t j = p->begin; rc == 0 && j < p->end; j++) {
                size_t at = t->offset + (size_t)whole_index(p, j);
                if (seen[at]++ || data[p->at + j - p->begin] != params[at])
                    rc = ST_RANK_FAIL("%s: '%s' element %lld of part %d/%d: %s", path, p->name,
                                      (long long)j, p->tp_rank, p->tp,
                                      seen[at] > 1 ? "held twice" : "not the assembled value");
            }
        }
        strata_ckpt_close(ck);
    }
    for (size_t i = 0; rc == 0 && i < P; i++)
        if (!seen[i])
            rc = ST_RANK_FAIL("step %lld: parameter %zu is in no shard's record", (long long)step,
                              i);
    if (rc == 0 && pieces < strata_model_ntensors(w))
        rc = ST_RANK_FAIL("%d pieces for %d tensors", pieces, strata_model_ntensors(w));
    free(seen);
    strata_model_destroy(w);
    return rc;
}

/* The data pipeline's readers (docs/train.md "Data"): of each TP group only TP rank 0, of a
 * pipeline only the stage of the first chunk (the tokens: seq bytes a row) and the stage of the
 * last chunk (the targets: seq bytes; one stage holding both reads seq + 1), each of this run's
 * rows once. Collective. */
static int check_reads(strata_comm_t *comm, strata_trainer_t *t,
                                   const strata_train_config_t *c, int n, int steps)
{
    uint64_t mine = strata_trainer_data_bytes_read(t);
    double v[2] = {(double)mine, mine > 0};
    ST_RANK_CHECK_OK(strata_allreduce(comm, v, v, 2, STRATA_DTYPE_F64, STRATA_OP_SUM));
    int P = c->pp, C = P * c->vp, dp = n / (c->tp * P);
    bool one = P == 1 || strata_pp_chunk_stage(c->schedule, P, c->vp, 0) ==
                             strata_pp_chunk_stage(c->schedule, P, c->vp, C - 1);
    double bytes = (double)steps * c->batch * (one ? c->seq + 1 : 2 * c->seq);
    int readers = dp * (one ? 1 : 2);
    if (v[0] != bytes || (int)v[1] != readers)
        return ST_RANK_FAIL("%d ranks (tp %d, pp %d): %d ranks read %.0f bytes of the data file, "
                            "expected %d ranks reading %.0f (this rank: %llu)", n, c->tp, P,
                            (int)v[1], v[0], readers, bytes, (unsigned long long)mine);
    return 0;
}

static int run_layout(int rank, int n, void *arg)
{
    ctx_t *x = arg;
    const layout_t *l = x->lay;
    strata_train_config_t c = config(l->lamb, l->layers, l->opts);
    c.tp = x->resuming ? l->resume_tp : l->tp;
    c.pp = ST_PP(x->resuming ? l->resume_pp : l->pp);
    c.vp = c.pp > 1 && l->vp ? l->vp : 1;
    c.schedule = l->schedule;
    c.zero = x->resuming ? l->resume_zero : l->zero;
    c.sp = l->sp && c.tp > 1;
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s", x->dir);
    c.ckpt_every = 10;
    c.ckpt_keep = 5;
    if (l->resume_n && !x->resuming)
        c.steps = STEPS; // the first half writes step 10; the run stops there below
    strata_comm_t *comm = st_test_comm();
    if (!comm)
        return ST_RANK_FAIL("no communicator");
    strata_trainer_t *t = NULL;
    ST_RANK_CHECK_OK(strata_trainer_create(&c, &t));
    strata_zero_config_t zc = strata_zero_config_default();
    ST_RANK_CHECK_OK(strata_trainer_distribute(t, comm, &zc));
    float losses[STEPS] = {0};
    int64_t first = 0;
    if (x->resuming) {
        ST_RANK_CHECK_OK(strata_trainer_resume(t, &first));
        if (first != 10)
            return ST_RANK_FAIL("resumed at step %lld, expected 10", (long long)first);
        ST_RANK_CHECK_OK(strata_trainer_run(t, losses));
    } else if (l->resume_n) {
        for (int s = 0; s < 10; s++) {
            strata_step_info_t info;
            ST_RANK_CHECK_OK(strata_trainer_step(t, &info));
            losses[s] = info.loss;
        }
        ST_RANK_CHECK_OK(strata_trainer_checkpoint(t));
    } else {
        ST_RANK_CHECK_OK(strata_trainer_run(t, losses));
    }
    int upto = l->resume_n && !x->resuming ? 10 : STEPS;
    for (int s = (int)first; s < upto; s++)
        if (!(fabsf(losses[s] - x->ref_losses[s]) <= 1e-4f * fabsf(x->ref_losses[s])))
            return ST_RANK_FAIL("step %d: loss %.7f, one process %.7f", s + 1, (double)losses[s],
                                (double)x->ref_losses[s]);
    if (upto == STEPS && check_reads(comm, t, &c, n, x->resuming ? STEPS - 10 : STEPS) != 0)
        return 1; // only the reading ranks read the file, each row's window once
    int rc = 0;
    if (upto == STEPS && rank == 0) { // the final checkpoint, assembled into the whole model
        strata_ckpt_full_t full;
        ST_RANK_CHECK_OK(strata_ckpt_assemble(strata_trainer_model(t), x->dir, STEPS, false, &full));
        if (full.nparams != x->P)
            rc = ST_RANK_FAIL("assembled %zu parameters, want %zu", full.nparams, x->P);
        else
            rc = compare_params(full.params, x);
        if (rc == 0)
            rc = check_pieces(x->dir, STEPS, n, &c.model, full.params);
        strata_ckpt_full_free(&full);
    }
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return rc;
}

/* The one-process run: losses of every step and the final parameters. */
static void reference(bool lamb, int layers, const strata_gpt_config_t *opts, float *losses,
                      float **params, float **init, size_t *P)
{
    strata_train_config_t c = config(lamb, layers, opts);
    strata_trainer_t *t = NULL;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    strata_gpt_t *m = strata_trainer_model(t);
    *P = strata_model_nparams(m);
    *params = malloc(*P * sizeof(float));
    *init = malloc(*P * sizeof(float));
    memcpy(*init, strata_model_param_arena(m), *P * sizeof(float));
    assert_int_equal(strata_trainer_run(t, losses), STRATA_OK);
    memcpy(*params, strata_model_param_arena(m), *P * sizeof(float));
    strata_trainer_destroy(t);
}

static void check(const layout_t *ls, size_t count, bool lamb)
{
    float losses[STEPS];
    float *params = NULL, *init = NULL;
    size_t P = 0;
    reference(lamb, ls[0].layers, ls[0].opts, losses, &params, &init, &P);
    for (size_t i = 0; i < count; i++) {
        const layout_t *l = &ls[i];
        ctx_t x = {.lay = l, .ref_losses = losses, .ref_params = params, .init_params = init,
                   .P = P};
        snprintf(x.dir, sizeof x.dir, "/tmp/mr_train_tp.XXXXXX");
        assert_non_null(mkdtemp(x.dir));
        fprintf(stderr, "%d ranks: tp %d%s, pp %d", l->n, l->tp, l->sp ? " sp" : "", ST_PP(l->pp));
        if (ST_PP(l->pp) > 1)
            fprintf(stderr, " %s (vp %d)", strata_schedule_name(l->schedule), l->vp ? l->vp : 1);
        fprintf(stderr, ", zero %d%s", l->zero, lamb ? ", lamb" : "");
        if (l->resume_n)
            fprintf(stderr, " -> resumed on %d ranks: tp %d, pp %d, zero %d", l->resume_n,
                    l->resume_tp, ST_PP(l->resume_pp), l->resume_zero);
        fputc('\n', stderr);
        assert_int_equal(st_test_ranks(l->n, run_layout, &x, NULL), 0);
        if (l->resume_n) {
            x.resuming = true;
            assert_int_equal(st_test_ranks(l->resume_n, run_layout, &x, NULL), 0);
        }
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", x.dir);
        assert_int_equal(system(cmd), 0);
    }
    free(params);
    free(init);
}

static void test_layouts_2_4(void **state)
{
    (void)state;
    const layout_t ls[] = {
        {2, 2, 0, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {2, 2, 1, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
        {4, 4, 0, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {4, 4, 2, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
        {4, 2, 0, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},  {4, 2, 1, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
        {4, 2, 2, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {4, 2, 3, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
        // data parallel alone (the shards' records of ZeRO ranges)
        {2, 1, 2, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {4, 1, 3, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

static void test_layouts_8(void **state)
{
    (void)state;
    const layout_t ls[] = {
        {8, 2, 3, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {8, 4, 2, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
        {8, 2, 1, true, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},  {8, 4, 0, false, false, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

static void test_lamb(void **state)
{
    (void)state;
    const layout_t ls[] = {{4, 2, 1, true, true, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, {4, 4, 0, false, true, 0, 0, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}};
    check(ls, sizeof ls / sizeof ls[0], true);
}

static void test_resume_across_tp(void **state)
{
    (void)state;
    const layout_t ls[] = {
        {4, 2, 1, false, false, 4, 4, 0, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, // TP 2 x DP 2, ZeRO-1 -> TP 4, ZeRO-0
        {4, 4, 0, true, false, 4, 1, 3, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL},  // TP 4 (SP) -> DP 4, ZeRO-3
        {2, 1, 2, false, false, 4, 2, 2, 0, 0, 0, STRATA_SCHED_GPIPE, 0, NULL}, // DP 2 -> TP 2 x DP 2
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

/* Pipelines of a 4-layer model: every schedule, with TP and DP. */
#define PPL(n, tp, pp, vp, sched, zero) {n, tp, zero, false, false, 0, 0, 0, pp, vp, 0, sched, 4, NULL}

static void test_pipeline_2(void **state)
{
    (void)state;
    const layout_t ls[] = {
        PPL(2, 1, 2, 1, STRATA_SCHED_GPIPE, 0),       PPL(2, 1, 2, 1, STRATA_SCHED_1F1B, 0),
        PPL(2, 1, 2, 2, STRATA_SCHED_INTERLEAVED, 0), PPL(2, 1, 2, 1, STRATA_SCHED_ZB_H1, 0),
        PPL(2, 1, 2, 2, STRATA_SCHED_ZB_V, 0),
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

static void test_pipeline_3d(void **state)
{
    (void)state;
    const layout_t ls[] = {
        PPL(4, 1, 2, 1, STRATA_SCHED_1F1B, 1),        PPL(4, 2, 2, 1, STRATA_SCHED_ZB_H1, 0),
        PPL(4, 1, 4, 1, STRATA_SCHED_1F1B, 0),        PPL(8, 2, 2, 1, STRATA_SCHED_1F1B, 1),
        PPL(8, 2, 2, 2, STRATA_SCHED_INTERLEAVED, 0), PPL(8, 1, 4, 1, STRATA_SCHED_ZB_H1, 1),
        PPL(8, 2, 2, 2, STRATA_SCHED_ZB_V, 1),        PPL(8, 1, 2, 1, STRATA_SCHED_GPIPE, 0),
        PPL(4, 1, 2, 1, STRATA_SCHED_ZB_H1, 2),       PPL(4, 1, 2, 2, STRATA_SCHED_INTERLEAVED, 3),
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

static void test_resume_across_pp(void **state)
{
    (void)state;
    const layout_t ls[] = {
        // PP 2 (1F1B) x DP 2 -> TP 2 x DP 2 without a pipeline; PP 4 (ZB-H1) -> PP 2 x TP 2.
        {4, 1, 1, false, false, 4, 2, 0, 2, 1, 1, STRATA_SCHED_1F1B, 4, NULL},
        {4, 1, 0, false, false, 4, 2, 1, 4, 1, 2, STRATA_SCHED_ZB_H1, 4, NULL},
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

/* The model options (docs/train.md) under ZeRO 3, TP 2 with sequence parallelism and PP 2 against
 * the one-process run of the same options, 4 layers: the parallel block with a sliding window of 5
 * (of 16 positions), and the Llama shape (RMSNorm, SwiGLU, RoPE, no biases, an untied head) with
 * grouped-query attention (2 k/v heads for 4 query heads: one a TP rank), the latter also resumed
 * from a TP 2 x PP 2 checkpoint as data parallel ZeRO 3. */
#define OPT(n, tp, sp, pp, zero, opts) {n, tp, zero, sp, false, 0, 0, 0, pp, 1, 0, STRATA_SCHED_1F1B, 4, opts}

static strata_gpt_config_t model_with(bool llama, bool parallel, int window)
{
    strata_gpt_config_t c = strata_gpt_config_default();
    if (llama)
        strata_gpt_config_llama(&c);
    c.parallel = parallel;
    c.window = window;
    return c;
}

static void test_options_parallel_swa(void **state)
{
    (void)state;
    strata_gpt_config_t o = model_with(false, true, 5);
    const layout_t ls[] = {OPT(2, 1, false, 0, 3, &o), OPT(2, 2, true, 0, 0, &o),
                           OPT(2, 1, false, 2, 0, &o)};
    check(ls, sizeof ls / sizeof ls[0], false);
}

static void test_options_llama(void **state)
{
    (void)state;
    strata_gpt_config_t o = model_with(true, false, 0);
    o.n_kv_head = 2;
    const layout_t ls[] = {
        OPT(2, 1, false, 0, 3, &o), OPT(2, 2, true, 0, 0, &o), OPT(2, 1, false, 2, 0, &o),
        {4, 2, 1, false, false, 2, 1, 3, 2, 1, 0, STRATA_SCHED_1F1B, 4, &o},
    };
    check(ls, sizeof ls / sizeof ls[0], false);
}

/* Side work in the bubbles (--harvest eval,sample,data,gemm) does not change the training: the
 * losses of a PP 2 run with and without it are bit-identical; the side work ran; the eval side
 * task's validation loss of its snapshot equals the blocking evaluation's at that step; the sample
 * side task generated its text; each rank's reads of the data file are whole batches of the part
 * of each row its stage uses (the data and eval side tasks read only that part, as the step
 * does). */
typedef struct harvest_run {
    bool harvest;
    char path[256];    /* rank 0 writes the losses there */
    char metrics[256]; /* and its metrics there */
    char bytes[256];   /* rank r the bytes it read of the data file to bytes.r */
} harvest_run_t;

static int run_harvest(int rank, int n, void *arg)
{
    (void)n;
    harvest_run_t *h = arg;
    strata_train_config_t c = config(false, 4, NULL);
    c.pp = 2;
    c.steps = 10;
    c.micro_batch = 1;
    c.eval_every = 4;
    c.eval_batches = 2;
    snprintf(c.metrics, sizeof c.metrics, "%s", h->metrics);
    if (h->harvest)
        snprintf(c.harvest, sizeof c.harvest, "eval,sample,data,gemm");
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = NULL;
    ST_RANK_CHECK_OK(strata_trainer_create(&c, &t));
    strata_zero_config_t zc = strata_zero_config_default();
    ST_RANK_CHECK_OK(strata_trainer_distribute(t, comm, &zc));
    float losses[STEPS] = {0};
    ST_RANK_CHECK_OK(strata_trainer_run(t, losses));
    char bp[300];
    snprintf(bp, sizeof bp, "%s.%d", h->bytes, rank);
    FILE *b = fopen(bp, "w");
    if (!b || fprintf(b, "%llu\n", (unsigned long long)strata_trainer_data_bytes_read(t)) < 0 ||
        fclose(b) != 0)
        return ST_RANK_FAIL("cannot write %s", bp);
    if (rank == 0) {
        FILE *f = fopen(h->path, "wb");
        if (!f || fwrite(losses, sizeof losses, 1, f) != 1)
            return ST_RANK_FAIL("cannot write %s", h->path);
        fclose(f);
    }
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return 0;
}

/* The value of "key": in the metrics line of `step` (its text up to the next , or }); false if none. */
static bool metric_at(const char *path, int step, const char *key, char *out, size_t size)
{
    FILE *f = fopen(path, "r");
    char line[8192], want[32], k[64];
    snprintf(want, sizeof want, "{\"step\":%d,", step);
    snprintf(k, sizeof k, "\"%s\":", key);
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        const char *v = strncmp(line, want, strlen(want)) == 0 ? strstr(line, k) : NULL;
        if (v) {
            v += strlen(k);
            snprintf(out, size, "%.*s", (int)strcspn(v, ",}"), v);
            found = true;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* The sum over the metrics lines of one number after `key` (the harvested seconds). */
static double metric_sum(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[8192], k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    double sum = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *v = strstr(line, k);
        if (v)
            sum += atof(v + strlen(k));
    }
    if (f)
        fclose(f);
    return sum;
}

static void test_harvest_identical(void **state)
{
    (void)state;
    harvest_run_t runs[2] = {{.harvest = false}, {.harvest = true}};
    float got[2][STEPS];
    for (int i = 0; i < 2; i++) {
        snprintf(runs[i].path, sizeof runs[i].path, "/tmp/mr_train_harvest.%d.%d", (int)getpid(), i);
        snprintf(runs[i].metrics, sizeof runs[i].metrics, "/tmp/mr_train_harvest.%d.%d.jsonl",
                 (int)getpid(), i);
        snprintf(runs[i].bytes, sizeof runs[i].bytes, "/tmp/mr_train_harvest.%d.%d.bytes",
                 (int)getpid(), i);
        unlink(runs[i].metrics);
        assert_int_equal(st_test_ranks(2, run_harvest, &runs[i], NULL), 0);
        FILE *f = fopen(runs[i].path, "rb");
        assert_non_null(f);
        assert_int_equal(fread(got[i], sizeof got[i], 1, f), 1);
        fclose(f);
        unlink(runs[i].path);
    }
    assert_memory_equal(got[0], got[1], 10 * sizeof(float));
    for (int r = 0; r < 2; r++) {
        unsigned long long b[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            char bp[300];
            snprintf(bp, sizeof bp, "%s.%d", runs[i].bytes, r);
            FILE *f = fopen(bp, "r");
            assert_non_null(f);
            assert_int_equal(fscanf(f, "%llu", &b[i]), 1);
            fclose(f);
            unlink(bp);
        }
        // Each stage reads one part of each row, seq bytes (the tokens, or the targets), never
        // the seq + 1 window of both: every read is whole batches of that. (How many evaluations
        // the side task finishes before the run ends varies, so the totals may differ.)
        strata_train_config_t c = config(false, 4, NULL);
        unsigned long long part = (unsigned long long)c.batch * (unsigned long long)c.seq;
        for (int i = 0; i < 2; i++)
            if (b[i] == 0 || b[i] % part)
                fail_msg("rank %d read %llu bytes of the data file %s --harvest: not whole "
                         "batches of one part of each row (%llu bytes)", r, b[i],
                         i ? "with" : "without", part);
    }
    assert_true(metric_sum(runs[1].metrics, "harvest_s") > 0); // side work ran
    // The eval side task's pass (finished in the bubbles, or at the last step) on the snapshot of
    // step 4 or 8: the blocking evaluation's loss at that step, to the metrics' 6 decimals.
    char side_step[32] = "", side[32] = "", blocking[32] = "";
    int at = 0;
    for (int s = 1; s <= 10 && !at; s++)
        if (metric_at(runs[1].metrics, s, "side_val_step", side_step, sizeof side_step))
            at = s;
    assert_true(at > 0);
    assert_true(metric_at(runs[1].metrics, at, "side_val_loss", side, sizeof side));
    assert_true(atoi(side_step) == 4 || atoi(side_step) == 8);
    assert_true(metric_at(runs[0].metrics, atoi(side_step), "val_loss", blocking, sizeof blocking));
    assert_string_equal(side, blocking);
    char text[256] = "";
    bool sampled = false;
    for (int s = 1; s <= 10 && !sampled; s++)
        sampled = metric_at(runs[1].metrics, s, "side_sample", text, sizeof text);
    assert_true(sampled);
    assert_true(strlen(text) >= 2 + 64 - 1); // "...": 64 generated bytes (some escaped)
    unlink(runs[0].metrics);
    unlink(runs[1].metrics);
}

/* A rank dies in its first bubble of step 3 (while waiting for a neighbour): every other rank's step
 * fails with the communicator's error naming it, within the timeout, and nothing hangs. */
#define VICTIM 2

static void die_in_bubble(void *ctx, const strata_pp_bubble_t *b)
{
    (void)b;
    if (*(const int64_t *)ctx == 3)
        raise(SIGKILL);
}

static int kill_mid_pipeline(int rank, int n, void *arg)
{
    (void)n;
    const layout_t *l = arg;
    strata_train_config_t c = config(false, l->layers, NULL);
    c.tp = l->tp;
    c.pp = l->pp;
    c.schedule = l->schedule;
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = NULL;
    ST_RANK_CHECK_OK(strata_trainer_create(&c, &t));
    strata_zero_config_t zc = strata_zero_config_default();
    ST_RANK_CHECK_OK(strata_trainer_distribute(t, comm, &zc));
    int64_t step = 0;
    if (rank == VICTIM)
        strata_pipeline_set_bubble_hook(strata_trainer_pipeline(t), die_in_bubble, &step);
    for (step = 1; step <= STEPS; step++) {
        strata_step_info_t info;
        strata_status_t rc = strata_trainer_step(t, &info);
        if (rc == STRATA_OK)
            continue;
        char want[32];
        snprintf(want, sizeof want, "rank %d", VICTIM);
        if (step != 3 || (rc != STRATA_ERR_PEER_FAILED && rc != STRATA_ERR_TIMEOUT) ||
            !strstr(strata_last_error(), want))
            return ST_RANK_FAIL("step %lld: %s: %s (want rank %d named at step 3)",
                                (long long)step, strata_status_name(rc), strata_last_error(),
                                VICTIM);
        strata_trainer_destroy(t);
        strata_comm_destroy(comm);
        return 0;
    }
    return ST_RANK_FAIL("the death of rank %d went unnoticed", VICTIM);
}

static void test_pipeline_kill(void **state)
{
    (void)state;
    const layout_t l = PPL(4, 1, 4, 1, STRATA_SCHED_1F1B, 0);
    st_ranks_opts_t o = {.deadline_ms = 120000, .expect_fail_rank = VICTIM,
                         .extra_env = "STRATA_COMM_TIMEOUT_MS=20000"};
    assert_int_equal(st_test_ranks(l.n, kill_mid_pipeline, (void *)&l, &o), 0);
}

static int refuse(int rank, int n, void *arg)
{
    (void)rank, (void)n;
    const char *want = arg;
    strata_train_config_t c = config(false, 0, NULL);
    c.tp = strcmp(want, "heads") == 0 ? 8 : 2;
    if (strcmp(want, "vocab") == 0) {
        c.tp = 2;
        c.model.vocab = 255;
    }
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = NULL;
    ST_RANK_CHECK_OK(strata_trainer_create(&c, &t));
    strata_zero_config_t zc = strata_zero_config_default();
    strata_status_t rc = strata_trainer_distribute(t, comm, &zc);
    if (rc != STRATA_ERR_INVALID_ARG || !strstr(strata_last_error(), want))
        return ST_RANK_FAIL("distribute: %s (%s), want a refusal naming '%s'",
                            strata_status_name(rc), strata_last_error(), want);
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return 0;
}

static void test_refusals(void **state)
{
    (void)state;
    assert_int_equal(st_test_ranks(8, refuse, "heads", NULL), 0);  // tp 8 > 4 heads
    assert_int_equal(st_test_ranks(4, refuse, "vocab", NULL), 0);  // 255 tokens over 2
    assert_int_equal(st_test_ranks(3, refuse, "does not divide", NULL), 0); // tp 2 over 3 ranks
}

static int setup(void **state)
{
    (void)state;
    snprintf(data_path, sizeof data_path, "/tmp/mr_train_tp.%d.txt", (int)getpid());
    FILE *f = fopen(data_path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < 400; i++)
        fprintf(f, "Tale %d. The tensor rides the fastest tier; the pipeline the zone. ", i);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(data_path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_layouts_2_4),
        cmocka_unit_test(test_layouts_8),
        cmocka_unit_test(test_lamb),
        cmocka_unit_test(test_resume_across_tp),
        cmocka_unit_test(test_pipeline_2),
        cmocka_unit_test(test_pipeline_3d),
        cmocka_unit_test(test_resume_across_pp),
        cmocka_unit_test(test_options_parallel_swa),
        cmocka_unit_test(test_options_llama),
        cmocka_unit_test(test_pipeline_kill),
        cmocka_unit_test(test_harvest_identical),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
