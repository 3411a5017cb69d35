/* Planner memory model against hand-computed cases and published figures: activation memory per
 * layer with and without tensor/sequence parallelism and recomputation (Korthikanti et al. 2022),
 * model states under ZeRO stages 0-3 (the ZeRO paper's Figure 1, Megatron-LM's distributed
 * optimizer table) and the ZeRO++ secondary copy, in-flight micro-batches per pipeline schedule,
 * ZeRO-3's gather buffers, fragmentation, the FSDP variants, and a published ZeRO-3 run that fits.
 */
#include "harness/st_test.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static strata_plan_problem_t gpt_problem(int tp_gpus)
{
    strata_plan_problem_t pb = {0};
    pb.model = strata_model_gpt("gpt", 8, 1024, 16, 51200, 2048);
    assert_int_equal(strata_topo_preset("dgx-a100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("a100-80gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.precision = STRATA_PREC_FP16;
    pb.train.flash_attention = false;
    pb.train.sequence_parallel = false;
    pb.train.micro_batch = 2;
    pb.train.global_batch = 64;
    pb.calib = strata_calib_default();
    pb.gpus = tp_gpus;
    return pb;
}

static double act(strata_plan_problem_t *pb, int tp, strata_recompute_t rc, bool sp)
{
    pb->train.recompute = rc;
    pb->train.sequence_parallel = sp;
    strata_parallel_t par = strata_parallel_default();
    par.tp = tp;
    st_layer_cost_t lc;
    assert_int_equal(st_plan_layer_cost(pb, &par, &lc), STRATA_OK);
    return lc.act_bytes;
}

static void test_activations_korthikanti(void **state)
{
    (void)state;
    strata_plan_problem_t pb = gpt_problem(8);
    const double s = 2048, b = 2, h = 1024, a = 16, sbh = s * b * h;
    // No parallelism, no recompute: s b h (34 + 5 a s / h).
    assert_true(fabs(act(&pb, 1, STRATA_RECOMPUTE_NONE, false) - sbh * (34 + 5 * a * s / h)) < 1);
    // Tensor parallel t=8 without SP: s b h (10 + 24/t + 5 a s / (h t)).
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_NONE, false) -
                     sbh * (10 + 24.0 / 8 + 5 * a * s / (h * 8))) < 1);
    // With SP: s b h / t (34 + 5 a s / h).
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_NONE, true) - sbh / 8 * (34 + 5 * a * s / h)) <
                1);
    // Selective recomputation with SP: 34 s b h / t.
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_SELECTIVE, true) - sbh / 8 * 34) < 1);
    // Selective without SP: s b h (10 + 24/t).
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_SELECTIVE, false) - sbh * (10 + 24.0 / 8)) < 1);
    // Full recomputation keeps the layer input only: 2 s b h (divided by t under SP).
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_FULL, false) - 2 * sbh) < 1);
    assert_true(fabs(act(&pb, 8, STRATA_RECOMPUTE_FULL, true) - 2 * sbh / 8) < 1);
    // Flash attention never keeps the s x s scores: 34 s b h plus fp32 log-sum-exp per head.
    pb.train.flash_attention = true;
    assert_true(fabs(act(&pb, 1, STRATA_RECOMPUTE_NONE, false) - (sbh * 34 + s * b * 4 * a)) < 1);
}

static void test_zero_model_states(void **state)
{
    (void)state;
    strata_plan_problem_t pb = gpt_problem(16);
    pb.train.precision = STRATA_PREC_BF16; /* 2-byte weights, 4-byte main grads, 12-byte Adam */
    strata_parallel_t par = strata_parallel_default();
    par.dp = 16;
    const double P = strata_model_params(&pb.model), d = 16;
    const double want_w[4] = {2 * P, 2 * P, 2 * P, 2 * P / d};
    const double want_g[4] = {4 * P, 4 * P, 4 * P / d, 4 * P / d};
    const double want_o[4] = {12 * P, 12 * P / d, 12 * P / d, 12 * P / d};
    for (int z = 0; z <= 3; z++) {
        par.zero = z;
        strata_prediction_t p;
        assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
        assert_true(fabs(p.mem.weights - want_w[z]) < 1);
        assert_true(fabs(p.mem.grads - want_g[z]) < 1);
        assert_true(fabs(p.mem.optimizer - want_o[z]) < 1);
    }
    // ZeRO++ hpZ keeps a secondary copy of the weights sharded over 8.
    par.zero = 3;
    par.zero_secondary = 8;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_true(fabs(p.mem.weights - (2 * P / d + 2 * P / 8)) < 1);
}

static void test_inflight_microbatches(void **state)
{
    (void)state;
    // 8 layers over pp=4 (2 per device), 16 micro-batches of 1 per pipeline, full recompute so a
    // layer keeps exactly 2 s b h.
    strata_plan_problem_t pb = gpt_problem(4);
    pb.model.vocab = 256; /* small logits, so the first device holds the most */
    pb.train.micro_batch = 1;
    pb.train.global_batch = 16;
    pb.train.recompute = STRATA_RECOMPUTE_FULL;
    strata_parallel_t par = strata_parallel_default();
    par.pp = 4;
    par.dp = 1;
    st_layer_cost_t lc;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &lc), STRATA_OK);
    struct {
        strata_schedule_t s;
        int vp;
        double layer_mbs; /* on the first device */
    } cases[] = {
        {STRATA_SCHED_GPIPE, 1, 16 * 2},         /* all m micro-batches */
        {STRATA_SCHED_1F1B, 1, 4 * 2},           /* p micro-batches */
        {STRATA_SCHED_ZB_H1, 1, 4 * 2},          /* like 1F1B */
        {STRATA_SCHED_INTERLEAVED, 2, 11 * 1.0}, /* 2(p-1)+(v-1)p+1 = 11 chunks of 1 layer */
    };
    for (int i = 0; i < 4; i++) {
        par.schedule = cases[i].s;
        par.vp = cases[i].vp;
        strata_prediction_t p;
        assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
        assert_int_equal(p.mem.stage, 0);
        double want = cases[i].layer_mbs * lc.act_bytes + lc.act_full_bytes +
                      (cases[i].s == STRATA_SCHED_GPIPE         ? 16
                       : cases[i].s == STRATA_SCHED_INTERLEAVED ? 11.0 / 2
                                                                : 4) *
                          lc.emb_act_bytes;
        assert_true(fabs(p.mem.activations - want) < 1);
    }
    // Korthikanti's interleaving factor: 1 + (p-1)/(p v) times the 1F1B memory, here 11/8.
}

static void test_fits(void **state)
{
    (void)state;
    strata_plan_problem_t pb = {0};
    assert_int_equal(strata_model_preset("gpt3-175b", &pb.model), STRATA_OK);
    assert_int_equal(strata_topo_preset("dgx-a100-superpod", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("a100-80gb", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 64;
    pb.calib = strata_calib_default();
    pb.gpus = 8;
    strata_parallel_t par = strata_parallel_default();
    par.tp = 8;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_false(p.mem.fits); /* 175B on 8 GPUs: 2.8 TB of model states */
    pb.gpus = 512;
    par.pp = 8;
    par.dp = 8;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    assert_true(p.mem.fits);
    assert_true(p.mem.total <= p.mem.capacity);
}

/* Model states (weights, gradients, optimizer) per parameter under `par`. */
static double states_per_param(strata_plan_problem_t *pb, const strata_parallel_t *par)
{
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(pb, par, &p), STRATA_OK);
    return (p.mem.weights + p.mem.grads + p.mem.optimizer) / strata_model_params(&pb->model);
}

static void test_zero_paper_figure(void **state)
{
    (void)state;
    // Rajbhandari et al. (ZeRO, SC'20) Figure 1: a 7.5B-parameter model, mixed-precision Adam
    // (fp16 weights and gradients, K = 12 bytes of optimizer state), 64-way data parallel: 120 GB,
    // 31.4 GB (ZeRO-1), 16.6 GB (ZeRO-2), 1.9 GB (ZeRO-3) per GPU.
    strata_plan_problem_t pb = gpt_problem(64);
    pb.train.micro_batch = 1;
    strata_parallel_t par = strata_parallel_default();
    par.dp = 64;
    const double published[4] = {120, 31.4, 16.6, 1.9};
    for (int z = 0; z <= 3; z++) {
        par.zero = z;
        double gb = states_per_param(&pb, &par) * 7.5;
        assert_true(fabs(gb - published[z]) < 0.05 + 1e-9);
    }
}

static void test_megatron_distributed_optimizer(void **state)
{
    (void)state;
    // Megatron-LM's distributed optimizer (docs/distrib_optimizer.md): bf16 parameters with fp32
    // gradients take 18 bytes per parameter, 6 + 12/d with the optimizer sharded over d.
    strata_plan_problem_t pb = gpt_problem(16);
    pb.train.precision = STRATA_PREC_BF16;
    strata_parallel_t par = strata_parallel_default();
    par.dp = 16;
    par.zero = 0;
    assert_true(fabs(states_per_param(&pb, &par) - 18) < 1e-9);
    par.zero = 1;
    assert_true(fabs(states_per_param(&pb, &par) - (6 + 12.0 / 16)) < 1e-9);
}

static void test_zero3_buffers_and_fragmentation(void **state)
{
    (void)state;
    strata_plan_problem_t pb = gpt_problem(16);
    strata_parallel_t par = strata_parallel_default();
    par.dp = 16;
    par.zero = 3;
    strata_prediction_t p, base;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    // ZeRO-3 gathers one weight matrix at a time and prefetches the next: two of the largest,
    // the MLP's h x 4h, in fp16.
    const double h = 1024;
    assert_true(fabs(p.mem.comm_buffers - 2 * (h * 4 * h) * 2) < 1e-6);
    // Fragmentation: a fraction of what is allocated and freed within the step.
    assert_true(fabs(p.mem.fragmentation -
                     pb.calib.mem_frag * (p.mem.activations + p.mem.comm_buffers)) < 1e-6);
    // Without the memory terms: two whole layers gathered, no fragmentation.
    pb.terms_off = STRATA_TERM_MEMORY;
    assert_int_equal(strata_plan_predict(&pb, &par, &base), STRATA_OK);
    st_layer_cost_t lc;
    assert_int_equal(st_plan_layer_cost(&pb, &par, &lc), STRATA_OK);
    assert_true(fabs(base.mem.comm_buffers - 2 * lc.params * 2) < 1e-6);
    assert_true(base.mem.fragmentation == 0);
}

static void test_fsdp_variants(void **state)
{
    (void)state;
    strata_plan_problem_t pb = gpt_problem(16); /* fp16: 2-byte weights and gradients */
    strata_parallel_t par = strata_parallel_default();
    par.dp = 16;
    const double P = strata_model_params(&pb.model), d = 16, frac = 15.0 / 16;
    const double M = 64 / 16 / 2; /* micro-batches per step */
    struct {
        int zero;
        bool keep, once;
        double weights, grads, dp_bytes;
    } c[] = {
        // ZeRO-3: gathers for the forward and the backward and a scatter, every micro-batch.
        {3, false, false, 2 * P / d, 2 * P / d, M * frac * P * (2 + 2 + 2)},
        // Keeping parameters: the gathered stage stays; no backward gather.
        {3, true, false, 2 * P * (1 + 1 / d), 2 * P / d, M * frac * P * (2 + 2)},
        // Reducing once: an unsharded gradient accumulator, one scatter per step.
        {3, false, true, 2 * P / d, 2 * P * (1 + 1 / d), M * frac * P * 4 + frac * P * 2},
        // Both: parameters gathered and gradients scattered once per step.
        {3, true, true, 2 * P * (1 + 1 / d), 2 * P * (1 + 1 / d), frac * P * (2 + 2)},
        // ZeRO-2 reducing once: ZeRO-1's traffic.
        {2, false, true, 2 * P, 2 * P * (1 + 1 / d), frac * P * (2 + 2)},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        par.zero = c[i].zero;
        par.zero_keep_params = c[i].keep;
        par.zero_reduce_once = c[i].once;
        strata_prediction_t p;
        assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
        assert_true(fabs(p.mem.weights / c[i].weights - 1) < 1e-12);
        assert_true(fabs(p.mem.grads / c[i].grads - 1) < 1e-12);
        assert_true(fabs(p.comm[STRATA_DIM_DP].bytes / c[i].dp_bytes - 1) < 1e-12);
        assert_true(p.mem.comm_buffers ==
                    (c[i].zero == 3 && !c[i].keep ? 2 * 4 * 1024 * 1024 * 2 : 0));
    }
    // Keeping parameters needs ZeRO-3; reducing once ZeRO-2 or 3.
    par.zero = 2;
    par.zero_keep_params = true;
    par.zero_reduce_once = false;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "keeping parameters"));
    par.zero = 1;
    par.zero_keep_params = false;
    par.zero_reduce_once = true;
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_ERR_INVALID_ARG);
}

static void test_published_zero3_run_fits(void **state)
{
    (void)state;
    // DeepSpeed ZeRO-3, 530B on 640 A100 80GB, micro-batch 4 (Narayanan et al. SC'21 Table 2):
    // it ran. The base memory model (two whole 530B layers gathered) refused it.
    char path[1200], dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    *slash = 0;
    snprintf(path, sizeof path, "%s/../../data/validation/megatron_sc21_zero3.csv", dir);
    strata_vtable_t t = {0};
    if (strata_vtable_load(path, &t) != STRATA_OK)
        fail_msg("%s", strata_last_error());
    int r = 0;
    while (r < t.nrows && strcmp(t.rows[r].id, "z3-530b-640"))
        r++;
    assert_true(r < t.nrows);
    strata_prediction_t p;
    double v;
    assert_int_equal(strata_vrow_predict(&t.rows[r], &t.rows[r].pb.calib, &v, &p), STRATA_OK);
    print_message("530B ZeRO-3 on 640: %.1f GiB of 80\n", p.mem.total / (1 << 30));
    assert_true(p.mem.fits);
    t.rows[r].pb.terms_off = STRATA_TERM_MEMORY;
    assert_int_equal(strata_vrow_predict(&t.rows[r], &t.rows[r].pb.calib, &v, &p), STRATA_OK);
    assert_false(p.mem.fits);
    strata_vtable_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations_korthikanti),
        cmocka_unit_test(test_zero_model_states),
        cmocka_unit_test(test_inflight_microbatches),
        cmocka_unit_test(test_fits),
        cmocka_unit_test(test_zero_paper_figure),
        cmocka_unit_test(test_megatron_distributed_optimizer),
        cmocka_unit_test(test_zero3_buffers_and_fragmentation),
        cmocka_unit_test(test_fsdp_variants),
        cmocka_unit_test(test_published_zero3_run_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
