/* The data pipeline (src/train/data.c, prefetch.c, trainer_data.c):
 *   - the loader queue on a scripted fill: batches come in order and each is read once; the thread
 *     reads at most `depth` batches ahead and then waits; a take of another index restarts it
 *     there; a fill's error reaches the take of that batch (and no earlier one) with its message,
 *     and taking it again reads it again; destroy joins the thread with a full queue, in the middle
 *     of a slow fill, and before any take; depth 0 fills on the caller's thread;
 *   - on a real file (read slowed by the test hook, so the thread lags behind the takes): the
 *     prefetched batches, also after a restart, are bit-identical to strata_data_batch's, and the
 *     tokens-only and targets-only reads are those parts of the whole read;
 *   - a file truncated under the run: the read fails with a message naming the file, through the
 *     queue too, without a hang;
 *   - the trainer: the rows of every step (and the losses) with --prefetch 3 equal those with
 *     --prefetch 0, and a run resumed from step 3 sees exactly the rows of steps 4-6 of the
 *     uninterrupted one; one process reads each row's window once (steps x batch x (seq + 1) bytes).
 * The waits this prints (slowed reads, prefetch 0 and 2) are a measurement, not an assertion. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "base/base.h"
#include "harness/train_checks.h"
#include "train/data_hook.h"
#include "train/prefetch.h"
#include "train/trainer.h"

#define N 8 /* elements per scripted batch */

/* ---- the queue on a scripted fill -------------------------------------------------------------- */

typedef struct script {
    atomic_int calls[64];     /* fills per index */
    atomic_long filled;       /* fills in all */
    atomic_long taken;        /* the last index the test's take returned */
    atomic_long max_ahead;    /* the largest index - taken a fill saw */
    int64_t fail_at;          /* a fill of this index fails (once) */
    unsigned sleep_us;        /* each fill sleeps this long */
    pthread_t caller;         /* depth 0: the thread that must fill */
    atomic_bool other_thread; /* a fill ran on another thread than caller */
} script_t;

static strata_status_t scripted(void *ctx, int64_t index, int32_t *tokens, int32_t *targets)
{
    script_t *s = ctx;
    if (s->sleep_us)
        usleep(s->sleep_us);
    if (!pthread_equal(pthread_self(), s->caller))
        atomic_store(&s->other_thread, true);
    long ahead = (long)index - atomic_load(&s->taken);
    if (ahead > atomic_load(&s->max_ahead))
        atomic_store(&s->max_ahead, ahead); // one filling thread: no lost update
    int n = atomic_fetch_add(&s->calls[index], 1);
    atomic_fetch_add(&s->filled, 1);
    if (index == s->fail_at && n == 0)
        return st_error(STRATA_ERR_IO, "data: cannot read /scripted/corpus.txt at byte %d",
                        (int)index * 100);
    for (int i = 0; i < N; i++) {
        tokens[i] = (int32_t)(index * 1000 + i);
        targets[i] = (int32_t)(index * 1000 + i + 1);
    }
    return STRATA_OK;
}

/* Takes `index` and checks it is the scripted batch. */
static void take_ok(st_prefetch_t *q, script_t *s, int64_t index, int32_t **tk, int32_t **tg)
{
    if (st_prefetch_take(q, index, tk, tg, NULL) != STRATA_OK)
        fail_msg("take %lld: %s", (long long)index, strata_last_error());
    atomic_store(&s->taken, (long)index);
    for (int i = 0; i < N; i++)
        if ((*tk)[i] != index * 1000 + i || (*tg)[i] != index * 1000 + i + 1)
            fail_msg("take %lld: element %d is %d/%d", (long long)index, i, (*tk)[i], (*tg)[i]);
}

/* Waits (a hang guard, not a timing check) until the fills reach `count`. */
static void wait_filled(script_t *s, long count)
{
    for (int i = 0; i < 20000 && atomic_load(&s->filled) < count; i++)
        usleep(1000);
    assert_true(atomic_load(&s->filled) >= count);
}

static void test_queue_order(void **state)
{
    (void)state;
    script_t s = {.caller = pthread_self()};
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(3, N, 50, scripted, &s, &q), STRATA_OK);
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg), *mine = tk;
    for (int64_t i = 1; i <= 50; i++)
        take_ok(q, &s, i, &tk, &tg);
    assert_ptr_not_equal(tk, mine); // swapped, not copied
    for (int i = 1; i <= 50; i++)
        assert_int_equal(atomic_load(&s.calls[i]), 1);
    assert_int_equal(atomic_load(&s.calls[51]), 0); // nothing past the last
    assert_true(atomic_load(&s.other_thread));
    st_prefetch_destroy(q);
    free(tk);
    free(tg);
}

static void test_queue_bounded(void **state)
{
    (void)state;
    const int depth = 3;
    script_t s = {.caller = pthread_self()};
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(depth, N, 60, scripted, &s, &q), STRATA_OK);
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg);
    take_ok(q, &s, 1, &tk, &tg);
    wait_filled(&s, 1 + depth); // batch 1, then a full queue: 2, 3, 4
    usleep(50000);
    assert_int_equal(atomic_load(&s.filled), 1 + depth); // and it waits there
    for (int64_t i = 2; i <= 60; i++) {
        take_ok(q, &s, i, &tk, &tg);
        if (i % 7 == 0)
            usleep(2000); // let it run ahead
    }
    // A fill of index i starts only when the queue holds fewer than depth batches, i.e. after the
    // take of i - depth (which the test records just after it returns: one more).
    assert_true(atomic_load(&s.max_ahead) <= depth + 1);
    st_prefetch_destroy(q);
    free(tk);
    free(tg);
}

static void test_queue_restart(void **state)
{
    (void)state;
    script_t s = {.caller = pthread_self()};
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(2, N, 40, scripted, &s, &q), STRATA_OK);
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg);
    take_ok(q, &s, 5, &tk, &tg); // a resumed run's first step
    take_ok(q, &s, 6, &tk, &tg);
    take_ok(q, &s, 20, &tk, &tg); // forward
    take_ok(q, &s, 21, &tk, &tg);
    take_ok(q, &s, 3, &tk, &tg); // backward
    take_ok(q, &s, 4, &tk, &tg);
    assert_int_equal(atomic_load(&s.calls[1]), 0); // it never read from 1
    assert_int_equal(st_prefetch_take(q, 41, &tk, &tg, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(st_prefetch_take(q, 0, &tk, &tg, NULL), STRATA_ERR_INVALID_ARG);
    take_ok(q, &s, 40, &tk, &tg);
    st_prefetch_destroy(q);
    free(tk);
    free(tg);
}

static void test_queue_error(void **state)
{
    (void)state;
    script_t s = {.caller = pthread_self(), .fail_at = 4};
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(3, N, 30, scripted, &s, &q), STRATA_OK);
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg);
    for (int64_t i = 1; i <= 3; i++) // read before the failure: delivered
        take_ok(q, &s, i, &tk, &tg);
    assert_int_equal(st_prefetch_take(q, 4, &tk, &tg, NULL), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "/scripted/corpus.txt at byte 400"));
    usleep(20000);
    assert_int_equal(atomic_load(&s.calls[5]), 0); // the thread stopped at the failure
    take_ok(q, &s, 4, &tk, &tg); // taken again: read again (the script fails once)
    take_ok(q, &s, 5, &tk, &tg);
    assert_int_equal(atomic_load(&s.calls[4]), 2);
    st_prefetch_destroy(q);
    free(tk);
    free(tg);
}

static void test_queue_shutdown(void **state)
{
    (void)state;
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg);
    for (int k = 0; k < 3; k++) { // a full queue; a thread inside a slow fill; never started
        script_t s = {.caller = pthread_self(), .sleep_us = k == 1 ? 100000 : 0};
        st_prefetch_t *q;
        assert_int_equal(st_prefetch_create(4, N, 100, scripted, &s, &q), STRATA_OK);
        if (k < 2)
            take_ok(q, &s, 1, &tk, &tg);
        if (k == 0)
            wait_filled(&s, 5);
        st_prefetch_destroy(q);
        assert_true(atomic_load(&s.filled) <= (k == 2 ? 0 : 5));
    }
    free(tk);
    free(tg);
}

static void test_queue_depth0(void **state)
{
    (void)state;
    script_t s = {.caller = pthread_self(), .fail_at = 3};
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(0, N, 10, scripted, &s, &q), STRATA_OK);
    int32_t *tk = malloc(N * sizeof *tk), *tg = malloc(N * sizeof *tg), *mine = tk;
    take_ok(q, &s, 1, &tk, &tg);
    take_ok(q, &s, 2, &tk, &tg);
    assert_ptr_equal(tk, mine); // filled in place
    assert_int_equal(st_prefetch_take(q, 3, &tk, &tg, NULL), STRATA_ERR_IO);
    assert_false(atomic_load(&s.other_thread));
    assert_int_equal(atomic_load(&s.filled), 3);
    st_prefetch_destroy(q);
    free(tk);
    free(tg);
}

/* ---- a real file ------------------------------------------------------------------------------- */

static char corpus[1024], tmp[64];

/* A corpus of random bytes (size bytes) at tmp/corpus.bin. */
static void make_corpus(size_t size)
{
    snprintf(tmp, sizeof tmp, "/tmp/test_train_data.XXXXXX");
    assert_non_null(mkdtemp(tmp));
    snprintf(corpus, sizeof corpus, "%s/corpus.bin", tmp);
    FILE *f = fopen(corpus, "wb");
    assert_non_null(f);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        fputc((int)(x & 0xff), f);
    }
    assert_int_equal(fclose(f), 0);
}

static void remove_corpus(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    assert_int_equal(system(cmd), 0);
}

enum { ROWS = 3, ROW0 = 5, T = 40 };

static strata_status_t file_fill(void *ctx, int64_t index, int32_t *tokens, int32_t *targets)
{
    return strata_data_batch(ctx, 0, 77, index, ROW0, ROWS, T, tokens, targets);
}

static void test_prefetch_identical(void **state)
{
    (void)state;
    make_corpus(1 << 20);
    strata_data_t *d;
    assert_int_equal(strata_data_open(corpus, 0.1, &d), STRATA_OK);
    st_data_set_read_delay(d, 300); // the thread lags: takes wait, restarts drop reads in flight
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(2, ROWS * T, 60, file_fill, d, &q), STRATA_OK);
    size_t n = ROWS * T;
    int32_t *tk = malloc(n * 4), *tg = malloc(n * 4), *rk = malloc(n * 4), *rg = malloc(n * 4);
    int32_t *only = malloc(n * 4);
    const int64_t order[] = {1, 2, 3, 4, 5, 17, 18, 19, 20, 9, 10, 58, 59, 60};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int64_t s = order[i];
        if (st_prefetch_take(q, s, &tk, &tg, NULL) != STRATA_OK)
            fail_msg("take %lld: %s", (long long)s, strata_last_error());
        assert_int_equal(strata_data_batch(d, 0, 77, s, ROW0, ROWS, T, rk, rg), STRATA_OK);
        assert_memory_equal(tk, rk, n * 4);
        assert_memory_equal(tg, rg, n * 4);
        for (int r = 0; r < ROWS; r++) // targets are the tokens shifted by one
            assert_memory_equal(tg + r * T, rk + r * T + 1, (T - 1) * 4);
        memset(only, 0xff, n * 4);
        assert_int_equal(strata_data_batch(d, 0, 77, s, ROW0, ROWS, T, only, NULL), STRATA_OK);
        assert_memory_equal(only, rk, n * 4);
        memset(only, 0xff, n * 4);
        assert_int_equal(strata_data_batch(d, 0, 77, s, ROW0, ROWS, T, NULL, only), STRATA_OK);
        assert_memory_equal(only, rg, n * 4);
    }
    st_prefetch_destroy(q);
    // The validation split draws its windows from the tail only: its bytes are the file's last 10%.
    size_t ntrain = strata_data_ntokens(d, 0);
    assert_int_equal(strata_data_batch(d, 1, 77, 0, 0, ROWS, T, rk, rg), STRATA_OK);
    FILE *f = fopen(corpus, "rb");
    uint8_t *all = malloc(1 << 20);
    assert_int_equal(fread(all, 1, 1 << 20, f), 1 << 20);
    fclose(f);
    for (int r = 0; r < ROWS; r++) {
        bool found = false;
        for (size_t at = ntrain; !found && at + T + 1 <= (1 << 20); at++) {
            found = true;
            for (int i = 0; found && i < T; i++)
                found = all[at + i] == rk[r * T + i] && all[at + i + 1] == rg[r * T + i];
        }
        assert_true(found);
    }
    free(all);
    free(tk), free(tg), free(rk), free(rg), free(only);
    strata_data_close(d);
    remove_corpus();
}

static void test_truncated(void **state)
{
    (void)state;
    make_corpus(1 << 16);
    strata_data_t *d;
    assert_int_equal(strata_data_open(corpus, 0.1, &d), STRATA_OK);
    int32_t *tk = malloc(ROWS * T * 4), *tg = malloc(ROWS * T * 4);
    assert_int_equal(truncate(corpus, 100), 0);
    assert_int_equal(strata_data_batch(d, 0, 77, 1, 0, ROWS, T, tk, tg), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), corpus));
    assert_non_null(strstr(strata_last_error(), "truncated"));
    st_prefetch_t *q;
    assert_int_equal(st_prefetch_create(2, ROWS * T, 10, file_fill, d, &q), STRATA_OK);
    assert_int_equal(st_prefetch_take(q, 1, &tk, &tg, NULL), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), corpus));
    st_prefetch_destroy(q);
    free(tk), free(tg);
    strata_data_close(d);
    assert_int_equal(strata_data_open("/nonexistent/corpus.txt", 0.1, &d), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "/nonexistent/corpus.txt"));
    remove_corpus();
}

/* ---- the trainer -------------------------------------------------------------------------------- */

enum { STEPS = 6, BATCH = 4 };

/* Runs steps (from a resume when resume) with `prefetch`, recording each step's rows and loss;
 * checkpoints at step 3 when ckpt. Returns the bytes the trainer read. */
static uint64_t run_rows(strata_train_config_t *c, int prefetch, bool resume, bool ckpt,
                         int32_t rows[][2][BATCH * 16], float *loss, double *wait)
{
    c->prefetch = prefetch;
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    int64_t at = 0;
    if (resume)
        assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    for (int64_t s = at; s < STEPS; s++) {
        strata_step_info_t info;
        if (strata_trainer_step(t, &info) != STRATA_OK)
            fail_msg("step %lld: %s", (long long)s + 1, strata_last_error());
        memcpy(rows[s][0], t->tokens, sizeof rows[s][0]);
        memcpy(rows[s][1], t->targets, sizeof rows[s][1]);
        loss[s] = info.loss;
        if (wait)
            *wait += info.data_wait_s;
        if (ckpt && s + 1 == 3)
            assert_int_equal(strata_trainer_checkpoint(t), STRATA_OK);
    }
    uint64_t bytes = strata_trainer_data_bytes_read(t);
    strata_trainer_destroy(t);
    return bytes;
}

static void test_trainer_rows(void **state)
{
    (void)state;
    make_corpus(1 << 18);
    strata_train_config_t c = st_tiny_train_config(BATCH, STEPS, corpus);
    static int32_t sync[STEPS][2][BATCH * 16], pre[STEPS][2][BATCH * 16], res[STEPS][2][BATCH * 16];
    float ls[STEPS], lp[STEPS], lr[STEPS];
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/ck", tmp);
    uint64_t bytes = run_rows(&c, 3, false, true, pre, lp, NULL);
    c.ckpt_dir[0] = 0;
    run_rows(&c, 0, false, false, sync, ls, NULL);
    assert_memory_equal(pre, sync, sizeof sync);
    assert_memory_equal(lp, ls, sizeof ls);
    assert_int_equal(bytes, (uint64_t)STEPS * BATCH * (c.seq + 1)); // each window once
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/ck", tmp);
    run_rows(&c, 2, true, false, res, lr, NULL);
    assert_memory_equal(res[3], sync[3], sizeof sync[0] * (STEPS - 3));
    assert_memory_equal(lr + 3, ls + 3, sizeof ls[0] * (STEPS - 3));
    remove_corpus();
}

/* The wait for data per step with slowed reads (2 ms a row), without and with the loader thread:
 * printed, not asserted (wall clock). */
static void test_trainer_wait(void **state)
{
    (void)state;
    make_corpus(1 << 18);
    strata_train_config_t c = st_tiny_train_config(BATCH, STEPS, corpus);
    static int32_t rows[STEPS][2][BATCH * 16];
    float loss[2][STEPS];
    double wait[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        c.prefetch = k * 2;
        strata_trainer_t *t;
        assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
        st_data_set_read_delay(t->data, 2000);
        for (int s = 0; s < STEPS; s++) {
            strata_step_info_t info;
            assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
            memcpy(rows[s][0], t->tokens, sizeof rows[s][0]);
            loss[k][s] = info.loss;
            if (s > 0) // the first step waits for its batch either way
                wait[k] += info.data_wait_s;
            usleep(20000); // a step's compute of a larger model, for the thread to read behind
        }
        strata_trainer_destroy(t);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    fprintf(stderr, "data wait per step, reads slowed to 2 ms a row, %d rows, 20 ms of compute: "
            "prefetch 0 %.2f ms, prefetch 2 %.2f ms\n", BATCH, wait[0] / (STEPS - 1) * 1e3,
            wait[1] / (STEPS - 1) * 1e3);
    remove_corpus();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_order),    cmocka_unit_test(test_queue_bounded),
        cmocka_unit_test(test_queue_restart),  cmocka_unit_test(test_queue_error),
        cmocka_unit_test(test_queue_shutdown), cmocka_unit_test(test_queue_depth0),
        cmocka_unit_test(test_prefetch_identical), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_trainer_rows),   cmocka_unit_test(test_trainer_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
