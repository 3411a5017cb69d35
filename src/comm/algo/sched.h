/* Schedules: how every collective is expressed and executed.
 *
 * An algorithm does not run; it builds a schedule: rounds of operations (send, receive, receive and
 * reduce, local copy, local reduce). Round k+1 starts when every operation of round k has finished.
 * Within a round, local operations run first (in order), then receives are posted, then sends.
 * The executor advances a schedule without blocking, so every collective is non-blocking for free
 * and several can be in flight at once; the blocking call is start + wait. Building is pure rank
 * arithmetic, which the unit tests check without any communication.
 *
 * Message tags: each p2p operation carries a small algorithm-chosen tag (usually the step number);
 * the executor combines it with the communicator's context id and the collective's sequence number,
 * so concurrent collectives and communicators never confuse their messages.
 */
#ifndef ST_SCHED_H
#define ST_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/endpoint.h"
#include "strata/comm.h"

typedef enum st_sop_kind {
    ST_SOP_SEND,
    ST_SOP_RECV,
    ST_SOP_RECV_REDUCE, /* dst = src op incoming */
    ST_SOP_COPY,        /* dst = src */
    ST_SOP_REDUCE,      /* dst = src op src2 */
    ST_SOP_AVG,         /* dst /= nranks */
    ST_SOP_CALL,        /* fn(s, ep, world, dst): local work that needs the endpoint */
} st_sop_kind_t;

typedef struct st_sched st_sched_t;
/* Local work run by a schedule, with the endpoint and the communicator-to-world rank map. */
typedef strata_status_t (*st_sched_fn_t)(st_sched_t *s, st_ep_t *ep, const int *world, void *arg);

typedef struct st_sop {
    uint8_t kind;
    int peer;            /* communicator rank, p2p only */
    uint32_t tag;        /* algorithm tag, p2p only */
    void *dst;
    const void *src, *src2;
    size_t bytes;
    st_sched_fn_t fn;    /* ST_SOP_CALL only */
    st_msg_t msg;        /* endpoint state while in flight */
} st_sop_t;

#define ST_SCHED_INLINE_OPS    8
#define ST_SCHED_INLINE_ROUNDS 8

struct st_sched {
    st_sop_t *ops;
    int nops, cap;
    int *round_end;      /* ops[round_end[k-1] .. round_end[k]) form round k */
    int nrounds, cap_rounds;
    int cur;             /* round being executed */
    int pending;         /* p2p ops of the current round not yet complete */
    bool started;
    strata_dtype_t dtype;
    strata_op_t op;
    size_t esize;
    int nranks;          /* for AVG */
    void *scratch[4];    /* owned temporary buffers */
    int nscratch;
    strata_status_t build_rc; /* sticky allocation failure while building */
    /* Small schedules (every latency-bound collective) live here: no allocation per call. */
    st_sop_t inline_ops[ST_SCHED_INLINE_OPS];
    int inline_rounds[ST_SCHED_INLINE_ROUNDS];
};

void st_sched_init(st_sched_t *s, strata_dtype_t dtype, strata_op_t op, int nranks);
void st_sched_fini(st_sched_t *s);

/* Builders. Byte counts are multiples of the element size. Zero-byte sends and receives are
 * real messages (barriers rely on them); algorithms skip empty blocks themselves, consistently on
 * both sides. */
void st_sched_send(st_sched_t *s, int peer, uint32_t tag, const void *buf, size_t bytes);
void st_sched_recv(st_sched_t *s, int peer, uint32_t tag, void *buf, size_t bytes);
void st_sched_recv_reduce(st_sched_t *s, int peer, uint32_t tag, void *dst, const void *src,
                          size_t bytes);
void st_sched_copy(st_sched_t *s, void *dst, const void *src, size_t bytes);
void st_sched_reduce(st_sched_t *s, void *dst, const void *a, const void *b, size_t bytes);
void st_sched_avg(st_sched_t *s, void *buf, size_t bytes);
/* Local work: fn(s, ep, world, arg) runs when its round starts; an error fails the schedule. */
void st_sched_call(st_sched_t *s, st_sched_fn_t fn, void *arg);
/* Closes the current round (no-op when it is empty). */
void st_sched_round(st_sched_t *s);
/* A temporary buffer owned by the schedule (freed by fini), or NULL (and build_rc set). */
void *st_sched_scratch(st_sched_t *s, size_t bytes);

/* Execution. `tag_base` is the communicator/sequence part of every message tag; `world` maps
 * communicator ranks to endpoint ranks. step() starts or advances the schedule and returns
 * STRATA_OK when it has finished, STRATA_INPROGRESS while it runs, or an error. */
strata_status_t st_sched_step(st_sched_t *s, st_ep_t *ep, const int *world, uint64_t tag_base);
bool st_sched_done(const st_sched_t *s);

/* Describes what the current round waits for ("receive of 4096 bytes from rank 3 ..."). */
void st_sched_describe(const st_sched_t *s, st_ep_t *ep, char *buf, size_t len);
/* The world rank the schedule waits on first (its current round's first unfinished message), or -1. */
int st_sched_awaited(const st_sched_t *s);

#endif
