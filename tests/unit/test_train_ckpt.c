/* Training checkpoints in one process: the data loader's rank split; one file's validation (round
 * trip, flipped/truncated bytes, an edited header, metadata out of range even under a valid checksum,
 * NaN under a valid checksum, the writer refusing a non-finite state, a shard's tensor record); a
 * step's identity (a shard of
 * another step, an older attempt or another run refused by the manifest); resume (exact, fallback,
 * never a silent fresh start, a real write failure); the non-finite guard (stop with a report, skip
 * leaving the state untouched, metrics always JSON); pruning (never the newest committed step,
 * leftovers of interrupted writes, temporaries of dead writers only). */
#include "harness/st_test.h"
#include "harness/train_checks.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

static bool has(const char *text, const char *part)
{
    if (strstr(text, part))
        return true;
    print_error("expected \"%s\" in: %s\n", part, text);
    return false;
}

static strata_train_config_t small_cfg(void)
{
    return st_tiny_train_config(4, 8, corpus);
}

/* ---- test-side file surgery: an independent (bitwise) crc32 to re-seal an edited file ---------- */

static uint32_t ref_crc32(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

typedef struct file_parts {
    char *hdr;      /* NUL-terminated header text (without padding) */
    float *data;
    size_t nbytes;
} file_parts_t;

static void read_parts(const char *path, file_parts_t *fp)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)len8[i] << (8 * i);
    fp->hdr = calloc(hl + 64, 1);
    assert_int_equal(fread(fp->hdr, 1, hl, f), hl);
    while (hl > 0 && fp->hdr[hl - 1] == ' ')
        fp->hdr[--hl] = 0;
    long here = ftell(f);
    fseek(f, 0, SEEK_END);
    fp->nbytes = (size_t)(ftell(f) - here);
    fseek(f, here, SEEK_SET);
    fp->data = malloc(fp->nbytes + 4);
    assert_int_equal(fread(fp->data, 1, fp->nbytes, f), fp->nbytes);
    fclose(f);
}

/* Replaces the value of "key":"..." in the header text. */
static void set_field(file_parts_t *fp, const char *key, const char *value)
{
    char pat[64], *out = malloc(strlen(fp->hdr) + strlen(value) + 64);
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    char *at = strstr(fp->hdr, pat);
    assert_non_null(at);
    at += strlen(pat);
    char *end = strchr(at, '"');
    sprintf(out, "%.*s%s%s", (int)(at - fp->hdr), fp->hdr, value, end);
    free(fp->hdr);
    fp->hdr = out;
}

/* Writes the parts back as a file whose data and header checksums are both valid again. */
static void write_sealed(const char *path, file_parts_t *fp)
{
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", ref_crc32(0, fp->data, fp->nbytes));
    set_field(fp, "crc32", crc);
    set_field(fp, "header_crc32", "00000000");
    size_t hl = strlen(fp->hdr), padded = (hl + 7) & ~(size_t)7;
    unsigned char *blob = malloc(8 + padded);
    for (int i = 0; i < 8; i++)
        blob[i] = (unsigned char)(padded >> (8 * i));
    memcpy(blob + 8, fp->hdr, hl);
    memset(blob + 8 + hl, ' ', padded - hl);
    snprintf(crc, sizeof crc, "%08x", ref_crc32(0, blob, 8 + padded));
    char *at = strstr((char *)blob + 8, "\"header_crc32\":\"") + strlen("\"header_crc32\":\"");
    memcpy(at, crc, 8);
    FILE *f = fopen(path, "wb");
    assert_int_equal(fwrite(blob, 1, 8 + padded, f), 8 + padded);
    assert_int_equal(fwrite(fp->data, 1, fp->nbytes, f), fp->nbytes);
    fclose(f);
    free(blob);
    free(fp->hdr);
    free(fp->data);
}

static void copy_file(const char *from, const char *to)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

/* ---- data --------------------------------------------------------------------------------------- */

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

static void test_config_nonfinite(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/c.json", tmpdir);
    FILE *f = fopen(path, "w");
    fputs("{\"steps\": 3,\n \"nonfinite\": \"skip\"}\n", f);
    fclose(f);
    strata_train_config_t c = strata_train_config_default();
    assert_int_equal(c.nonfinite, STRATA_NONFINITE_STOP);
    assert_int_equal(strata_train_config_load(path, &c), STRATA_OK);
    assert_int_equal(c.nonfinite, STRATA_NONFINITE_SKIP);
    f = fopen(path, "w");
    fputs("{\"steps\": 3,\n \"nonfinite\": \"ignore\"}\n", f);
    fclose(f);
    assert_int_equal(strata_train_config_load(path, &c), STRATA_ERR_PARSE);
    char where[300];
    snprintf(where, sizeof where, "%s:2:", path);
    assert_true(has(strata_last_error(), where));
    rm_dir(tmpdir);
}

/* ---- one file ------------------------------------------------------------------------------------ */

static float wa[6] = {1, 2, 3, 4, 5, 6}, wb[3] = {-1, 0.5f, 7};

static strata_ckpt_meta_t test_meta(void)
{
    strata_ckpt_meta_t meta = {.step = 42, .seed = 9, .rank = 1, .nranks = 2, .shard_offset = 100,
                               .shard_count = 9};
    snprintf(meta.run_id, sizeof meta.run_id, "0123456789abcdef");
    snprintf(meta.config, sizeof meta.config, "{\"x\": \"q\\\"uote\", \"step\":\"7\"}");
    return meta;
}

static void write_test_file(const char *path)
{
    strata_ckpt_tensor_t ts[2] = {{"w", 2, {2, 3}, wa}, {"b", 1, {3}, wb}};
    strata_ckpt_meta_t meta = test_meta();
    assert_int_equal(strata_ckpt_write(path, ts, 2, &meta, NULL), STRATA_OK);
}

static void test_ckpt_roundtrip_and_corruption(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/a.safetensors", tmpdir);
    strata_ckpt_tensor_t ts[2] = {{"w", 2, {2, 3}, wa}, {"b", 1, {3}, wb}};
    strata_ckpt_meta_t meta = test_meta();
    strata_ckpt_digest_t dg;
    assert_int_equal(strata_ckpt_write(path, ts, 2, &meta, &dg), STRATA_OK);
    strata_ckpt_t *ck;
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_OK);
    assert_int_equal(strata_ckpt_meta(ck)->step, 42);
    assert_int_equal(strata_ckpt_meta(ck)->rank, 1);
    assert_int_equal(strata_ckpt_meta(ck)->shard_offset, 100);
    assert_string_equal(strata_ckpt_meta(ck)->run_id, meta.run_id);
    assert_string_equal(strata_ckpt_meta(ck)->config, meta.config);
    assert_int_equal(strata_ckpt_digest(ck).header_crc32, dg.header_crc32);
    assert_int_equal(strata_ckpt_digest(ck).bytes, dg.bytes);
    float a2[6], b2[3];
    strata_ckpt_tensor_t rd[2] = {{"w", 2, {2, 3}, a2}, {"b", 1, {3}, b2}};
    assert_int_equal(strata_ckpt_load(ck, rd, 2), STRATA_OK);
    assert_memory_equal(wa, a2, sizeof wa);
    assert_memory_equal(wb, b2, sizeof wb);
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
    assert_true(has(strata_last_error(), path));
    assert_true(has(strata_last_error(), "checksum"));
    // Truncate: refused too.
    write_test_file(path);
    long full;
    f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    full = ftell(f);
    fclose(f);
    for (long cut = 0; cut < full; cut += 7) {
        assert_int_equal(truncate(path, cut), 0);
        assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
        assert_non_null(strstr(strata_last_error(), path));
        write_test_file(path);
    }
    rm_dir(tmpdir);
}

/* The metadata is covered by the header checksum: an edited step is refused, and so is a step out of
 * range or not a number even when the file's checksums were recomputed (a buggy or hostile writer). */
static void test_ckpt_header_checked(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/h.safetensors", tmpdir);
    strata_ckpt_t *ck;
    // Edit "step":"42" -> "step":"43" in place, same length, checksums left alone.
    write_test_file(path);
    file_parts_t fp;
    read_parts(path, &fp);
    char *at = strstr(fp.hdr, "\"step\":\"42\"");
    assert_non_null(at);
    long off = 8 + (at - fp.hdr) + 9; // the '2'
    free(fp.hdr);
    free(fp.data);
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    fputc('3', f);
    fclose(f);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), path));
    assert_true(has(strata_last_error(), "header checksum mismatch"));

    // Re-sealed edits: each value is checked for type and range.
    static const struct { const char *key, *value, *why; } cases[] = {
        {"step", "-2147483649", "\"step\" is \"-2147483649\", expected an integer in [0, "},
        {"step", "12abc", "\"step\" is \"12abc\""},
        {"step", "99999999999999999999", "\"step\""},
        {"nranks", "0", "\"nranks\" is \"0\""},
        {"rank", "2", "\"rank\" is \"2\", expected an integer in [0, 1]"},
        {"shard_count", "-1", "\"shard_count\""},
        {"seed", "-3", "\"seed\" is \"-3\""},
        {"run_id", "xyz", "\"run_id\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_test_file(path);
        read_parts(path, &fp);
        set_field(&fp, cases[i].key, cases[i].value);
        write_sealed(path, &fp);
        assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
        assert_true(has(strata_last_error(), path));
        assert_true(has(strata_last_error(), cases[i].why));
    }
    // A control: re-sealing without an edit gives a valid file (the surgery itself is sound).
    write_test_file(path);
    read_parts(path, &fp);
    write_sealed(path, &fp);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_OK);
    strata_ckpt_close(ck);
    rm_dir(tmpdir);
}

/* NaN/inf: never written, and refused on load even under valid checksums, naming file and tensor. */
/* A shard's "tensors" record round-trips (every field, a TP part and a tied copy), a file without
 * one has no pieces, and a record naming a range the file does not hold, or elements past its part,
 * is refused naming the file. */
static void test_ckpt_pieces(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/p.safetensors", tmpdir);
    float x[10] = {0};
    strata_ckpt_tensor_t ts[3] = {{"params@64", 1, {10}, x}, {"optim.m@64", 1, {10}, x},
                                  {"optim.v@64", 1, {10}, x}};
    strata_ckpt_piece_t p[2] = {
        {.name = "h.0.attn.qkv.weight", .ndim = 2, .shape = {12, 2}, .tp = 2, .tp_rank = 1,
         .split_dim = 0, .split_groups = 3, .part_shape = {6, 2}, .begin = 4, .end = 12,
         .range = 64, .at = 0},
        {.name = "wte", .ndim = 1, .shape = {5}, .tp = 1, .tp_rank = 0, .split_dim = -1,
         .split_groups = 1, .part_shape = {5}, .begin = 3, .end = 5, .range = 64, .at = 8,
         .tied_copy = true}};
    strata_ckpt_meta_t meta = test_meta();
    assert_int_equal(st_ckpt_write(path, ts, 3, &meta, p, 2, NULL, false), STRATA_OK);
    strata_ckpt_t *ck;
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_OK);
    assert_int_equal(strata_ckpt_npieces(ck), 2);
    for (int i = 0; i < 2; i++) {
        const strata_ckpt_piece_t *q = strata_ckpt_piece(ck, i);
        assert_string_equal(q->name, p[i].name);
        assert_int_equal(q->ndim, p[i].ndim);
        for (int d = 0; d < q->ndim; d++) {
            assert_int_equal(q->shape[d], p[i].shape[d]);
            assert_int_equal(q->part_shape[d], p[i].part_shape[d]);
        }
        assert_int_equal(q->tp, p[i].tp);
        assert_int_equal(q->tp_rank, p[i].tp_rank);
        assert_int_equal(q->split_dim, p[i].split_dim);
        assert_int_equal(q->split_groups, p[i].split_groups);
        assert_int_equal(q->begin, p[i].begin);
        assert_int_equal(q->end, p[i].end);
        assert_int_equal(q->range, p[i].range);
        assert_int_equal(q->at, p[i].at);
        assert_int_equal(q->tied_copy, p[i].tied_copy);
    }
    assert_null(strata_ckpt_piece(ck, 2));
    strata_ckpt_close(ck);

    write_test_file(path); // no record
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_OK);
    assert_int_equal(strata_ckpt_npieces(ck), 0);
    strata_ckpt_close(ck);

    p[1].at = 9; // 2 elements from 9 of a 10-element range
    assert_int_equal(st_ckpt_write(path, ts, 3, &meta, p, 2, NULL, false), STRATA_OK);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), path));
    assert_true(has(strata_last_error(), "'wte' elements [3, 5) in 'params@64' from 9"));
    p[1].at = 8;
    p[1].range = 65; // no such range
    assert_int_equal(st_ckpt_write(path, ts, 3, &meta, p, 2, NULL, false), STRATA_OK);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), "'params@65'"));
    p[1].range = 64;
    p[0].end = 13; // past the 12 elements of the part
    assert_int_equal(st_ckpt_write(path, ts, 3, &meta, p, 2, NULL, false), STRATA_OK);
    assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), "\"tensors\" entry 0 is malformed or out of range"));
    rm_dir(tmpdir);
}

static void test_ckpt_nonfinite(void **state)
{
    (void)state;
    setup_paths();
    char path[256];
    snprintf(path, sizeof path, "%s/n.safetensors", tmpdir);
    float x[3] = {1, NAN, 2};
    strata_ckpt_tensor_t t = {"bias", 1, {3}, x};
    strata_ckpt_meta_t meta = test_meta();
    assert_int_equal(strata_ckpt_write(path, &t, 1, &meta, NULL), STRATA_ERR_INVALID_ARG);
    assert_true(has(strata_last_error(), "'bias' element 1"));
    assert_int_equal(access(path, F_OK), -1);
    meta.step = -1;
    x[1] = 0;
    assert_int_equal(strata_ckpt_write(path, &t, 1, &meta, NULL), STRATA_ERR_INVALID_ARG);

    strata_ckpt_t *ck;
    static const float poison[2] = {NAN, -INFINITY};
    for (int k = 0; k < 2; k++) {
        write_test_file(path);
        file_parts_t fp;
        read_parts(path, &fp);
        fp.data[4] = poison[k]; // "w" is stored first: its element 4
        write_sealed(path, &fp);
        assert_int_equal(strata_ckpt_open(path, &ck), STRATA_ERR_PARSE);
        assert_true(has(strata_last_error(), path));
        assert_true(has(strata_last_error(), "tensor 'w' element 4"));
        assert_true(has(strata_last_error(), "non-finite"));
    }
    rm_dir(tmpdir);
}

/* ---- steps, resume ------------------------------------------------------------------------------- */

static void run_losses(strata_train_config_t *c, float *losses, bool resume, int64_t want_resume)
{
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    if (resume) {
        int64_t at;
        if (strata_trainer_resume(t, &at) != STRATA_OK)
            fail_msg("resume: %s", strata_last_error());
        assert_int_equal(at, want_resume);
    }
    if (strata_trainer_run(t, losses) != STRATA_OK)
        fail_msg("run: %s", strata_last_error());
    strata_trainer_destroy(t);
}

/* Trains `steps` steps with c (checkpoints as configured) and then writes a checkpoint. */
static void train_and_checkpoint(strata_train_config_t *c, int steps)
{
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    int64_t at;
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    for (int s = 0; s < steps; s++)
        assert_int_equal(strata_trainer_step(t, NULL), STRATA_OK);
    assert_int_equal(strata_trainer_checkpoint(t), STRATA_OK);
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
        // Stop after 5 (the LR schedule still spans 8), then resume to 8.
        snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/run%d", tmpdir, kind);
        memset(part, 0, sizeof part);
        strata_trainer_t *t;
        assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
        for (int s = 0; s < 5; s++) {
            strata_step_info_t info;
            assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
            part[s] = info.loss;
        }
        assert_int_equal(strata_trainer_checkpoint(t), STRATA_OK);
        strata_trainer_destroy(t);
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
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 8), 3);
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
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 8), 3);
    for (int i = 0; i < 3; i++) {
        strata_ckpt_path(c.ckpt_dir, steps[i], 0, 1, p6, sizeof p6);
        assert_int_equal(truncate(p6, 10), 0);
    }
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), p8));
    assert_true(has(strata_last_error(), "refusing to start over"));
    strata_trainer_destroy(t);
    rm_dir(tmpdir);
}

/* The manifest is the step's identity: a file of another step, an older attempt at the same step,
 * or another run is refused by name, and resume falls back to the newest step it can trust. */
static void test_step_identity(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/id", tmpdir);
    c.ckpt_every = 2;
    c.ckpt_keep = 10;
    c.steps = 6;
    run_losses(&c, NULL, false, 0); // 2, 4, 6
    char p2[2048], p4[2048], p6[2048], keep6[2048], keep4[2048], other[2048];
    strata_ckpt_path(c.ckpt_dir, 2, 0, 1, p2, sizeof p2);
    strata_ckpt_path(c.ckpt_dir, 4, 0, 1, p4, sizeof p4);
    strata_ckpt_path(c.ckpt_dir, 6, 0, 1, p6, sizeof p6);
    snprintf(keep6, sizeof keep6, "%s/six", tmpdir);
    snprintf(keep4, sizeof keep4, "%s/four", tmpdir);
    copy_file(p6, keep6);
    copy_file(p4, keep4);
    strata_trainer_t *t;
    int64_t at;

    // 4 and 6 swapped: both refused ("holds step"), resume at 2.
    copy_file(keep4, p6);
    copy_file(keep6, p4);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    assert_int_equal(at, 2);
    strata_trainer_destroy(t);
    strata_ckpt_full_t full;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_ckpt_assemble(strata_trainer_model(t), c.ckpt_dir, 6, true, &full),
                     STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), p6));
    assert_true(has(strata_last_error(), "it holds step 4"));

    // The same step from an earlier attempt (same run, step 6 rewritten after resuming from 4 with
    // another learning rate): the digest tells them apart.
    copy_file(keep4, p4);
    copy_file(keep6, p6);
    strata_trainer_destroy(t);
    strata_train_config_t c2 = c;
    c2.lr *= 2;
    assert_int_equal(unlink(p6), 0); // 6 unusable, so the next resume starts at 4
    char m6[2048];
    snprintf(m6, sizeof m6, "%s/ckpt_00000006.manifest.json", c.ckpt_dir);
    assert_int_equal(unlink(m6), 0);
    train_and_checkpoint(&c2, 2); // a new step 6 of the same run
    copy_file(keep6, p6);         // ... its file replaced by the first attempt's
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_ckpt_assemble(strata_trainer_model(t), c.ckpt_dir, 6, true, &full),
                     STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), p6));
    assert_true(has(strata_last_error(), "stale or mixed"));
    strata_trainer_destroy(t);

    // Another run (another seed) at the same step: refused as such.
    strata_train_config_t c3 = c;
    c3.seed = 2;
    snprintf(c3.ckpt_dir, sizeof c3.ckpt_dir, "%s/other", tmpdir);
    c3.ckpt_every = 0;
    run_losses(&c3, NULL, false, 0);
    strata_ckpt_path(c3.ckpt_dir, 6, 0, 1, other, sizeof other);
    copy_file(other, p6);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_ckpt_assemble(strata_trainer_model(t), c.ckpt_dir, 6, true, &full),
                     STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), p6));
    assert_true(has(strata_last_error(), "a shard of another run"));
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    assert_int_equal(at, 4);
    strata_trainer_destroy(t);

    // An edited manifest is refused by its own checksum.
    FILE *f = fopen(m6, "r+b");
    assert_non_null(f);
    fseek(f, 30, SEEK_SET);
    fputc('#', f);
    fclose(f);
    strata_ckpt_manifest_t mf;
    assert_int_equal(strata_ckpt_manifest_read(c.ckpt_dir, 6, &mf), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), m6));
    assert_true(has(strata_last_error(), "manifest checksum mismatch"));
    rm_dir(tmpdir);
}

/* --resume never starts over silently: no directory or an empty one is a (reported) fresh start,
 * files without a committed step are an error naming them. */
static void test_resume_never_silent(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/none", tmpdir);
    strata_trainer_t *t;
    int64_t at = -1;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    assert_int_equal(at, 0);
    // A shard left by a write that never committed (the manifest missing).
    assert_int_equal(strata_trainer_step(t, NULL), STRATA_OK);
    assert_int_equal(strata_trainer_checkpoint(t), STRATA_OK);
    strata_trainer_destroy(t);
    char m1[2048];
    snprintf(m1, sizeof m1, "%s/ckpt_00000001.manifest.json", c.ckpt_dir);
    assert_int_equal(unlink(m1), 0);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), "no committed step"));
    assert_true(has(strata_last_error(), "ckpt_00000001.safetensors"));
    assert_true(has(strata_last_error(), "refusing to start over"));
    strata_trainer_destroy(t);
    rm_dir(tmpdir);
}

/* A write that really fails (the file size limit, SIGXFSZ ignored: write() returns EFBIG as it
 * returns ENOSPC on a full disk): the run fails naming the file, nothing is committed, no temporary
 * is left, and resume continues from the last committed step. */
static void test_write_failure(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/full", tmpdir);
    c.ckpt_every = 2;
    c.steps = 4;
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    for (int s = 0; s < 2; s++)
        assert_int_equal(strata_trainer_step(t, NULL), STRATA_OK);
    assert_int_equal(strata_trainer_checkpoint(t), STRATA_OK);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096; // a checkpoint of this model is ~100 KB
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    strata_status_t rc = strata_trainer_run(t, NULL); // steps 3, 4, checkpoint at 4 fails
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, STRATA_ERR_IO);
    assert_true(has(strata_last_error(), "ckpt_00000004.safetensors"));
    assert_true(has(strata_last_error(), "File too large"));
    strata_trainer_destroy(t);
    int64_t steps[4];
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 4), 1);
    assert_int_equal(steps[0], 2);
    char name[256];
    assert_int_equal(strata_ckpt_count_files(c.ckpt_dir, name, sizeof name), 2);
    assert_int_equal(strncmp(name, "ckpt_00000002.", 14), 0); // the manifest or the shard
    float l[4];
    run_losses(&c, l, true, 2);
    rm_dir(tmpdir);
}

/* ---- the non-finite guard ------------------------------------------------------------------------ */

typedef struct poison {
    int64_t at_step; /* the step (1-based) whose gradients / loss go bad */
    bool loss_only;
} poison_t;

static strata_status_t poison_sync(void *ctx, strata_trainer_t *t, float *loss)
{
    const poison_t *p = ctx;
    if (strata_trainer_step_count(t) + 1 != p->at_step)
        return STRATA_OK;
    if (p->loss_only)
        *loss = NAN;
    else
        strata_model_grad_arena(strata_trainer_model(t))[7] = INFINITY;
    return STRATA_OK;
}

/* Every line of a metrics file is a JSON object; returns the number of lines. */
static int check_metrics_json(const char *path, int64_t skipped_step)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_object *o = json_tokener_parse(line), *v;
        if (!o)
            fail_msg("metrics line %d is not JSON: %s", n + 1, line);
        assert_true(json_object_object_get_ex(o, "step", &v));
        if (json_object_get_int64(v) == skipped_step) {
            assert_true(json_object_object_get_ex(o, "loss", &v));
            assert_null(v); // null
            assert_true(json_object_object_get_ex(o, "skipped", &v));
            assert_true(json_object_get_boolean(v));
        }
        json_object_put(o);
        n++;
    }
    fclose(f);
    return n;
}

static void test_nonfinite_stop(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/nf", tmpdir);
    snprintf(c.metrics, sizeof c.metrics, "%s/m.jsonl", tmpdir);
    c.ckpt_every = 1;
    c.ckpt_keep = 10;
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    poison_t p = {4, false};
    strata_trainer_set_sync(t, poison_sync, &p);
    assert_int_equal(strata_trainer_run(t, NULL), STRATA_ERR_INVALID_ARG);
    assert_true(has(strata_last_error(), "step 4"));
    assert_true(has(strata_last_error(), "grad norm inf"));
    assert_true(has(strata_last_error(), "non-finite gradients"));
    assert_true(has(strata_last_error(), "--nonfinite skip"));
    assert_int_equal(strata_trainer_step_count(t), 3);
    strata_trainer_destroy(t);
    int64_t steps[8];
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 8), 3);
    assert_int_equal(steps[0], 3); // nothing of step 4 was checkpointed
    assert_int_equal(check_metrics_json(c.metrics, -1), 3);
    // The one-step API refuses too.
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_forward_backward(t, 0, c.batch, &(float){0}), STRATA_OK);
    strata_model_grad_arena(strata_trainer_model(t))[0] = NAN;
    float norm;
    assert_int_equal(strata_trainer_update(t, &norm, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_trainer_step_count(t), 0);
    strata_trainer_destroy(t);
    rm_dir(tmpdir);
}

static void test_nonfinite_skip(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/sk", tmpdir);
    snprintf(c.metrics, sizeof c.metrics, "%s/m.jsonl", tmpdir);
    c.nonfinite = STRATA_NONFINITE_SKIP;
    c.ckpt_every = 1;
    for (int loss_only = 0; loss_only < 2; loss_only++) {
        strata_trainer_t *t;
        assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
        poison_t p = {4, loss_only};
        strata_trainer_set_sync(t, poison_sync, &p);
        strata_gpt_t *m = strata_trainer_model(t);
        size_t P = strata_model_nparams(m);
        float *before = malloc(P * sizeof(float));
        strata_step_info_t info;
        for (int s = 1; s <= 3; s++) {
            assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
            assert_false(info.skipped);
        }
        memcpy(before, strata_model_param_arena(m), P * sizeof(float));
        assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
        assert_true(info.skipped);
        assert_int_equal(info.step, 4);
        assert_memory_equal(before, strata_model_param_arena(m), P * sizeof(float));
        assert_int_equal(strata_trainer_step(t, &info), STRATA_OK);
        assert_false(info.skipped);
        assert_memory_not_equal(before, strata_model_param_arena(m), P * sizeof(float));
        free(before);
        strata_trainer_destroy(t);
    }
    // Through run: the metrics stay JSON (null, not nan) and the run finishes.
    unlink(c.metrics);
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    poison_t p = {4, true};
    strata_trainer_set_sync(t, poison_sync, &p);
    assert_int_equal(strata_trainer_run(t, NULL), STRATA_OK);
    strata_trainer_destroy(t);
    assert_int_equal(check_metrics_json(c.metrics, 4), 8);
    rm_dir(tmpdir);
}

/* ---- pruning ------------------------------------------------------------------------------------- */

static bool exists(const char *dir, const char *name)
{
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
}

/* keep 1 with the leftovers of interrupted writes around: the step just committed is never removed,
 * older uncommitted leftovers go, newer ones stay; temporaries of dead writers go, live ones stay. */
static void test_prune(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = small_cfg();
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/pr", tmpdir);
    c.ckpt_every = 2;
    c.ckpt_keep = 1;
    c.steps = 4;
    run_losses(&c, NULL, false, 0);
    const char *d = c.ckpt_dir;
    assert_true(exists(d, "ckpt_00000004.manifest.json"));
    assert_false(exists(d, "ckpt_00000002.safetensors"));
    // Leftovers: shards without a manifest, older (3) and newer (9) than the next commit; shards
    // of a sharded run at step 3.
    char p4[2048], p3[2048], p9[2048];
    strata_ckpt_path(d, 4, 0, 1, p4, sizeof p4);
    strata_ckpt_path(d, 3, 0, 1, p3, sizeof p3);
    strata_ckpt_path(d, 9, 0, 1, p9, sizeof p9);
    copy_file(p4, p3);
    copy_file(p4, p9);
    touch(d, "ckpt_00000003.rank1.safetensors");
    // Temporaries: a dead writer (a reaped child), a live one (this process), another host's.
    pid_t kid = fork();
    if (kid == 0)
        _exit(0);
    assert_int_equal(waitpid(kid, NULL, 0), kid);
    char host[256], dead[512], live[512], far[512], legacy[512];
    gethostname(host, sizeof host);
    // (step 10, which this test never writes: its own writer's temporary would reuse `live`)
    snprintf(dead, sizeof dead, "ckpt_00000010.safetensors.tmp.%d.%s", (int)kid, host);
    snprintf(live, sizeof live, "ckpt_00000010.safetensors.tmp.%d.%s", (int)getpid(), host);
    snprintf(far, sizeof far, "ckpt_00000010.safetensors.tmp.%d.not-%s", (int)kid, host);
    snprintf(legacy, sizeof legacy, "ckpt_00000010.safetensors.tmp.%d", (int)kid);
    touch(d, dead);
    touch(d, live);
    touch(d, far);
    touch(d, legacy);
    // Resume at 4, commit 6 with keep 1.
    c.steps = 6;
    run_losses(&c, NULL, true, 4);
    assert_true(exists(d, "ckpt_00000006.manifest.json"));
    assert_true(exists(d, "ckpt_00000006.safetensors"));
    assert_false(exists(d, "ckpt_00000004.manifest.json"));
    assert_false(exists(d, "ckpt_00000004.safetensors"));
    assert_false(exists(d, "ckpt_00000003.safetensors"));
    assert_false(exists(d, "ckpt_00000003.rank1.safetensors"));
    assert_true(exists(d, "ckpt_00000009.safetensors")); // newer than the commit: not ours to judge
    assert_false(exists(d, dead));
    assert_false(exists(d, legacy));
    assert_true(exists(d, live));
    assert_true(exists(d, far));
    // The next resume finds the committed step (the leftover 9 has no manifest).
    c.steps = 8;
    run_losses(&c, NULL, true, 6);
    // Pruning directly: never the newest, whatever keep says.
    assert_int_equal(strata_ckpt_prune(d, 8, 0), 0);
    assert_true(exists(d, "ckpt_00000008.manifest.json"));
    rm_dir(tmpdir);
}

/* ---- memory checkpoints ------------------------------------------------------------------------- */

/* The folded crc32 (PCLMULQDQ where the CPU has it) equals a bitwise reference for every length
 * around its block sizes, every alignment, and when continued across calls. */
static void test_crc32(void **state)
{
    (void)state;
    enum { N = 3000 };
    unsigned char *buf = malloc(N + 8);
    assert_non_null(buf);
    uint32_t x = 12345;
    for (int i = 0; i < N + 8; i++)
        buf[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    for (size_t len = 0; len <= N; len += len < 300 ? 1 : 97)
        for (int off = 0; off < 4; off++)
            if (st_crc32(7, buf + off, len) != ref_crc32(7, buf + off, len))
                fail_msg("crc32 of %zu bytes at offset %d differs from the reference", len, off);
    uint32_t a = st_crc32(st_crc32(0, buf, 1000), buf + 1000, N - 1000);
    assert_int_equal(a, ref_crc32(0, buf, N));
    assert_int_equal(st_crc32(0, "123456789", 9), 0xCBF43926u); // the standard check value
    free(buf);
}

/* Redirects stderr to a file until capture_end, which returns what was written (malloc'd). */
static int saved_stderr = -1;

static void capture_begin(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    saved_stderr = dup(2);
    assert_true(dup2(fd, 2) == 2);
    close(fd);
}

static char *capture_end(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char *out = calloc(1 << 16, 1);
    assert_non_null(out);
    size_t n = fread(out, 1, (1 << 16) - 1, f);
    out[n] = 0;
    fclose(f);
    return out;
}

/* Whether a line of the metrics file starts with `head` and contains `part`. */
static bool metrics_line(const char *path, const char *head, const char *part)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = !strncmp(line, head, strlen(head)) && strstr(line, part);
    fclose(f);
    if (!found)
        print_error("no line of %s starts with %s and holds %s\n", path, head, part);
    return found;
}

/* A step hook that fails step *ctx, the way a dead rank ends a run: nothing of the step is kept. */
static strata_status_t fail_at(void *ctx, strata_trainer_t *t, float *loss)
{
    (void)loss;
    return strata_trainer_step_count(t) + 1 == *(const int64_t *)ctx ? STRATA_ERR_ABORTED
                                                                     : STRATA_OK;
}

/* Runs c (its checkpoints as configured) until step `fail` fails. */
static void run_until_failure(const strata_train_config_t *c, int64_t fail)
{
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    strata_trainer_set_sync(t, fail_at, &fail);
    assert_int_equal(strata_trainer_run(t, NULL), STRATA_ERR_ABORTED);
    assert_int_equal(strata_trainer_step_count(t), fail - 1);
    strata_trainer_destroy(t);
}

/* Resumes c (expecting `want_step`, from memory or not) and runs it to the end into losses (indexed
 * by step - 1); returns the resume's outcome. */
static strata_resume_info_t resume_run(const strata_train_config_t *c, int64_t want_step,
                                       bool want_memory, float *losses)
{
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(c, &t), STRATA_OK);
    int64_t at;
    if (strata_trainer_resume(t, &at) != STRATA_OK)
        fail_msg("resume: %s", strata_last_error());
    strata_resume_info_t ri = strata_trainer_resume_info(t);
    if (at != want_step || ri.step != at || ri.from_memory != want_memory)
        fail_msg("resumed at step %lld (from memory: %d), expected %lld (%d)", (long long)at,
                 ri.from_memory, (long long)want_step, want_memory);
    assert_int_equal(strata_trainer_run(t, losses), STRATA_OK);
    strata_trainer_destroy(t);
    return ri;
}

static strata_train_config_t mem_cfg(const char *disk, const char *mem)
{
    strata_train_config_t c = small_cfg();
    if (disk)
        snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s/%s", tmpdir, disk);
    snprintf(c.mem_ckpt_dir, sizeof c.mem_ckpt_dir, "%s/%s", tmpdir, mem);
    c.ckpt_every = 4;
    c.mem_ckpt_every = 1;
    return c;
}

/* Memory newer than the disk: a run that dies at step 7 left disk step 4 and memory step 6 (one
 * memory step kept, none written at a disk step); resume takes memory step 6, says so in the
 * metrics, and steps 7-8 are those of an uninterrupted run. At the same step memory is
 * preferred. */
static void test_mem_resume_newer(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t ref = small_cfg(), c = mem_cfg("d", "m");
    snprintf(c.metrics, sizeof c.metrics, "%s/m.jsonl", tmpdir);
    float full[8], part[8];
    run_losses(&ref, full, false, 0);
    run_until_failure(&c, 7);
    int64_t steps[8];
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 8), 1);
    assert_int_equal(steps[0], 4);
    assert_int_equal(strata_ckpt_steps(c.mem_ckpt_dir, steps, 8), 1);
    assert_int_equal(steps[0], 6);
    assert_false(exists(c.mem_ckpt_dir, "ckpt_00000005.safetensors"));
    memcpy(part, full, sizeof part);
    part[6] = part[7] = 0;
    strata_resume_info_t ri = resume_run(&c, 6, true, part);
    assert_int_equal(ri.disk_step, 4);
    assert_int_equal(ri.memory_step, 6);
    assert_memory_equal(full, part, sizeof full);
    // The metrics file says what each step wrote and where the resumed run came from.
    assert_true(metrics_line(c.metrics, "{\"step\":4,", "\"ckpt\":\"disk\",\"ckpt_s\":"));
    assert_true(metrics_line(c.metrics, "{\"step\":5,", "\"ckpt\":\"memory\",\"ckpt_s\":"));
    assert_true(metrics_line(c.metrics,
                             "{\"event\":\"resumed_from\",\"step\":6,\"source\":\"memory\"",
                             "\"disk_step\":4,\"memory_step\":6,\"resume_s\":"));
    // Step 8 went to disk (the last step), 7 to memory; both at 8: memory preferred.
    strata_trainer_t *t;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    int64_t at;
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    assert_int_equal(at, 8);
    assert_false(strata_trainer_resume_info(t).from_memory);
    assert_int_equal(strata_trainer_resume_info(t).memory_step, 7);
    assert_int_equal(strata_trainer_checkpoint_memory(t), STRATA_OK);
    strata_trainer_destroy(t);
    assert_false(exists(c.mem_ckpt_dir, "ckpt_00000007.manifest.json"));
    resume_run(&c, 8, true, NULL);
    rm_dir(tmpdir);
}

/* Memory refused, disk used: a corrupt memory shard (named), and a memory step of another run (the
 * run id of the disk's checkpoints is not its own) are refused with a warning; resume continues
 * from disk step 4 and replays 5-8 exactly. */
static void test_mem_resume_refused(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t ref = small_cfg(), c = mem_cfg("d", "m");
    float full[8], part[8];
    run_losses(&ref, full, false, 0);
    run_until_failure(&c, 7);
    char shard[2048];
    strata_ckpt_path(c.mem_ckpt_dir, 6, 0, 1, shard, sizeof shard);
    assert_int_equal(truncate(shard, 1000), 0);
    memcpy(part, full, sizeof part);
    memset(part + 4, 0, 4 * sizeof(float));
    capture_begin();
    strata_resume_info_t ri = resume_run(&c, 4, false, part);
    char *err = capture_end();
    assert_true(has(err, "refusing memory step 6: "));
    assert_true(has(err, shard));
    free(err);
    assert_int_equal(ri.memory_step, 6);
    assert_memory_equal(full, part, sizeof full);

    // Another run (another seed) left memory step 6 in the directory of this one.
    strata_train_config_t o = mem_cfg(NULL, "m");
    o.seed = 2;
    run_until_failure(&o, 7);
    assert_int_equal(strata_ckpt_steps(c.mem_ckpt_dir, (int64_t[1]){0}, 1), 1);
    strata_ckpt_manifest_t mf;
    assert_int_equal(strata_ckpt_manifest_read(c.mem_ckpt_dir, 6, &mf), STRATA_OK);
    char foreign[17];
    snprintf(foreign, sizeof foreign, "%s", mf.run_id);
    strata_ckpt_manifest_free(&mf);
    // The disk holds steps 4 and 8 of this run now: back to 4, so the foreign step is the newest.
    char path[2048];
    snprintf(path, sizeof path, "%s/ckpt_00000008.manifest.json", c.ckpt_dir);
    assert_int_equal(unlink(path), 0);
    capture_begin();
    resume_run(&c, 4, false, NULL);
    err = capture_end();
    snprintf(path, sizeof path, "%s/ckpt_00000006.manifest.json: it belongs to run %s",
             c.mem_ckpt_dir, foreign);
    assert_true(has(err, path));
    assert_true(has(err, "a memory directory of another job?"));
    free(err);
    rm_dir(tmpdir);
}

/* Memory only (no --ckpt-dir): resume from memory; a memory step of another training config is
 * refused and, nothing else being there, the resume fails instead of starting over; memory files
 * without a committed step (a first memory write cut short) allow a fresh start. */
static void test_mem_only(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t ref = small_cfg(), c = mem_cfg(NULL, "m");
    float full[8], part[8];
    run_losses(&ref, full, false, 0);
    run_until_failure(&c, 5);
    memcpy(part, full, sizeof part);
    memset(part + 4, 0, 4 * sizeof(float));
    strata_resume_info_t ri = resume_run(&c, 4, true, part);
    assert_int_equal(ri.disk_step, -1);
    assert_memory_equal(full, part, sizeof full);

    strata_train_config_t o = c;
    o.lr *= 2;
    strata_trainer_t *t;
    int64_t at;
    assert_int_equal(strata_trainer_create(&o, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_ERR_PARSE);
    assert_true(has(strata_last_error(), "another training config (\"lr\" recorded"));
    assert_true(has(strata_last_error(), "refusing to start over"));
    strata_trainer_destroy(t);

    assert_int_equal(strata_ckpt_steps(c.mem_ckpt_dir, (int64_t[1]){0}, 1), 1);
    char m[2048];
    snprintf(m, sizeof m, "%s/ckpt_00000008.manifest.json", c.mem_ckpt_dir);
    assert_int_equal(unlink(m), 0);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    assert_int_equal(strata_trainer_resume(t, &at), STRATA_OK);
    assert_int_equal(at, 0);
    strata_trainer_destroy(t);
    rm_dir(tmpdir);
}

/* The settings: memory checkpoints need a directory, and not the disk one; the JSON keys. A memory
 * checkpoint that cannot be written is one warning and the run goes on (the disk's are written). */
static void test_mem_settings_and_failure(void **state)
{
    (void)state;
    setup_paths();
    strata_train_config_t c = mem_cfg("d", "m");
    strata_trainer_t *t;
    c.mem_ckpt_dir[0] = 0;
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_ERR_INVALID_ARG);
    assert_true(has(strata_last_error(), "need a directory"));
    snprintf(c.mem_ckpt_dir, sizeof c.mem_ckpt_dir, "%s/d/.", tmpdir);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_ERR_INVALID_ARG);
    assert_true(has(strata_last_error(), "is the checkpoint directory"));

    char js[256];
    snprintf(js, sizeof js, "%s/c.json", tmpdir);
    FILE *f = fopen(js, "w");
    assert_non_null(f);
    fputs("{\"mem_ckpt_every\": 3, \"mem_ckpt_dir\": \"/dev/shm/x\"}\n", f);
    fclose(f);
    strata_train_config_t j = strata_train_config_default();
    assert_int_equal(strata_train_config_load(js, &j), STRATA_OK);
    assert_int_equal(j.mem_ckpt_every, 3);
    assert_string_equal(j.mem_ckpt_dir, "/dev/shm/x");

    // The memory directory becomes a file after the trainer made it: every memory write fails.
    c = mem_cfg("d", "m");
    snprintf(c.metrics, sizeof c.metrics, "%s/m.jsonl", tmpdir);
    assert_int_equal(strata_trainer_create(&c, &t), STRATA_OK);
    rm_dir(c.mem_ckpt_dir);
    touch(tmpdir, "m");
    capture_begin();
    strata_status_t rc = strata_trainer_run(t, NULL);
    char *err = capture_end();
    assert_int_equal(rc, STRATA_OK);
    assert_int_equal(strata_trainer_step_count(t), 8);
    assert_true(has(err, "Not a directory; training goes on without this memory checkpoint"));
    const char *first = strstr(err, "training goes on");
    assert_null(first ? strstr(first + 1, "training goes on") : NULL); // warned once, not 8 times
    free(err);
    strata_trainer_destroy(t);
    int64_t steps[4];
    assert_int_equal(strata_ckpt_steps(c.ckpt_dir, steps, 4), 2); // 4 and 8
    assert_true(metrics_line(c.metrics, "{\"step\":3,", "\"ckpt\":\"memory_failed\""));
    assert_true(metrics_line(c.metrics, "{\"step\":4,", "\"ckpt\":\"disk\""));
    rm_dir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_split),
        cmocka_unit_test(test_config_nonfinite),
        cmocka_unit_test(test_ckpt_roundtrip_and_corruption),
        cmocka_unit_test(test_ckpt_header_checked),
        cmocka_unit_test(test_ckpt_nonfinite),
        cmocka_unit_test(test_ckpt_pieces),
        cmocka_unit_test(test_resume_exact),
        cmocka_unit_test(test_resume_fallback),
        cmocka_unit_test(test_step_identity),
        cmocka_unit_test(test_resume_never_silent),
        cmocka_unit_test(test_write_failure),
        cmocka_unit_test(test_nonfinite_stop),
        cmocka_unit_test(test_nonfinite_skip),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_crc32),
        cmocka_unit_test(test_mem_resume_newer),
        cmocka_unit_test(test_mem_resume_refused),
        cmocka_unit_test(test_mem_only),
        cmocka_unit_test(test_mem_settings_and_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
