/* The GPT model object: the parameter/gradient arena and its tensor table and segments, the
 * activation arena, deterministic initialisation, and the forward/backward drivers that call the
 * kernels of layers.c, attention.c and loss.c and the parameter hooks of a ZeRO engine. The
 * optimizers are in optim.c, the JSON form of the configuration in config.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/gpt_internal.h"
#include "model/layers.h"
#include "model/parallel_range.h"
#include "strata/model.h"
#include "strata/trace.h"

/* ---- layout ------------------------------------------------------------------------------------ */

/* Walks the whole model's tensors in order; the ones this model holds (held) enter its table. */
typedef struct layout_walk {
    strata_gpt_t *m;
    char *names;
    size_t cur, full; /* this model's arena; the whole model's */
    int index;        /* the tensor's index in the whole model (its initialisation stream) */
} layout_walk_t;

/* Adds a tensor of whole shape d0 x d1 (d1 ignored when ndim 1), cut along split_dim (-1: none) in
 * `groups` blocks of tp parts, when `held`; the whole model's cursor advances anyway. */
static void add_tensor(layout_walk_t *w, bool held, const char *name, int ndim, int64_t d0,
                       int64_t d1, int seg, bool decay, int split_dim, int groups)
{
    size_t whole = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    int index = w->index++;
    size_t full = w->full;
    w->full += whole;
    if (!held)
        return;
    strata_gpt_t *m = w->m;
    strata_tensor_info_t *t = &m->tensors[m->ntensors++];
    size_t len = strlen(name) + 1;
    memcpy(w->names, name, len);
    t->name = w->names;
    w->names += len;
    t->ndim = ndim;
    t->full_shape[0] = d0;
    t->full_shape[1] = ndim > 1 ? d1 : 0;
    t->shape[0] = t->full_shape[0];
    t->shape[1] = t->full_shape[1];
    t->split_dim = m->shard.tp > 1 ? split_dim : -1;
    t->split_groups = t->split_dim >= 0 ? groups : 1;
    if (t->split_dim >= 0)
        t->shape[t->split_dim] /= m->shard.tp;
    t->count = (size_t)t->shape[0] * (ndim > 1 ? (size_t)t->shape[1] : 1);
    t->offset = w->cur;
    t->full_offset = full;
    t->segment = seg;
    t->decay = decay;
    t->tied_copy = false;
    t->init_index = index;
    w->cur += t->count;
}

/* One tensor of a block: where block_layout_t keeps its offset, its name after "h.<l>.", its whole
 * shape (d1 0 for a vector) and its TP cut (see add_tensor). */
typedef struct block_tensor {
    size_t field; /* offsetof(block_layout_t, ...) */
    const char *suffix;
    size_t d0, d1;
    int split, groups;
} block_tensor_t;

#define ST_MAX_BLOCK_TENSORS 16

/* The tensors of one block of configuration c, in arena order; returns their count. */
static int block_tensors(const strata_gpt_config_t *c, block_tensor_t *bt)
{
    size_t C = (size_t)c->d_model, F = (size_t)c->d_ff;
    int nkv = c->n_kv_head ? c->n_kv_head : c->n_head; // 0 until validated: n_head
    size_t KV = C / (size_t)c->n_head * (size_t)nkv;    // k's (and v's) width
    bool ln = c->norm == STRATA_GPT_NORM_LAYERNORM, bias = !c->no_bias;
    int n = 0;
#define ADD(f, suffix, d0, d1, split, groups)                                                      \
    bt[n++] = (block_tensor_t){offsetof(block_layout_t, f), suffix, d0, d1, split, groups}
    ADD(ln1w, "ln1.weight", C, 0, -1, 1);
    if (ln)
        ADD(ln1b, "ln1.bias", C, 0, -1, 1);
    if (KV == C) { // q | k | v, three equal blocks each cut by heads
        ADD(qkvw, "attn.qkv.weight", 3 * C, C, 0, 3);
        if (bias)
            ADD(qkvb, "attn.qkv.bias", 3 * C, 0, 0, 3);
    } else { // GQA: q, then k | v (two equal blocks), adjacent in a rank's arena: one product
        ADD(qkvw, "attn.q.weight", C, C, 0, 1);
        ADD(kvw, "attn.kv.weight", 2 * KV, C, 0, 2);
        if (bias) {
            ADD(qkvb, "attn.q.bias", C, 0, 0, 1);
            ADD(kvb, "attn.kv.bias", 2 * KV, 0, 0, 2);
        }
    }
    ADD(projw, "attn.proj.weight", C, C, 1, 1);
    if (bias)
        ADD(projb, "attn.proj.bias", C, 0, -1, 1);
    if (!c->parallel) {
        ADD(ln2w, "ln2.weight", C, 0, -1, 1);
        if (ln)
            ADD(ln2b, "ln2.bias", C, 0, -1, 1);
    }
    if (c->mlp == STRATA_GPT_MLP_SWIGLU) { // w1, w3 adjacent (then their biases): one product
        ADD(fcw, "mlp.w1.weight", F, C, 0, 1);
        ADD(w3w, "mlp.w3.weight", F, C, 0, 1);
        if (bias) {
            ADD(fcb, "mlp.w1.bias", F, 0, 0, 1);
            ADD(w3b, "mlp.w3.bias", F, 0, 0, 1);
        }
        ADD(fc2w, "mlp.w2.weight", C, F, 1, 1);
        if (bias)
            ADD(fc2b, "mlp.w2.bias", C, 0, -1, 1);
    } else {
        ADD(fcw, "mlp.fc.weight", F, C, 0, 1);
        if (bias)
            ADD(fcb, "mlp.fc.bias", F, 0, 0, 1);
        ADD(fc2w, "mlp.proj.weight", C, F, 1, 1);
        if (bias)
            ADD(fc2b, "mlp.proj.bias", C, 0, -1, 1);
    }
#undef ADD
    return n;
}

/* Builds the tensor table of this rank's part (m->shard: TP part, pipeline chunk); returns the whole
 * model's P. With m == NULL it only counts the whole model. */
static size_t build_layout(strata_gpt_t *m, const strata_gpt_config_t *c)
{
    size_t C = (size_t)c->d_model, V = (size_t)c->vocab, T = (size_t)c->max_seq;
    bool learned = c->pos == STRATA_GPT_POS_LEARNED, ln = c->norm == STRATA_GPT_NORM_LAYERNORM;
    block_tensor_t bt[ST_MAX_BLOCK_TENSORS];
    int nbt = block_tensors(c, bt);
    size_t block = 0;
    for (int i = 0; i < nbt; i++)
        block += bt[i].d0 * (bt[i].d1 ? bt[i].d1 : 1);
    size_t P = V * C + (learned ? T * C : 0) + (size_t)c->n_layer * block + (ln ? 2 : 1) * C +
               (c->untied ? V * C : 0);
    if (!m)
        return P;
    layout_walk_t w = {.m = m, .names = m->names};
    char nm[96];
    int seg = 0;
    m->head_seg = -1;
    if (m->has_embed) {
        m->seg_off[seg] = 0;
        m->wte = 0;
        if (m->has_head && !c->untied) {
            m->head_seg = 0;
            m->headw = 0;
        }
    }
    add_tensor(&w, m->has_embed, "wte", 2, (int64_t)V, (int64_t)C, seg, true, 0, 1);
    m->wpe = learned ? w.cur : ST_ABSENT;
    if (learned)
        add_tensor(&w, m->has_embed, "wpe", 2, (int64_t)T, (int64_t)C, seg, true, -1, 1);
    if (m->has_embed)
        m->seg_cnt[seg++] = w.cur;
    memset(&m->bl, 0xff, sizeof m->bl); // every offset ST_ABSENT until its tensor is placed
    for (int l = 0; l < c->n_layer; l++) {
        bool held = m->blk[l] >= 0;
        size_t base = w.cur;
        if (held)
            m->seg_off[seg] = base;
        for (int i = 0; i < nbt; i++) {
            // The offsets in a block are the same for every block: set them from a held one.
            if (held)
                *(size_t *)((char *)&m->bl + bt[i].field) = w.cur - base;
            snprintf(nm, sizeof nm, "h.%d.%s", l, bt[i].suffix);
            add_tensor(&w, held, nm, bt[i].d1 ? 2 : 1, (int64_t)bt[i].d0, (int64_t)bt[i].d1, seg,
                       bt[i].d1 > 0, bt[i].split, bt[i].groups);
        }
        if (held)
            m->seg_cnt[seg++] = w.cur - base;
    }
    if (m->has_head) {
        size_t base = w.cur;
        m->seg_off[seg] = base;
        m->lnfw = 0;
        add_tensor(&w, true, "lnf.weight", 1, (int64_t)C, 0, seg, false, -1, 1);
        m->lnfb = ln ? C : ST_ABSENT;
        if (ln)
            add_tensor(&w, true, "lnf.bias", 1, (int64_t)C, 0, seg, false, -1, 1);
        if (c->untied) {
            m->head_seg = seg;
            m->headw = w.cur - base;
            add_tensor(&w, true, "lm_head.weight", 2, (int64_t)V, (int64_t)C, seg, true, 0, 1);
        } else if (!m->has_embed) { // the tied head's own copy of the embedding (Megatron-LM's)
            m->head_seg = seg;
            m->headw = w.cur - base;
            layout_walk_t copy = w;
            copy.full = 0;
            copy.index = 0;
            add_tensor(&copy, true, "wte", 2, (int64_t)V, (int64_t)C, seg, true, 0, 1);
            m->tensors[m->ntensors - 1].tied_copy = true;
            w.cur = copy.cur;
            w.names = copy.names;
        }
        m->seg_cnt[seg] = w.cur - base;
    }
    m->P = w.cur;
    return P;
}

void strata_tensor_part_copy(const strata_tensor_info_t *t, int tp, int tp_rank, float *whole,
                             float *part, bool to_part)
{
    size_t n = t->count;
    if (t->split_dim < 0 || tp <= 1) {
        if (to_part)
            memcpy(part, whole, n * sizeof(float));
        else
            memcpy(whole, part, n * sizeof(float));
        return;
    }
    // Runs of contiguous floats: dim 0 cuts whole rows out of each block, dim 1 a column range of
    // every row.
    size_t row = t->ndim > 1 ? (size_t)t->full_shape[1] : 1, nrun, run, stride, first;
    if (t->split_dim == 0) {
        size_t block_rows = (size_t)t->full_shape[0] / (size_t)t->split_groups;
        size_t part_rows = block_rows / (size_t)tp;
        nrun = (size_t)t->split_groups;
        run = part_rows * row;
        stride = block_rows * row;
        first = (size_t)tp_rank * part_rows * row;
    } else {
        nrun = (size_t)t->full_shape[0];
        run = row / (size_t)tp;
        stride = row;
        first = (size_t)tp_rank * run;
    }
    for (size_t i = 0; i < nrun; i++) {
        float *w = whole + first + i * stride, *p = part + i * run;
        if (to_part)
            memcpy(p, w, run * sizeof(float));
        else
            memcpy(w, p, run * sizeof(float));
    }
}

size_t strata_gpt_config_nparams(const strata_gpt_config_t *cfg)
{
    strata_gpt_config_t c = *cfg;
    if (c.d_ff == 0)
        c.d_ff = 4 * c.d_model;
    return build_layout(NULL, &c);
}

/* ---- deterministic initialisation ---------------------------------------------------------------- */

static void fill_normal(float *x, size_t n, float std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(st_splitmix(s) >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (double)(st_splitmix(s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2) * std);
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2) * std);
    }
}

/* Fills x (n floats) with whole tensor i's initial values. */
static void init_tensor(const strata_gpt_t *m, int i, uint64_t seed, float *x, size_t n)
{
    const strata_tensor_info_t *t = &m->tensors[i];
    float std = m->cfg.init_std, proj_std = std / sqrtf(2.f * (float)m->cfg.n_layer);
    // Each tensor has its own stream, so a tensor's values do not depend on the others' sizes.
    uint64_t s = seed * 0x100000001B3ull + (uint64_t)t->init_index * 0x9E3779B97F4A7C15ull;
    if (t->ndim == 2) {
        bool proj = strstr(t->name, "attn.proj.weight") || strstr(t->name, "mlp.proj.weight") ||
                    strstr(t->name, "mlp.w2.weight");
        fill_normal(x, n, proj ? proj_std : std, &s);
    } else {
        float v = strstr(t->name, ".weight") ? 1.f : 0.f; // norm weights 1, biases 0
        for (size_t k = 0; k < n; k++)
            x[k] = v;
    }
}

/* The whole tensor is drawn, then this rank's part taken from it, so every TP layout starts from
 * the one-process parameters. `whole` holds the largest tensor (NULL at tp 1). */
static void init_params(strata_gpt_t *m, uint64_t seed, float *whole)
{
    for (int i = 0; i < m->ntensors; i++) {
        const strata_tensor_info_t *t = &m->tensors[i];
        float *x = m->params + t->offset;
        if (t->split_dim < 0) {
            init_tensor(m, i, seed, x, t->count);
            continue;
        }
        init_tensor(m, i, seed, whole, (size_t)t->full_shape[0] *
                                           (t->ndim > 1 ? (size_t)t->full_shape[1] : 1));
        strata_tensor_part_copy(t, m->shard.tp, m->shard.tp_rank, whole, x, true);
    }
}

static size_t largest_tensor(const strata_gpt_t *m)
{
    size_t most = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const strata_tensor_info_t *t = &m->tensors[i];
        most = ST_MAX(most, (size_t)t->full_shape[0] * (t->ndim > 1 ? (size_t)t->full_shape[1] : 1));
    }
    return most;
}

strata_status_t strata_model_init_params(strata_gpt_t *m, uint64_t seed)
{
    float *whole = m->shard.tp > 1 ? malloc(largest_tensor(m) * sizeof(float)) : NULL;
    if (m->shard.tp > 1 && !whole)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory for a whole tensor of %zu "
                        "floats to initialise this rank's part from", largest_tensor(m));
    init_params(m, seed, whole);
    free(whole);
    return STRATA_OK;
}

/* ---- create / destroy --------------------------------------------------------------------------- */

strata_gpt_config_t strata_gpt_config_default(void)
{
    return (strata_gpt_config_t){.vocab = 256, .max_seq = 64, .n_layer = 2, .n_head = 4,
                                 .d_model = 64, .d_ff = 0, .ln_eps = 1e-5f, .init_std = 0.02f};
}

strata_status_t strata_gpt_config_validate(strata_gpt_config_t *c)
{
#define CHECK(cond, ...)                                                                           \
    if (!(cond))                                                                                   \
    return st_error(STRATA_ERR_INVALID_ARG, __VA_ARGS__)
    CHECK(c->vocab >= 2 && c->vocab <= (1 << 24), "model: vocab must be in [2, 16M], got %d", c->vocab);
    CHECK(c->max_seq >= 1 && c->max_seq <= 65536, "model: max_seq must be in [1, 65536], got %d",
          c->max_seq);
    CHECK(c->n_layer >= 1 && c->n_layer <= 1024, "model: n_layer must be in [1, 1024], got %d",
          c->n_layer);
    CHECK(c->d_model >= 1 && c->d_model <= 65536, "model: d_model must be in [1, 65536], got %d",
          c->d_model);
    CHECK(c->n_head >= 1 && c->d_model % c->n_head == 0,
          "model: n_head (%d) must divide d_model (%d)", c->n_head, c->d_model);
    if (c->n_kv_head == 0)
        c->n_kv_head = c->n_head;
    CHECK(c->n_kv_head >= 1 && c->n_head % c->n_kv_head == 0,
          "model: n_kv_head (%d) must divide n_head (%d): each k/v head serves a whole group of "
          "query heads", c->n_kv_head, c->n_head);
    if (c->d_ff == 0)
        c->d_ff = 4 * c->d_model;
    CHECK(c->d_ff >= 1 && c->d_ff <= 1 << 20, "model: d_ff must be in [1, 1M], got %d", c->d_ff);
    CHECK(c->ln_eps > 0.f && c->ln_eps < 1.f, "model: ln_eps must be in (0, 1), got %g",
          (double)c->ln_eps);
    CHECK(c->init_std > 0.f && c->init_std < 10.f, "model: init_std must be in (0, 10), got %g",
          (double)c->init_std);
    CHECK(c->window >= 0 && c->window <= 65536,
          "model: window must be in [0, 65536] (0: full causal attention), got %d", c->window);
    CHECK(c->norm == STRATA_GPT_NORM_LAYERNORM || c->norm == STRATA_GPT_NORM_RMSNORM,
          "model: norm must be layernorm or rmsnorm (%d)", (int)c->norm);
    CHECK(c->mlp == STRATA_GPT_MLP_GELU || c->mlp == STRATA_GPT_MLP_SWIGLU,
          "model: mlp must be gelu or swiglu (%d)", (int)c->mlp);
    CHECK(c->pos == STRATA_GPT_POS_LEARNED || c->pos == STRATA_GPT_POS_ROPE,
          "model: pos must be learned or rope (%d)", (int)c->pos);
    if (c->rope_theta == 0.f)
        c->rope_theta = 10000.f;
    CHECK(c->rope_theta > 1.f && c->rope_theta <= 1e12f, "model: rope_theta must be in (1, 1e12], "
          "got %g", (double)c->rope_theta);
    CHECK(c->pos != STRATA_GPT_POS_ROPE || (c->d_model / c->n_head) % 2 == 0,
          "model: RoPE rotates pairs of a head's columns: the head size d_model / n_head (%d) "
          "must be even", c->d_model / c->n_head);
#undef CHECK
    return STRATA_OK;
}

strata_gpt_shard_t strata_gpt_shard_none(void)
{
    return (strata_gpt_shard_t){.tp = 1, .tp_rank = 0, .sp = false, .chunks = 0};
}

strata_status_t strata_gpt_config_check_tp(const strata_gpt_config_t *cfg, int tp)
{
    strata_gpt_config_t c = *cfg;
    ST_TRY(strata_gpt_config_validate(&c));
    if (tp < 1 || tp > 1024)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor-parallel size %d outside [1, 1024]",
                        tp);
    if (c.n_head % tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor parallelism %d must divide the "
                        "attention heads (n_head %d): each rank holds whole heads", tp, c.n_head);
    if (c.n_kv_head % tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor parallelism %d must divide the k/v "
                        "heads (n_kv_head %d): each rank holds whole k/v heads with their query "
                        "heads", tp, c.n_kv_head);
    if (c.vocab % tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor parallelism %d must divide the "
                        "vocabulary (vocab %d): each rank holds an equal vocabulary slice", tp,
                        c.vocab);
    if (c.d_ff % tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor parallelism %d must divide the MLP "
                        "width (d_ff %d)", tp, c.d_ff);
    return STRATA_OK;
}

strata_status_t strata_model_create(const strata_gpt_config_t *cfg, int max_batch, uint64_t seed,
                                    strata_gpt_t **out)
{
    strata_gpt_shard_t none = strata_gpt_shard_none();
    return strata_model_create_shard(cfg, &none, max_batch, seed, out);
}

/* The chunks, flags and segments of a shard (m->cfg, m->shard set), and the storage of its tensor
 * table (m->blk, m->tensors, m->names, m->seg_off, m->seg_cnt) for build_layout. */
static strata_status_t set_chunks(strata_gpt_t *m)
{
    int L = m->cfg.n_layer;
    strata_gpt_layers_t ch = m->shard.layers;
    if (ch.n == 0)
        ch = (strata_gpt_layers_t){.n = 1, .begin = {0}, .end = {L}};
    if (ch.n < 0 || ch.n > STRATA_GPT_MAX_CHUNKS)
        return st_error(STRATA_ERR_INVALID_ARG, "model: %d pipeline chunks outside [1, %d]", ch.n,
                        STRATA_GPT_MAX_CHUNKS);
    for (int k = 0; k < ch.n; k++) {
        int lo = k ? ch.end[k - 1] : 0;
        if (ch.begin[k] < lo || ch.end[k] > L || ch.begin[k] >= ch.end[k])
            return st_error(STRATA_ERR_INVALID_ARG, "model: pipeline chunk %d, layers [%d, %d), "
                            "is not inside the model's %d layers after the chunk before it (a "
                            "chunk holds at least one layer)", k, ch.begin[k], ch.end[k], L);
    }
    m->ch = ch;
    m->blk = malloc((size_t)L * sizeof *m->blk);
    if (!m->blk)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory");
    for (int l = 0; l < L; l++)
        m->blk[l] = -1;
    m->nblocks = 0;
    for (int k = 0; k < ch.n; k++)
        for (int l = ch.begin[k]; l < ch.end[k]; l++)
            m->blk[l] = m->nblocks++;
    m->has_embed = ch.begin[0] == 0;
    m->has_head = ch.end[ch.n - 1] == L;
    m->seg_block0 = m->has_embed ? 1 : 0;
    m->nseg = m->seg_block0 + m->nblocks + (m->has_head ? 1 : 0);
    m->seg_final = m->has_head ? m->nseg - 1 : -1;
    int maxt = 6 + ST_MAX_BLOCK_TENSORS * L; // wte, wpe, lnf (2), the head's wte or lm_head
    m->tensors = calloc((size_t)maxt, sizeof *m->tensors);
    m->names = calloc((size_t)maxt, 64);
    m->seg_off = calloc((size_t)m->nseg, sizeof(size_t));
    m->seg_cnt = calloc((size_t)m->nseg, sizeof(size_t));
    m->wgrad_fresh = calloc((size_t)m->nseg, sizeof(bool));
    m->wgrad_beta = 1.f;
    if (!m->tensors || !m->names || !m->seg_off || !m->seg_cnt || !m->wgrad_fresh)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory");
    return STRATA_OK;
}

/* Lays one slot's activations out from base + *at, advancing *at (base NULL: only counts). */
static void take_slot(strata_gpt_t *m, slot_t *sl, float *base, size_t *at, size_t N, size_t R)
{
    size_t C = m->cfg.d_model, Cl = m->Cl, Fl = m->Fl, Gl = m->Gl, T = m->cfg.max_seq;
    size_t QKV = (size_t)st_qkv_width(m);
    size_t att = (size_t)m->max_batch * m->NHl * T * st_attention_band((int)T, m->cfg.window);
    bool split = m->shard.split_backward, ln2 = !m->cfg.parallel;
#define TAKE(n) (*at += (n), base ? base + *at - (n) : NULL)
    sl->encoded = TAKE(R * C);
    for (int l = 0; l < m->nblocks; l++) {
        block_acts_t *a = &sl->ba[l];
        a->ln1 = TAKE(R * C);
        a->ln1_mean = TAKE(R);
        a->ln1_rstd = TAKE(R);
        a->qkv = TAKE(N * QKV);
        a->atty = TAKE(N * Cl);
        a->att = TAKE(att);
        a->res1 = TAKE(R * C);
        a->ln2 = ln2 ? TAKE(R * C) : NULL;
        a->ln2_mean = ln2 ? TAKE(R) : NULL;
        a->ln2_rstd = ln2 ? TAKE(R) : NULL;
        a->fch = TAKE(N * Gl);
        a->fch_gelu = TAKE(N * Fl);
        a->res2 = TAKE(R * C);
        if (split) {
            a->dqkv = TAKE(N * QKV);
            a->dproj = TAKE(N * C);
            a->dfc = TAKE(N * Gl);
            a->dfc2 = TAKE(N * C);
        }
    }
    if (m->has_head) {
        sl->lnf = TAKE(R * C);
        sl->lnf_mean = TAKE(R);
        sl->lnf_rstd = TAKE(R);
        sl->logits = TAKE(N * m->Vl);
        sl->lse = TAKE(N);
    }
#undef TAKE
}

/* Lays the backward's scratch buffers, the TP buffers and RoPE's tables out from base + *at, as
 * take_slot. */
static void take_scratch(strata_gpt_t *m, float *base, size_t *at, size_t N, size_t R)
{
    size_t C = m->cfg.d_model, Fl = m->Fl, T = m->cfg.max_seq;
    size_t hs = C / m->cfg.n_head;
#define TAKE(n) (*at += (n), base ? base + *at - (n) : NULL)
    m->dres = TAKE(R * C);
    m->dbuf = TAKE(N * C);
    m->dqkv = TAKE(N * (size_t)st_qkv_width(m));
    m->dfch = TAKE(N * m->Gl);
    m->dact = m->cfg.mlp == STRATA_GPT_MLP_SWIGLU ? TAKE(N * Fl) : m->dfch;
    m->dln = m->cfg.parallel ? TAKE(R * C) : NULL;
    if (!m->nscratch) // one attention scratch per thread (this sizing pass and the allocating one)
        m->nscratch = st_parallel_threads();
    m->dscratch = TAKE(T * (size_t)st_attention_band((int)T, m->cfg.window) * m->nscratch);
    m->rope_cos = m->cfg.pos == STRATA_GPT_POS_ROPE ? TAKE(T * hs / 2) : NULL;
    m->rope_sin = m->cfg.pos == STRATA_GPT_POS_ROPE ? TAKE(T * hs / 2) : NULL;
    if (m->shard.tp > 1) {
        m->full = TAKE(N * C);
        m->dfull = TAKE(N * C);
        m->dpart = TAKE(N * C);
        m->xent = TAKE(3 * N);
        m->packed = TAKE(6 * C);
    }
#undef TAKE
}

/* RoPE's tables: angle t * theta^(-2i / hs) for position t and pair i (computed in double). */
static void rope_tables(strata_gpt_t *m)
{
    int hs = m->cfg.d_model / m->cfg.n_head, half = hs / 2;
    for (int t = 0; t < m->cfg.max_seq; t++)
        for (int i = 0; i < half; i++) {
            double ang = t * pow((double)m->cfg.rope_theta, -2.0 * i / hs);
            m->rope_cos[(size_t)t * half + i] = (float)cos(ang);
            m->rope_sin[(size_t)t * half + i] = (float)sin(ang);
        }
}

strata_status_t strata_model_create_shard(const strata_gpt_config_t *cfg,
                                          const strata_gpt_shard_t *shard, int max_batch,
                                          uint64_t seed, strata_gpt_t **out)
{
    *out = NULL;
    strata_gpt_config_t c = *cfg;
    ST_TRY(strata_gpt_config_validate(&c));
    ST_TRY(strata_gpt_config_check_tp(&c, shard->tp));
    if (shard->tp_rank < 0 || shard->tp_rank >= shard->tp)
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor-parallel rank %d outside [0, %d)",
                        shard->tp_rank, shard->tp);
    if (shard->tp > 1 && (!shard->ops.start || !shard->ops.wait))
        return st_error(STRATA_ERR_INVALID_ARG, "model: tensor parallelism %d needs collective "
                        "operations (strata_gpt_shard_t.ops)", shard->tp);
    if (shard->chunks < 0 || shard->chunks > ST_TP_MAX_CHUNKS)
        return st_error(STRATA_ERR_INVALID_ARG, "model: chunks %d outside [0, %d]", shard->chunks,
                        ST_TP_MAX_CHUNKS);
    if (shard->slots < 0 || shard->slots > STRATA_GPT_MAX_SLOTS)
        return st_error(STRATA_ERR_INVALID_ARG, "model: %d activation slots outside [0, %d]",
                        shard->slots, STRATA_GPT_MAX_SLOTS);
    if (max_batch < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "model: max_batch must be >= 1, got %d", max_batch);
    strata_gpt_t *m = calloc(1, sizeof *m);
    if (!m)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory");
    m->cfg = c;
    m->shard = *shard;
    m->shard.sp = shard->sp && shard->tp > 1;
    m->max_batch = max_batch;
    strata_status_t rc = set_chunks(m);
    if (rc < 0) {
        strata_model_destroy(m);
        return rc;
    }
    int tp = shard->tp;
    m->Cl = c.d_model / tp;
    m->Fl = c.d_ff / tp;
    m->Gl = c.mlp == STRATA_GPT_MLP_SWIGLU ? 2 * m->Fl : m->Fl;
    m->NHl = c.n_head / tp;
    m->NKVl = c.n_kv_head / tp;
    m->KVl = c.d_model / c.n_head * m->NKVl;
    m->Vl = c.vocab / tp;
    m->nslots = shard->slots > 0 ? shard->slots : 1;
    m->slot = calloc((size_t)m->nslots, sizeof *m->slot);
    bool slots_ok = m->slot != NULL;
    for (int k = 0; slots_ok && k < m->nslots; k++)
        slots_ok = (m->slot[k].ba = calloc((size_t)m->nblocks, sizeof(block_acts_t))) != NULL;
    // N: every token of a batch; R: the residual stream's rows here (a 1/tp share with sp).
    size_t N = (size_t)max_batch * c.max_seq;
    size_t R = m->shard.sp ? (N + tp - 1) / tp : N, nacts = 0;
    if (!slots_ok)
        goto oom;
    take_slot(m, &m->slot[0], NULL, &m->slot_floats, N, R);
    nacts = m->slot_floats * (size_t)m->nslots;
    take_scratch(m, NULL, &nacts, N, R);
    m->P_full = build_layout(m, &c);
    m->params = malloc(m->P * sizeof(float));
    m->grads = calloc(m->P, sizeof(float));
    m->acts = calloc(nacts, sizeof(float));
    for (int k = 0; m->acts && k < m->nslots; k++) {
        m->slot[k].tokens = calloc(N, sizeof(int32_t));
        m->slot[k].targets = calloc(N, sizeof(int32_t));
        if (!m->slot[k].tokens || !m->slot[k].targets)
            goto oom;
    }
    if (!m->params || !m->grads || !m->acts)
        goto oom;
    size_t at = 0;
    for (int k = 0; k < m->nslots; k++)
        take_slot(m, &m->slot[k], m->acts, &at, N, R);
    take_scratch(m, m->acts, &at, N, R);
    if (m->rope_cos)
        rope_tables(m);
    rc = strata_model_init_params(m, seed);
    if (rc < 0) {
        strata_model_destroy(m);
        return rc;
    }
    *out = m;
    return STRATA_OK;
oom:
    strata_model_destroy(m);
    return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory allocating %zu parameters and "
                    "%zu activation floats", build_layout(NULL, &c) / (size_t)tp, nacts);
}

size_t strata_model_slot_floats(const strata_gpt_t *m)
{
    return m->slot_floats;
}

/* The tensor table of one rank of a TP group of tp holding `layers` (NULL: all), without
 * parameters or activations (its ops are never called). */
static strata_status_t layout_only(const strata_gpt_config_t *cfg, int tp,
                                   const strata_gpt_layers_t *layers, strata_gpt_t **out)
{
    *out = NULL;
    strata_gpt_config_t c = *cfg;
    ST_TRY(strata_gpt_config_validate(&c));
    ST_TRY(strata_gpt_config_check_tp(&c, tp));
    strata_gpt_t *m = calloc(1, sizeof *m);
    if (!m)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory");
    m->cfg = c;
    m->shard = strata_gpt_shard_none();
    m->shard.tp = tp;
    if (layers)
        m->shard.layers = *layers;
    strata_status_t rc = set_chunks(m);
    if (rc < 0) {
        strata_model_destroy(m);
        return rc;
    }
    m->P_full = build_layout(m, &c);
    *out = m;
    return STRATA_OK;
}

size_t strata_gpt_config_part_nparams(const strata_gpt_config_t *cfg, int tp,
                                      const strata_gpt_layers_t *layers)
{
    strata_gpt_t *m = NULL;
    if (layout_only(cfg, tp, layers, &m) < 0)
        return 0;
    size_t P = m->P;
    strata_model_destroy(m);
    return P;
}

strata_status_t strata_gpt_arena_convert(const strata_gpt_config_t *cfg, int tp,
                                         const strata_gpt_layers_t *layers, float *whole,
                                         float *parts, bool to_parts)
{
    strata_gpt_t *m = NULL;
    ST_TRY(layout_only(cfg, tp, layers, &m));
    // Rank 0 last when gathering: its copy of a replicated tensor is the one that stays; a tied
    // copy of wte is never gathered (the embedding's chunk holds the tensor).
    for (int r = tp - 1; r >= 0; r--)
        for (int i = 0; i < m->ntensors; i++) {
            const strata_tensor_info_t *t = &m->tensors[i];
            if (t->tied_copy && !to_parts)
                continue;
            strata_tensor_part_copy(t, tp, r, whole + t->full_offset,
                                    parts + (size_t)r * m->P + t->offset, to_parts);
        }
    strata_model_destroy(m);
    return STRATA_OK;
}

const strata_gpt_shard_t *strata_model_shard(const strata_gpt_t *m)
{
    return &m->shard;
}

size_t strata_model_full_nparams(const strata_gpt_t *m)
{
    return m->P_full;
}

void strata_model_destroy(strata_gpt_t *m)
{
    if (!m)
        return;
    for (int k = 0; m->slot && k < m->nslots; k++) {
        free(m->slot[k].ba);
        free(m->slot[k].tokens);
        free(m->slot[k].targets);
        free(m->slot[k].a16);
    }
    free(m->slot);
    free(m->blk);
    free(m->tensors);
    free(m->names);
    free(m->seg_off);
    free(m->seg_cnt);
    free(m->wgrad_fresh);
    free(m->params);
    free(m->grads);
    free(m->w16);
    free(m->wpk);
    free(m->wpk_off);
    free(m->w16_held);
    free(m->att16);
    free(m->acts);
    free(m);
}

const strata_gpt_config_t *strata_model_config(const strata_gpt_t *m)
{
    return &m->cfg;
}
size_t strata_model_nparams(const strata_gpt_t *m)
{
    return m->P;
}
float *strata_model_param_arena(strata_gpt_t *m)
{
    return m->params;
}
float *strata_model_grad_arena(strata_gpt_t *m)
{
    return m->grads;
}
int strata_model_nsegments(const strata_gpt_t *m)
{
    return m->nseg;
}
int strata_model_head_segment(const strata_gpt_t *m)
{
    return m->head_seg;
}
void strata_model_segment(const strata_gpt_t *m, int seg, size_t *offset, size_t *count)
{
    bool ok = seg >= 0 && seg < m->nseg;
    if (offset)
        *offset = ok ? m->seg_off[seg] : 0;
    if (count)
        *count = ok ? m->seg_cnt[seg] : 0;
}
int strata_model_ntensors(const strata_gpt_t *m)
{
    return m->ntensors;
}
const strata_tensor_info_t *strata_model_tensor(const strata_gpt_t *m, int i)
{
    return (i >= 0 && i < m->ntensors) ? &m->tensors[i] : NULL;
}
int strata_model_find_tensor(const strata_gpt_t *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return i;
    return -1;
}
void strata_model_set_hooks(strata_gpt_t *m, const strata_param_hooks_t *hooks)
{
    m->has_hooks = hooks != NULL;
    if (hooks)
        m->hooks = *hooks;
    else
        memset(&m->hooks, 0, sizeof m->hooks);
}
void strata_model_set_progress(strata_gpt_t *m, strata_model_progress_fn fn, void *ctx)
{
    m->progress = fn;
    m->progress_ctx = fn ? ctx : NULL;
}

const float *strata_model_logits(const strata_gpt_t *m)
{
    return m->slot[0].logits;
}

double strata_gpt_config_block_flops(const strata_gpt_config_t *c, int keys)
{
    double C = c->d_model, F = c->d_ff ? c->d_ff : 4.0 * C;
    double KV = C / c->n_head * (c->n_kv_head ? c->n_kv_head : c->n_head);
    double mlp = (c->mlp == STRATA_GPT_MLP_SWIGLU ? 3 : 2) * C * F;
    return 2 * (C * (C + 2 * KV) + C * C + mlp) + 4.0 * keys * C;
}

double strata_model_flops_per_token(const strata_gpt_t *m, int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    int keys = c->window > 0 && c->window < T ? c->window : T; // dense within the window
    // Forward + backward: 3 x the forward of every block and of the head (2 C V).
    double blocks = c->n_layer * strata_gpt_config_block_flops(c, keys);
    return 3.0 * (blocks + 2.0 * c->vocab * c->d_model);
}

