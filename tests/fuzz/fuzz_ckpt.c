/* Fuzz target: safetensors checkpoints (src/train/checkpoint.c: strata_ckpt_open; ckpt_step.c:
 * strata_ckpt_assemble), the way `strata sample --ckpt` and `strata train --resume` read them.
 *
 * A mutated file almost never keeps its checksums, which would stop every input at the first one;
 * so the target re-seals it before it is read: the data crc32 ("crc32":"xxxxxxxx") first, since it
 * lies inside the header, then the header's own "header_crc32" over the length bytes and the header
 * (the checksums themselves are tested by the unit tests). The file is stored as step 1 of a
 * one-process run. An accepted checkpoint's tensors are all read; when its metadata holds a small
 * model configuration, the step is committed with a manifest carrying the file's digest and its
 * metadata (as the trainer's rank 0 commits it), and that model is built, assembled from the step
 * with and without optimizer state, and run forward and backward on a few tokens, so the values a
 * file carries (huge, tiny) reach the model's kernels as they do in `strata sample`. */
#include "common.h"

#include "strata/model.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

#include <json-c/json.h>
#include <string.h>
#include <unistd.h>

/* A run id for files that carry none: the manifest needs one, so such a file is refused as a shard
 * of another run, as strata_ckpt_assemble refuses it. */
#define FUZZ_RUN_ID "00000000000f0220"

/* Rewrites the stored crc32 to match the data section, then seals the header, when there are
 * fields to rewrite. */
static void reseal(uint8_t *buf, size_t size)
{
    if (size < 8)
        return;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)buf[i] << (8 * i);
    if (hlen > size - 8)
        return;
    char *hdr = (char *)buf + 8;
    static const char key[] = "\"crc32\":\"";
    const char *at = memmem(hdr, hlen, key, sizeof key - 1);
    if (at && (size_t)(at - hdr) + sizeof key - 1 + 8 <= hlen)
        st_ckpt_put_crc(hdr, (size_t)(at - hdr) + sizeof key - 1,
                        st_crc32(0, buf + 8 + hlen, size - 8 - hlen));
    uint32_t crc;
    size_t pos;
    if (st_ckpt_sealed_crc(buf, 8, hdr, hlen, "header_crc32", &crc, &pos))
        st_ckpt_put_crc(hdr, pos, crc);
}

/* The model of the checkpoint's metadata, if it has one small enough to run here. */
static bool small_model(const strata_ckpt_t *ck, strata_gpt_config_t *cfg)
{
    json_object *root = json_tokener_parse(strata_ckpt_meta(ck)->config), *model;
    *cfg = strata_gpt_config_default();
    bool ok = root && json_object_object_get_ex(root, "model", &model) &&
              strata_gpt_config_from_json(json_object_to_json_string(model), "ckpt", cfg) ==
                  STRATA_OK &&
              strata_gpt_config_validate(cfg) == STRATA_OK &&
              strata_gpt_config_nparams(cfg) <= (1u << 16) && cfg->max_seq <= 64;
    json_object_put(root);
    return ok;
}

/* Commits step 1 of dir as the trainer's rank 0 would for the file ck (its digest, run id, seed
 * and config), for model m. */
static void commit(const strata_ckpt_t *ck, const strata_gpt_t *m, const char *dir)
{
    const strata_ckpt_meta_t *md = strata_ckpt_meta(ck);
    strata_ckpt_digest_t d = strata_ckpt_digest(ck);
    strata_ckpt_manifest_t mf = {.step = 1, .nranks = 1,
                                 .nparams = (int64_t)strata_model_nparams(m), .seed = md->seed,
                                 .shards = &d};
    snprintf(mf.run_id, sizeof mf.run_id, "%s", md->run_id[0] ? md->run_id : FUZZ_RUN_ID);
    snprintf(mf.config, sizeof mf.config, "%s", md->config);
    // Not durable (no fsync): the same writer as strata_ckpt_commit, at the speed of a memory one.
    FUZZ_CHECK(st_ckpt_commit(dir, &mf, false) == STRATA_OK);
}

static void run_model(const strata_ckpt_t *ck, const strata_gpt_config_t *cfg, const char *dir)
{
    strata_gpt_t *m;
    if (strata_model_create(cfg, 1, 1, &m) < 0)
        return;
    commit(ck, m, dir);
    for (int with_state = 0; with_state < 2; with_state++) {
        strata_ckpt_full_t full;
        if (strata_ckpt_assemble(m, dir, 1, with_state, &full) < 0) {
            FUZZ_CHECK(strata_last_error()[0]);
            continue;
        }
        FUZZ_CHECK(full.nparams == strata_model_nparams(m));
        FUZZ_CHECK(!with_state || (full.m && full.v));
        memcpy(strata_model_param_arena(m), full.params, full.nparams * sizeof(float));
        strata_ckpt_full_free(&full);
        int32_t tok[4], tgt[4];
        int T = cfg->max_seq < 4 ? cfg->max_seq : 4;
        for (int i = 0; i < T; i++) {
            tok[i] = (i * 7 + 1) % cfg->vocab;
            tgt[i] = (i * 5 + 2) % cfg->vocab;
        }
        float loss;
        if (strata_model_forward(m, tok, tgt, 1, T, &loss) == STRATA_OK)
            strata_model_backward(m);
    }
    strata_model_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    reseal(buf, size);
    const char *dir = fuzz_dir();
    const char *path = fuzz_file("ckpt_00000001.safetensors", buf, size); // step 1, one process
    free(buf);
    strata_ckpt_t *ck;
    if (strata_ckpt_open(path, &ck) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        return 0;
    }
    int n = strata_ckpt_ntensors(ck);
    FUZZ_CHECK(strata_ckpt_tensor_name(ck, n) == NULL);
    volatile float sink = 0;
    for (int i = 0; i < n; i++) {
        int nd;
        int64_t shape[4];
        const float *v = strata_ckpt_find(ck, strata_ckpt_tensor_name(ck, i), &nd, shape);
        FUZZ_CHECK(v && nd >= 0 && nd <= 4);
        size_t count = 1;
        for (int d = 0; d < nd; d++) // a shape must describe the extent it was checked against
            FUZZ_CHECK(shape[d] >= 0 && !__builtin_mul_overflow(count, (size_t)shape[d], &count));
        FUZZ_CHECK(count <= SIZE_MAX / sizeof(float));
        for (size_t k = 0; k < count; k += 97) // touch the extent the shape claims
            sink += v[k];
        if (count)
            sink += v[count - 1];
    }
    (void)sink;
    strata_gpt_config_t cfg;
    if (small_model(ck, &cfg))
        run_model(ck, &cfg, dir);
    strata_ckpt_close(ck);
    return 0;
}
