/* Fuzz target: the planner's model, training, accelerator and calibration files
 * (src/plan/plan_json.c: strata_model_load, strata_training_load, strata_accel_load,
 * strata_calib_load). The input is offered to all four readers. What one accepts is written back
 * (model, accelerator, calibration) and must read again, and replaces its part of a small problem
 * (a GPT-2 on the preset dgx-h100-superpod, 64 accelerators) that is then predicted and searched,
 * as `strata plan --model FILE --train FILE --accel FILE` does. */
#include "common.h"

#include "strata/plan.h"

static strata_plan_problem_t base_problem(void)
{
    strata_plan_problem_t pb = {0};
    if (strata_model_preset("gpt2-124m", &pb.model) < 0 ||
        strata_topo_preset("dgx-h100-superpod", &pb.topo) < 0 ||
        strata_accel_preset("h100-sxm", &pb.accel) < 0)
        abort();
    pb.train = strata_training_default();
    pb.train.global_batch = 64;
    pb.calib = strata_calib_default();
    pb.gpus = 64;
    return pb;
}

static void plan(const strata_plan_problem_t *pb)
{
    if (strata_plan_problem_validate(pb) < 0)
        return;
    strata_parallel_t par = strata_parallel_default();
    par.dp = (int)pb->gpus;
    strata_prediction_t pred;
    if (strata_plan_predict(pb, &par, &pred) == STRATA_OK)
        FUZZ_CHECK(pred.step_s >= 0);
    strata_search_opts_t so = strata_search_opts_default();
    so.top = 2;
    so.allow_no_fit = true;
    strata_search_result_t r;
    if (strata_plan_search(pb, &so, &r) == STRATA_OK)
        strata_search_result_free(&r);
}

/* Writes with `write` and reads the text back with `load`, which must accept it. */
static void round_trip(void (*write)(const void *, FILE *), const void *value,
                       strata_status_t (*load)(const char *, void *), void *back)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    write(value, f);
    fclose(f);
    const char *path = fuzz_file("written.json", out, len);
    free(out);
    if (load(path, back) < 0) {
        fprintf(stderr, "written back, refused: %s\n", strata_last_error());
        FUZZ_CHECK(!"a file the planner wrote reads back");
    }
}

static void w_model(const void *v, FILE *f)
{
    strata_model_write_json(v, f);
}
static strata_status_t l_model(const char *p, void *o)
{
    return strata_model_load(p, o);
}
static void w_accel(const void *v, FILE *f)
{
    strata_accel_write_json(v, f);
}
static strata_status_t l_accel(const char *p, void *o)
{
    return strata_accel_load(p, o);
}
static void w_calib(const void *v, FILE *f)
{
    strata_calib_write_json(v, f);
}
static strata_status_t l_calib(const char *p, void *o)
{
    return strata_calib_load(p, o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("fuzz.json", data, size);
    strata_plan_problem_t pb = base_problem();
    strata_model_t m, m2;
    if (strata_model_load(path, &m) == STRATA_OK) {
        round_trip(w_model, &m, l_model, &m2);
        pb.model = m;
        plan(&pb);
        pb = base_problem();
    } else {
        FUZZ_CHECK(strata_last_error()[0]);
    }
    path = fuzz_file("fuzz.json", data, size);
    if (strata_training_load(path, &pb.train) == STRATA_OK) {
        plan(&pb);
        pb = base_problem();
    }
    strata_accel_t a, a2;
    path = fuzz_file("fuzz.json", data, size);
    if (strata_accel_load(path, &a) == STRATA_OK) {
        round_trip(w_accel, &a, l_accel, &a2);
        pb.accel = a;
        plan(&pb);
        pb = base_problem();
    }
    strata_calib_t c, c2;
    path = fuzz_file("fuzz.json", data, size);
    if (strata_calib_load(path, &c) == STRATA_OK) {
        round_trip(w_calib, &c, l_calib, &c2);
        pb.calib = c;
        plan(&pb);
    }
    return 0;
}
