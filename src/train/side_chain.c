/* The side pipeline behind the eval and sample side tasks (train/side_tasks.h): a snapshot of this
 * stage's chunks, run micro-batch by micro-batch, chunk by chunk, in the bubbles, the activations
 * passed between the stages over a communicator of its own. One micro-batch (a job) goes through
 * every chunk before the next starts, so a stage only ever waits for one message. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "train/side_tasks.h"
#include "train/trainer.h"

enum { TAG_ACT = 0, TAG_TOKEN = 1 << 20 }; /* activations for chunk c: TAG_ACT + c */
enum { SAMPLE_TOKENS = 64 };               /* generated per sample pass */
#define SAMPLE_TEMPERATURE 0.8

/* A step runs one piece: a pipeline chunk of this stage, or a run of its layers, so a step is as
 * short as the pieces allow (the training waits for at most the one running when its data comes). */
typedef struct piece {
    int chunk;        /* the pipeline chunk it belongs to */
    bool first, last; /* its first / last layers */
} piece_t;

struct st_side_chain {
    strata_trainer_t *t;
    st_side_kind_t kind;
    strata_comm_t *comm;   /* split of the pipeline's communicator: its own message space */
    strata_gpt_t *model;   /* the snapshot (NULL until init) */
    int stage, C, d;
    int *owner;            /* [C] each chunk's stage */
    int *mine, nmine;      /* this stage's chunks, in order */
    piece_t piece[STRATA_GPT_MAX_CHUNKS]; /* the snapshot's chunks: this stage's, cut finer */
    int npieces;
    size_t msg;            /* floats of the largest activation */
    float *in, *out, *hand; /* received, being sent, handed to this stage's next chunk */
    strata_request_t *rreq, *sreq;
    int32_t tok_in, tok_out;
    /* the pass */
    bool running, want_token;
    int64_t step;          /* the snapshot's step */
    int job, njobs, k;     /* job; the next piece to run for it */
    int rows;              /* rows of a job */
    int32_t *tokens, *targets; /* eval: every job's; sample: the context */
    int ctx_len, prompt_len;
    double batch_sum, total; /* eval: this batch's micro-batch losses; the batches' means */
    uint64_t rng;
    char text[SAMPLE_TOKENS + 1];
    bool done_once;        /* a pass has finished */
    double result;
};

static bool is_first(const st_side_chain_t *c)
{
    return c->owner[0] == c->stage;
}

/* Job j's shape: eval, micro_rows x seq; sample, 1 x the context window. */
static void job_shape(const st_side_chain_t *c, int j, int *B, int *T)
{
    const strata_train_config_t *cfg = &c->t->cfg;
    if (c->kind == ST_SIDE_EVAL) {
        *B = c->rows;
        *T = cfg->seq;
        return;
    }
    int len = c->prompt_len + j;
    *B = 1;
    *T = len < cfg->seq ? len : cfg->seq;
}

/* Cuts this stage's chunks into at most STRATA_GPT_MAX_CHUNKS pieces of whole layers, as even as the
 * chunks allow (the arena's layout does not depend on the cut: the snapshot is one copy), into
 * layers and c->piece. */
static void cut_pieces(st_side_chain_t *c, strata_gpt_layers_t *layers)
{
    const strata_gpt_layers_t *mine = &c->t->stage_layers[c->stage];
    int per = STRATA_GPT_MAX_CHUNKS / (mine->n ? mine->n : 1);
    layers->n = 0;
    for (int k = 0; k < mine->n; k++) {
        int b = mine->begin[k], len = mine->end[k] - b, n = len < per ? len : per;
        for (int i = 0; i < n; i++) {
            layers->begin[layers->n] = b + (int)((long long)len * i / n);
            layers->end[layers->n] = b + (int)((long long)len * (i + 1) / n);
            c->piece[layers->n++] = (piece_t){.chunk = c->mine[k], .first = i == 0,
                                                 .last = i == n - 1};
        }
    }
    c->npieces = layers->n;
}

static strata_status_t chain_init(void *self)
{
    st_side_chain_t *c = self;
    strata_gpt_shard_t sh = *strata_model_shard(c->t->model);
    sh.slots = 1;
    sh.split_backward = false;
    cut_pieces(c, &sh.layers);
    ST_TRY(strata_model_create_shard(&c->t->cfg.model, &sh, c->rows, c->t->cfg.seed, &c->model));
    c->in = malloc(c->msg * sizeof(float));
    c->out = malloc(c->msg * sizeof(float));
    c->hand = malloc(c->msg * sizeof(float));
    if (!c->in || !c->out || !c->hand)
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    return STRATA_OK;
}

static void chain_finalize(void *self)
{
    st_side_chain_t *c = self;
    (void)strata_request_wait(c->rreq);
    (void)strata_request_wait(c->sreq);
    c->rreq = c->sreq = NULL;
    strata_model_destroy(c->model);
    c->model = NULL;
    free(c->in);
    free(c->out);
    free(c->hand);
    c->in = c->out = c->hand = NULL;
    c->running = false;
}

/* Tests *r; STRATA_INPROGRESS while it runs, else its status (the request released). */
static strata_status_t poll(strata_request_t **r)
{
    bool done = false;
    strata_status_t rc = strata_request_test(*r, &done);
    if (!done)
        return rc < 0 ? rc : STRATA_INPROGRESS;
    *r = NULL;
    return rc;
}

/* Job j's token: the text's j-th byte, the context's next (the window sliding at seq). */
static void append(st_side_chain_t *c, int32_t tok)
{
    c->text[c->job] = (char)(tok >= 32 && tok < 127 ? tok : tok == '\n' ? '\n' : '?');
    c->text[c->job + 1] = 0;
    if (c->ctx_len == c->t->cfg.seq) // the window slides
        memmove(c->tokens, c->tokens + 1, (size_t)(c->ctx_len - 1) * sizeof *c->tokens);
    else
        c->ctx_len++;
    c->tokens[c->ctx_len - 1] = tok;
}

static void next_job(st_side_chain_t *c)
{
    c->k = 0;
    if (++c->job < c->njobs)
        return;
    c->running = false;
    c->done_once = true;
    if (c->kind == ST_SIDE_EVAL)
        c->result = c->total / c->t->cfg.eval_batches;
}

/* The last chunk's output of job j: eval adds its loss, sample draws the next token. */
static strata_status_t job_done(st_side_chain_t *c, float loss, int T)
{
    if (c->kind == ST_SIDE_EVAL) { // summed as the blocking evaluation sums, so the same loss
        int micro = c->t->micro;
        c->batch_sum += loss;
        if (c->job % micro == micro - 1) {
            c->total += (double)(float)(c->batch_sum / micro);
            c->batch_sum = 0;
        }
        return STRATA_OK;
    }
    int V = c->t->cfg.model.vocab;
    int32_t tok = strata_sample_token(strata_model_logits(c->model) + (size_t)(T - 1) * V, V,
                                      SAMPLE_TEMPERATURE, &c->rng);
    if (is_first(c)) {
        append(c, tok);
        return STRATA_OK;
    }
    c->tok_out = tok;
    return strata_isend(c->comm, &c->tok_out, 1, STRATA_DTYPE_I32, c->owner[0], TAG_TOKEN,
                        &c->sreq);
}

static strata_status_t chain_step(void *self)
{
    st_side_chain_t *c = self;
    if (!c->running)
        return STRATA_INPROGRESS;
    strata_status_t rc;
    if (c->sreq && (rc = poll(&c->sreq)) != STRATA_OK) // its buffer is reused below
        return rc;
    if (c->want_token) { // sample, first stage: the last chunk's token before the next job
        if (!c->rreq)
            ST_TRY(strata_irecv(c->comm, &c->tok_in, 1, STRATA_DTYPE_I32, c->owner[c->C - 1],
                                TAG_TOKEN, &c->rreq));
        if ((rc = poll(&c->rreq)) != STRATA_OK)
            return rc;
        append(c, c->tok_in);
        c->want_token = false;
        next_job(c);
        return STRATA_OK;
    }
    const piece_t *pc = &c->piece[c->k];
    int ch = pc->chunk, B, T;
    job_shape(c, c->job, &B, &T);
    size_t n = (size_t)B * (size_t)T * (size_t)c->d;
    const float *input = NULL;
    if (!pc->first || (ch > 0 && c->owner[ch - 1] == c->stage)) { // the piece before, here
        input = c->hand;
    } else if (ch > 0) {
        if (!c->rreq)
            ST_TRY(strata_irecv(c->comm, c->in, n, STRATA_DTYPE_F32, c->owner[ch - 1], TAG_ACT + ch,
                                &c->rreq));
        if ((rc = poll(&c->rreq)) != STRATA_OK)
            return rc;
        input = c->in;
    }
    const int32_t *tokens = NULL, *targets = NULL;
    if (c->kind == ST_SIDE_EVAL) {
        size_t at = (size_t)c->job * (size_t)B * (size_t)T;
        tokens = c->tokens + at;
        targets = ch == c->C - 1 && pc->last ? c->targets + at : NULL;
    } else {
        tokens = c->tokens + (c->ctx_len - T);
    }
    float loss = 0;
    ST_TRY(strata_model_forward_chunk(c->model, c->k, 0, ch == 0 && pc->first ? tokens : NULL,
                                      input, targets, B, T, &loss));
    if (!pc->last) { // the input was copied in: hand is free for this piece's output
        memcpy(c->hand, strata_model_chunk_output(c->model, 0), n * sizeof(float));
    } else if (ch == c->C - 1) {
        ST_TRY(job_done(c, loss, T));
    } else if (c->owner[ch + 1] == c->stage) {
        memcpy(c->hand, strata_model_chunk_output(c->model, 0), n * sizeof(float));
    } else {
        memcpy(c->out, strata_model_chunk_output(c->model, 0), n * sizeof(float));
        ST_TRY(strata_isend(c->comm, c->out, n, STRATA_DTYPE_F32, c->owner[ch + 1], TAG_ACT + ch + 1,
                            &c->sreq));
    }
    if (++c->k < c->npieces)
        return STRATA_OK;
    if (c->kind == ST_SIDE_SAMPLE && is_first(c) && c->owner[c->C - 1] != c->stage)
        c->want_token = true;
    else
        next_job(c);
    return STRATA_OK;
}

static double chain_progress(const void *self)
{
    const st_side_chain_t *c = self;
    return c->running && c->njobs ? (double)c->job / c->njobs : 1.0;
}

strata_status_t st_side_chain_create(strata_trainer_t *t, st_side_kind_t kind,
                                     st_side_chain_t **out, strata_side_task_ops_t *ops)
{
    *out = NULL;
    const char *name = kind == ST_SIDE_EVAL ? "eval" : "sample";
    if (t->tp > 1)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --harvest %s runs the model's chunks in "
                        "the bubbles, which a tensor-parallel part cannot do alone (--tp %d)", name,
                        t->tp);
    if (t->zero && t->zcfg.stage >= 3)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --harvest %s snapshots the stage's "
                        "parameters, which ZeRO-3 does not hold whole (use --zero 2 or less)", name);
    const strata_train_config_t *cfg = &t->cfg;
    st_side_chain_t *c = calloc(1, sizeof *c);
    if (!c)
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    c->t = t;
    c->kind = kind;
    c->stage = t->pp_rank;
    c->C = t->pp * cfg->vp;
    c->d = cfg->model.d_model;
    c->rows = kind == ST_SIDE_EVAL ? t->micro_rows : 1;
    c->msg = (size_t)c->rows * (size_t)cfg->seq * (size_t)c->d;
    c->owner = malloc((size_t)c->C * sizeof *c->owner);
    c->mine = malloc((size_t)c->C * sizeof *c->mine);
    size_t ntok = kind == ST_SIDE_EVAL
                      ? (size_t)cfg->eval_batches * (size_t)t->micro * (size_t)c->msg / (size_t)c->d
                      : (size_t)cfg->seq;
    c->tokens = malloc(ntok * sizeof *c->tokens);
    c->targets = malloc(ntok * sizeof *c->targets);
    if (!c->owner || !c->mine || !c->tokens || !c->targets) {
        st_side_chain_destroy(c);
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    }
    for (int ch = 0; ch < c->C; ch++) {
        c->owner[ch] = strata_pp_chunk_stage(cfg->schedule, t->pp, cfg->vp, ch);
        if (c->owner[ch] == c->stage)
            c->mine[c->nmine++] = ch;
    }
    strata_status_t rc = strata_comm_split(t->pp_comm, 0, c->stage, &c->comm);
    if (rc < 0) {
        st_side_chain_destroy(c);
        return rc;
    }
    // What init allocates: the snapshot's parameters and gradients, one slot, three messages.
    size_t floats = 2 * strata_model_nparams(t->model) + strata_model_slot_floats(t->model) +
                    3 * c->msg;
    *ops = (strata_side_task_ops_t){.name = name, .mem_bytes = floats * sizeof(float),
                                    .init = chain_init, .step = chain_step,
                                    .finalize = chain_finalize, .progress = chain_progress};
    *out = c;
    return STRATA_OK;
}

void st_side_chain_destroy(st_side_chain_t *c)
{
    if (!c)
        return;
    if (c->model || c->rreq || c->sreq) // never initialised by a harvester, or left by one
        chain_finalize(c);
    strata_comm_destroy(c->comm);
    free(c->owner);
    free(c->mine);
    free(c->tokens);
    free(c->targets);
    free(c);
}

bool st_side_chain_idle(const st_side_chain_t *c)
{
    return !c->running;
}

bool st_side_chain_ready(const st_side_chain_t *c)
{
    return c->model != NULL;
}

void st_side_chain_snapshot(st_side_chain_t *c, int64_t step)
{
    strata_trainer_t *t = c->t;
    const strata_train_config_t *cfg = &t->cfg;
    memcpy(strata_model_param_arena(c->model), strata_model_param_arena(t->model),
           strata_model_nparams(t->model) * sizeof(float));
    c->step = step;
    c->job = c->k = 0;
    c->want_token = false;
    c->running = true;
    if (c->kind == ST_SIDE_EVAL) { // the blocking evaluation's batches: this rank's rows of each,
        // the parts its stage uses (the first chunk's tokens, the last's targets)
        size_t per = (size_t)(cfg->batch / t->dp) * (size_t)cfg->seq;
        c->njobs = cfg->eval_batches * t->micro;
        c->batch_sum = c->total = 0;
        for (int e = 0; e < cfg->eval_batches; e++)
            if (st_trainer_read_rows(t, 1, e, c->tokens + e * per, c->targets + e * per) < 0)
                c->running = false; // validation text too short: the trainer refused it already
        return;
    }
    c->njobs = SAMPLE_TOKENS;
    c->prompt_len = c->ctx_len = 1;
    c->tokens[0] = '\n';
    c->text[0] = 0;
    c->rng = cfg->seed ^ (uint64_t)step;
}

strata_status_t st_side_chain_drain(st_side_chain_t *c)
{
    while (c->running) {
        strata_status_t rc = chain_step(c);
        if (rc < 0)
            return rc;
    }
    strata_status_t rc = c->sreq ? strata_request_wait(c->sreq) : STRATA_OK;
    c->sreq = NULL;
    return rc;
}

bool st_side_chain_result(const st_side_chain_t *c, double *loss, const char **text)
{
    if (c->running || !c->done_once)
        return false;
    *loss = c->result;
    *text = c->text;
    return c->kind == ST_SIDE_EVAL ? c->owner[c->C - 1] == c->stage : is_first(c);
}
