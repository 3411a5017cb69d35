/* The GPT model object: the parameter/gradient arena and its tensor table and segments, the
 * activation arena, deterministic initialisation, and the forward/backward drivers that call the
 * kernels of layers.c, attention.c and loss.c and the parameter hooks of a ZeRO engine. The
 * optimizers are in optim.c, the JSON form of the configuration in config.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/layers.h"
#include "strata/model.h"
#include "strata/trace.h"

/* Offsets of one block's tensors relative to the block's segment start (the same for every block). */
typedef struct block_layout {
    size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fc2w, fc2b;
} block_layout_t;

/* Activations of one block, pointers into the activation arena (sized for max_batch x max_seq). */
typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res1;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res2;
} block_acts_t;

struct strata_gpt {
    strata_gpt_config_t cfg;
    int max_batch;
    size_t P;
    float *params, *grads;
    int ntensors;
    strata_tensor_info_t *tensors;
    char *names; /* storage of the tensor names */
    int nseg;
    size_t *seg_off, *seg_cnt;
    block_layout_t bl;
    size_t wte, wpe, lnfw, lnfb; /* offsets relative to their segment */
    float *acts;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *lse;
    block_acts_t *ba;
    float *dres, *dbuf, *dqkv, *dfch, *dscratch;
    int32_t *tokens, *targets;
    int B, T;
    bool have_targets, logits_valid;
    strata_param_hooks_t hooks;
    bool has_hooks;
    strata_model_progress_fn progress;
    void *progress_ctx;
};

/* Lets a communication engine advance between matrix products (strata_model_set_progress). */
#define PROGRESS(m)                                                                                \
    do {                                                                                           \
        if ((m)->progress)                                                                         \
            (m)->progress((m)->progress_ctx);                                                      \
    } while (0)

/* ---- layout ------------------------------------------------------------------------------------ */

static void add_tensor(strata_gpt_t *m, char **names, const char *name, int ndim, int64_t d0,
                       int64_t d1, int seg, bool decay, size_t *cursor)
{
    strata_tensor_info_t *t = &m->tensors[m->ntensors++];
    size_t len = strlen(name) + 1;
    memcpy(*names, name, len);
    t->name = *names;
    *names += len;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->count = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    t->offset = *cursor;
    t->segment = seg;
    t->decay = decay;
    *cursor += t->count;
}

/* Builds the tensor table; returns P. With m == NULL it only counts. */
static size_t build_layout(strata_gpt_t *m, const strata_gpt_config_t *c)
{
    size_t C = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab, T = (size_t)c->max_seq;
    size_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
    size_t P = V * C + T * C + (size_t)c->n_layer * block + 2 * C;
    if (!m)
        return P;
    char *names = m->names, nm[96];
    size_t cur = 0;
    m->seg_off[0] = 0;
    m->wte = 0;
    add_tensor(m, &names, "wte", 2, (int64_t)V, (int64_t)C, 0, true, &cur);
    m->wpe = cur;
    add_tensor(m, &names, "wpe", 2, (int64_t)T, (int64_t)C, 0, true, &cur);
    m->seg_cnt[0] = cur;
    for (int l = 0; l < c->n_layer; l++) {
        size_t base = cur;
        m->seg_off[1 + l] = base;
#define T1(field, suffix, n, decay)                                                                \
    m->bl.field = cur - base;                                                                      \
    snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                                 \
    add_tensor(m, &names, nm, 1, (int64_t)(n), 0, 1 + l, decay, &cur)
#define T2(field, suffix, r, k)                                                                    \
    m->bl.field = cur - base;                                                                      \
    snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                                 \
    add_tensor(m, &names, nm, 2, (int64_t)(r), (int64_t)(k), 1 + l, true, &cur)
        T1(ln1w, "ln1.weight", C, false);
        T1(ln1b, "ln1.bias", C, false);
        T2(qkvw, "attn.qkv.weight", 3 * C, C);
        T1(qkvb, "attn.qkv.bias", 3 * C, false);
        T2(projw, "attn.proj.weight", C, C);
        T1(projb, "attn.proj.bias", C, false);
        T1(ln2w, "ln2.weight", C, false);
        T1(ln2b, "ln2.bias", C, false);
        T2(fcw, "mlp.fc.weight", F, C);
        T1(fcb, "mlp.fc.bias", F, false);
        T2(fc2w, "mlp.proj.weight", C, F);
        T1(fc2b, "mlp.proj.bias", C, false);
#undef T1
#undef T2
        m->seg_cnt[1 + l] = cur - base;
    }
    int last = c->n_layer + 1;
    m->seg_off[last] = cur;
    m->lnfw = 0;
    add_tensor(m, &names, "lnf.weight", 1, (int64_t)C, 0, last, false, &cur);
    m->lnfb = C;
    add_tensor(m, &names, "lnf.bias", 1, (int64_t)C, 0, last, false, &cur);
    m->seg_cnt[last] = cur - m->seg_off[last];
    return cur;
}

size_t strata_gpt_config_nparams(const strata_gpt_config_t *cfg)
{
    strata_gpt_config_t c = *cfg;
    if (c.d_ff == 0)
        c.d_ff = 4 * c.d_model;
    return build_layout(NULL, &c);
}

/* ---- deterministic initialisation ---------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_normal(float *x, size_t n, float std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix(s) >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (double)(splitmix(s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2) * std);
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2) * std);
    }
}

void strata_model_init_params(strata_gpt_t *m, uint64_t seed)
{
    float std = m->cfg.init_std, proj_std = std / sqrtf(2.f * (float)m->cfg.n_layer);
    for (int i = 0; i < m->ntensors; i++) {
        const strata_tensor_info_t *t = &m->tensors[i];
        // Each tensor has its own stream, so a tensor's values do not depend on the others' sizes.
        uint64_t s = seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        float *x = m->params + t->offset;
        if (t->ndim == 2) {
            bool proj = strstr(t->name, "attn.proj.weight") || strstr(t->name, "mlp.proj.weight");
            fill_normal(x, t->count, proj ? proj_std : std, &s);
        } else {
            float v = strstr(t->name, ".weight") ? 1.f : 0.f; // norm weights 1, biases 0
            for (size_t k = 0; k < t->count; k++)
                x[k] = v;
        }
    }
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
    if (c->d_ff == 0)
        c->d_ff = 4 * c->d_model;
    CHECK(c->d_ff >= 1 && c->d_ff <= 1 << 20, "model: d_ff must be in [1, 1M], got %d", c->d_ff);
    CHECK(c->ln_eps > 0.f && c->ln_eps < 1.f, "model: ln_eps must be in (0, 1), got %g",
          (double)c->ln_eps);
    CHECK(c->init_std > 0.f && c->init_std < 10.f, "model: init_std must be in (0, 10), got %g",
          (double)c->init_std);
#undef CHECK
    return STRATA_OK;
}

strata_status_t strata_model_create(const strata_gpt_config_t *cfg, int max_batch, uint64_t seed,
                                    strata_gpt_t **out)
{
    *out = NULL;
    strata_gpt_config_t c = *cfg;
    ST_TRY(strata_gpt_config_validate(&c));
    if (max_batch < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "model: max_batch must be >= 1, got %d", max_batch);
    strata_gpt_t *m = calloc(1, sizeof *m);
    if (!m)
        return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory");
    m->cfg = c;
    m->max_batch = max_batch;
    int L = c.n_layer;
    m->nseg = L + 2;
    int maxt = 4 + 12 * L;
    m->tensors = calloc((size_t)maxt, sizeof *m->tensors);
    m->names = calloc((size_t)maxt, 64);
    m->seg_off = calloc((size_t)m->nseg, sizeof(size_t));
    m->seg_cnt = calloc((size_t)m->nseg, sizeof(size_t));
    m->ba = calloc((size_t)L, sizeof *m->ba);
    size_t BT = (size_t)max_batch * c.max_seq, C = c.d_model, F = c.d_ff, V = c.vocab;
    size_t att = (size_t)max_batch * c.n_head * c.max_seq * c.max_seq;
    size_t per_block = 8 * BT * C + 4 * BT + 3 * BT * C + att + 2 * BT * F;
    size_t nacts = BT * C + L * per_block + BT * C + 2 * BT + BT * V + BT;
    size_t ngrad_acts = 2 * BT * C + 3 * BT * C + BT * F + (size_t)c.max_seq * c.max_seq;
    if (!m->tensors || !m->names || !m->seg_off || !m->seg_cnt || !m->ba)
        goto oom;
    m->P = build_layout(m, &c);
    m->params = malloc(m->P * sizeof(float));
    m->grads = calloc(m->P, sizeof(float));
    m->acts = calloc(nacts + ngrad_acts, sizeof(float));
    m->tokens = calloc(BT, sizeof(int32_t));
    m->targets = calloc(BT, sizeof(int32_t));
    if (!m->params || !m->grads || !m->acts || !m->tokens || !m->targets)
        goto oom;
    float *p = m->acts;
#define TAKE(n) (p += (n), p - (n))
    m->encoded = TAKE(BT * C);
    for (int l = 0; l < L; l++) {
        block_acts_t *a = &m->ba[l];
        a->ln1 = TAKE(BT * C);
        a->ln1_mean = TAKE(BT);
        a->ln1_rstd = TAKE(BT);
        a->qkv = TAKE(3 * BT * C);
        a->atty = TAKE(BT * C);
        a->att = TAKE(att);
        a->res1 = TAKE(BT * C);
        a->ln2 = TAKE(BT * C);
        a->ln2_mean = TAKE(BT);
        a->ln2_rstd = TAKE(BT);
        a->fch = TAKE(BT * F);
        a->fch_gelu = TAKE(BT * F);
        a->res2 = TAKE(BT * C);
        // 4 BT*C of per_block's 8 are spare: keeps the count simple and over-, never under-sized.
    }
    m->lnf = TAKE(BT * C);
    m->lnf_mean = TAKE(BT);
    m->lnf_rstd = TAKE(BT);
    m->logits = TAKE(BT * V);
    m->lse = TAKE(BT);
    m->dres = TAKE(BT * C);
    m->dbuf = TAKE(BT * C);
    m->dqkv = TAKE(3 * BT * C);
    m->dfch = TAKE(BT * F);
    m->dscratch = TAKE((size_t)c.max_seq * c.max_seq);
#undef TAKE
    strata_model_init_params(m, seed);
    *out = m;
    return STRATA_OK;
oom:
    strata_model_destroy(m);
    return st_error(STRATA_ERR_NO_MEMORY, "model: out of memory allocating %zu parameters and "
                    "%zu activation floats", build_layout(NULL, &c), nacts + ngrad_acts);
}

void strata_model_destroy(strata_gpt_t *m)
{
    if (!m)
        return;
    free(m->tensors);
    free(m->names);
    free(m->seg_off);
    free(m->seg_cnt);
    free(m->ba);
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->tokens);
    free(m->targets);
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
    return m->logits;
}

double strata_model_flops_per_token(const strata_gpt_t *m, int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    double C = c->d_model, F = c->d_ff, L = c->n_layer;
    double matmul = L * (3 * C * C + C * C + 2 * C * F) + (double)c->vocab * C; // incl. the head
    double attn = L * 2.0 * T * C; // qk^T and att v, dense
    return 6.0 * matmul + 6.0 * attn;
}

/* ---- hooks ------------------------------------------------------------------------------------- */

static strata_status_t acquire(strata_gpt_t *m, int seg, bool bwd, const float **p)
{
    if (m->has_hooks && m->hooks.acquire) {
        const float *q = NULL;
        ST_TRY(m->hooks.acquire(m->hooks.ctx, seg, bwd, &q));
        if (!q)
            return st_error(STRATA_ERR_INTERNAL, "model: acquire hook gave no parameters for "
                            "segment %d", seg);
        *p = q;
        return STRATA_OK;
    }
    *p = m->params + m->seg_off[seg];
    return STRATA_OK;
}

static strata_status_t release(strata_gpt_t *m, int seg, bool bwd)
{
    if (m->has_hooks && m->hooks.release)
        return m->hooks.release(m->hooks.ctx, seg, bwd);
    return STRATA_OK;
}

static strata_status_t grad_ready(strata_gpt_t *m, int seg)
{
    if (m->has_hooks && m->hooks.grad_ready)
        return m->hooks.grad_ready(m->hooks.ctx, seg);
    return STRATA_OK;
}

/* ---- forward ----------------------------------------------------------------------------------- */

static const char *const fwd_names[] = {"block1.fwd", "block2.fwd", "block3.fwd", "block4.fwd",
                                        "block5.fwd", "block6.fwd", "block7.fwd", "block8.fwd"};
static const char *const bwd_names[] = {"block1.bwd", "block2.bwd", "block3.bwd", "block4.bwd",
                                        "block5.bwd", "block6.bwd", "block7.bwd", "block8.bwd"};
#define NAMED(arr, l, dflt) ((l) < 8 ? arr[l] : (dflt))

static void block_forward(strata_gpt_t *m, int l, const float *p, const float *x, int B, int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    block_acts_t *a = &m->ba[l];
    int N = B * T, C = c->d_model, F = c->d_ff;
    size_t NC = (size_t)N * C;
    st_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p + o->ln1w, p + o->ln1b, N, C,
                         c->ln_eps);
    st_matmul_forward(a->qkv, a->ln1, p + o->qkvw, p + o->qkvb, N, C, 3 * C);
    PROGRESS(m);
    st_attention_forward(a->atty, a->att, a->qkv, B, T, C, c->n_head);
    PROGRESS(m);
    st_matmul_forward(a->res1, a->atty, p + o->projw, p + o->projb, N, C, C);
    PROGRESS(m);
    st_add_inplace(a->res1, x, NC);
    st_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, p + o->ln2w, p + o->ln2b, N,
                         C, c->ln_eps);
    st_matmul_forward(a->fch, a->ln2, p + o->fcw, p + o->fcb, N, C, F);
    PROGRESS(m);
    st_gelu_forward(a->fch_gelu, a->fch, (size_t)N * F);
    st_matmul_forward(a->res2, a->fch_gelu, p + o->fc2w, p + o->fc2b, N, F, C);
    PROGRESS(m);
    st_add_inplace(a->res2, a->res1, NC);
}

/* Runs `body` between acquire and release of `seg`, releasing even when body fails. */
#define WITH_SEG(m, seg, bwd, p, body)                                                             \
    do {                                                                                           \
        ST_TRY(acquire(m, seg, bwd, &p));                                                          \
        body;                                                                                      \
        ST_TRY(release(m, seg, bwd));                                                              \
    } while (0)

strata_status_t strata_model_forward(strata_gpt_t *m, const int32_t *tokens, const int32_t *targets,
                                     int B, int T, float *loss)
{
    const strata_gpt_config_t *c = &m->cfg;
    if (B < 1 || B > m->max_batch || T < 1 || T > c->max_seq)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "model: batch %d x %d outside the model's %d x %d", B, T, m->max_batch,
                        c->max_seq);
    int N = B * T, C = c->d_model, V = c->vocab, L = c->n_layer;
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return st_error(STRATA_ERR_INVALID_ARG, "model: token %d at position %d outside "
                            "[0, %d)", tokens[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            return st_error(STRATA_ERR_INVALID_ARG, "model: target %d at position %d outside "
                            "[0, %d)", targets[i], i, V);
    }
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int32_t));
    if (targets)
        memcpy(m->targets, targets, (size_t)N * sizeof(int32_t));
    m->B = B;
    m->T = T;
    m->have_targets = false;
    m->logits_valid = false;
    const float *p = NULL;

    strata_trace_begin("compute", "embed.fwd");
    WITH_SEG(m, 0, false, p,
             st_encoder_forward(m->encoded, m->tokens, p + m->wte, p + m->wpe, B, T, C));
    strata_trace_end("compute", "embed.fwd");
    const float *x = m->encoded;
    for (int l = 0; l < L; l++) {
        const char *nm = NAMED(fwd_names, l, "block.fwd");
        strata_trace_begin("compute", nm);
        WITH_SEG(m, 1 + l, false, p, block_forward(m, l, p, x, B, T));
        strata_trace_end("compute", nm);
        x = m->ba[l].res2;
    }
    strata_trace_begin("compute", "head.fwd");
    WITH_SEG(m, L + 1, false, p,
             st_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, p + m->lnfw, p + m->lnfb,
                                  N, C, c->ln_eps));
    WITH_SEG(m, 0, false, p, st_matmul_forward(m->logits, m->lnf, p + m->wte, NULL, N, C, V));
    PROGRESS(m);
    m->logits_valid = true;
    if (targets) {
        float l = st_xent_forward(m->lse, m->logits, m->targets, N, V);
        if (loss)
            *loss = l;
        m->have_targets = true;
    }
    strata_trace_end("compute", "head.fwd");
    return STRATA_OK;
}

/* ---- backward ---------------------------------------------------------------------------------- */

static void block_backward(strata_gpt_t *m, int l, const float *p, const float *x, int B, int T)
{
    const strata_gpt_config_t *c = &m->cfg;
    const block_layout_t *o = &m->bl;
    block_acts_t *a = &m->ba[l];
    float *g = m->grads + m->seg_off[1 + l];
    int N = B * T, C = c->d_model, F = c->d_ff;
    // dres holds d(res2); it flows unchanged into d(res1) through the residual.
    st_matmul_backward(m->dfch, g + o->fc2w, g + o->fc2b, m->dres, a->fch_gelu, p + o->fc2w, N, F,
                       C, 0.f);
    PROGRESS(m);
    st_gelu_backward(m->dfch, a->fch, m->dfch, (size_t)N * F);
    st_matmul_backward(m->dbuf, g + o->fcw, g + o->fcb, m->dfch, a->ln2, p + o->fcw, N, C, F, 0.f);
    PROGRESS(m);
    st_layernorm_backward(m->dres, g + o->ln2w, g + o->ln2b, m->dbuf, a->res1, p + o->ln2w,
                          a->ln2_mean, a->ln2_rstd, N, C);
    // dres now holds d(res1); it flows unchanged into d(x).
    st_matmul_backward(m->dbuf, g + o->projw, g + o->projb, m->dres, a->atty, p + o->projw, N, C,
                       C, 0.f);
    PROGRESS(m);
    st_attention_backward(m->dqkv, m->dscratch, m->dbuf, a->qkv, a->att, B, T, C, c->n_head);
    PROGRESS(m);
    st_matmul_backward(m->dbuf, g + o->qkvw, g + o->qkvb, m->dqkv, a->ln1, p + o->qkvw, N, C,
                       3 * C, 0.f);
    PROGRESS(m);
    st_layernorm_backward(m->dres, g + o->ln1w, g + o->ln1b, m->dbuf, x, p + o->ln1w, a->ln1_mean,
                          a->ln1_rstd, N, C);
}

strata_status_t strata_model_backward(strata_gpt_t *m)
{
    if (!m->have_targets)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "model: backward needs a forward pass with targets first");
    const strata_gpt_config_t *c = &m->cfg;
    int B = m->B, T = m->T, N = B * T, C = c->d_model, V = c->vocab, L = c->n_layer;
    const float *p = NULL;
    // The kernels accumulate, so the arena is zeroed once here. Writing the first contribution with
    // beta = 0 instead would not save a pass: OpenBLAS implements beta = 0 as its own zeroing pass
    // over C before the kernel, and this memset (13 MB at the benchmark size) costs ~0.2 ms of a
    // ~250 ms step.
    memset(m->grads, 0, m->P * sizeof(float));
    m->have_targets = false; // the logits buffer becomes dlogits
    m->logits_valid = false;

    strata_trace_begin("compute", "head.bwd");
    st_xent_backward(m->logits, m->logits, m->lse, m->targets, N, V, 1.f / (float)N);
    WITH_SEG(m, 0, true, p,
             st_matmul_backward(m->dbuf, m->grads + m->wte, NULL, m->logits, m->lnf, p + m->wte,
                                N, C, V, 0.f));
    PROGRESS(m);
    memset(m->dres, 0, (size_t)N * C * sizeof(float));
    const float *xl = L > 0 ? m->ba[L - 1].res2 : m->encoded;
    float *gl = m->grads + m->seg_off[L + 1];
    WITH_SEG(m, L + 1, true, p,
             st_layernorm_backward(m->dres, gl + m->lnfw, gl + m->lnfb, m->dbuf, xl, p + m->lnfw,
                                   m->lnf_mean, m->lnf_rstd, N, C));
    strata_trace_end("compute", "head.bwd");
    ST_TRY(grad_ready(m, L + 1));
    for (int l = L - 1; l >= 0; l--) {
        const char *nm = NAMED(bwd_names, l, "block.bwd");
        strata_trace_begin("compute", nm);
        const float *x = l > 0 ? m->ba[l - 1].res2 : m->encoded;
        WITH_SEG(m, 1 + l, true, p, block_backward(m, l, p, x, B, T));
        strata_trace_end("compute", nm);
        ST_TRY(grad_ready(m, 1 + l));
    }
    strata_trace_begin("compute", "embed.bwd");
    WITH_SEG(m, 0, true, p,
             st_encoder_backward(m->grads + m->wte, m->grads + m->wpe, m->dres, m->tokens, B, T,
                                 C));
    (void)p;
    strata_trace_end("compute", "embed.bwd");
    ST_TRY(grad_ready(m, 0));
    return STRATA_OK;
}
