/* Configuration validation and file errors: each violated constraint of a parallel configuration is
 * an error naming it; malformed JSON and bad fields name the file and the line; the JSON presets in
 * data/presets/ match the built-in ones. */
#include "harness/st_test.h"
#include "strata/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char data_dir[1024];

static void find_data(void)
{
    // Tests know where the sources are: data/ is two levels above this file.
    snprintf(data_dir, sizeof data_dir, "%s", __FILE__);
    char *slash = strrchr(data_dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(data_dir, sizeof data_dir, ".");
    strncat(data_dir, "/../../data", sizeof data_dir - strlen(data_dir) - 1);
}

static strata_plan_problem_t problem(void)
{
    strata_plan_problem_t pb = {0};
    assert_int_equal(strata_model_preset("llama3-70b", &pb.model), STRATA_OK);
    assert_int_equal(strata_topo_preset("h100-roce-24k", &pb.topo), STRATA_OK);
    assert_int_equal(strata_accel_preset("h100-sxm", &pb.accel), STRATA_OK);
    pb.train = strata_training_default();
    pb.train.global_batch = 256;
    pb.calib = strata_calib_default();
    pb.gpus = 512;
    return pb;
}

static void expect_error(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                         const char *needle)
{
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(pb, par, &p), STRATA_ERR_INVALID_ARG);
    if (!strstr(strata_last_error(), needle))
        fail_msg("expected '%s' in: %s", needle, strata_last_error());
}

static void test_parallel_errors(void **state)
{
    (void)state;
    strata_plan_problem_t pb = problem();
    strata_parallel_t ok = strata_parallel_default();
    ok.tp = 8;
    ok.pp = 4;
    ok.dp = 16;
    strata_prediction_t p;
    assert_int_equal(strata_plan_predict(&pb, &ok, &p), STRATA_OK);

    strata_parallel_t par = ok;
    par.dp = 8;
    expect_error(&pb, &par, "tp*cp*pp*dp = 512");
    par = ok;
    par.tp = 16; /* 8 KV heads */
    par.dp = 8;
    expect_error(&pb, &par, "key/value heads");
    par = ok;
    par.vp = 2;
    expect_error(&pb, &par, "virtual stages need 'interleaved'");
    par = ok;
    par.schedule = STRATA_SCHED_INTERLEAVED;
    expect_error(&pb, &par, "vp >= 2");
    par.vp = 3; /* 80 layers over 4 x 3 chunks fits; 256/16 = 16 micro-batches, a multiple of 4 */
    assert_int_equal(strata_plan_predict(&pb, &par, &p), STRATA_OK);
    par.vp = 40;
    expect_error(&pb, &par, "model chunks");
    par = ok;
    par.zero = 4;
    expect_error(&pb, &par, "ZeRO stage 0 to 3");
    par = ok;
    par.zero_secondary = 8;
    expect_error(&pb, &par, "secondary partition");
    par = ok;
    par.pp = 128;
    par.dp = 1;
    par.tp = 4;
    expect_error(&pb, &par, "pp=128 <= layers=80");
    par = ok;
    par.cp = 3;
    pb.gpus = 8 * 4 * 16 * 3;
    expect_error(&pb, &par, "2*cp=6");
    pb = problem();
    pb.train.global_batch = 100;
    expect_error(&pb, &ok, "global_batch=100");
    pb = problem();
    pb.train.global_batch = 32 * 5; /* 10 micro-batches per pipeline */
    par = ok;
    par.schedule = STRATA_SCHED_INTERLEAVED;
    par.vp = 2;
    expect_error(&pb, &par, "multiple of pp=4");
    pb = problem();
    pb.gpus = 1 << 20;
    expect_error(&pb, &ok, "accelerators on cluster");
    pb = problem();
    pb.model.kv_heads = 7;
    expect_error(&pb, &ok, "kv_heads (7) to divide heads");
    pb = problem();
    par = ok;
    par.order[0] = par.order[1];
    expect_error(&pb, &par, "order");
}

static void test_parsers(void **state)
{
    (void)state;
    strata_dim_t o[4];
    assert_int_equal(strata_order_parse("dp,pp,cp,tp", o), STRATA_OK);
    assert_int_equal(o[0], STRATA_DIM_DP);
    assert_int_equal(o[3], STRATA_DIM_TP);
    assert_int_equal(strata_order_parse("tp,tp,pp,dp", o), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_order_parse("tp,pp,dp", o), STRATA_ERR_INVALID_ARG);
    bool ov[4];
    assert_int_equal(strata_overlap_parse("dp+pp", ov), STRATA_OK);
    assert_true(ov[STRATA_DIM_DP] && ov[STRATA_DIM_PP] && !ov[STRATA_DIM_TP]);
    assert_int_equal(strata_overlap_parse("dp+xx", ov), STRATA_ERR_INVALID_ARG);
    strata_schedule_t s;
    assert_int_equal(strata_schedule_parse("zb-h1", &s), STRATA_OK);
    assert_int_equal(s, STRATA_SCHED_ZB_H1);
    assert_int_equal(strata_schedule_parse("pipedream", &s), STRATA_ERR_INVALID_ARG);
    strata_calib_t c = strata_calib_default();
    assert_int_equal(strata_calib_apply(&c, "eta_up=0.5,overlap_cost=0.2"), STRATA_OK);
    assert_true(c.eta_up == 0.5 && c.overlap_cost == 0.2);
    assert_int_equal(strata_calib_apply(&c, "eta_foo=1"), STRATA_ERR_INVALID_ARG);
    strata_model_t m;
    assert_int_equal(strata_model_preset("gpt-9000", &m), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "llama3-405b"));
}

static const char *write_tmp_path(void)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/strata_test_plan_%d.json", (int)getpid());
    return path;
}

static const char *write_tmp(const char *text)
{
    const char *path = write_tmp_path();
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_parse_error(strata_status_t rc, const char *path, int line, const char *needle)
{
    assert_int_equal(rc, STRATA_ERR_PARSE);
    char want[128];
    snprintf(want, sizeof want, "%s:%d:", path, line);
    if (!strstr(strata_last_error(), want) || !strstr(strata_last_error(), needle))
        fail_msg("expected '%s' and '%s' in: %s", want, needle, strata_last_error());
}

static void test_json_errors(void **state)
{
    (void)state;
    strata_model_t m;
    strata_topo_t t;
    strata_training_t tr;
    strata_accel_t a;
    const char *p =
        write_tmp("{\n  \"layers\": 2,\n  \"hidden\": 64,\n  \"heads\": 4\n  \"vocab\": 10\n}\n");
    expect_parse_error(strata_model_load(p, &m), p, 5, "expected valid JSON");
    p = write_tmp("{\n  \"layers\": 2,\n  \"hidden\": \"big\",\n  \"heads\": 4, \"vocab\": 10, "
                  "\"seq\": 8\n}\n");
    expect_parse_error(strata_model_load(p, &m), p, 3, "expected an integer");
    p = write_tmp(
        "{\n  \"layers\": 2,\n  \"hiden\": 64,\n  \"heads\": 4, \"vocab\": 10, \"seq\": 8\n}\n");
    expect_parse_error(strata_model_load(p, &m), p, 3, "unknown field \"hiden\"");
    p = write_tmp("{\"layers\": 2, \"hidden\": 64, \"heads\": 4, \"vocab\": 10, \"seq\": 8,\n"
                  " \"mlp\": \"relu\"}\n");
    expect_parse_error(strata_model_load(p, &m), p, 2, "gelu");
    p = write_tmp("{\"layers\": 2, \"hidden\": 64, \"heads\": 4, \"vocab\": 10, \"seq\": 8, "
                  "\"kv_heads\": 4, \"mlp\": \"swiglu\", \"norm\": \"rmsnorm\"}\n");
    assert_int_equal(strata_model_load(p, &m), STRATA_OK);
    assert_int_equal(m.mlp, STRATA_MLP_SWIGLU);
    // Sizes beyond STRATA_MODEL_MAX_*: refused naming the field, before 4 x hidden (the default
    // ffn) overflowed an int (UBSan; found by fuzzing `strata plan --model FILE`).
    p = write_tmp("{\"layers\": 2, \"heads\": 4, \"vocab\": 10, \"seq\": 8,\n"
                  " \"hidden\": 1073741824}\n");
    expect_parse_error(strata_model_load(p, &m), p, 2, "\"hidden\"");
    p = write_tmp("{\"layers\": 2, \"hidden\": 64, \"heads\": 4, \"seq\": 8,\n"
                  " \"vocab\": 1073741824}\n");
    expect_parse_error(strata_model_load(p, &m), p, 2, "\"vocab\"");
    m = strata_model_gpt("api", 2, 1 << 30, 4, 10, 8); // the constructor does not overflow either
    assert_int_equal(strata_model_validate(&m), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "hidden"));
    p = write_tmp("{\n \"global_batch\": 64,\n \"recompute\": \"sometimes\"\n}\n");
    expect_parse_error(strata_training_load(p, &tr), p, 3, "recompute");
    p = write_tmp("{\n \"name\": \"x\",\n \"peak_tflops_16\": 100,\n \"memory_GiB\": -3,\n"
                  " \"memory_bandwidth_GBps\": 100\n}\n");
    expect_parse_error(strata_accel_load(p, &a), p, 4, "memory_GiB");
    p = write_tmp("{\"name\": \"c\", \"levels\": [\n"
                  "  {\"name\": \"host\", \"fanout\": 8, \"bandwidth_GBps\": 300},\n"
                  "  {\"name\": \"rack\", \"fanout\": 0, \"bandwidth_GBps\": 25}\n]}\n");
    expect_parse_error(strata_topo_load(p, &t), p, 3, "fanout");
    p = write_tmp(
        "{\"name\": \"c\", \"levels\": [\n"
        "  {\"name\": \"host\", \"fanout\": 8, \"bandwidth_GBps\": 300},\n"
        "  {\"name\": \"rack\", \"fanout\": 4, \"bandwidth_GBps\": 25, \"class\": \"fast\"}\n]}\n");
    expect_parse_error(strata_topo_load(p, &t), p, 3, "scale-up");
    unlink(p);
    assert_int_equal(strata_model_load("/nonexistent/model.json", &m), STRATA_ERR_IO);
}

static void test_csv_errors(void **state)
{
    (void)state;
    strata_vtable_t t = {0};
    const char *p = write_tmp("id,source\nx,y\n");
    assert_int_equal(strata_vtable_load(p, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":1: expected a column named"));
    strata_vtable_free(&t);
    // tp, cp, pp and dp of 2^30 each (the column maximum): their product overflowed a long long
    // in the planner's check (UBSan, found by fuzzing); now the row is refused.
    p = write_tmp("id,source,arch,layers,hidden,heads,kv_heads,ffn,vocab,seq,gpus,cluster,"
                  "accelerator,tp,cp,pp,vp,dp,global_batch,micro_batch,schedule,zero,"
                  "zero_secondary,recompute,sequence_parallel,flash_attention,precision,optimizer,"
                  "overlap,order,metric,measured,calibrate,notes\n"
                  "big,x,gpt,24,2304,24,24,9216,51200,2048,32,dgx-a100-superpod,a100-80gb,"
                  "1073741824,1073741824,1073741824,1,1073741824,512,1,1f1b,0,1,full,no,no,fp16,"
                  "adam,none,,tflops_megatron,137,yes,\n");
    assert_int_equal(strata_vtable_load(p, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":2: column tp: expected tp*cp*pp*dp"));
    strata_vtable_free(&t);
    unlink(p);
}

/* What the writers write reads again: names holding quotes, backslashes or control characters
 * (a file may give them) used to be printed raw, and accelerator numbers rounded to 6 digits
 * (both found by fuzzing the readers' round trips). */
static void test_names_write_back(void **state)
{
    (void)state;
    const char *name = "q\"uo\\te\ttab";
    char *text = NULL;
    size_t len = 0;
    strata_topo_t t, t2;
    assert_int_equal(strata_topo_preset("cpu-local", &t), STRATA_OK);
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.accel, sizeof t.accel, "%s", name);
    snprintf(t.level[0].name, sizeof t.level[0].name, "%s", name);
    FILE *f = open_memstream(&text, &len);
    strata_topo_write_json(&t, f);
    fclose(f);
    if (strata_topo_parse(text, "written", &t2) != STRATA_OK)
        fail_msg("%s\n%s", strata_last_error(), text);
    assert_string_equal(t2.name, name);
    assert_string_equal(t2.accel, name);
    assert_string_equal(t2.level[0].name, name);
    free(text);

    strata_model_t m, m2;
    assert_int_equal(strata_model_preset("gpt2-124m", &m), STRATA_OK);
    snprintf(m.name, sizeof m.name, "%s", name);
    f = fopen(write_tmp(""), "w");
    strata_model_write_json(&m, f);
    fclose(f);
    assert_int_equal(strata_model_load(write_tmp_path(), &m2), STRATA_OK);
    assert_string_equal(m2.name, name);
    strata_accel_t a, a2;
    assert_int_equal(strata_accel_preset("h100-sxm", &a), STRATA_OK);
    snprintf(a.name, sizeof a.name, "%s", name);
    f = fopen(write_tmp_path(), "w");
    strata_accel_write_json(&a, f);
    fclose(f);
    assert_int_equal(strata_accel_load(write_tmp_path(), &a2), STRATA_OK);
    assert_string_equal(a2.name, name);
    // Numbers written exactly: with %.6g a reserved memory just below capacity came back equal to
    // it, which the reader refuses.
    a.mem_bytes = 1.0000001 * 1073741824.0;
    a.reserved_bytes = 1073741824.0;
    f = fopen(write_tmp_path(), "w");
    strata_accel_write_json(&a, f);
    fclose(f);
    if (strata_accel_load(write_tmp_path(), &a2) != STRATA_OK)
        fail_msg("%s", strata_last_error());
    assert_true(a2.mem_bytes == a.mem_bytes && a2.reserved_bytes == a.reserved_bytes);
    unlink(write_tmp_path());
}

static void test_presets_match_files(void **state)
{
    (void)state;
    char path[1200];
    for (int i = 0; i < strata_model_preset_count(); i++) {
        strata_model_t a, b;
        assert_int_equal(strata_model_preset(strata_model_preset_name(i), &a), STRATA_OK);
        snprintf(path, sizeof path, "%s/presets/models/%s.json", data_dir, a.name);
        if (strata_model_load(path, &b) != STRATA_OK)
            fail_msg("%s", strata_last_error());
        assert_memory_equal(&a, &b, sizeof a);
    }
    for (int i = 0; i < strata_accel_preset_count(); i++) {
        strata_accel_t a, b;
        assert_int_equal(strata_accel_preset(strata_accel_preset_name(i), &a), STRATA_OK);
        snprintf(path, sizeof path, "%s/presets/accelerators/%s.json", data_dir, a.name);
        if (strata_accel_load(path, &b) != STRATA_OK)
            fail_msg("%s", strata_last_error());
        assert_true(fabs(a.peak_flops_16 / b.peak_flops_16 - 1) < 1e-5);
        assert_true(fabs(a.mem_bytes / b.mem_bytes - 1) < 1e-5);
        assert_true(fabs(a.gemm_eff - b.gemm_eff) < 1e-3);
        assert_true(fabs(a.peak_flops_8 - b.peak_flops_8) <= 1e-5 * a.peak_flops_8);
        assert_true(fabs(a.gemm_eff_8 - b.gemm_eff_8) < 1e-3);
        assert_int_equal(a.sms, b.sms);
        assert_int_equal(a.tile_m, b.tile_m);
        assert_int_equal(a.tile_n, b.tile_n);
    }
    for (int i = 0; i < strata_topo_preset_count(); i++) {
        strata_topo_t a, b;
        assert_int_equal(strata_topo_preset(strata_topo_preset_name(i), &a), STRATA_OK);
        snprintf(path, sizeof path, "%s/presets/clusters/%s.json", data_dir, a.name);
        if (strata_topo_load(path, &b) != STRATA_OK)
            fail_msg("%s", strata_last_error());
        assert_int_equal(a.nlevels, b.nlevels);
        assert_int_equal(strata_topo_capacity(&a), strata_topo_capacity(&b));
        for (int l = 0; l < a.nlevels; l++)
            assert_true(fabs(a.level[l].bw_Bps / b.level[l].bw_Bps - 1) < 1e-6);
    }
    strata_calib_t c, d = strata_calib_default();
    snprintf(path, sizeof path, "%s/presets/calibration.json", data_dir);
    assert_int_equal(strata_calib_load(path, &c), STRATA_OK);
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
        assert_true(fabs(*strata_calib_param(&c, i) - *strata_calib_param(&d, i)) < 1e-4);
}

int main(void)
{
    find_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_errors),     cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_json_errors),         cmocka_unit_test(test_csv_errors),
        cmocka_unit_test(test_presets_match_files), cmocka_unit_test(test_names_write_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
