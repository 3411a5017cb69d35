/* Training: the data loader's rank split, safetensors checkpoints (round trip, a corrupt or
 * truncated file refused with a message naming it, fallback to the previous checkpoint), and the
 * resume contract: a run stopped and resumed reproduces the uninterrupted run's losses exactly. */
#include "harness/st_test.h"
#include "strata/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char corpus[1024], tmpdir[64];

static void setup_paths(void)
{
    snprintf(corpus, sizeof corpus, "%s", __FILE__);
    *strrchr(corpus, '/') = 0;
    strncat(corpus, "/../../data/corpus/strata_tales.txt", sizeof corpus - strlen(corpus) - 1);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/strata_ckpt_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
}

static void rm_dir(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static strata_train_config_t small_cfg(void)
{
    strata_train_config_t c = strata_train_config_default();
    c.model.n_layer = 2;
    c.model.d_model = 32;
    c.model.n_head = 2;
    c.model.max_seq = 16;
    c.seq = 16;
    c.batch = 4;
    c.steps = 8;
    c.warmup = 2;
    c.progress = false;
    snprintf(c.data, sizeof c.data, "%s", corpus);
    return c;
}

static void test_data_split(void **state)
{
    (void)state;
    setup_paths();
    strata_data_t *d;
    assert_int_equal(strata_data_open(corpus, 0.1, &d), STRATA_OK);
    int B = 6, T = 10;
    int32_t all[60], allt[60], part[60], partt[60];
    assert_int_equal(strata_data_batch(d, 0, 5, 3, 0, B, T, all, allt), STRATA_OK);
    // 3 ranks of 2 rows each see exactly the global batch's rows.
    for (int r = 0; r < 3; r++)
        assert_int_equal(strata_data_batch(d, 0, 5, 3, r * 2, 2, T, part + r * 2 * T,
                                           partt + r * 2 * T), STRATA_OK);
    assert_memory_equal(all, part, sizeof all);
    assert_memory_equal(allt, partt, sizeof allt);
    for (int i = 0; i + 1 < T; i++)
        assert_int_equal(all[i + 1], allt[i]);
    // Another step or seed gives another batch.
    assert_int_equal(strata_data_batch(d, 0, 5, 4, 0, B, T, part, partt), STRATA_OK);
    assert_memory_not_equal(all, part, sizeof all);
    strata_data_close(d);
    assert_int_equal(strata_data_open("/nonexistent/x.txt", 0.1, &d), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "/nonexistent/x.txt"));
    rm_dir(tmpdir);
}

static void test_ckpt_roundtrip_and_corruption(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", tmpdir);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, 0.5f, 7};
    strata_ckpt_tensor_t ts[2] = {{"w", 2, {2, 3}, a}, {"b", 1, {3}, b}};
    strata_ckpt_meta_t meta = {.step = 42, .seed = 9, .rank = 1, .nranks = 2, .shard_offset = 100,
                               .shard_count = 9};
    snprintf(meta.config, sizeof meta.config, "{\"x\": \"q\\\"uote\"}");
    assert_int_equal(strata_ckpt_write(path, ts, 2, &meta), STRATA_OK);
    strata_ckpt_t *ck;
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_OK);
    assert_int_equal(strata_ckpt_meta(ck)->step, 42);
    assert_int_equal(strata_ckpt_meta(ck)->rank, 1);
    assert_int_equal(strata_ckpt_meta(ck)->shard_offset, 100);
    assert_string_equal(strata_ckpt_meta(ck)->config, meta.config);
    float a2[6], b2[3];
    strata_ckpt_tensor_t rd[2] = {{"w", 2, {2, 3}, a2}, {"b", 1, {3}, b2}};
    assert_int_equal(strata_ckpt_load(ck, rd, 2), STRATA_OK);
    assert_memory_equal(a, a2, sizeof a);
    assert_memory_equal(b, b2, sizeof b);
    strata_ckpt_tensor_t bad = {"w", 2, {3, 2}, a2};
    assert_int_equal(strata_ckpt_load(ck, &bad, 1), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "'w'"));
    strata_ckpt_close(ck);

    // Flip one data byte: checksum mismatch naming the file.
    FILE *f = fopen(path, "r+b");
    fseek(f, -5, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(ch ^ 0x40, f);
    fclose(f);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), path));
    assert_non_null(strstr(strata_last_error(), "checksum"));
    // Truncate: refused too.
    assert_int_equal(strata_ckpt_write(path, ts, 2, &meta), STRATA_OK);
    long full;
    f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    full = ftell(f);
    fclose(f);
    for (long cut = 0; cut < full; cut += 7) {
        assert_int_equal(truncate(path, cut), 0);
        assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
        assert_non_null(strstr(strata_last_error(), path));
        assert_int_equal(strata_ckpt_write(path, ts, 2, &meta), STRATA_OK);
    }
    rm_dir(tmpdir);
}

static void run_losses(strata_train_config_t *c, float *losses, bool resume, int64_t want_resume)
{
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    if (resume) {
        int64_t at;
        assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
        assert_int_equal(at, want_resume);
    }
    assert_int_equal(strata_trainer_run(t, losses), STRATA_OK);
    strata_trainer_destroy(t);
}

static void test_resume_exact(void **state)
{
    (void)state;
    setup_paths();
    for (int kind = 0; kind < 2; kind++) {
        strata_train_config_t c = small_cfg();
        c.optim.kind = kind;
        float full[8], part[8];
        run_losses(&c, full, false, 0);
        assert_true(full[7] < full[0]);
        // Stop after 5 (a checkpoint every 5), then resume to 8.
        snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/run%d", tmpdir, kind);
        c.ckpt_every = 5;
        c.steps = 5;
        memset(part, 0, sizeof part);
        strata_train_config_t c5 = c;
        // The LR schedule spans the full run: stop early by steps, but keep `total` at 8.
        c5.steps = 8;
        strata_trainer_t *t;
        assert_int_equal(strata_trainer_create(&c5, &t), STRATA_OK);
        for (int s = 0; s < 5; s++) {
            strata_step_info_t info;
            assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
            part[s] = info.loss;
        }
        char path[2048];
        strata_ckpt_path(c.ckpt_dir, 5, 0, 1, path, sizeof path);
        assert_int_equal(strata_trainer_save(t, path), STRATA_OK);
        strata_trainer_destroy(t);
        c.steps = 8;
        run_losses(&c, part, true, 5);
        assert_memory_equal(full, part, sizeof full);
    }
    rm_dir(tmpdir);
}

static void test_resume_fallback(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/fb", tmpdir);
    c.ckpt_every = 2;
    c.ckpt_keep = 3;
    float full[8];
    run_losses(&c, full, false, 0); // checkpoints at 4, 6, 8 kept
    int64_t steps[8];
    assert_int_equal(strata_ckpt_list(c.ckpt_dir, 0, 1, steps, 8), 3);
    assert_int_equal(steps[0], 8);
    assert_int_equal(steps[2], 4);
    // Corrupt the newest (8) and truncate the next (6): resume must land on 4 and replay 5..8.
    char p8[2048], p6[2048];
    strata_ckpt_path(c.ckpt_dir, 8, 0, 1, p8, sizeof p8);
    strata_ckpt_path(c.ckpt_dir, 6, 0, 1, p6, sizeof p6);
    FILE *f = fopen(p8, "r+b");
    fseek(f, -100, SEEK_END);
    fputc('X', f);
    fclose(f);
    assert_int_equal(truncate(p6, 1000), 0);
    float again[8];
    memset(again, 0, sizeof again);
    memcpy(again, full, 4 * sizeof(float));
    run_losses(&c, again, true, 4);
    assert_memory_equal(full, again, sizeof full);
    // Every checkpoint bad: an error naming the newest file, not a silent fresh start.
    strata_ckpt_path(c.ckpt_dir, 8, 0, 1, p8, sizeof p8);
    int64_t at;
    strata_trainer_t *t;
    assert_int_equal(strata_ckpt_list(c.ckpt_dir, 0, 1, steps, 8), 3);
    for (int i = 0; i < 3; i++) {
        strata_ckpt_path(c.ckpt_dir, steps[i], 0, 1, p6, sizeof p6);
        assert_int_equal(truncate(p6, 10), 0);
    }
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), p8));
    strata_trainer_destroy(t);
    rm_dir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_split),
        cmocka_unit_test(test_ckpt_roundtrip_and_corruption),
        cmocka_unit_test(test_resume_exact),
        cmocka_unit_test(test_resume_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
