/* Fuzz target: safetensors checkpoints (src/train/checkpoint.c: strata_ckpt_open and
 * strata_ckpt_assemble), the way `strata sample --ckpt` and `strata train --resume` read them.
 *
 * A mutated file almost never keeps its crc32, which would stop every input at the checksum; so
 * when the header holds "crc32":"xxxxxxxx", those 8 characters are replaced by the checksum of the
 * data section before the file is read (the checksum itself is tested by the unit tests). The file
 * is stored as step 1 of a run: unsharded, or as rank 0's shard when its header names a
 * "params@" range. An accepted checkpoint's tensors are all read; when its metadata holds a small
 * model configuration, that model is built, assembled from the file with and without optimizer
 * state, and run forward and backward on a few tokens, so the values a file carries (NaN, Inf,
 * huge) reach the model's kernels as they do in `strata sample`. */
#include "common.h"

#include "strata/model.h"
#include "strata/train.h"

#include <json-c/json.h>
#include <string.h>
#include <unistd.h>

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

/* Rewrites the stored crc32 to match the data section, when there is one to rewrite. */
static void fix_crc(uint8_t *buf, size_t size)
{
    if (size < 8)
        return;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)buf[i] << (8 * i);
    if (hlen > size - 8)
        return;
    static const char key[] = "\"crc32\":\"";
    const uint8_t *hdr = buf + 8;
    const uint8_t *at = memmem(hdr, hlen, key, sizeof key - 1);
    if (!at || (size_t)(at - hdr) + sizeof key - 1 + 8 > hlen)
        return;
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", crc32_of(buf + 8 + hlen, size - 8 - hlen));
    memcpy((uint8_t *)at + sizeof key - 1, hex, 8);
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

static void run_model(const strata_gpt_config_t *cfg, const char *dir)
{
    strata_gpt_t *m;
    if (strata_model_create(cfg, 1, 1, &m) < 0)
        return;
    for (int with_state = 0; with_state < 2; with_state++) {
        strata_ckpt_full_t full;
        if (strata_ckpt_assemble(m, dir, 1, with_state, &full) < 0)
            continue;
        FUZZ_CHECK(full.nparams == strata_model_nparams(m));
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
    fix_crc(buf, size);
    bool shard = memmem(buf, size, "params@", 7) != NULL;
    const char *name = shard ? "ckpt_00000001.rank0.safetensors" : "ckpt_00000001.safetensors";
    char other[512];
    snprintf(other, sizeof other, "%s/%s", fuzz_dir(),
             shard ? "ckpt_00000001.safetensors" : "ckpt_00000001.rank0.safetensors");
    unlink(other);
    const char *path = fuzz_file(name, buf, size);
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
    bool run = small_model(ck, &cfg);
    strata_ckpt_close(ck);
    if (run)
        run_model(&cfg, fuzz_dir());
    return 0;
}
