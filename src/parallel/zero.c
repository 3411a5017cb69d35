/* The ZeRO data-parallel engine behind include/strata/parallel.h.
 *
 * Everything the engine sends is an "op": the all-gather of one segment's parameters or the reduction
 * of one gradient bucket. An op is a short chain of non-blocking collectives, one per hierarchy level
 * (slow tier first for gathers, fast tier first for reductions; one step when flat). Ranks must start
 * collectives on a communicator in the same order, but the chain's later steps become startable at
 * times that differ between ranks; so each communicator has a FIFO of not-yet-started steps, filled in
 * op creation order (the same on every rank because ops are created by the model's hook calls), and
 * only its head may start. A dependency cycle cannot form: all steps of an op are queued when it is
 * created, so an older op is ahead of a younger one in every queue.
 *
 * progress() tests every started step, finishes completed ones and starts queue heads; every hook
 * calls it, so communication advances while the model computes between hooks. It does not do the
 * model's work, allocate shards or run the optimizer: the caller does. Not thread-safe.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/bf16.h"
#include "parallel/zero_internal.h"
#include "strata/trace.h"

enum { OP_GATHER, OP_REDUCE };
enum { LV_QUEUED, LV_STARTED, LV_DONE };
enum { COLL_AG, COLL_RS, COLL_A2A, COLL_AR };

typedef struct zop zop_t;

/* One collective of an op. */
typedef struct zstep {
    zop_t *op;
    int q;      /* queue = communicator index */
    int level;  /* hierarchy level (block arithmetic) */
    int coll;   /* COLL_* */
    int st;     /* LV_* */
    strata_request_t *req;
    size_t *cnt;            /* counts[size] then displs[size], in units */
    void *qsend, *qrecv;    /* qgZ all-to-all buffers */
    size_t *qcnt;           /* qgZ byte counts / displs: send[2 * size], recv[2 * size] */
    struct zstep *qnext;    /* next in its queue */
} zstep_t;

struct zop {
    int kind;
    int seg;        /* gather: segment; reduce: bucket */
    bool backward;  /* gather: served from the secondary partition */
    bool quant;     /* gather: qwZ bytes; reduce: qgZ all-to-all */
    bool external;  /* gather into a caller buffer (gather_params): no secondary, no free */
    bool own_buf;   /* buf is the op's own allocation (quantised bytes, staging) */
    int nsteps, cur;
    zstep_t step[ST_ZERO_MAX_LEVELS];
    size_t *po;     /* N + 1 unit offsets of the pieces in buf (gathers of quantised bytes, buckets) */
    size_t es;      /* bytes per unit: 1 (qwZ bytes), 2 (bf16 gradients), 4 (floats) */
    unsigned char *buf;
    float *dst;     /* gather: the floats to fill */
    uint64_t id;
    bool done;
    zop_t *next;    /* live list */
};

typedef struct zseg {
    size_t off, count;
    size_t shard_off;       /* my piece's position in pshard / gshard / optimizer state */
    size_t *po;             /* N + 1 piece offsets within the segment (floats) */
    float *sec;             /* stage 3 secondary partition: my tier-0 block */
    size_t sec_off, sec_count;
    bool sec_valid;
    float *gbuf;            /* stage 3: gathered parameters (resident or being gathered) */
    zop_t *gop;             /* gather in flight */
    int gissue_pos;         /* schedule position at which a prefetch was issued (-2 = none) */
    int refs;
    bool ready;
} zseg_t;

typedef struct zqueue {
    zstep_t *head, *tail;
} zqueue_t;

typedef struct zlevel {
    strata_comm_t *comm; /* owned unless it is the world */
    int size, digit;
    size_t R;            /* pieces per block at this level */
} zlevel_t;

struct strata_zero {
    strata_comm_t *world;
    int rank, n, stage, S;
    size_t P, bucket;
    bool qw, qg, bf16, prefetch;
    zseg_t *seg;
    float *params, *grads; /* the model's arenas */
    float *pshard, *gshard;
    size_t shard_count;
    int nlev, idx;
    zlevel_t lv[ST_ZERO_MAX_LEVELS];
    zqueue_t queue[ST_ZERO_MAX_LEVELS + 1];
    int qworld;
    zop_t *live;
    uint64_t next_id;
    strata_status_t err;
    char errmsg[512];
    /* backward */
    int hi_unready, nready, next_bucket, nbuckets;
    zop_t **bop;
    /* stage-3 schedule */
    int *sched; /* 2 * (S + 1) entries: seg * 2 + backward */
    int nsched, pos;
    size_t resident, peak;
    strata_zero_shard_t *shards;
    int nshards;
    bool in_step;
    strata_zero_stats_t stats;
};

/* ---- errors ------------------------------------------------------------------------------------ */

/* Records the first failure; the engine is broken from then on. Returns it. */
static strata_status_t fail(strata_zero_t *z, strata_status_t rc)
{
    if (z->err == STRATA_OK) {
        z->err = rc;
        snprintf(z->errmsg, sizeof z->errmsg, "zero: %s", strata_last_error());
        ST_LOG_DEBUG(ST_SUB_TRAIN, "%s", z->errmsg);
    }
    st_error_set(z->errmsg);
    return z->err;
}

#define ZTRY(z, expr)                                                                              \
    do {                                                                                           \
        strata_status_t zrc_ = (expr);                                                             \
        if (ST_UNLIKELY(zrc_ < 0))                                                                 \
            return fail((z), zrc_);                                                                \
    } while (0)

static strata_status_t check(strata_zero_t *z)
{
    if (!z)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: engine is NULL");
    if (z->err != STRATA_OK) {
        st_error_set(z->errmsg);
        return z->err;
    }
    return STRATA_OK;
}

/* ---- block arithmetic -------------------------------------------------------------------------- */

/* First piece of the block this rank holds *before* a gather step at level i (its own block at this
 * level) and of the range the level spans. */
static size_t lvl_base(const strata_zero_t *z, int i)
{
    size_t span = z->lv[i].R * (size_t)z->lv[i].size;
    return (size_t)z->idx / span * span;
}

/* Fills counts/displs (units) of level i's members from the piece offsets `po`, relative to the
 * level's span. Returns the span's first unit. */
static size_t lvl_blocks(const strata_zero_t *z, int i, const size_t *po, size_t *cnt)
{
    const zlevel_t *l = &z->lv[i];
    size_t base = lvl_base(z, i);
    for (int m = 0; m < l->size; m++) {
        size_t a = base + (size_t)m * l->R, b = a + l->R;
        cnt[m] = po[b] - po[a];
        cnt[l->size + m] = po[a] - po[base];
    }
    return po[base];
}

/* ---- units ------------------------------------------------------------------------------------- */

/* The communicator's dtype for an op's units. */
static strata_dtype_t unit_dtype(const zop_t *op)
{
    return op->es == 1 ? STRATA_DTYPE_U8 : op->es == 2 ? STRATA_DTYPE_BF16 : STRATA_DTYPE_F32;
}

/* Gradients src[0..n) into a bucket's units [at, at + n): copied, or rounded to bf16. */
static void put_grads(zop_t *op, size_t at, const float *src, size_t n)
{
    if (op->es == 2) {
        uint16_t *u = (uint16_t *)op->buf + at;
        for (size_t i = 0; i < n; i++)
            u[i] = st_f32_to_bf16(src[i]);
    } else {
        memcpy((float *)op->buf + at, src, n * sizeof(float));
    }
}

/* A bucket's reduced sums in units [at, at + n), widened to fp32 and scaled (1/N: the average),
 * into dst. */
static void get_grads(const zop_t *op, size_t at, float *dst, size_t n, float scale)
{
    if (op->es == 2) {
        const uint16_t *u = (const uint16_t *)op->buf + at;
        for (size_t i = 0; i < n; i++)
            dst[i] = st_bf16_to_f32(u[i]) * scale;
    } else {
        const float *f = (const float *)op->buf + at;
        for (size_t i = 0; i < n; i++)
            dst[i] = f[i] * scale;
    }
}

/* ---- queues and steps -------------------------------------------------------------------------- */

static const char *step_name(const zop_t *op)
{
    if (op->kind == OP_GATHER)
        return op->backward ? "allgather_bwd" : "allgather_fwd";
    return op->step[0].coll == COLL_AR ? "allreduce_grads" : "reduce_scatter_grads";
}

static strata_status_t start_step(strata_zero_t *z, zstep_t *s)
{
    zop_t *op = s->op;
    const zlevel_t *l = &z->lv[s->level];
    strata_comm_t *comm = s->q == z->qworld ? z->world : l->comm;
    strata_status_t rc = STRATA_OK;
    if (s->coll == COLL_AR) { // fp32: averaged in place; bf16: summed, averaged when widened back
        size_t count = op->po[1];
        rc = strata_iallreduce(comm, op->buf, op->buf, count, unit_dtype(op),
                               op->es == 2 ? STRATA_OP_SUM : STRATA_OP_AVG, &s->req);
        z->stats.bytes_sent_reduce += count * op->es;
    } else {
        s->cnt = malloc(2 * (size_t)l->size * sizeof *s->cnt);
        if (!s->cnt)
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        size_t first = lvl_blocks(z, s->level, op->po, s->cnt);
        unsigned char *span = op->buf + first * op->es;
        size_t mine = s->cnt[l->size + l->digit], my_count = s->cnt[l->digit];
        strata_dtype_t dt = unit_dtype(op);
        if (s->coll == COLL_AG) {
            rc = strata_iallgatherv(comm, span + mine * op->es, span, s->cnt, s->cnt + l->size, dt,
                                    &s->req);
            z->stats.bytes_sent_gather += my_count * op->es;
        } else if (s->coll == COLL_RS) {
            rc = strata_ireduce_scatterv(comm, span, span + mine * op->es, s->cnt, dt, STRATA_OP_SUM,
                                         &s->req);
            size_t total = s->cnt[l->size - 1] + s->cnt[2 * l->size - 1];
            z->stats.bytes_sent_reduce += (total - my_count) * op->es;
        } else { // qgZ: member m's block quantised and sent to m; we receive our block from each
            s->qcnt = malloc(4 * (size_t)l->size * sizeof *s->qcnt);
            if (!s->qcnt)
                return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
            size_t *sc = s->qcnt, *sd = sc + l->size, *rcn = sd + l->size, *rd = rcn + l->size;
            size_t st = 0, rt = 0, qb = strata_zero_qbytes(my_count);
            for (int m = 0; m < l->size; m++) {
                sc[m] = strata_zero_qbytes(s->cnt[m]);
                sd[m] = st;
                st += sc[m];
                rcn[m] = qb;
                rd[m] = rt;
                rt += qb;
            }
            s->qsend = malloc(st ? st : 1);
            s->qrecv = malloc(rt ? rt : 1);
            if (!s->qsend || !s->qrecv)
                return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
            for (int m = 0; m < l->size; m++)
                strata_zero_quantize((float *)span + s->cnt[l->size + m], s->cnt[m],
                                     (unsigned char *)s->qsend + sd[m]);
            rc = strata_ialltoallv(comm, s->qsend, sc, sd, s->qrecv, rcn, rd, STRATA_DTYPE_U8,
                                   &s->req);
            z->stats.bytes_sent_reduce += st - sc[l->digit];
        }
    }
    if (rc < 0)
        return rc;
    s->st = LV_STARTED;
    strata_trace_async_begin("comm", step_name(op), op->id * 8 + (uint64_t)(s - op->step));
    return STRATA_OK;
}

static void free_op(zop_t *op)
{
    for (int i = 0; i < op->nsteps; i++) {
        free(op->step[i].cnt);
        free(op->step[i].qcnt);
        free(op->step[i].qsend);
        free(op->step[i].qrecv);
    }
    if (op->own_buf)
        free(op->buf);
    free(op->po);
    free(op);
}

/* A gather's last step completed: dequantise, cut the secondary partition. */
static void finish_gather(strata_zero_t *z, zop_t *op)
{
    zseg_t *sg = &z->seg[op->seg];
    if (op->quant)
        for (int p = 0; p < z->n; p++)
            strata_zero_dequantize(op->buf + op->po[p], sg->po[p + 1] - sg->po[p],
                                   op->dst + sg->po[p], false);
    if (z->stage == 3 && !op->external && !op->backward && sg->sec) {
        memcpy(sg->sec, op->dst + sg->sec_off, sg->sec_count * sizeof(float));
        sg->sec_valid = true;
    }
}

/* A bucket's last step completed. All-reduce: fp32 is done (averaged in place); bf16 sums are
 * widened back into the arena, averaged. Reduce-scatter: our piece of each segment in it, averaged,
 * into gshard. */
static void finish_reduce(strata_zero_t *z, zop_t *op)
{
    size_t hi = z->P - (size_t)op->seg * z->bucket, lo = hi > z->bucket ? hi - z->bucket : 0;
    float inv = 1.0f / (float)z->n;
    if (op->step[0].coll == COLL_AR) {
        if (op->es == 2)
            get_grads(op, 0, z->grads + lo, hi - lo, inv);
        return;
    }
    size_t at = op->po[z->idx];
    for (int s = 0; s < z->S; s++) {
        zseg_t *sg = &z->seg[s];
        size_t a = ST_MAX(lo, sg->off + sg->po[z->idx]), b = ST_MIN(hi, sg->off + sg->po[z->idx + 1]);
        if (a >= b)
            continue;
        get_grads(op, at, z->gshard + sg->shard_off + (a - sg->off - sg->po[z->idx]), b - a, inv);
        at += b - a;
    }
}

/* Step s of its op completed (its request is released). */
static strata_status_t step_done(strata_zero_t *z, zstep_t *s)
{
    zop_t *op = s->op;
    s->st = LV_DONE;
    s->req = NULL;
    strata_trace_async_end("comm", step_name(op), op->id * 8 + (uint64_t)(s - op->step));
    if (s->coll == COLL_A2A) { // sum what the members sent us (our own block stays exact)
        const zlevel_t *l = &z->lv[s->level];
        size_t first = lvl_blocks(z, s->level, op->po, s->cnt);
        float *mine = (float *)op->buf + first + s->cnt[l->size + l->digit];
        size_t cnt = s->cnt[l->digit], *rd = s->qcnt + 3 * (size_t)l->size;
        for (int m = 0; m < l->size; m++)
            if (m != l->digit)
                strata_zero_dequantize((unsigned char *)s->qrecv + rd[m], cnt, mine, true);
    }
    if (++op->cur == op->nsteps) {
        op->done = true;
        if (op->kind == OP_GATHER)
            finish_gather(z, op);
        else
            finish_reduce(z, op);
    }
    return STRATA_OK;
}

/* Queues an op's steps and starts what can start. */
static void enqueue(strata_zero_t *z, zop_t *op)
{
    op->id = ++z->next_id;
    op->next = z->live;
    z->live = op;
    for (int i = 0; i < op->nsteps; i++) {
        zstep_t *s = &op->step[i];
        s->op = op;
        s->st = LV_QUEUED;
        zqueue_t *q = &z->queue[s->q];
        if (q->tail)
            q->tail->qnext = s;
        else
            q->head = s;
        q->tail = s;
    }
}

/* Starts queue heads whose previous step is done; tests started steps. Never blocks. */
static strata_status_t progress(strata_zero_t *z)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (int qi = 0; qi <= z->nlev; qi++) {
            zqueue_t *q = &z->queue[qi];
            while (q->head && q->head->op->cur == q->head - q->head->op->step) {
                zstep_t *s = q->head;
                q->head = s->qnext;
                if (!q->head)
                    q->tail = NULL;
                s->qnext = NULL;
                ST_TRY(start_step(z, s));
                moved = true;
            }
        }
        for (zop_t *op = z->live; op; op = op->next) {
            if (op->done)
                continue;
            zstep_t *s = &op->step[op->cur];
            if (s->st != LV_STARTED)
                continue;
            bool done = false;
            strata_status_t rc = strata_request_test(s->req, &done);
            if (done)
                s->req = NULL;
            ST_TRY(rc);
            if (done) {
                ST_TRY(step_done(z, s));
                moved = true;
            }
        }
    }
    return STRATA_OK;
}

/* Blocks (sleeping inside the communicator, not spinning) until op is done. */
static strata_status_t wait_op(strata_zero_t *z, zop_t *op)
{
    for (;;) {
        ST_TRY(progress(z));
        if (op->done)
            return STRATA_OK;
        zstep_t *s = &op->step[op->cur];
        if (s->st != LV_STARTED) { // queued behind another op's step: wait for the oldest started
            s = NULL;
            for (zop_t *o = z->live; o; o = o->next)
                if (!o->done && o->step[o->cur].st == LV_STARTED)
                    s = &o->step[o->cur];
            if (!s)
                return st_error(STRATA_ERR_INTERNAL, "zero: op %llu cannot progress",
                                (unsigned long long)op->id);
        }
        strata_status_t rc = strata_request_wait(s->req);
        s->req = NULL;
        ST_TRY(rc);
        ST_TRY(step_done(z, s));
    }
}

/* Drops completed ops from the live list (op must not be referenced any more). */
static void reap(strata_zero_t *z, zop_t *op)
{
    for (zop_t **p = &z->live; *p; p = &(*p)->next)
        if (*p == op) {
            *p = op->next;
            free_op(op);
            return;
        }
}

static strata_status_t wait_all(strata_zero_t *z)
{
    for (zop_t *op = z->live; op; op = op->next)
        ST_TRY(wait_op(z, op));
    return STRATA_OK;
}

/* ---- gathers ----------------------------------------------------------------------------------- */

/* Starts the gather of segment s into dst (floats, count of the segment). Forward: every level, slow
 * tier first, from the primary shard (stage 3) or the arena (stages 1-2, dst = the arena). Backward
 * (stage 3 with a valid secondary): level 0 only, from the secondary partition. */
static strata_status_t start_gather(strata_zero_t *z, int s, bool backward, float *dst,
                                    bool external, zop_t **out)
{
    zseg_t *sg = &z->seg[s];
    zop_t *op = calloc(1, sizeof *op);
    if (!op)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    op->kind = OP_GATHER;
    op->seg = s;
    op->external = external;
    op->backward = backward && sg->sec_valid && z->nlev > 1;
    op->quant = z->qw && !op->backward && !external;
    op->dst = dst;
    size_t mine_off = sg->po[z->idx], mine = sg->po[z->idx + 1] - mine_off;
    const float *src = z->stage == 3 ? z->pshard + sg->shard_off : NULL;
    if (op->quant) {
        op->es = 1;
        op->po = malloc(((size_t)z->n + 1) * sizeof *op->po);
        if (!op->po) {
            free(op);
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        }
        op->po[0] = 0;
        for (int p = 0; p < z->n; p++)
            op->po[p + 1] = op->po[p] + strata_zero_qbytes(sg->po[p + 1] - sg->po[p]);
        op->buf = malloc(op->po[z->n] ? op->po[z->n] : 1);
        op->own_buf = true;
        if (!op->buf) {
            free(op->po);
            free(op);
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        }
        strata_zero_quantize(src, mine, op->buf + op->po[z->idx]);
    } else {
        op->es = sizeof(float);
        op->buf = (unsigned char *)dst;
        op->po = malloc(((size_t)z->n + 1) * sizeof *op->po);
        if (!op->po) {
            free(op);
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        }
        memcpy(op->po, sg->po, ((size_t)z->n + 1) * sizeof *op->po);
        if (op->backward)
            memcpy(dst + sg->sec_off, sg->sec, sg->sec_count * sizeof(float));
        else if (src)
            memcpy(dst + mine_off, src, mine * sizeof(float));
    }
    int top = op->backward ? 0 : z->nlev - 1;
    for (int i = top; i >= 0; i--) {
        zstep_t *st = &op->step[op->nsteps++];
        st->level = i;
        st->q = i;
        st->coll = COLL_AG;
    }
    z->stats.gathers_issued++;
    if (op->backward)
        z->stats.gathers_secondary++;
    enqueue(z, op);
    *out = op;
    return progress(z);
}

/* ---- gradient buckets -------------------------------------------------------------------------- */

static strata_status_t start_bucket(strata_zero_t *z, int b)
{
    size_t hi = z->P - (size_t)b * z->bucket, lo = hi > z->bucket ? hi - z->bucket : 0;
    zop_t *op = calloc(1, sizeof *op);
    if (!op)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    op->kind = OP_REDUCE;
    op->seg = b;
    op->es = z->bf16 ? 2 : sizeof(float);
    op->po = calloc((size_t)z->n + 1, sizeof *op->po);
    // fp32 at stages 0-1 reduces in place in the arena; everything else needs an own buffer
    op->own_buf = z->bf16 || z->stage >= 2;
    op->buf = op->own_buf ? malloc((hi - lo) * op->es + 1) : (unsigned char *)(z->grads + lo);
    if (!op->po || !op->buf) {
        free_op(op);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    }
    if (z->stage <= 1) { // all-reduce the bucket (in place, or its bf16 copy)
        if (z->bf16)
            put_grads(op, 0, z->grads + lo, hi - lo);
        op->po[1] = hi - lo;
        op->nsteps = 1;
        op->step[0] = (zstep_t){.q = z->qworld, .level = 0, .coll = COLL_AR};
    } else { // pack piece-major into a staging buffer, then reduce-scatter level by level
        for (int p = 0; p < z->n; p++) {
            op->po[p + 1] = op->po[p];
            for (int s = 0; s < z->S; s++) {
                zseg_t *sg = &z->seg[s];
                size_t a = ST_MAX(lo, sg->off + sg->po[p]), e = ST_MIN(hi, sg->off + sg->po[p + 1]);
                if (a >= e)
                    continue;
                put_grads(op, op->po[p + 1], z->grads + a, e - a);
                op->po[p + 1] += e - a;
            }
        }
        op->quant = z->qg;
        for (int i = 0; i < z->nlev; i++)
            op->step[op->nsteps++] =
                (zstep_t){.q = i, .level = i, .coll = z->qg ? COLL_A2A : COLL_RS};
    }
    z->stats.buckets_issued++;
    if (z->nready < z->S)
        z->stats.buckets_before_last++;
    enqueue(z, op);
    z->bop[b] = op;
    return STRATA_OK;
}

/* ---- creation ---------------------------------------------------------------------------------- */

strata_zero_config_t strata_zero_config_default(void)
{
    strata_zero_config_t c;
    memset(&c, 0, sizeof c);
    c.prefetch = true;
    return c;
}

static strata_status_t validate(strata_comm_t *comm, const strata_zero_config_t *cfg, float *params,
                                float *grads)
{
    if (!comm || !cfg || !grads || (!params && cfg->nparams))
        return st_error(STRATA_ERR_INVALID_ARG, "zero: comm, cfg, params and grads are required");
    if (cfg->stage < 0 || cfg->stage > 3)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: stage %d (want 0..3)", cfg->stage);
    if (cfg->nsegments < 1 || !cfg->segments)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: at least one segment is required");
    size_t at = 0;
    for (int s = 0; s < cfg->nsegments; s++) {
        if (cfg->segments[s].offset != at)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "zero: segment %d starts at %zu, want %zu (contiguous, forward order)", s,
                            cfg->segments[s].offset, at);
        at += cfg->segments[s].count;
    }
    if (at != cfg->nparams)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: segments cover %zu floats, nparams is %zu",
                        at, cfg->nparams);
    if (cfg->head_segment < 0 || cfg->head_segment >= cfg->nsegments)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: head segment %d outside the %d segments",
                        cfg->head_segment, cfg->nsegments);
    if (cfg->ntiers < 0 || cfg->ntiers > STRATA_ZERO_MAX_TIERS)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: ntiers %d (want 0..%d)", cfg->ntiers,
                        STRATA_ZERO_MAX_TIERS);
    if (cfg->ntiers > 0 && cfg->stage == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: tiers need stage 1, 2 or 3");
    if (cfg->quant_weights && cfg->stage != 3)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: quant_weights (qwZ) needs stage 3");
    if (cfg->quant_grads && cfg->stage < 2)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: quant_grads (qgZ) needs stage 2 or 3");
    if (cfg->quant_grads && cfg->bf16_grads)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: bf16_grads and quant_grads (qgZ) are two "
                        "gradient encodings (qgZ already sends int8); choose one");
    return STRATA_OK;
}

static strata_status_t setup_levels(strata_zero_t *z, const strata_zero_config_t *cfg)
{
    st_zero_layout_t lay;
    if (cfg->ntiers == 0) {
        ST_TRY(st_zero_layout(z->n, 0, NULL, z->rank, &lay));
    } else {
        int *all = malloc((size_t)z->n * (size_t)cfg->ntiers * sizeof *all);
        if (!all)
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        strata_status_t rc = strata_allgather(z->world, cfg->tier_colors, all, (size_t)cfg->ntiers,
                                              STRATA_DTYPE_I32);
        if (rc >= 0)
            rc = st_zero_layout(z->n, cfg->ntiers, all, z->rank, &lay);
        free(all);
        ST_TRY(rc);
    }
    z->nlev = lay.nlevels;
    z->idx = lay.idx;
    size_t R = 1;
    for (int i = z->nlev - 1; i >= 0; i--) {
        z->lv[i].size = lay.size[i];
        z->lv[i].digit = lay.digit[i];
        z->lv[i].R = R;
        R *= (size_t)lay.size[i];
    }
    if (z->nlev == 1) {
        z->lv[0].comm = z->world;
        z->qworld = 0;
        return STRATA_OK;
    }
    z->qworld = z->nlev;
    for (int i = 0; i < z->nlev; i++) {
        ST_TRY(strata_comm_split(z->world, lay.color[i], lay.digit[i], &z->lv[i].comm));
        if (strata_comm_rank(z->lv[i].comm) != lay.digit[i] ||
            strata_comm_size(z->lv[i].comm) != lay.size[i])
            return st_error(STRATA_ERR_INTERNAL, "zero: level %d communicator mismatch", i);
    }
    return STRATA_OK;
}

strata_status_t strata_zero_create(strata_comm_t *comm, const strata_zero_config_t *cfg,
                                   float *params, float *grads, strata_zero_t **out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: out is NULL");
    *out = NULL;
    ST_TRY(validate(comm, cfg, params, grads));
    strata_zero_t *z = calloc(1, sizeof *z);
    if (!z)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    strata_status_t rc = STRATA_OK;
    z->world = comm;
    z->rank = strata_comm_rank(comm);
    z->n = strata_comm_size(comm);
    z->stage = cfg->stage;
    z->S = cfg->nsegments;
    z->P = cfg->nparams;
    z->bucket = cfg->bucket_count ? cfg->bucket_count
                                  : (size_t)st_knob_int("STRATA_ZERO_BUCKET", 4 << 20);
    if (z->bucket == 0)
        z->bucket = 4 << 20;
    z->qw = cfg->quant_weights;
    z->qg = cfg->quant_grads;
    z->bf16 = cfg->bf16_grads;
    z->prefetch = cfg->prefetch;
    z->params = params;
    z->grads = grads;
    ST_TRY_GOTO(setup_levels(z, cfg), rc, fail_out);
    z->seg = calloc((size_t)z->S, sizeof *z->seg);
    z->nbuckets = (int)((z->P + z->bucket - 1) / z->bucket);
    z->bop = calloc((size_t)z->nbuckets + 1, sizeof *z->bop);
    z->shards = calloc((size_t)z->S, sizeof *z->shards);
    z->nsched = 2 * (z->S + 1);
    z->sched = malloc((size_t)z->nsched * sizeof *z->sched);
    if (!z->seg || !z->bop || !z->shards || !z->sched) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        goto fail_out;
    }
    // The model's order of acquires: forward 0..S-1, head H; backward head H, S-1..0.
    int k = 0;
    for (int s = 0; s < z->S; s++)
        z->sched[k++] = 2 * s;
    z->sched[k++] = 2 * cfg->head_segment;
    z->sched[k++] = 2 * cfg->head_segment + 1;
    for (int s = z->S - 1; s >= 0; s--)
        z->sched[k++] = 2 * s + 1;
    size_t shard = 0;
    for (int s = 0; s < z->S; s++) {
        zseg_t *sg = &z->seg[s];
        sg->off = cfg->segments[s].offset;
        sg->count = cfg->segments[s].count;
        sg->gissue_pos = -2;
        sg->po = malloc(((size_t)z->n + 1) * sizeof *sg->po);
        if (!sg->po) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory");
            goto fail_out;
        }
        for (int p = 0; p <= z->n; p++)
            sg->po[p] = p == z->n ? sg->count : st_zero_piece_off(sg->count, z->n, p);
        sg->shard_off = shard;
        shard += sg->po[z->idx + 1] - sg->po[z->idx];
        if (z->stage == 3 && z->nlev > 1) { // secondary partition: my block at level 0
            size_t b0 = lvl_base(z, 0) + (size_t)z->lv[0].digit * z->lv[0].R;
            sg->sec_off = sg->po[b0];
            sg->sec_count = sg->po[b0 + z->lv[0].R] - sg->sec_off;
            sg->sec = malloc(sg->sec_count * sizeof(float) + 1);
            if (!sg->sec) {
                rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory");
                goto fail_out;
            }
        }
    }
    z->shard_count = z->stage == 0 ? z->P : shard;
    if (z->stage >= 2) {
        z->gshard = calloc(shard + 1, sizeof(float));
        if (!z->gshard) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory");
            goto fail_out;
        }
    }
    if (z->stage == 3) {
        z->pshard = malloc((shard + 1) * sizeof(float));
        if (!z->pshard) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory");
            goto fail_out;
        }
        for (int s = 0; s < z->S; s++) {
            zseg_t *sg = &z->seg[s];
            memcpy(z->pshard + sg->shard_off, params + sg->off + sg->po[z->idx],
                   (sg->po[z->idx + 1] - sg->po[z->idx]) * sizeof(float));
        }
        z->params = NULL; // never touched again
    }
    z->hi_unready = z->S - 1;
    ST_LOG_INFO(ST_SUB_TRAIN,
                "zero: stage %d, %zu params in %d segments, %d ranks, %d levels, piece %d, "
                "bucket %zu, shard %zu",
                z->stage, z->P, z->S, z->n, z->nlev, z->idx, z->bucket, z->shard_count);
    *out = z;
    return STRATA_OK;
fail_out:
    strata_zero_destroy(z);
    return rc;
}

void strata_zero_destroy(strata_zero_t *z)
{
    if (!z)
        return;
    while (z->live) {
        zop_t *op = z->live;
        z->live = op->next;
        free_op(op);
    }
    if (z->seg)
        for (int s = 0; s < z->S; s++) {
            free(z->seg[s].po);
            free(z->seg[s].sec);
            free(z->seg[s].gbuf);
        }
    for (int i = 0; i < z->nlev; i++)
        if (z->lv[i].comm && z->lv[i].comm != z->world)
            strata_comm_destroy(z->lv[i].comm);
    free(z->seg);
    free(z->bop);
    free(z->shards);
    free(z->sched);
    free(z->pshard);
    free(z->gshard);
    free(z);
}

/* ---- hooks ------------------------------------------------------------------------------------- */

strata_status_t strata_zero_progress(strata_zero_t *z)
{
    ST_TRY(check(z));
    ZTRY(z, progress(z));
    return STRATA_OK;
}

/* Stage 3: a gathered buffer for segment s, gather started (or resident). */
static strata_status_t fetch(strata_zero_t *z, int s, bool backward, int issue_pos)
{
    zseg_t *sg = &z->seg[s];
    if (sg->gbuf)
        return STRATA_OK;
    sg->gbuf = malloc(sg->count * sizeof(float) + 1);
    if (!sg->gbuf)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    z->resident += sg->count;
    z->peak = ST_MAX(z->peak, z->resident);
    sg->gissue_pos = issue_pos;
    return start_gather(z, s, backward, sg->gbuf, false, &sg->gop);
}

static strata_status_t finish_fetch(strata_zero_t *z, int s)
{
    zseg_t *sg = &z->seg[s];
    if (!sg->gop)
        return STRATA_OK;
    ST_TRY(wait_op(z, sg->gop));
    reap(z, sg->gop);
    sg->gop = NULL;
    return STRATA_OK;
}

strata_status_t strata_zero_acquire(void *ctx, int seg, bool backward, const float **params)
{
    strata_zero_t *z = ctx;
    ST_TRY(check(z));
    if (seg < 0 || seg >= z->S || !params)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: acquire of segment %d (have %d)", seg, z->S);
    zseg_t *sg = &z->seg[seg];
    ZTRY(z, progress(z));
    if (z->stage < 3) {
        if (sg->gop) { // stages 1-2: this segment's share of the parameter all-gather
            if (!sg->gop->done)
                z->stats.gathers_waited++;
            ZTRY(z, finish_fetch(z, seg));
        }
        *params = z->params + sg->off;
        return STRATA_OK;
    }
    // Where are we in the model's order? (-1: off the expected order; no prefetch then)
    int want = 2 * seg + (backward ? 1 : 0), here = -1;
    for (int p = z->pos; p < z->nsched; p++)
        if (z->sched[p] == want) {
            here = p;
            break;
        }
    if (here >= 0)
        z->pos = here + 1;
    if (sg->gop && !sg->gop->done)
        z->stats.gathers_waited++;
    if (!sg->gbuf)
        ZTRY(z, fetch(z, seg, backward, -2));
    else if (sg->gissue_pos != -2) { // served by a prefetch
        uint64_t dist = (uint64_t)(here - sg->gissue_pos);
        if (here >= 0 && dist > z->stats.max_prefetch_distance)
            z->stats.max_prefetch_distance = dist;
        sg->gissue_pos = -2;
    }
    // Prefetch the next segment in the order before we block on this one.
    if (z->prefetch && here >= 0 && here + 1 < z->nsched) {
        int nx = z->sched[here + 1] / 2;
        if (!z->seg[nx].gbuf) {
            ZTRY(z, fetch(z, nx, z->sched[here + 1] & 1, here));
            z->stats.gathers_prefetched++;
        }
    }
    if (sg->gop) {
        strata_trace_begin("wait", "wait_gather");
        strata_status_t rc = finish_fetch(z, seg);
        strata_trace_end("wait", "wait_gather");
        ZTRY(z, rc);
    }
    sg->refs++;
    *params = sg->gbuf;
    return STRATA_OK;
}

strata_status_t strata_zero_release(void *ctx, int seg, bool backward)
{
    strata_zero_t *z = ctx;
    (void)backward;
    ST_TRY(check(z));
    if (seg < 0 || seg >= z->S)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: release of segment %d (have %d)", seg, z->S);
    ZTRY(z, progress(z));
    if (z->stage < 3)
        return STRATA_OK;
    zseg_t *sg = &z->seg[seg];
    if (sg->refs <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: release of segment %d not acquired", seg);
    if (--sg->refs > 0)
        return STRATA_OK;
    bool next_same = z->pos < z->nsched && z->sched[z->pos] / 2 == seg;
    if (!next_same && !sg->gop) { // FSDP-style: free the gathered copy
        free(sg->gbuf);
        sg->gbuf = NULL;
        z->resident -= sg->count;
    }
    return STRATA_OK;
}

strata_status_t strata_zero_grad_ready(void *ctx, int seg)
{
    strata_zero_t *z = ctx;
    ST_TRY(check(z));
    if (seg < 0 || seg >= z->S)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: grad_ready of segment %d (have %d)", seg,
                        z->S);
    zseg_t *sg = &z->seg[seg];
    if (sg->ready)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: grad_ready of segment %d twice in a step",
                        seg);
    sg->ready = true;
    z->nready++;
    while (z->hi_unready >= 0 && z->seg[z->hi_unready].ready)
        z->hi_unready--;
    size_t frontier = z->hi_unready >= 0
                          ? z->seg[z->hi_unready].off + z->seg[z->hi_unready].count
                          : 0;
    // Bucket b spans [P - (b+1) * bucket, P - b * bucket): start every one now entirely final.
    while (z->next_bucket < z->nbuckets) {
        size_t hi = z->P - (size_t)z->next_bucket * z->bucket;
        size_t lo = hi > z->bucket ? hi - z->bucket : 0;
        if (lo < frontier)
            break;
        ZTRY(z, start_bucket(z, z->next_bucket));
        z->next_bucket++;
    }
    ZTRY(z, progress(z));
    return STRATA_OK;
}

strata_zero_hooks_t strata_zero_hooks(strata_zero_t *z)
{
    return (strata_zero_hooks_t){z, strata_zero_acquire, strata_zero_release,
                                 strata_zero_grad_ready};
}

/* ---- step -------------------------------------------------------------------------------------- */

size_t strata_zero_state_count(const strata_zero_t *z)
{
    return z ? z->shard_count : 0;
}

int strata_zero_ranges(strata_zero_t *z, strata_zero_shard_t *out, int max)
{
    if (!z)
        return 0;
    int k = 0;
    if (z->stage == 0) {
        if (max > 0)
            out[0] = (strata_zero_shard_t){0, z->P, 0, z->params, NULL};
        return 1;
    }
    for (int s = 0; s < z->S; s++) {
        zseg_t *sg = &z->seg[s];
        size_t off = sg->off + sg->po[z->idx], cnt = sg->po[z->idx + 1] - sg->po[z->idx];
        if (cnt == 0)
            continue;
        if (k < max)
            out[k] = (strata_zero_shard_t){off, cnt, sg->shard_off,
                                           z->stage == 3 ? z->pshard + sg->shard_off
                                                         : z->params + off,
                                           NULL};
        k++;
    }
    return k;
}

strata_status_t strata_zero_step_begin(strata_zero_t *z, const strata_zero_shard_t **shards,
                                       int *nshards)
{
    ST_TRY(check(z));
    if (!shards || !nshards)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: step_begin needs shards and nshards");
    if (z->nready != z->S)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "zero: step_begin after %d of %d grad_ready calls", z->nready, z->S);
    strata_trace_begin("wait", "wait_grads");
    strata_status_t rc = STRATA_OK;
    for (int b = 0; b < z->nbuckets && rc >= 0; b++)
        if (z->bop[b]) {
            rc = wait_op(z, z->bop[b]);
            if (rc >= 0) {
                reap(z, z->bop[b]);
                z->bop[b] = NULL;
            }
        }
    strata_trace_end("wait", "wait_grads");
    ZTRY(z, rc);
    int k = 0;
    if (z->stage == 0) {
        z->shards[k++] = (strata_zero_shard_t){0, z->P, 0, z->params, z->grads};
    } else {
        for (int s = 0; s < z->S; s++) {
            zseg_t *sg = &z->seg[s];
            size_t off = sg->off + sg->po[z->idx], cnt = sg->po[z->idx + 1] - sg->po[z->idx];
            if (cnt == 0)
                continue;
            strata_zero_shard_t *sh = &z->shards[k++];
            sh->offset = off;
            sh->count = cnt;
            sh->state_offset = sg->shard_off;
            sh->params = z->stage == 3 ? z->pshard + sg->shard_off : z->params + off;
            sh->grads = z->stage >= 2 ? z->gshard + sg->shard_off : z->grads + off;
        }
    }
    z->nshards = k;
    z->in_step = true;
    *shards = z->shards;
    *nshards = k;
    return STRATA_OK;
}

strata_status_t strata_zero_allreduce_f64(strata_zero_t *z, double *vals, int n)
{
    ST_TRY(check(z));
    if (n < 0 || (n > 0 && !vals))
        return st_error(STRATA_ERR_INVALID_ARG, "zero: allreduce_f64 of %d values", n);
    ZTRY(z, wait_all(z)); // keep the world's collective order identical on every rank
    ZTRY(z, strata_allreduce(z->world, vals, vals, (size_t)n, STRATA_DTYPE_F64, STRATA_OP_SUM));
    return STRATA_OK;
}

strata_status_t strata_zero_grad_norm(strata_zero_t *z, double *norm)
{
    ST_TRY(check(z));
    if (!z->in_step || !norm)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: grad_norm outside step_begin/step_end");
    double ss = 0.0;
    for (int i = 0; i < z->nshards; i++)
        for (size_t j = 0; j < z->shards[i].count; j++)
            ss += (double)z->shards[i].grads[j] * z->shards[i].grads[j];
    if (z->stage > 0) // stage 0: every rank holds every gradient already
        ST_TRY(strata_zero_allreduce_f64(z, &ss, 1));
    *norm = sqrt(ss);
    return STRATA_OK;
}

strata_status_t strata_zero_step_end(strata_zero_t *z)
{
    ST_TRY(check(z));
    if (!z->in_step)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: step_end without step_begin");
    z->in_step = false;
    for (int s = 0; s < z->S; s++) {
        z->seg[s].ready = false;
        z->seg[s].sec_valid = false;
    }
    z->nready = 0;
    z->hi_unready = z->S - 1;
    z->next_bucket = 0;
    z->pos = 0;
    if (z->stage == 1 || z->stage == 2) { // the updated shards back into every arena
        for (int s = 0; s < z->S; s++)
            ZTRY(z, start_gather(z, s, false, z->params + z->seg[s].off, false, &z->seg[s].gop));
    } else if (z->stage == 3) {
        for (int s = 0; s < z->S; s++)
            if (z->seg[s].gbuf) { // the model kept one acquired: stale now
                ZTRY(z, finish_fetch(z, s));
                free(z->seg[s].gbuf);
                z->seg[s].gbuf = NULL;
                z->resident -= z->seg[s].count;
                z->seg[s].refs = 0;
            }
        if (z->prefetch) {
            ZTRY(z, fetch(z, 0, false, -1));
            z->stats.gathers_prefetched++;
        }
    }
    return STRATA_OK;
}

strata_status_t strata_zero_sync(strata_zero_t *z)
{
    ST_TRY(check(z));
    for (int s = 0; s < z->S; s++)
        if (z->seg[s].gop)
            ZTRY(z, finish_fetch(z, s));
    ZTRY(z, wait_all(z));
    return STRATA_OK;
}

strata_status_t strata_zero_gather_params(strata_zero_t *z, float *out)
{
    ST_TRY(check(z));
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "zero: gather_params into NULL");
    ST_TRY(strata_zero_sync(z));
    if (z->stage < 3) {
        memcpy(out, z->params, z->P * sizeof(float));
        return STRATA_OK;
    }
    for (int s = 0; s < z->S; s++) {
        zop_t *op;
        ZTRY(z, start_gather(z, s, false, out + z->seg[s].off, true, &op));
        ZTRY(z, wait_op(z, op));
        reap(z, op);
    }
    return STRATA_OK;
}

strata_zero_stats_t strata_zero_stats(const strata_zero_t *z)
{
    strata_zero_stats_t s = z ? z->stats : (strata_zero_stats_t){0};
    if (z)
        s.peak_gathered_floats = z->peak;
    return s;
}
