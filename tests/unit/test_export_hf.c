/* strata_export_hf_gpt2 without torch (tests/cli/export_hf.sh runs GPT-2's forward where torch is
 * installed): every tensor of the model lands under its GPT-2 name with the projections transposed
 * to Conv1D's [in, out] and the rest as they are, nothing else in the file, "format": "pt", and
 * config.json carrying the model's sizes; a pipeline stage and a non-finite value are refused. */
#include "harness/st_test.h"
#include "strata/train.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

/* The file's header and data section. */
typedef struct file {
    json_object *hdr;
    unsigned char *data;
} file_t;

static file_t read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)len8[i] << (8 * i);
    char *text = calloc(n + 1, 1);
    assert_int_equal(fread(text, 1, n, f), n);
    file_t out = {json_tokener_parse(text), malloc(1 << 22)};
    (void)fread(out.data, 1, 1 << 22, f);
    fclose(f);
    free(text);
    assert_non_null(out.hdr);
    return out;
}

/* Tensor `name` of the file: its data, and its shape in sh (2 entries, 0 for a 1-D tensor). */
static const float *tensor(const file_t *f, const char *name, int64_t sh[2])
{
    json_object *e, *shape, *offs;
    if (!json_object_object_get_ex(f->hdr, name, &e))
        fail_msg("no tensor %s in the export", name);
    assert_true(json_object_object_get_ex(e, "shape", &shape));
    assert_true(json_object_object_get_ex(e, "data_offsets", &offs));
    sh[1] = 0;
    for (size_t d = 0; d < json_object_array_length(shape); d++)
        sh[d] = json_object_get_int64(json_object_array_get_idx(shape, d));
    return (const float *)(f->data + json_object_get_int64(json_object_array_get_idx(offs, 0)));
}

static void test_names_and_transposes(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/strata_hf_XXXXXX");
    assert_non_null(mkdtemp(dir));
    strata_gpt_config_t c = strata_gpt_config_default();
    c.d_ff = 3 * c.d_model; // GPT-2's n_inner
    strata_gpt_t *m;
    assert_int_equal(strata_model_create(&c, 1, 7, &m), STRATA_OK);
    char out[128], path[160];
    snprintf(out, sizeof out, "%s/hf", dir);
    assert_int_equal(strata_export_hf_gpt2(m, out), STRATA_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    file_t f = read_file(path);
    json_object *md, *fmt;
    assert_true(json_object_object_get_ex(f.hdr, "__metadata__", &md));
    assert_true(json_object_object_get_ex(md, "format", &fmt));
    assert_string_equal(json_object_get_string(fmt), "pt");
    static const char *const map[][2] = {
        {"ln1.weight", "ln_1.weight"},      {"ln1.bias", "ln_1.bias"},
        {"attn.qkv.weight", "attn.c_attn.weight"}, {"attn.qkv.bias", "attn.c_attn.bias"},
        {"attn.proj.weight", "attn.c_proj.weight"}, {"attn.proj.bias", "attn.c_proj.bias"},
        {"ln2.weight", "ln_2.weight"},      {"ln2.bias", "ln_2.bias"},
        {"mlp.fc.weight", "mlp.c_fc.weight"}, {"mlp.fc.bias", "mlp.c_fc.bias"},
        {"mlp.proj.weight", "mlp.c_proj.weight"}, {"mlp.proj.bias", "mlp.c_proj.bias"}};
    const float *P = strata_model_param_arena(m);
    int n = strata_model_ntensors(m);
    for (int i = 0; i < n; i++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, i);
        char hf[96] = "";
        int layer;
        if (sscanf(t->name, "h.%d.", &layer) == 1) {
            const char *rest = strchr(t->name + 2, '.') + 1;
            for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
                if (!strcmp(rest, map[k][0]))
                    snprintf(hf, sizeof hf, "transformer.h.%d.%s", layer, map[k][1]);
        } else {
            snprintf(hf, sizeof hf, "transformer.%s.%s",
                     !strncmp(t->name, "lnf", 3) ? "ln_f" : t->name,
                     !strncmp(t->name, "lnf", 3) ? t->name + 4 : "weight");
        }
        int64_t sh[2];
        const float *x = tensor(&f, hf, sh);
        bool conv = t->ndim == 2 && strcmp(t->name, "wte") && strcmp(t->name, "wpe");
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 0;
        assert_int_equal(sh[0], conv ? cols : rows); // Conv1D: [in, out]
        assert_int_equal(sh[1], conv ? rows : cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < (cols ? cols : 1); k++) {
                float want = P[t->offset + (size_t)(r * (cols ? cols : 1) + k)];
                float got = conv ? x[k * rows + r] : x[r * (cols ? cols : 1) + k];
                if (got != want)
                    fail_msg("%s -> %s: element (%lld, %lld) is %g, want %g", t->name, hf,
                             (long long)r, (long long)k, (double)got, (double)want);
            }
    }
    assert_int_equal(json_object_object_length(f.hdr), n + 1); // every tensor, the metadata
    json_object_put(f.hdr);
    free(f.data);

    snprintf(path, sizeof path, "%s/config.json", out);
    json_object *cfg = json_object_from_file(path), *v;
    assert_non_null(cfg);
    static const char *const keys[] = {"n_embd", "n_layer", "n_head", "n_positions", "n_inner",
                                       "vocab_size"};
    const int want[] = {c.d_model, c.n_layer, c.n_head, c.max_seq, c.d_ff, c.vocab};
    for (int k = 0; k < 6; k++) {
        assert_true(json_object_object_get_ex(cfg, keys[k], &v));
        assert_int_equal(json_object_get_int(v), want[k]);
    }
    assert_true(json_object_object_get_ex(cfg, "activation_function", &v));
    assert_string_equal(json_object_get_string(v), "gelu_new"); // strata's GELU is tanh's
    assert_true(json_object_object_get_ex(cfg, "layer_norm_epsilon", &v));
    assert_true(fabs(json_object_get_double(v) - 1e-5) < 1e-12);
    json_object_put(cfg);

    // A non-finite value: refused naming the tensor, by its GPT-2 name.
    strata_model_param_arena(m)[strata_model_tensor(m, 1)->offset + 3] = NAN;
    assert_int_equal(strata_export_hf_gpt2(m, out), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "'transformer.wpe.weight' element 3"));
    strata_model_destroy(m);
}

static void test_stage_refused(void **state)
{
    (void)state;
    strata_gpt_config_t c = strata_gpt_config_default();
    strata_gpt_shard_t sh = strata_gpt_shard_none();
    sh.layers = (strata_gpt_layers_t){1, {0}, {1}}; // layer 0 of 2: a pipeline stage
    strata_gpt_t *m;
    assert_int_equal(strata_model_create_shard(&c, &sh, 1, 7, &m), STRATA_OK);
    char out[128];
    snprintf(out, sizeof out, "%s/stage", dir);
    assert_int_equal(strata_export_hf_gpt2(m, out), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "needs the whole model"));
    strata_model_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Each model option GPT-2 cannot express is refused by name, and nothing is written. */
static void test_options_refused(void **state)
{
    (void)state;
    static const char *const want[] = {"the parallel block", "sliding-window attention", "RMSNorm",
                                       "SwiGLU", "RoPE", "without biases",
                                       "grouped-query attention", "an untied head"};
    for (int k = 0; k < 8; k++) {
        strata_gpt_config_t c = strata_gpt_config_default();
        c.parallel = k == 0;
        c.window = k == 1 ? 8 : 0;
        c.norm = k == 2 ? STRATA_GPT_NORM_RMSNORM : STRATA_GPT_NORM_LAYERNORM;
        c.mlp = k == 3 ? STRATA_GPT_MLP_SWIGLU : STRATA_GPT_MLP_GELU;
        c.pos = k == 4 ? STRATA_GPT_POS_ROPE : STRATA_GPT_POS_LEARNED;
        c.no_bias = k == 5;
        c.n_kv_head = k == 6 ? 2 : 0;
        c.untied = k == 7;
        strata_gpt_t *m;
        assert_int_equal(strata_model_create(&c, 1, 7, &m), STRATA_OK);
        char out[128];
        snprintf(out, sizeof out, "%s/opt%d", dir, k);
        assert_int_equal(strata_export_hf_gpt2(m, out), STRATA_ERR_UNSUPPORTED);
        assert_non_null(strstr(strata_last_error(), want[k]));
        assert_int_equal(access(out, F_OK), -1);
        strata_model_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_transposes),
        cmocka_unit_test(test_options_refused),
        cmocka_unit_test(test_stage_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
