/* Tensor parallelism in the model, multi-rank: a TP group of 2 or 4 ranks (the whole world) runs the
 * forward and backward of one batch, with and without sequence parallelism, in one and two row
 * blocks, and every rank checks against the one-process model computed locally on the same batch:
 *   - the loss (vocabulary-parallel cross-entropy vs the plain one) within 1e-5 relative;
 *   - its logits slice equals the reference logits' columns of its vocabulary slice;
 *   - every gradient of its part equals its part of the reference gradients within 2e-4 of the
 *     tensor's largest gradient (float sums in another order: the row-parallel products are summed
 *     over ranks, the cross-entropy's sums too);
 *   - its parameter arena holds its 1/tp of every cut tensor: arena size checked against the
 *     whole model's count.
 * The parallel block under sequence parallelism gathers ln1 once for both its layers (forward and
 * weight gradients). And the refusals: tp not dividing the heads, the vocabulary, or the MLP width,
 * named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"
#include "strata/parallel.h"

#define B 4
#define T 16

typedef struct tp_case {
    bool sp;
    int chunks;
    bool parallel; /* the parallel block (attention and MLP both read ln1) */
} tp_case_t;

static strata_gpt_config_t small_model(void)
{
    strata_gpt_config_t c = strata_gpt_config_default();
    c.vocab = 96;
    c.max_seq = T;
    c.n_layer = 2;
    c.n_head = 4;
    c.d_model = 32;
    return c;
}

static void batch(int32_t *tok, int32_t *tgt, int V)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)((i * 37 + 11) % V);
        tgt[i] = (int32_t)((i * 53 + 7) % V);
    }
}

static int run_case(int rank, int n, void *arg)
{
    const tp_case_t *tc = arg;
    strata_comm_t *comm = st_test_comm();
    if (!comm)
        return ST_RANK_FAIL("no communicator");
    strata_gpt_config_t cfg = small_model();
    cfg.parallel = tc->parallel;
    strata_tp_group_t *g = NULL;
    ST_RANK_CHECK_OK(strata_tp_group_create(comm, &g));
    strata_gpt_shard_t sh = {.tp = n, .tp_rank = rank, .sp = tc->sp, .chunks = tc->chunks,
                             .ops = strata_tp_group_ops(g)};
    strata_gpt_t *m = NULL, *ref = NULL;
    ST_RANK_CHECK_OK(strata_model_create_shard(&cfg, &sh, B, 5, &m));
    ST_RANK_CHECK_OK(strata_model_create(&cfg, B, 5, &ref));
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, cfg.vocab);
    float loss = 0, loss_ref = 0;
    ST_RANK_CHECK_OK(strata_model_forward(ref, tok, tgt, B, T, &loss_ref));
    ST_RANK_CHECK_OK(strata_model_forward(m, tok, tgt, B, T, &loss));
    if (fabsf(loss - loss_ref) > 1e-5f * fabsf(loss_ref))
        return ST_RANK_FAIL("loss %.7f, one process %.7f", (double)loss, (double)loss_ref);
    int V = cfg.vocab, Vl = V / n;
    const float *lg = strata_model_logits(m), *lr = strata_model_logits(ref);
    for (int i = 0; i < B * T; i++)
        for (int v = 0; v < Vl; v++) {
            float a = lg[(size_t)i * Vl + v], b = lr[(size_t)i * V + rank * Vl + v];
            if (fabsf(a - b) > 1e-4f * (1 + fabsf(b)))
                return ST_RANK_FAIL("logit [%d, %d]: %g, one process %g", i, rank * Vl + v,
                                    (double)a, (double)b);
        }
    ST_RANK_CHECK_OK(strata_model_backward(ref));
    ST_RANK_CHECK_OK(strata_model_backward(m));
    // Every tensor's part against the reference's part.
    const float *gr = strata_model_grad_arena(ref), *gm = strata_model_grad_arena(m);
    float *part = malloc(strata_model_nparams(ref) * sizeof(float));
    size_t cut_whole = 0, cut_part = 0;
    for (int i = 0; i < strata_model_ntensors(m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, i);
        const strata_tensor_info_t *tr = strata_model_tensor(ref, i);
        if (strcmp(t->name, tr->name) || t->full_offset != tr->offset) {
            free(part);
            return ST_RANK_FAIL("tensor %d: %s at whole offset %zu, one process %s at %zu", i,
                                t->name, t->full_offset, tr->name, tr->offset);
        }
        strata_tensor_part_copy(t, n, rank, (float *)gr + tr->offset, part, true);
        float big = 0, worst = 0;
        size_t at = 0;
        for (size_t k = 0; k < t->count; k++) {
            big = fmaxf(big, fabsf(part[k]));
            float d = fabsf(gm[t->offset + k] - part[k]);
            if (d > worst)
                worst = d, at = k;
        }
        if (worst > 2e-4f * fmaxf(big, 1e-3f)) {
            int rc = ST_RANK_FAIL("%s%s: gradient element %zu is %g, one process %g (largest %g)",
                                  t->name, t->split_dim < 0 ? " (replicated)" : "", at,
                                  (double)gm[t->offset + at], (double)part[at], (double)big);
            free(part);
            return rc;
        }
        if (t->split_dim >= 0)
            cut_whole += tr->count, cut_part += t->count;
    }
    free(part);
    size_t P = strata_model_nparams(m), Pw = strata_model_nparams(ref);
    if (cut_part * (size_t)n != cut_whole || P != Pw - cut_whole + cut_part ||
        strata_model_full_nparams(m) != Pw)
        return ST_RANK_FAIL("arena %zu of %zu: cut tensors %zu of %zu (want 1/%d)", P, Pw,
                            cut_part, cut_whole, n);
    strata_tp_stats_t st = strata_tp_group_stats(g);
    if (st.ops == 0)
        return ST_RANK_FAIL("no TP collective ran");
    strata_model_destroy(m);
    strata_model_destroy(ref);
    strata_tp_group_destroy(g);
    strata_comm_destroy(comm);
    return 0;
}

static void check_cases(int n)
{
    tp_case_t cases[] = {{false, 1, false}, {false, 2, false}, {true, 1, false},
                         {true, 2, false},  {true, 2, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fprintf(stderr, "tp %d, sp %d, chunks %d, parallel block %d\n", n, cases[i].sp,
                cases[i].chunks, cases[i].parallel);
        assert_int_equal(st_test_ranks(n, run_case, &cases[i], NULL), 0);
    }
}

static void test_tp2(void **state)
{
    (void)state;
    check_cases(2);
}

static void test_tp4(void **state)
{
    (void)state;
    check_cases(4);
}

/* The TP collectives of one forward and backward of a model with sequence parallelism in K row
 * blocks. */
static int step_ops(strata_comm_t *comm, int rank, int n, bool parallel, bool split,
                    uint64_t *ops)
{
    strata_gpt_config_t cfg = small_model();
    cfg.parallel = parallel;
    strata_tp_group_t *g = NULL;
    ST_RANK_CHECK_OK(strata_tp_group_create(comm, &g));
    strata_gpt_shard_t sh = {.tp = n, .tp_rank = rank, .sp = true, .chunks = 2,
                             .split_backward = split, .ops = strata_tp_group_ops(g)};
    strata_gpt_t *m = NULL;
    ST_RANK_CHECK_OK(strata_model_create_shard(&cfg, &sh, B, 5, &m));
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, cfg.vocab);
    float loss;
    strata_model_zero_grads(m);
    ST_RANK_CHECK_OK(strata_model_forward_chunk(m, 0, 0, tok, NULL, tgt, B, T, &loss));
    ST_RANK_CHECK_OK(strata_model_backward_chunk(m, 0, NULL, 1.f));
    if (split)
        ST_RANK_CHECK_OK(strata_model_backward_weights(m, 0));
    *ops = strata_tp_group_stats(g).ops;
    strata_model_destroy(m);
    strata_tp_group_destroy(g);
    return 0;
}

/* Under sequence parallelism the parallel block gathers ln1 once for its attention and its MLP,
 * and re-gathers it once for both weight gradients: two gathers of K row blocks a layer fewer
 * than the sequential block, whose ln1 and ln2 each need theirs (its other collectives are the
 * same), with the backward whole or split. */
static int parallel_gathers(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *comm = st_test_comm();
    if (!comm)
        return ST_RANK_FAIL("no communicator");
    for (int split = 0; split < 2; split++) {
        uint64_t seq = 0, par = 0;
        int rc = step_ops(comm, rank, n, false, split, &seq);
        if (rc == 0)
            rc = step_ops(comm, rank, n, true, split, &par);
        if (rc)
            return rc;
        uint64_t want = 2 * 2 * (uint64_t)small_model().n_layer; // 2 gathers x K = 2 x layers
        if (seq - par != want)
            return ST_RANK_FAIL("split %d: %llu TP collectives with the parallel block, %llu "
                                "with the sequential one: expected %llu fewer", split,
                                (unsigned long long)par, (unsigned long long)seq,
                                (unsigned long long)want);
    }
    strata_comm_destroy(comm);
    return 0;
}

static void test_parallel_gathers(void **state)
{
    (void)state;
    assert_int_equal(st_test_ranks(2, parallel_gathers, NULL, NULL), 0);
}

static void test_refusals(void **state)
{
    (void)state;
    strata_gpt_config_t c = small_model();
    assert_int_equal(strata_gpt_config_check_tp(&c, 4), STRATA_OK);
    assert_int_equal(strata_gpt_config_check_tp(&c, 8), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "heads"));
    c.vocab = 98;
    assert_int_equal(strata_gpt_config_check_tp(&c, 4), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "vocab"));
    c = small_model();
    c.d_ff = 126;
    assert_int_equal(strata_gpt_config_check_tp(&c, 4), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "d_ff"));
    strata_gpt_shard_t sh = {.tp = 2, .tp_rank = 0}; // no ops
    strata_gpt_t *m = NULL;
    c = small_model();
    assert_int_equal(strata_model_create_shard(&c, &sh, B, 1, &m), STRATA_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(strata_last_error(), "ops"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_tp2),
        cmocka_unit_test(test_tp4),
        cmocka_unit_test(test_parallel_gathers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
