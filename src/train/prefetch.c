/* The loader thread and its bounded queue (train/prefetch.h). One thread fills batches in index
 * order into a ring of `depth` slots while the step computes; the step takes the batch at the head
 * by swapping buffers. A take of any other index (a resume, a caller that skipped) drops the ring
 * and restarts the thread there: the fill is a pure function of the index, so what is dropped is
 * only work, never a batch the step would have seen differently. The fill runs outside the lock; a
 * generation number tells the thread that the batch it just read was dropped meanwhile. An error
 * takes a slot like a batch, so the take that needs that batch, and no earlier one, reports it,
 * and the thread waits instead of reading on. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "train/prefetch.h"

typedef struct slot {
    int64_t index;
    strata_status_t rc; /* the fill's status; its message in q->msg */
    int32_t *tokens, *targets;
} slot_t;

struct st_prefetch {
    int depth;
    size_t n;
    int64_t last;
    st_prefetch_fill_fn fill;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t ready; /* a batch was added (the step waits) */
    pthread_cond_t space; /* a slot was freed, a restart or a stop (the thread waits) */
    slot_t *slot;
    int head, count;      /* the ready batches: slots head, head + 1, ... (mod depth) */
    int64_t next;         /* the index the thread reads next */
    uint64_t gen;         /* bumped by a restart */
    bool failed;          /* a fill failed: the thread waits for a restart */
    bool stop, started;
    pthread_t thread;
    char msg[1024];       /* the failed fill's message */
};

static void *loader(void *arg)
{
    st_prefetch_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && (q->count == q->depth || q->next > q->last || q->failed))
            pthread_cond_wait(&q->space, &q->mu);
        if (q->stop)
            break;
        slot_t *s = &q->slot[(q->head + q->count) % q->depth]; // free: the step holds only ready ones
        int64_t index = q->next;
        uint64_t gen = q->gen;
        int32_t *tokens = s->tokens, *targets = s->targets;
        pthread_mutex_unlock(&q->mu);
        strata_status_t rc = q->fill(q->ctx, index, tokens, targets);
        pthread_mutex_lock(&q->mu);
        if (gen != q->gen) // a restart dropped it
            continue;
        s->index = index;
        s->rc = rc;
        if (rc < 0) {
            snprintf(q->msg, sizeof q->msg, "%s", strata_last_error());
            q->failed = true;
        }
        q->count++;
        q->next++;
        pthread_cond_signal(&q->ready);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

strata_status_t st_prefetch_create(int depth, size_t n, int64_t last, st_prefetch_fill_fn fill,
                                   void *ctx, st_prefetch_t **out)
{
    *out = NULL;
    if (depth < 0 || n == 0 || last < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "data: a loader queue of depth %d, %zu tokens per "
                        "batch, %" PRId64 " batches", depth, n, last);
    st_prefetch_t *q = calloc(1, sizeof *q);
    if (!q || !(q->slot = calloc((size_t)depth + 1, sizeof *q->slot))) {
        free(q);
        return st_error(STRATA_ERR_NO_MEMORY, "data: out of memory");
    }
    q->depth = depth;
    q->n = n;
    q->last = last;
    q->fill = fill;
    q->ctx = ctx;
    q->next = 1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->ready, NULL);
    pthread_cond_init(&q->space, NULL);
    for (int i = 0; i < depth; i++) {
        q->slot[i].tokens = malloc(n * sizeof(int32_t));
        q->slot[i].targets = malloc(n * sizeof(int32_t));
        if (!q->slot[i].tokens || !q->slot[i].targets) {
            st_prefetch_destroy(q);
            return st_error(STRATA_ERR_NO_MEMORY, "data: out of memory for %d batches of %zu "
                            "tokens", depth, n);
        }
    }
    *out = q;
    return STRATA_OK;
}

/* Starts the thread with every signal blocked: the process's signals keep going to the threads
 * that handled them before (the step's thread), and no read is interrupted. */
static strata_status_t start(st_prefetch_t *q)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&q->thread, NULL, loader, q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return st_error_errno(STRATA_ERR_SYSTEM, err, "data: cannot start the loader thread");
    q->started = true;
    return STRATA_OK;
}

strata_status_t st_prefetch_take(st_prefetch_t *q, int64_t index, int32_t **tokens,
                                 int32_t **targets, double *wait_s)
{
    if (index < 1 || index > q->last)
        return st_error(STRATA_ERR_INVALID_ARG, "data: batch %" PRId64 " is outside the run's "
                        "[1, %" PRId64 "]", index, q->last);
    uint64_t t0 = st_now_ns();
    strata_status_t rc = STRATA_OK;
    if (q->depth == 0) {
        rc = q->fill(q->ctx, index, *tokens, *targets);
    } else {
        pthread_mutex_lock(&q->mu);
        if (q->next - q->count != index || (q->failed && q->count == 0)) { // not at the head
            q->gen++;
            q->head = q->count = 0;
            q->next = index;
            q->failed = false;
            pthread_cond_signal(&q->space);
        }
        if (!q->started)
            rc = start(q);
        while (rc == STRATA_OK && q->count == 0)
            pthread_cond_wait(&q->ready, &q->mu);
        if (rc == STRATA_OK) {
            slot_t *s = &q->slot[q->head];
            rc = s->rc;
            if (rc < 0) {
                st_error_set(q->msg);
            } else {
                int32_t *tk = *tokens, *tg = *targets;
                *tokens = s->tokens;
                *targets = s->targets;
                s->tokens = tk;
                s->targets = tg;
            }
            q->head = (q->head + 1) % q->depth;
            q->count--;
            pthread_cond_signal(&q->space);
        }
        pthread_mutex_unlock(&q->mu);
    }
    if (wait_s)
        *wait_s = (double)(st_now_ns() - t0) * 1e-9;
    return rc;
}

void st_prefetch_destroy(st_prefetch_t *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->space);
    pthread_mutex_unlock(&q->mu);
    if (q->started)
        pthread_join(q->thread, NULL);
    for (int i = 0; i < q->depth; i++) {
        free(q->slot[i].tokens);
        free(q->slot[i].targets);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->ready);
    pthread_cond_destroy(&q->space);
    free(q->slot);
    free(q);
}
