/* The trainer's pipeline: the cut of the model's layers into P x V chunks (given, or balanced by
 * each chunk's predicted compute), this stage's executor, and a step's forward and backward through
 * it, with the tied embedding's gradient summed between the stage of the embeddings and the stage of
 * the head (Megatron-LM's embedding group; not for an untied head). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/trace.h"
#include "train/trainer.h"

/* Layers per chunk (C chunks) that make the most expensive chunk as cheap as possible (the last
 * chunk also carries the head): a search over every cut, C x L^2. */
static void balance(const strata_gpt_config_t *m, int seq, int C, int *count)
{
    int L = m->n_layer;
    // Each block's and the head's forward FLOPs per token (the embedding lookup is free).
    double lay = strata_gpt_config_block_flops(m, seq), head = 2.0 * m->d_model * m->vocab;
    // best[c][l]: the least max cost of the first l layers in c chunks; cut[c][l]: chunk c-1's start.
    double *best = malloc(sizeof(double) * (size_t)(C + 1) * (size_t)(L + 1));
    int *cut = malloc(sizeof(int) * (size_t)(C + 1) * (size_t)(L + 1));
    if (!best || !cut) { // no memory for the search: equal counts
        for (int c = 0; c < C; c++)
            count[c] = L / C + (c < L % C);
        free(best);
        free(cut);
        return;
    }
#define B_(c, l) best[(size_t)(c) * (size_t)(L + 1) + (size_t)(l)]
#define K_(c, l) cut[(size_t)(c) * (size_t)(L + 1) + (size_t)(l)]
    for (int c = 0; c <= C; c++)
        for (int l = 0; l <= L; l++)
            B_(c, l) = 1e300;
    B_(0, 0) = 0;
    for (int c = 1; c <= C; c++)
        for (int l = c; l <= L - (C - c); l++)
            for (int s = c - 1; s < l; s++) {
                double cost = (l - s) * lay + (c == C ? head : 0);
                double v = B_(c - 1, s) > cost ? B_(c - 1, s) : cost;
                if (v < B_(c, l)) {
                    B_(c, l) = v;
                    K_(c, l) = s;
                }
            }
    for (int c = C, l = L; c > 0; c--) {
        int s = K_(c, l);
        count[c - 1] = l - s;
        l = s;
    }
#undef B_
#undef K_
    free(best);
    free(cut);
}

strata_status_t st_trainer_pp_cut(strata_trainer_t *t)
{
    const strata_train_config_t *c = &t->cfg;
    int P = t->pp, V = c->vp, C = P * V, L = c->model.n_layer;
    if (!strata_schedule_chunks_ok(c->schedule, V))
        return st_error(STRATA_ERR_INVALID_ARG, "train: the %s schedule does not run with %d chunks "
                        "per stage (--vp: 1 for gpipe, 1f1b and zb-h1; 2 or more for interleaved; "
                        "2 for zb-v)", strata_schedule_name(c->schedule), V);
    if (C > L)
        return st_error(STRATA_ERR_INVALID_ARG, "train: %d stages x %d chunks need at least %d "
                        "layers, the model has %d", P, V, C, L);
    if (V > STRATA_GPT_MAX_CHUNKS)
        return st_error(STRATA_ERR_INVALID_ARG, "train: at most %d chunks per stage",
                        STRATA_GPT_MAX_CHUNKS);
    int *count = calloc((size_t)C, sizeof *count);
    t->stage_layers = calloc((size_t)P, sizeof *t->stage_layers);
    if (!count || !t->stage_layers) {
        free(count);
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    }
    strata_status_t rc = STRATA_OK;
    if (c->pp_layers[0]) { // "3,3,2": layers per chunk, every chunk
        const char *s = c->pp_layers;
        int n = 0, sum = 0;
        while (*s && rc == STRATA_OK) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v < 1 || v > L || n >= C || (*end && *end != ',')) {
                rc = st_error(STRATA_ERR_INVALID_ARG, "train: --pp-layers '%s': expected %d "
                              "positive layer counts separated by commas (one per chunk: %d stages "
                              "x %d chunks), summing to the model's %d layers", c->pp_layers, C,
                              P, V, L);
                break;
            }
            count[n++] = (int)v;
            sum += (int)v;
            s = *end ? end + 1 : end;
        }
        if (rc == STRATA_OK && (n != C || sum != L))
            rc = st_error(STRATA_ERR_INVALID_ARG, "train: --pp-layers '%s' gives %d chunks of %d "
                          "layers in all; expected %d chunks (%d stages x %d) of %d layers",
                          c->pp_layers, n, sum, C, P, V, L);
    } else {
        balance(&c->model, c->seq, C, count);
    }
    for (int ch = 0, at = 0; ch < C && rc == STRATA_OK; ch++) {
        int s = strata_pp_chunk_stage(c->schedule, P, V, ch);
        strata_gpt_layers_t *g = &t->stage_layers[s];
        // A stage's chunks, in layer order (a V puts the later chunks first on the last stages).
        int k = g->n++;
        while (k > 0 && g->begin[k - 1] > at) {
            g->begin[k] = g->begin[k - 1];
            g->end[k] = g->end[k - 1];
            k--;
        }
        g->begin[k] = at;
        g->end[k] = at + count[ch];
        at += count[ch];
    }
    free(count);
    return rc;
}

strata_status_t st_trainer_pp_create(strata_trainer_t *t)
{
    strata_pipeline_config_t pc = {.schedule = t->cfg.schedule, .vstages = t->cfg.vp,
                                   .micro = t->micro, .rows = t->micro_rows, .seq = t->cfg.seq,
                                   .model = t->model};
    return strata_pipeline_create(t->pp_comm, &pc, &t->pipe);
}

/* The tokens and targets of micro-batch mb of this data-parallel rank's rows (filled at the start
 * of the step in t->tokens / t->targets). */
static strata_status_t micro_batch(void *ctx, int mb, const int32_t **tokens,
                                   const int32_t **targets)
{
    strata_trainer_t *t = ctx;
    size_t at = (size_t)mb * t->micro_rows * t->cfg.seq;
    *tokens = t->tokens + at;
    *targets = t->targets + at;
    return STRATA_OK;
}

/* Sums wte's gradient between the embeddings' holder and the head's copy: over the embedding group
 * (first and last stage), or on one model that holds both (one wte, nothing to do). An untied
 * head has its own weight: nothing to sum. */
static strata_status_t tie_embedding(strata_trainer_t *t)
{
    int P = t->pp, V = t->cfg.vp;
    if (!t->embed_comm || strata_model_config(t->model)->untied ||
        strata_pp_chunk_stage(t->cfg.schedule, P, V, P * V - 1) == 0)
        return STRATA_OK; // the head on the embeddings' stage (a V): one wte
    int i = strata_model_find_tensor(t->model, "wte");
    if (i < 0)
        return st_error(STRATA_ERR_INTERNAL, "train: no wte on a stage of the embedding group");
    const strata_tensor_info_t *w = strata_model_tensor(t->model, i);
    float *g = strata_model_grad_arena(t->model) + w->offset;
    return strata_allreduce(t->embed_comm, g, g, w->count, STRATA_DTYPE_F32, STRATA_OP_SUM);
}

/* The last stage's mean loss over the micro-batches, on every rank of the pipeline and TP group. */
static strata_status_t share_loss(strata_trainer_t *t, double sum, float *loss)
{
    double v[1] = {sum / t->micro / t->tp};
    ST_TRY(strata_allreduce(t->pp_comm, v, v, 1, STRATA_DTYPE_F64, STRATA_OP_SUM));
    if (t->tp > 1)
        ST_TRY(strata_allreduce(t->tp_comm, v, v, 1, STRATA_DTYPE_F64, STRATA_OP_SUM));
    *loss = (float)v[0];
    return STRATA_OK;
}

strata_status_t st_trainer_pp_forward_backward(strata_trainer_t *t, float *loss)
{
    const strata_train_config_t *c = &t->cfg;
    int rows = c->batch / t->dp;
    ST_TRY(st_trainer_batch(t, t->step + 1, t->dp_rank * rows, rows, &t->data_wait_s));
    strata_model_zero_grads(t->model);
    double sum = 0;
    ST_TRY(strata_pipeline_step(t->pipe, micro_batch, t, &sum));
    ST_TRY(tie_embedding(t));
    ST_TRY(strata_model_grads_done(t->model));
    return share_loss(t, sum, loss);
}

strata_status_t st_trainer_pp_eval(strata_trainer_t *t, int64_t batch_index, float *loss)
{
    ST_TRY(st_trainer_val_batch(t, batch_index));
    double sum = 0;
    ST_TRY(strata_pipeline_forward(t->pipe, micro_batch, t, &sum));
    return share_loss(t, sum, loss);
}

strata_status_t st_trainer_pp_report(strata_trainer_t *t, strata_step_info_t *s, const char *svg)
{
    int P = t->pp;
    if (!t->pp_bubbles && !(t->pp_bubbles = calloc(2 * (size_t)P, sizeof *t->pp_bubbles)))
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    strata_pipeline_stats_t st = strata_pipeline_stats(t->pipe);
    memset(t->pp_bubbles, 0, 2 * (size_t)P * sizeof *t->pp_bubbles);
    t->pp_bubbles[t->pp_rank] = st.bubble;
    t->pp_bubbles[P + t->pp_rank] = st.bubble_predicted;
    ST_TRY(strata_allreduce(t->pp_comm, t->pp_bubbles, t->pp_bubbles, 2 * (size_t)P,
                            STRATA_DTYPE_F64, STRATA_OP_SUM));
    s->pp_bubble = t->pp_bubbles;
    s->pp_bubble_predicted = t->pp_bubbles + P;
    const strata_pp_bubble_t *b; // this rank's idle time, and the side work done in it
    int nb = strata_pipeline_bubbles(t->pipe, &b);
    for (int i = 0; i < nb; i++)
        s->bubble_s += b[i].dur_s;
    if (t->harvester)
        ST_TRY(st_trainer_harvest_report(t, s));
    for (int i = 0; i < P; i++) {
        s->pp_bubble_mean += t->pp_bubbles[i] / P;
        s->pp_bubble_predicted_mean += t->pp_bubbles[P + i] / P;
    }
    if (!svg)
        return STRATA_OK;
    strata_pp_timeline_t measured, predicted;
    ST_TRY(strata_pipeline_timelines(t->pipe, &measured, &predicted));
    strata_status_t rc = STRATA_OK;
    if (t->rank == 0) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            rc = st_error_errno(STRATA_ERR_IO, errno, "train: cannot write %s", svg);
        } else {
            char top[128], bottom[128];
            snprintf(top, sizeof top, "planned: %s, %d stages x %d chunks, %d micro-batches "
                     "(bubble %.1f%%)", strata_schedule_name(t->cfg.schedule), P, t->cfg.vp,
                     t->micro, 100 * predicted.bubble_mean);
            snprintf(bottom, sizeof bottom, "measured: step %lld (bubble %.1f%%)",
                     (long long)t->step, 100 * measured.bubble_mean);
            rc = strata_pp_timeline_svg(&predicted, top, &measured, bottom, f);
            if (fclose(f) != 0 && rc == STRATA_OK)
                rc = st_error_errno(STRATA_ERR_IO, errno, "train: cannot write %s", svg);
        }
    }
    strata_pp_timeline_free(&measured);
    strata_pp_timeline_free(&predicted);
    return rc;
}
