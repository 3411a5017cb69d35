/* Mailboxes: small blocking allreduces among the ranks of one host (see mailbox.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/base.h"
#include "comm/algo/reduce_op.h"
#include "comm/comm_internal.h"
#include "comm/mailbox.h"
#include "comm/window.h"

#define SLOT_HEAD 8     /* the call number; the data follows in the same cache line */
#define FAST_POLLS 128  /* polls before the endpoint's wait (which progresses, sleeps, times out) */

/* One slot: the number of the call whose contribution it holds, then the contribution. */
typedef struct slot {
    _Alignas(64) atomic_uint_least64_t call;
    char data[];
} slot_t;

struct st_mailbox {
    bool off;             /* some rank could not set up: this communicator never uses them */
    size_t slot_bytes;    /* one slot, whole cache lines */
    char *mine;           /* this rank's region (strata_mem_alloc memory), two slots */
    char *box[ST_MAILBOX_MAX_RANKS]; /* every rank's region as mapped here (own: mine) */
    size_t mapped_bytes[ST_MAILBOX_MAX_RANKS];
    uint64_t calls;       /* calls so far on this communicator */
};

static size_t max_bytes;
static pthread_once_t max_once = PTHREAD_ONCE_INIT;

static void read_max(void)
{
    long long v = st_knob_int("STRATA_SHM_MAILBOX", 1024);
    max_bytes = v > 0 ? (size_t)ST_MIN(v, 64 << 10) : 0;
}

bool st_mailbox_serves(const strata_comm_t *comm, size_t bytes)
{
    pthread_once(&max_once, read_max);
    return bytes > 0 && bytes <= max_bytes && comm->nranks >= 2 &&
           comm->nranks <= ST_MAILBOX_MAX_RANKS && !(comm->mailbox && comm->mailbox->off) &&
           st_ep_single_host(comm->sh->ep) && !st_algo_forced(STRATA_COLL_ALLREDUCE);
}

static slot_t *slot_of(const st_mailbox_t *mb, int rank, uint64_t call)
{
    return (slot_t *)(mb->box[rank] + (call & 1) * mb->slot_bytes);
}

void st_mailbox_free(strata_comm_t *comm, st_mailbox_t *mb)
{
    if (!mb)
        return;
    for (int q = 0; q < ST_MAILBOX_MAX_RANKS; q++)
        if (mb->mapped_bytes[q])
            munmap(mb->box[q], mb->mapped_bytes[q]);
    if (mb->mine)
        strata_mem_free(comm, mb->mine);
    free(mb);
}

/* What every rank tells the others at set-up. */
typedef struct offer {
    st_buf_desc_t region;
    int32_t ok;
    int32_t pad;
} offer_t;

/* Sets the mailboxes of `comm` up, collectively: each rank allocates its region and publishes it,
 * maps everyone else's, and all agree whether every rank succeeded. Errors here are the
 * collectives' own (a dead peer); a rank that merely cannot set up turns the mailboxes off. */
static strata_status_t setup(strata_comm_t *comm)
{
    const int n = comm->nranks, r = comm->rank;
    st_mailbox_t *mb = calloc(1, sizeof *mb);
    offer_t *all = calloc((size_t)n, sizeof *all);
    strata_status_t rc = STRATA_OK;
    if (!mb || !all) {
        free(mb);
        free(all);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory for the mailboxes");
    }
    comm->mailbox = mb;
    mb->slot_bytes = (SLOT_HEAD + max_bytes + 63) & ~(size_t)63;
    offer_t mine = {.ok = 0};
    void *region = NULL;
    if (strata_mem_alloc(comm, 2 * mb->slot_bytes, &region) == STRATA_OK) {
        mb->mine = region;
        st_win_describe(st_ep_window(comm->sh->ep), region, 2 * mb->slot_bytes, &mine.region);
        mine.ok = mine.region.region != 0;
    }
    rc = strata_allgather(comm, &mine, all, sizeof mine, STRATA_DTYPE_U8);
    int32_t ok = rc >= 0;
    for (int q = 0; q < n && ok; q++) {
        ok = all[q].ok;
        if (q == r || !ok) {
            mb->box[q] = mb->mine;
            continue;
        }
        void *p = NULL;
        ok = st_win_map_own(&all[q].region, &p, &mb->mapped_bytes[q]) == 0 &&
             mb->mapped_bytes[q] >= 2 * mb->slot_bytes;
        mb->box[q] = p;
    }
    // Mapping may fail on one rank only: everyone learns whether all succeeded.
    // (through a schedule: strata_allreduce would come back here).
    strata_request_t *req = NULL;
    if (rc >= 0)
        rc = strata_iallreduce(comm, &ok, &ok, 1, STRATA_DTYPE_I32, STRATA_OP_MIN, &req);
    if (rc >= 0)
        rc = strata_request_wait(req);
    free(all);
    if (rc < 0 || !ok) {
        mb->off = true; // the schedules serve every call from now on
        ST_LOG_DEBUG(ST_SUB_COMM, "mailboxes unavailable on this communicator");
    } else {
        ST_LOG_DEBUG(ST_SUB_COMM, "mailboxes set up: %zu-byte slots", mb->slot_bytes);
    }
    return rc;
}

typedef struct waiting {
    st_mailbox_t *mb;
    strata_comm_t *comm;
    uint64_t call;
    int next; /* the first rank not seen yet */
} waiting_t;

/* True once every rank has published this call; advances the rest of the endpoint meanwhile. */
static bool arrived(void *arg)
{
    waiting_t *w = arg;
    while (w->next < w->comm->nranks &&
           atomic_load_explicit(&slot_of(w->mb, w->next, w->call)->call, memory_order_acquire) ==
               w->call)
        w->next++;
    if (w->next < w->comm->nranks && w->comm->sh->active)
        st_request_step_all(w->comm->sh);
    return w->next == w->comm->nranks;
}

static void what_waits(void *arg, char *buf, size_t len, int *awaited)
{
    waiting_t *w = arg;
    *awaited = w->next < w->comm->nranks ? w->comm->world[w->next] : -1;
    snprintf(buf, len, "in allreduce (mailbox, rank %d of %d) waiting for rank %d's contribution",
             w->comm->rank, w->comm->nranks, w->next);
}

strata_status_t st_mailbox_allreduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, strata_dtype_t dtype, strata_op_t op,
                                     bool *served)
{
    *served = false;
    if (!comm->mailbox)
        ST_TRY(setup(comm));
    st_mailbox_t *mb = comm->mailbox;
    if (mb->off)
        return STRATA_OK;
    *served = true;
    st_ep_t *ep = comm->sh->ep;
    const int n = comm->nranks, r = comm->rank;
    const size_t bytes = count * strata_dtype_size(dtype);
    strata_request_t rec = {.comm = comm, .what = "allreduce", .algo = "mailbox", .bytes = bytes,
                            .peer = -1, .seq = ++comm->seq};
    st_request_record_begin(&rec);
    waiting_t w = {.mb = mb, .comm = comm, .call = ++mb->calls};
    // Publish: the contribution, then the call's number (release: the data is seen first).
    slot_t *own = slot_of(mb, r, w.call);
    memcpy(own->data, sendbuf, bytes);
    atomic_store_explicit(&own->call, w.call, memory_order_release);
    strata_status_t rc = STRATA_OK;
    for (int q = 0; q < n && rc >= 0; q++)
        rc = st_ep_wake(ep, comm->world[q]);
    bool all = false;
    for (int i = 0; i < FAST_POLLS && !all && rc >= 0; i++) {
        all = arrived(&w);
#if defined(__x86_64__) || defined(__i386__)
        if (!all)
            __builtin_ia32_pause();
#endif
    }
    if (!all && rc >= 0)
        rc = st_ep_wait(ep, arrived, &w, what_waits, st_deadline_ms(st_ep_timeout_ms(ep)));
    if (rc >= 0) {
        // In rank order, from the slots: the same bits on every rank, whatever recvbuf aliases.
        st_reduce(dtype, op, recvbuf, slot_of(mb, 0, w.call)->data, slot_of(mb, 1, w.call)->data,
                  count);
        for (int q = 2; q < n; q++)
            st_reduce(dtype, op, recvbuf, recvbuf, slot_of(mb, q, w.call)->data, count);
        if (op == STRATA_OP_AVG)
            st_reduce_finish_avg(dtype, recvbuf, count, n);
    }
    st_request_record_end(&rec, rc);
    return rc;
}
