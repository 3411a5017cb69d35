/* The model as a HuggingFace GPT-2 directory (what transformers' GPT2LMHeadModel.from_pretrained
 * loads): model.safetensors with GPT-2's parameter names, and config.json.
 *
 * strata's GPT is GPT-2's architecture (pre-norm blocks, learned positions, tanh GELU, tied head), so
 * the export is renaming and one transpose: GPT-2 keeps its projections in Conv1D layout, [in, out]
 * (y = x W + b), where strata keeps PyTorch nn.Linear's [out, in]. The tied head is not written (as
 * save_pretrained leaves it out: transformers ties lm_head.weight to transformer.wte.weight). A tensor
 * this mapping does not know is refused, so a model GPT-2 cannot express never exports half-right;
 * so is a model option GPT-2 has no place for although its tensors keep GPT-2's names (the parallel
 * block, a sliding window, and the Llama shape: RMSNorm, SwiGLU, RoPE, no biases).
 * Reading a checkpoint into a model is the caller's (strata export assembles any layout first). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

/* strata's name (a block's after "h.<n>.") -> GPT-2's, and whether the weight is transposed. */
static const struct {
    bool block;
    const char *strata, *hf;
    bool transpose;
} names[] = {
    {false, "wte", "wte.weight", false},
    {false, "wpe", "wpe.weight", false},
    {false, "lnf.weight", "ln_f.weight", false},
    {false, "lnf.bias", "ln_f.bias", false},
    {true, "ln1.weight", "ln_1.weight", false},
    {true, "ln1.bias", "ln_1.bias", false},
    {true, "attn.qkv.weight", "attn.c_attn.weight", true},
    {true, "attn.qkv.bias", "attn.c_attn.bias", false},
    {true, "attn.proj.weight", "attn.c_proj.weight", true},
    {true, "attn.proj.bias", "attn.c_proj.bias", false},
    {true, "ln2.weight", "ln_2.weight", false},
    {true, "ln2.bias", "ln_2.bias", false},
    {true, "mlp.fc.weight", "mlp.c_fc.weight", true},
    {true, "mlp.fc.bias", "mlp.c_fc.bias", false},
    {true, "mlp.proj.weight", "mlp.c_proj.weight", true},
    {true, "mlp.proj.bias", "mlp.c_proj.bias", false},
};

/* GPT-2's name of strata's tensor `name` into out; the index of its row in names[], or -1. */
static int hf_name(const char *name, char *out, size_t size)
{
    int layer = -1, used = 0;
    const char *rest = name;
    if (sscanf(name, "h.%d.%n", &layer, &used) == 1 && used > 0)
        rest = name + used;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        if (strcmp(rest, names[i].strata) != 0 || names[i].block != (layer >= 0))
            continue;
        if (names[i].block)
            snprintf(out, size, "transformer.h.%d.%s", layer, names[i].hf);
        else
            snprintf(out, size, "transformer.%s", names[i].hf);
        return i;
    }
    return -1;
}

/* The shortest decimal that reads back as the same float (1e-05, not 9.99999975e-06). */
static void float_text(float x, char *out, size_t size)
{
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, size, "%.*g", prec, (double)x);
        if (strtof(out, NULL) == x)
            return;
    }
}

static strata_status_t write_config(const strata_gpt_config_t *c, const char *path)
{
    char eps[32], std[32], text[2048];
    float_text(c->ln_eps, eps, sizeof eps);
    float_text(c->init_std, std, sizeof std);
    // Dropout 0: strata trains without it. n_inner: the MLP width (GPT-2's default is 4 n_embd).
    int n = snprintf(text, sizeof text,
                     "{\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": %d,\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": %s,\n"
                     "  \"initializer_range\": %s,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"torch_dtype\": \"float32\"\n"
                     "}\n",
                     c->vocab, c->max_seq, c->max_seq, c->d_model, c->n_layer, c->n_head, c->d_ff,
                     eps, std);
    const void *buf = text;
    size_t len = (size_t)n;
    return st_ckpt_write_atomic(path, &buf, &len, 1, true);
}

strata_status_t strata_export_hf_gpt2(strata_gpt_t *m, const char *dir)
{
    const strata_gpt_shard_t *sh = strata_model_shard(m);
    if (sh->tp != 1 || strata_model_nparams(m) != strata_model_full_nparams(m))
        return st_error(STRATA_ERR_INVALID_ARG, "export: the HuggingFace layout needs the whole "
                        "model, not a tensor-parallel part or a pipeline stage (assemble it first)");
    const strata_gpt_config_t *mc = strata_model_config(m);
    const char *opt = mc->parallel                            ? "the parallel block"
                      : mc->window > 0                        ? "sliding-window attention"
                      : mc->norm != STRATA_GPT_NORM_LAYERNORM ? "RMSNorm"
                      : mc->mlp != STRATA_GPT_MLP_GELU        ? "SwiGLU"
                      : mc->pos != STRATA_GPT_POS_LEARNED     ? "RoPE"
                      : mc->no_bias                           ? "linear layers without biases"
                      : mc->n_kv_head != mc->n_head           ? "grouped-query attention"
                      : mc->untied                            ? "an untied head"
                                                              : NULL;
    if (opt)
        return st_error(STRATA_ERR_UNSUPPORTED, "export: the model uses %s, which HuggingFace's "
                        "GPT-2 (GPT2LMHeadModel) cannot express: not exported (strata's own "
                        "format, strata export without --format hf, keeps every option)", opt);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return st_error_errno(STRATA_ERR_IO, errno, "export: cannot create %s", dir);
    int n = strata_model_ntensors(m);
    strata_ckpt_tensor_t *ts = calloc((size_t)n + 1, sizeof *ts);
    char(*hf)[96] = calloc((size_t)n + 1, sizeof *hf);
    float *P = strata_model_param_arena(m), *moved = malloc(strata_model_nparams(m) * sizeof *moved);
    strata_status_t rc = STRATA_OK;
    if (!ts || !hf || !moved)
        rc = st_error(STRATA_ERR_NO_MEMORY, "export: out of memory");
    for (int i = 0; rc == STRATA_OK && i < n; i++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, i);
        int row = hf_name(t->name, hf[i], sizeof hf[i]);
        if (row < 0) {
            rc = st_error(STRATA_ERR_UNSUPPORTED, "export: tensor '%s' has no place in GPT-2's "
                          "layout (GPT2LMHeadModel): not exported", t->name);
            break;
        }
        ts[i] = (strata_ckpt_tensor_t){hf[i], t->ndim, {t->shape[0], t->shape[1]}, P + t->offset};
        if (!names[row].transpose)
            continue;
        // [out, in] (nn.Linear) -> [in, out] (Conv1D)
        size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
        float *dst = moved + t->offset;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                dst[c * rows + r] = P[t->offset + r * cols + c];
        ts[i] = (strata_ckpt_tensor_t){hf[i], 2, {(int64_t)cols, (int64_t)rows}, dst};
    }
    char path[4200];
    if (rc == STRATA_OK) {
        static const char *const meta[] = {"format", "pt", NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = st_safetensors_write(path, ts, n, meta);
    }
    if (rc == STRATA_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = write_config(strata_model_config(m), path);
    }
    free(ts);
    free(hf);
    free(moved);
    return rc;
}
