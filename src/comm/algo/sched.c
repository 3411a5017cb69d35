/* Building and executing schedules (see sched.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/reduce_op.h"
#include "comm/algo/sched.h"

void st_sched_init(st_sched_t *s, strata_dtype_t dtype, strata_op_t op, int nranks)
{
    memset(s, 0, offsetof(st_sched_t, inline_ops));
    s->ops = s->inline_ops;
    s->cap = ST_SCHED_INLINE_OPS;
    s->round_end = s->inline_rounds;
    s->cap_rounds = ST_SCHED_INLINE_ROUNDS;
    s->dtype = dtype;
    s->op = op;
    s->esize = strata_dtype_size(dtype);
    s->nranks = nranks;
}

void st_sched_fini(st_sched_t *s)
{
    if (s->ops != s->inline_ops)
        free(s->ops);
    if (s->round_end != s->inline_rounds)
        free(s->round_end);
    for (int i = 0; i < s->nscratch; i++)
        free(s->scratch[i]);
    s->ops = NULL;
    s->round_end = NULL;
    s->nops = s->nrounds = s->nscratch = 0;
}

/* Grows an array that may still be the inline one (which must not be realloc'd). */
static void *grow(void *arr, const void *inline_arr, int *cap, size_t elem)
{
    int ncap = *cap * 2;
    void *p = arr == inline_arr ? malloc((size_t)ncap * elem) : realloc(arr, (size_t)ncap * elem);
    if (p && arr == inline_arr)
        memcpy(p, arr, (size_t)*cap * elem);
    if (p)
        *cap = ncap;
    return p;
}

static st_sop_t *add(st_sched_t *s, st_sop_kind_t kind)
{
    if (s->build_rc)
        return NULL;
    if (s->nops == s->cap) {
        st_sop_t *ops = grow(s->ops, s->inline_ops, &s->cap, sizeof *ops);
        if (!ops) {
            s->build_rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory building a schedule");
            return NULL;
        }
        s->ops = ops;
    }
    st_sop_t *o = &s->ops[s->nops++];
    memset(o, 0, sizeof *o);
    o->kind = (uint8_t)kind;
    return o;
}

void st_sched_round(st_sched_t *s)
{
    int start = s->nrounds ? s->round_end[s->nrounds - 1] : 0;
    if (s->build_rc || s->nops == start)
        return;
    if (s->nrounds == s->cap_rounds) {
        int *re = grow(s->round_end, s->inline_rounds, &s->cap_rounds, sizeof *re);
        if (!re) {
            s->build_rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory building a schedule");
            return;
        }
        s->round_end = re;
    }
    s->round_end[s->nrounds++] = s->nops;
}

static void add_p2p(st_sched_t *s, st_sop_kind_t kind, int peer, uint32_t tag, void *dst,
                    const void *src, size_t bytes)
{
    st_sop_t *o = add(s, kind);
    if (!o)
        return;
    o->peer = peer;
    o->tag = tag;
    o->dst = dst;
    o->src = src;
    o->bytes = bytes;
}

void st_sched_send(st_sched_t *s, int peer, uint32_t tag, const void *buf, size_t bytes)
{
    add_p2p(s, ST_SOP_SEND, peer, tag, NULL, buf, bytes);
}

void st_sched_recv(st_sched_t *s, int peer, uint32_t tag, void *buf, size_t bytes)
{
    add_p2p(s, ST_SOP_RECV, peer, tag, buf, NULL, bytes);
}

void st_sched_recv_reduce(st_sched_t *s, int peer, uint32_t tag, void *dst, const void *src,
                          size_t bytes)
{
    add_p2p(s, ST_SOP_RECV_REDUCE, peer, tag, dst, src, bytes);
}

void st_sched_copy(st_sched_t *s, void *dst, const void *src, size_t bytes)
{
    if (dst == src || bytes == 0)
        return;
    st_sop_t *o = add(s, ST_SOP_COPY);
    if (o) {
        o->dst = dst;
        o->src = src;
        o->bytes = bytes;
    }
}

void st_sched_reduce(st_sched_t *s, void *dst, const void *a, const void *b, size_t bytes)
{
    st_sop_t *o = add(s, ST_SOP_REDUCE);
    if (o) {
        o->dst = dst;
        o->src = a;
        o->src2 = b;
        o->bytes = bytes;
    }
}

void st_sched_avg(st_sched_t *s, void *buf, size_t bytes)
{
    st_sop_t *o = add(s, ST_SOP_AVG);
    if (o) {
        o->dst = buf;
        o->bytes = bytes;
    }
}

void st_sched_call(st_sched_t *s, st_sched_fn_t fn, void *arg)
{
    st_sop_t *o = add(s, ST_SOP_CALL);
    if (o) {
        o->fn = fn;
        o->dst = arg;
    }
}

void *st_sched_scratch(st_sched_t *s, size_t bytes)
{
    if (s->build_rc)
        return NULL;
    if (s->nscratch == (int)(sizeof s->scratch / sizeof s->scratch[0])) {
        s->build_rc = st_error(STRATA_ERR_INTERNAL, "schedule asked for too many scratch buffers");
        return NULL;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        s->build_rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory for %zu scratch bytes", bytes);
        return NULL;
    }
    s->scratch[s->nscratch++] = p;
    return p;
}

bool st_sched_done(const st_sched_t *s)
{
    return s->started && s->cur >= s->nrounds;
}

static strata_status_t start_round(st_sched_t *s, st_ep_t *ep, const int *world, uint64_t tag_base)
{
    int begin = s->cur ? s->round_end[s->cur - 1] : 0, end = s->round_end[s->cur];
    s->pending = 0;
    for (int i = begin; i < end; i++) {
        st_sop_t *o = &s->ops[i];
        switch (o->kind) {
        case ST_SOP_COPY: memmove(o->dst, o->src, o->bytes); break;
        case ST_SOP_REDUCE:
            st_reduce(s->dtype, s->op, o->dst, o->src, o->src2, o->bytes / s->esize);
            break;
        case ST_SOP_AVG: st_reduce_finish_avg(s->dtype, o->dst, o->bytes / s->esize, s->nranks); break;
        case ST_SOP_CALL: ST_TRY(o->fn(s, ep, world, o->dst)); break;
        default: s->pending++; break;
        }
    }
    // Receives before sends, so a peer's early data finds its receive already posted.
    for (int pass = 0; pass < 2; pass++) {
        for (int i = begin; i < end; i++) {
            st_sop_t *o = &s->ops[i];
            bool is_send = o->kind == ST_SOP_SEND;
            if (o->kind > ST_SOP_RECV_REDUCE || is_send != (pass == 1))
                continue;
            st_msg_t *m = &o->msg;
            memset(m, 0, sizeof *m);
            m->peer = world[o->peer];
            m->tag = tag_base | o->tag;
            m->bytes = o->bytes;
            m->pending = &s->pending;
            m->esize = (uint8_t)s->esize;
            if (is_send) {
                m->sbuf = o->src;
                ST_TRY(st_ep_post_send(ep, m));
            } else {
                m->rbuf = o->dst;
                if (o->kind == ST_SOP_RECV_REDUCE) {
                    m->reduce = true;
                    m->rsrc = o->src;
                    m->dtype = (uint8_t)s->dtype;
                    m->op = (uint8_t)s->op;
                }
                ST_TRY(st_ep_post_recv(ep, m));
            }
        }
    }
    return STRATA_OK;
}

strata_status_t st_sched_step(st_sched_t *s, st_ep_t *ep, const int *world, uint64_t tag_base)
{
    if (!s->started) {
        s->started = true;
        s->cur = 0;
        if (s->nrounds == 0)
            return STRATA_OK;
        ST_TRY(start_round(s, ep, world, tag_base));
    }
    while (s->cur < s->nrounds && s->pending == 0) {
        if (++s->cur < s->nrounds)
            ST_TRY(start_round(s, ep, world, tag_base));
    }
    return s->cur >= s->nrounds ? STRATA_OK : STRATA_INPROGRESS;
}

/* The first message of the current round still in flight, or NULL. */
static const st_sop_t *first_pending(const st_sched_t *s)
{
    if (!s->started || s->cur >= s->nrounds)
        return NULL;
    int begin = s->cur ? s->round_end[s->cur - 1] : 0, end = s->round_end[s->cur];
    for (int i = begin; i < end; i++) {
        const st_sop_t *o = &s->ops[i];
        if (o->kind <= ST_SOP_RECV_REDUCE && o->msg.state != ST_MSG_DONE)
            return o;
    }
    return NULL;
}

void st_sched_describe(const st_sched_t *s, st_ep_t *ep, char *buf, size_t len)
{
    if (!s->started || s->cur >= s->nrounds) {
        snprintf(buf, len, "(not waiting)");
        return;
    }
    const st_sop_t *o = first_pending(s);
    if (!o) {
        snprintf(buf, len, "in round %d of %d", s->cur + 1, s->nrounds);
        return;
    }
    snprintf(buf, len, "in round %d of %d waiting for %s of %zu bytes %s %s", s->cur + 1,
             s->nrounds, o->kind == ST_SOP_SEND ? "a send" : "a receive", o->bytes,
             o->kind == ST_SOP_SEND ? "to" : "from", st_ep_peer_name(ep, o->msg.peer));
}

int st_sched_awaited(const st_sched_t *s)
{
    const st_sop_t *o = first_pending(s);
    return o ? o->msg.peer : -1;
}
