/* Pipeline chunks of the model in one process: the model cut into chunks of layers (the first with
 * the embeddings, the last with the final norm, the tied head's own copy of wte and the loss), run
 * micro-batch by micro-batch through activation slots, with the backward whole or split in two
 * phases (input gradient, then weight gradient, as zero-bubble schedules run it), equals the whole
 * model on the whole batch:
 *   - every chunk's parameters are the whole model's (by whole offset; the wte copy is wte);
 *   - the mean of the micro-batches' losses is the whole batch's loss (1e-6 relative);
 *   - every gradient, summed over the micro-batches (and, for wte, over the embedding and the
 *     head's copy), is the whole model's within 1e-5 of the tensor's largest.
 * And two chunks on one model (a stage of an interleaved or V schedule: the embeddings and the head
 * on one model share wte). Also the refusals: a chunk outside the layers, a slot out of range, a chunk fed the wrong input,
 * weight gradients twice. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/model.h"

#define B 4
#define T 16
#define M 2

static strata_gpt_config_t config(void)
{
    strata_gpt_config_t c = strata_gpt_config_default();
    c.vocab = 64;
    c.max_seq = T;
    c.n_layer = 3;
    c.n_head = 2;
    c.d_model = 16;
    return c;
}

static void batch(int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 29 + 3) % 64;
        tgt[i] = (i * 17 + 5) % 64;
    }
}

/* Runs the chunks [0, cut[0]), [cut[0], cut[1]), ... on M micro-batches; checks against whole. */
static void check_cut(const int *cut, int nchunks, bool split)
{
    strata_gpt_config_t c = config();
    strata_gpt_t *whole = NULL, *ch[4] = {0};
    assert_int_equal(strata_model_create(&c, B, 7, &whole), STRATA_OK);
    for (int k = 0; k < nchunks; k++) {
        strata_gpt_shard_t sh = strata_gpt_shard_none();
        sh.layers = (strata_gpt_layers_t){.n = 1, .begin = {k ? cut[k - 1] : 0}, .end = {cut[k]}};
        sh.slots = M;
        sh.split_backward = split;
        assert_int_equal(strata_model_create_shard(&c, &sh, B / M, 7, &ch[k]), STRATA_OK);
    }
    const float *wp = strata_model_param_arena(whole), *wg = strata_model_grad_arena(whole);
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt);
    float loss = 0;
    assert_int_equal(strata_model_forward(whole, tok, tgt, B, T, &loss), STRATA_OK);
    assert_int_equal(strata_model_backward(whole), STRATA_OK);
    for (int k = 0; k < nchunks; k++)
        strata_model_zero_grads(ch[k]);
    double mean = 0;
    int rows = B / M, n = rows * T;
    for (int mb = 0; mb < M; mb++) {
        const float *x = NULL;
        float l = 0;
        for (int k = 0; k < nchunks; k++) {
            bool last = k == nchunks - 1;
            assert_int_equal(strata_model_forward_chunk(ch[k], 0, mb, k ? NULL : tok + mb * n, x,
                                                        last ? tgt + mb * n : NULL, rows, T, &l),
                             STRATA_OK);
            x = last ? NULL : strata_model_chunk_output(ch[k], mb);
        }
        mean += l / M;
    }
    for (int mb = M - 1; mb >= 0; mb--) { // any order of micro-batches sums the same gradients
        const float *d = NULL;
        for (int k = nchunks - 1; k >= 0; k--) {
            assert_int_equal(strata_model_backward_chunk(ch[k], mb, d, 1.f / M), STRATA_OK);
            d = strata_model_chunk_input_grad(ch[k]);
            if (split)
                assert_int_equal(strata_model_backward_weights(ch[k], mb), STRATA_OK);
        }
    }
    assert_true(fabs(mean - loss) <= 1e-6 * fabs(loss));
    // Parameters and gradients by whole offset; wte's gradient summed over its holders.
    size_t P = strata_model_nparams(whole);
    float *sum = calloc(P, sizeof(float));
    for (int k = 0; k < nchunks; k++) {
        const float *p = strata_model_param_arena(ch[k]), *g = strata_model_grad_arena(ch[k]);
        for (int i = 0; i < strata_model_ntensors(ch[k]); i++) {
            const strata_tensor_info_t *t = strata_model_tensor(ch[k], i);
            assert_int_equal(t->count, (size_t)t->full_shape[0] * (t->ndim > 1 ? t->full_shape[1] : 1));
            assert_memory_equal(p + t->offset, wp + t->full_offset, t->count * sizeof(float));
            for (size_t e = 0; e < t->count; e++)
                sum[t->full_offset + e] += g[t->offset + e];
        }
    }
    for (int i = 0; i < strata_model_ntensors(whole); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(whole, i);
        float big = 0, worst = 0;
        for (size_t e = 0; e < t->count; e++) {
            big = fmaxf(big, fabsf(wg[t->offset + e]));
            worst = fmaxf(worst, fabsf(sum[t->offset + e] - wg[t->offset + e]));
        }
        if (worst > 1e-5f * fmaxf(big, 1e-6f))
            fail_msg("%s: gradient off by %g (largest %g)", t->name, (double)worst, (double)big);
    }
    free(sum);
    for (int k = 0; k < nchunks; k++)
        strata_model_destroy(ch[k]);
    strata_model_destroy(whole);
}

static void test_two_chunks(void **state)
{
    (void)state;
    int cut[] = {1, 3};
    check_cut(cut, 2, false);
    check_cut(cut, 2, true);
}

static void test_three_chunks(void **state)
{
    (void)state;
    int cut[] = {1, 2, 3};
    check_cut(cut, 3, false);
    check_cut(cut, 3, true);
}

/* Two chunks on one model, as a stage of an interleaved or V schedule holds them: model A holds
 * layers [0, 1) and [2, 3) (the embeddings and the head: one wte, no copy), model B layer 1. */
static void test_two_chunks_one_model(void **state)
{
    (void)state;
    strata_gpt_config_t c = config();
    strata_gpt_t *whole = NULL, *a = NULL, *b = NULL;
    assert_int_equal(strata_model_create(&c, B, 7, &whole), STRATA_OK);
    strata_gpt_shard_t sa = strata_gpt_shard_none(), sb = strata_gpt_shard_none();
    sa.layers = (strata_gpt_layers_t){.n = 2, .begin = {0, 2}, .end = {1, 3}};
    sa.slots = 2 * M;
    sb.layers = (strata_gpt_layers_t){.n = 1, .begin = {1}, .end = {2}};
    sb.slots = M;
    assert_int_equal(strata_model_create_shard(&c, &sa, B / M, 7, &a), STRATA_OK);
    assert_int_equal(strata_model_create_shard(&c, &sb, B / M, 7, &b), STRATA_OK);
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt);
    float loss = 0, l = 0;
    assert_int_equal(strata_model_forward(whole, tok, tgt, B, T, &loss), STRATA_OK);
    assert_int_equal(strata_model_backward(whole), STRATA_OK);
    strata_model_zero_grads(a);
    strata_model_zero_grads(b);
    int rows = B / M, n = rows * T;
    double mean = 0;
    for (int mb = 0; mb < M; mb++) { // slots of A: chunk 0 in mb, chunk 1 in M + mb
        assert_int_equal(strata_model_forward_chunk(a, 0, mb, tok + mb * n, NULL, NULL, rows, T, NULL),
                         STRATA_OK);
        assert_int_equal(strata_model_forward_chunk(b, 0, mb, NULL, strata_model_chunk_output(a, mb),
                                                    NULL, rows, T, NULL), STRATA_OK);
        assert_int_equal(strata_model_forward_chunk(a, 1, M + mb, NULL,
                                                    strata_model_chunk_output(b, mb), tgt + mb * n,
                                                    rows, T, &l), STRATA_OK);
        mean += l / M;
    }
    for (int mb = 0; mb < M; mb++) {
        assert_int_equal(strata_model_backward_chunk(a, M + mb, NULL, 1.f / M), STRATA_OK);
        assert_int_equal(strata_model_backward_chunk(b, mb, strata_model_chunk_input_grad(a),
                                                     1.f / M), STRATA_OK);
        assert_int_equal(strata_model_backward_chunk(a, mb, strata_model_chunk_input_grad(b),
                                                     1.f / M), STRATA_OK);
    }
    assert_true(fabs(mean - loss) <= 1e-6 * fabs(loss));
    const float *wg = strata_model_grad_arena(whole);
    strata_gpt_t *parts[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < strata_model_ntensors(parts[k]); i++) {
            const strata_tensor_info_t *t = strata_model_tensor(parts[k], i);
            assert_false(t->tied_copy);
            const float *g = strata_model_grad_arena(parts[k]) + t->offset;
            float big = 0, worst = 0;
            for (size_t e = 0; e < t->count; e++) {
                big = fmaxf(big, fabsf(wg[t->full_offset + e]));
                worst = fmaxf(worst, fabsf(g[e] - wg[t->full_offset + e]));
            }
            if (worst > 1e-5f * fmaxf(big, 1e-6f))
                fail_msg("%s: gradient off by %g (largest %g)", t->name, (double)worst, (double)big);
        }
    strata_model_destroy(a);
    strata_model_destroy(b);
    strata_model_destroy(whole);
}

static void test_refusals(void **state)
{
    (void)state;
    strata_gpt_config_t c = config();
    strata_gpt_shard_t sh = strata_gpt_shard_none();
    strata_gpt_t *m = NULL;
    sh.layers = (strata_gpt_layers_t){.n = 1, .begin = {2}, .end = {4}};
    assert_int_equal(strata_model_create_shard(&c, &sh, 1, 1, &m), STRATA_ERR_INVALID_ARG);
    sh.layers = (strata_gpt_layers_t){.n = 2, .begin = {1, 0}, .end = {2, 1}}; // out of order
    assert_int_equal(strata_model_create_shard(&c, &sh, 1, 1, &m), STRATA_ERR_INVALID_ARG);
    sh.layers = (strata_gpt_layers_t){.n = 1, .begin = {1}, .end = {2}};
    sh.slots = 2;
    assert_int_equal(strata_model_create_shard(&c, &sh, 1, 1, &m), STRATA_OK);
    int32_t tok[T] = {0};
    float x[T * 16] = {0};
    assert_int_equal(strata_model_forward_chunk(m, 0, 2, NULL, x, NULL, 1, T, NULL),
                     STRATA_ERR_INVALID_ARG); // slot 2 of 2
    assert_int_equal(strata_model_forward_chunk(m, 1, 0, NULL, x, NULL, 1, T, NULL),
                     STRATA_ERR_INVALID_ARG); // chunk 1 of 1
    assert_int_equal(strata_model_forward_chunk(m, 0, 0, tok, NULL, NULL, 1, T, NULL),
                     STRATA_ERR_INVALID_ARG); // a middle chunk reads activations
    assert_int_equal(strata_model_forward(m, tok, tok, 1, T, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_model_forward_chunk(m, 0, 1, NULL, x, NULL, 1, T, NULL), STRATA_OK);
    assert_int_equal(strata_model_backward_weights(m, 1), STRATA_ERR_INVALID_ARG); // not split
    strata_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_chunks),
        cmocka_unit_test(test_three_chunks),
        cmocka_unit_test(test_two_chunks_one_model),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
