/* The model against PyTorch: tests/fixtures/model/gpt_*.safetensors (made by
 * tests/fixtures/make_model_fixtures.py with Debian's python3-torch) hold a small GPT's parameters,
 * a batch, and PyTorch's logits, loss and every gradient, one file per option set (GPT-2's shape;
 * the parallel block with sliding-window attention; the Llama shape: RMSNorm, SwiGLU, RoPE, no
 * biases; and with grouped-query attention and an untied head). strata must hold exactly the
 * fixture's tensors by name and shape and reproduce them within float tolerances, with and without
 * parameter hooks (which must be called in the documented order). */
#include "harness/st_test.h"
#include "strata/model.h"
#include "strata/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char fixture[1024];

static void find_fixture(const char *name)
{
    snprintf(fixture, sizeof fixture, "%s", __FILE__);
    char *slash = strrchr(fixture, '/');
    *slash = 0;
    size_t n = strlen(fixture);
    snprintf(fixture + n, sizeof fixture - n, "/../fixtures/model/%s.safetensors", name);
}

static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]) - (atol + rtol * fabs(want[i]));
        if (err > worst) {
            worst = err;
            at = i;
        }
    }
    if (worst > 0)
        fail_msg("%s[%zu]: strata %.8g, torch %.8g", what, at, (double)got[at], (double)want[at]);
}

typedef struct fx {
    strata_ckpt_t *ck;
    strata_gpt_t *m;
    int32_t tok[16], tgt[16];
    int B, T;
} fx_t;

static void fx_open(fx_t *f, const char *name)
{
    find_fixture(name);
    assert_int_equal(strata_ckpt_open(fixture, &f->ck), STRATA_OK);
    strata_gpt_config_t cfg = strata_gpt_config_default();
    assert_int_equal(strata_gpt_config_from_json(strata_ckpt_meta(f->ck)->config, fixture, &cfg),
                     STRATA_OK);
    f->B = 2;
    f->T = 8;
    assert_int_equal(strata_model_create(&cfg, f->B, 1, &f->m), STRATA_OK);
    // The fixture holds each tensor, its gradient, and tokens, targets, logits, loss: no tensor
    // torch has and strata lacks (or the reverse, checked by the loads below).
    assert_int_equal(strata_ckpt_ntensors(f->ck), 2 * strata_model_ntensors(f->m) + 4);
    float *P = strata_model_param_arena(f->m);
    for (int i = 0; i < strata_model_ntensors(f->m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(f->m, i);
        strata_ckpt_tensor_t ct = {t->name, t->ndim, {t->shape[0], t->shape[1]}, P + t->offset};
        assert_int_equal(strata_ckpt_load(f->ck, &ct, 1), STRATA_OK);
    }
    const float *tk = strata_ckpt_find(f->ck, "tokens", NULL, NULL);
    const float *tg = strata_ckpt_find(f->ck, "targets", NULL, NULL);
    assert_non_null(tk);
    assert_non_null(tg);
    for (int i = 0; i < f->B * f->T; i++) {
        f->tok[i] = (int32_t)tk[i];
        f->tgt[i] = (int32_t)tg[i];
    }
}

static void fx_check(fx_t *f)
{
    float loss = 0;
    assert_int_equal(strata_model_forward(f->m, f->tok, f->tgt, f->B, f->T, &loss), STRATA_OK);
    const float *want_logits = strata_ckpt_find(f->ck, "logits", NULL, NULL);
    expect_close("logits", strata_model_logits(f->m), want_logits, (size_t)f->B * f->T * 256, 1e-5,
                 1e-4);
    const float *want_loss = strata_ckpt_find(f->ck, "loss", NULL, NULL);
    expect_close("loss", &loss, want_loss, 1, 1e-6, 1e-5);
    assert_int_equal(strata_model_backward(f->m), STRATA_OK);
    const float *G = strata_model_grad_arena(f->m);
    for (int i = 0; i < strata_model_ntensors(f->m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(f->m, i);
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        const float *want = strata_ckpt_find(f->ck, name, NULL, NULL);
        if (!want)
            fail_msg("fixture has no %s", name);
        expect_close(name, G + t->offset, want, t->count, 2e-6, 1e-3);
    }
}

static void fx_close(fx_t *f)
{
    strata_model_destroy(f->m);
    strata_ckpt_close(f->ck);
}

static void matches_torch(const char *name)
{
    fx_t f;
    fx_open(&f, name);
    fx_check(&f);
    // A second pass gives the same (backward overwrites, it does not accumulate).
    fx_check(&f);
    fx_close(&f);
}

static void test_matches_torch(void **state)
{
    (void)state;
    matches_torch("gpt_small");
}

static void test_parallel_swa_matches_torch(void **state)
{
    (void)state;
    matches_torch("gpt_parallel_swa");
    const strata_gpt_config_t *c = NULL;
    fx_t f;
    fx_open(&f, "gpt_parallel_swa");
    c = strata_model_config(f.m);
    assert_true(c->parallel);
    assert_int_equal(c->window, 3);
    assert_int_equal(strata_model_find_tensor(f.m, "h.0.ln2.weight"), -1);
    fx_close(&f);
}

static void test_llama_matches_torch(void **state)
{
    (void)state;
    matches_torch("gpt_llama");
    fx_t f;
    fx_open(&f, "gpt_llama");
    const strata_gpt_config_t *c = strata_model_config(f.m);
    assert_true(c->norm == STRATA_GPT_NORM_RMSNORM && c->mlp == STRATA_GPT_MLP_SWIGLU &&
                c->pos == STRATA_GPT_POS_ROPE && c->no_bias);
    assert_int_equal(strata_model_find_tensor(f.m, "wpe"), -1);
    assert_int_equal(strata_model_find_tensor(f.m, "h.1.attn.qkv.bias"), -1);
    assert_true(strata_model_find_tensor(f.m, "h.1.mlp.w3.weight") >= 0);
    fx_close(&f);
}

/* Hooks that serve each segment from a private copy (as a ZeRO-3 gather would) and log the calls. */
typedef struct hook_log {
    strata_gpt_t *m;
    float *copy;
    char calls[256][16];
    int n;
    int held;
    int fail_at; /* call index that fails, or -1 */
} hook_log_t;

static strata_status_t h_acquire(void *ctx, int seg, bool bwd, const float **params)
{
    hook_log_t *h = ctx;
    if (h->n == h->fail_at)
        return STRATA_ERR_PEER_FAILED;
    snprintf(h->calls[h->n++], 16, "a%c%d", bwd ? 'b' : 'f', seg);
    size_t off, cnt;
    strata_model_segment(h->m, seg, &off, &cnt);
    memcpy(h->copy + off, strata_model_param_arena(h->m) + off, cnt * sizeof(float));
    *params = h->copy + off;
    h->held++;
    return STRATA_OK;
}

static strata_status_t h_release(void *ctx, int seg, bool bwd)
{
    hook_log_t *h = ctx;
    bool fail = h->n == h->fail_at;
    snprintf(h->calls[h->n++], 16, "r%c%d", bwd ? 'b' : 'f', seg);
    size_t off, cnt;
    strata_model_segment(h->m, seg, &off, &cnt);
    // Poison the private copy: reading after release would show up in the gradients.
    for (size_t i = 0; i < cnt; i++)
        h->copy[off + i] = NAN;
    h->held--;
    return fail ? STRATA_ERR_PEER_FAILED : STRATA_OK;
}

static strata_status_t h_ready(void *ctx, int seg)
{
    hook_log_t *h = ctx;
    bool fail = h->n == h->fail_at;
    snprintf(h->calls[h->n++], 16, "g%d", seg);
    return fail ? STRATA_ERR_PEER_FAILED : STRATA_OK;
}

static void test_hooks(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "gpt_small");
    hook_log_t h = {.m = f.m, .fail_at = -1};
    h.copy = calloc(strata_model_nparams(f.m), sizeof(float));
    strata_param_hooks_t hooks = {&h, h_acquire, h_release, h_ready};
    strata_model_set_hooks(f.m, &hooks);
    // Scribble over the model's own arena copy inside hooks: results must still match torch.
    fx_check(&f);
    assert_int_equal(h.held, 0);
    int S = strata_model_nsegments(f.m);
    assert_int_equal(S, 4);
    const char *want[] = {"af0", "rf0", "af1", "rf1", "af2", "rf2", "af3", "rf3", "af0", "rf0",
                          "ab0", "rb0", "ab3", "rb3", "g3",  "ab2", "rb2", "g2",  "ab1", "rb1",
                          "g1",  "ab0", "rb0", "g0"};
    assert_int_equal(h.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < h.n; i++)
        assert_string_equal(h.calls[i], want[i]);
    // Segments tile the arena in order, and tensors never straddle them.
    size_t next = 0;
    for (int s = 0; s < S; s++) {
        size_t off, cnt;
        strata_model_segment(f.m, s, &off, &cnt);
        assert_int_equal(off, next);
        next = off + cnt;
    }
    assert_int_equal(next, strata_model_nparams(f.m));
    for (int i = 0; i < strata_model_ntensors(f.m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(f.m, i);
        size_t off, cnt;
        strata_model_segment(f.m, t->segment, &off, &cnt);
        assert_true(t->offset >= off && t->offset + t->count <= off + cnt);
    }
    // A failing hook aborts the pass with its status.
    for (int k = 0; k < 24; k++) {
        h.n = 0;
        h.held = 0;
        h.fail_at = k;
        float loss;
        strata_status_t rc = strata_model_forward(f.m, f.tok, f.tgt, f.B, f.T, &loss);
        if (rc == STRATA_OK)
            rc = strata_model_backward(f.m);
        assert_int_equal(rc, STRATA_ERR_PEER_FAILED);
        assert_int_equal(h.held, 0);
    }
    strata_model_set_hooks(f.m, NULL);
    free(h.copy);
    fx_close(&f);
}

/* Grouped-query attention (4 query heads, 2 k/v heads) and an untied head on the Llama shape: the
 * tensors torch has (q, kv, lm_head), its numbers, and the head's segment in the hooks' order. */
static void test_llama_gqa_matches_torch(void **state)
{
    (void)state;
    matches_torch("gpt_llama_gqa");
    fx_t f;
    fx_open(&f, "gpt_llama_gqa");
    const strata_gpt_config_t *c = strata_model_config(f.m);
    assert_true(c->n_head == 4 && c->n_kv_head == 2 && c->untied);
    assert_int_equal(strata_model_find_tensor(f.m, "h.0.attn.qkv.weight"), -1);
    const strata_tensor_info_t *q =
        strata_model_tensor(f.m, strata_model_find_tensor(f.m, "h.0.attn.q.weight"));
    const strata_tensor_info_t *kv =
        strata_model_tensor(f.m, strata_model_find_tensor(f.m, "h.0.attn.kv.weight"));
    assert_true(q->shape[0] == 16 && q->shape[1] == 16 && kv->shape[0] == 16 &&
                kv->offset == q->offset + q->count);
    int lm = strata_model_find_tensor(f.m, "lm_head.weight");
    assert_true(lm >= 0);
    int S = strata_model_nsegments(f.m);
    assert_int_equal(strata_model_tensor(f.m, lm)->segment, S - 1);
    assert_int_equal(strata_model_head_segment(f.m), S - 1);
    // The head reads the final segment: acquired again after it, and first in the backward.
    hook_log_t h = {.m = f.m, .fail_at = -1};
    h.copy = calloc(strata_model_nparams(f.m), sizeof(float));
    strata_param_hooks_t hooks = {&h, h_acquire, h_release, h_ready};
    strata_model_set_hooks(f.m, &hooks);
    fx_check(&f);
    const char *want[] = {"af0", "rf0", "af1", "rf1", "af2", "rf2", "af3", "rf3",
                          "af3", "rf3", "ab3", "rb3", "ab3", "rb3", "g3",  "ab2",
                          "rb2", "g2",  "ab1", "rb1", "g1",  "ab0", "rb0", "g0"};
    assert_int_equal(h.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < h.n; i++)
        assert_string_equal(h.calls[i], want[i]);
    strata_model_set_hooks(f.m, NULL);
    free(h.copy);
    fx_close(&f);
}

static void test_bad_input(void **state)
{
    (void)state;
    strata_gpt_config_t cfg = strata_gpt_config_default();
    cfg.n_head = 3; // does not divide 64
    strata_gpt_t *m = NULL;
    assert_int_equal(strata_model_create(&cfg, 1, 1, &m), STRATA_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(strata_last_error(), "n_head"));
    cfg = strata_gpt_config_default();
    assert_int_equal(strata_model_create(&cfg, 1, 1, &m), STRATA_OK);
    int32_t tok[4] = {1, 2, 300, 4};
    assert_int_equal(strata_model_forward(m, tok, NULL, 1, 4, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_model_forward(m, tok, NULL, 2, 2, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_model_backward(m), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_gpt_config_from_json("{\"n_layers\": 2}", "t.json", &cfg),
                     STRATA_ERR_PARSE);
    // The options: an unknown choice is named with the ones there are; RoPE needs even heads.
    assert_int_equal(strata_gpt_config_from_json("{\n\"norm\": \"batchnorm\"}", "t.json", &cfg),
                     STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "t.json:2: model: norm must be layernorm or "
                                                "rmsnorm, got 'batchnorm'"));
    cfg = strata_gpt_config_default();
    cfg.pos = STRATA_GPT_POS_ROPE;
    cfg.n_head = 64; // head size 1
    assert_int_equal(strata_gpt_config_validate(&cfg), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "must be even"));
    cfg = strata_gpt_config_default();
    cfg.window = -1;
    assert_int_equal(strata_gpt_config_validate(&cfg), STRATA_ERR_INVALID_ARG);
    cfg = strata_gpt_config_default();
    cfg.n_kv_head = 3; // does not divide the 4 query heads
    assert_int_equal(strata_gpt_config_validate(&cfg), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "n_kv_head (3) must divide n_head (4)"));
    // The FLOP count under GQA (C 64, F 256, k/v width 32, 64 keys), unvalidated and validated:
    // 2 (64 (64 + 64) + 64^2 + 2 64 256) + 4 64 64 = 106496 a block's forward, per token.
    cfg = strata_gpt_config_default();
    cfg.n_kv_head = 2;
    assert_true(strata_gpt_config_block_flops(&cfg, 64) == 106496.0);
    strata_gpt_t *gqa = NULL;
    assert_int_equal(strata_model_create(&cfg, 1, 1, &gqa), STRATA_OK);
    assert_true(strata_gpt_config_block_flops(strata_model_config(gqa), 64) == 106496.0);
    assert_true(strata_model_flops_per_token(gqa, 64) == 3.0 * (2 * 106496.0 + 2.0 * 256 * 64));
    strata_model_destroy(gqa);
    cfg = strata_gpt_config_default();
    cfg.n_kv_head = 2; // 2 k/v heads cannot be cut 4 ways
    assert_int_equal(strata_gpt_config_check_tp(&cfg, 4), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "k/v heads (n_kv_head 2)"));
    // Every option survives the JSON form (what checkpoints record).
    cfg = strata_gpt_config_default();
    strata_gpt_config_llama(&cfg);
    cfg.parallel = true;
    cfg.window = 5;
    cfg.rope_theta = 500000.f;
    cfg.n_kv_head = 2;
    char json[1024];
    assert_true(strata_gpt_config_to_json(&cfg, json, sizeof json) > 0);
    strata_gpt_config_t back = strata_gpt_config_default();
    assert_int_equal(strata_gpt_config_from_json(json, "t.json", &back), STRATA_OK);
    char again[1024];
    assert_true(strata_gpt_config_to_json(&back, again, sizeof again) > 0);
    assert_string_equal(again, json);
    assert_true(back.parallel && back.window == 5 && back.no_bias &&
                back.norm == STRATA_GPT_NORM_RMSNORM && back.mlp == STRATA_GPT_MLP_SWIGLU &&
                back.pos == STRATA_GPT_POS_ROPE && back.rope_theta == 500000.f &&
                back.n_kv_head == 2 && back.untied);
    strata_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_torch),
        cmocka_unit_test(test_parallel_swa_matches_torch),
        cmocka_unit_test(test_llama_matches_torch),
        cmocka_unit_test(test_llama_gqa_matches_torch),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
