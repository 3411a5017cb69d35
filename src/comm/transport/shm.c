/* Shared-memory transport between ranks of one host.
 *
 * Each pair of ranks that talks gets one segment, created lazily by whichever rank uses the pair
 * first (O_EXCL decides) and unlinked by the second, holding two single-producer single-consumer
 * rings of fixed slots, one per direction. A message is cut into slot-sized chunks: the sender
 * copies a chunk in and publishes it with a release store of the ring head; the receiver copies
 * (or reduces) it out and releases the slot with the tail. Sender and receiver work on different
 * slots at once, so a large message is pipelined, and the fast path makes no system call.
 *
 * Layout: the first page holds the rings and every slot's 64-byte header, whose second half
 * carries a message of up to 32 bytes inline; the slots' payloads follow, page-aligned. A small
 * message (a barrier, an 8-byte allreduce) thus moves one cache line and never touches a payload
 * page: a first touch of a page costs microseconds (more on a virtual machine), which a 512-rank
 * start-up would pay on every connection.
 *
 * Sleeping: every process owns a doorbell page (a futex word plus a "sleeping" flag). A rank about
 * to sleep raises its flag, re-checks its rings, and waits on the futex; a peer that publishes or
 * frees a slot rings the bell only when the flag is up (Dekker-style fences make this race-free).
 * Peer death is seen through a pidfd of the peer's process.
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/transport/transport.h"

#define SEG_MAGIC  0x53545348u /* "STSH" */
#define BELL_MAGIC 0x5354424cu /* "STBL" */
#define SLOT_HDR   64
#define INLINE_MAX 32 /* bytes of a message carried in its slot header */

typedef struct bell {
    _Alignas(64) atomic_uint seq;
    _Alignas(64) atomic_uint sleeping;
    atomic_uint magic; /* set last: the fields below are valid */
    int32_t pid;       /* the owner, for peers that did not look it up in the store */
} bell_t;

typedef struct ring {
    _Alignas(64) atomic_uint_least64_t head; /* written by the producer */
    _Alignas(64) atomic_uint_least64_t tail; /* written by the consumer */
} ring_t;

typedef struct seg_hdr {
    _Alignas(64) atomic_uint magic;
    uint32_t nslots;
    uint32_t slot_bytes;
    atomic_uint attached; /* set by the second rank once it has mapped the segment and the
                             first rank's doorbell */
} seg_hdr_t;

typedef struct slot_hdr {
    uint64_t tag;
    uint64_t msg_bytes;
    uint64_t off;
    uint64_t len;
    char inline_data[INLINE_MAX]; /* the payload when msg_bytes <= INLINE_MAX */
} slot_hdr_t;
_Static_assert(sizeof(slot_hdr_t) == SLOT_HDR, "a slot header is one cache line");

struct st_transport {
    bell_t *bell;
    char bell_name[160];
    uint32_t nslots;
    uint32_t slot_bytes;
};

typedef struct shm_conn {
    void *base;
    size_t size;
    ring_t *tx, *rx;
    slot_hdr_t *tx_hdrs, *rx_hdrs;
    char *tx_slots, *rx_slots;
    bell_t *peer_bell;
    int pidfd;
    st_msg_t *rx_cur; /* receive being filled */
    char name[160];
    bool created;
} shm_conn_t;

/* Bytes before the payloads: segment header, two rings, 2 * nslots slot headers; page-aligned. */
static size_t seg_head_size(uint32_t nslots)
{
    return (64 + 2 * sizeof(ring_t) + 2 * (size_t)nslots * SLOT_HDR + 4095) & ~(size_t)4095;
}

static size_t seg_size(uint32_t nslots, uint32_t slot_bytes)
{
    return seg_head_size(nslots) + 2 * (size_t)nslots * slot_bytes;
}

static long futex(atomic_uint *addr, int op, unsigned val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void ring_bell(bell_t *b)
{
    // Pairs with the fence in st_shm_sleep_begin: either the sleeper sees our data, or we see it.
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleeping, memory_order_relaxed)) {
        atomic_fetch_add(&b->seq, 1);
        futex(&b->seq, FUTEX_WAKE, 1, NULL);
    }
}

uint32_t st_shm_sleep_begin(st_transport_t *t)
{
    uint32_t seq = atomic_load(&t->bell->seq);
    atomic_store(&t->bell->sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    return seq;
}

void st_shm_sleep_wait(st_transport_t *t, uint32_t seq, int timeout_ms)
{
    struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
    futex(&t->bell->seq, FUTEX_WAIT, seq, &ts);
}

void st_shm_sleep_end(st_transport_t *t)
{
    atomic_store_explicit(&t->bell->sleeping, 0, memory_order_relaxed);
}

static void bell_name(const st_ep_t *ep, int rank, char *buf, size_t len)
{
    snprintf(buf, len, "/strata-%s-b%d", st_ep_job_id(ep), rank);
}

static void *map_fd(int fd, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static strata_status_t shm_open_tp(st_ep_t *ep, st_transport_t **out)
{
    st_transport_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    long long slot = st_knob_int("STRATA_SHM_SLOT_BYTES", 256 << 10);
    long long nslots = st_knob_int("STRATA_SHM_SLOTS", 8);
    // Slots stay multiples of 64 bytes so every chunk holds whole elements of every dtype.
    t->slot_bytes = (uint32_t)ST_MAX(4096, ST_MIN(slot, 64LL << 20)) & ~63u;
    t->nslots = (uint32_t)ST_MAX(2, ST_MIN(nslots, 1024));
    bell_name(ep, st_ep_rank(ep), t->bell_name, sizeof t->bell_name);
    int fd = shm_open(t->bell_name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
        strata_status_t rc = st_error_errno(STRATA_ERR_SYSTEM, errno, "shm_open %s", t->bell_name);
        free(t);
        return rc;
    }
    if (ftruncate(fd, 4096) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(t->bell_name);
        free(t);
        return st_error_errno(STRATA_ERR_SYSTEM, e, "ftruncate shared-memory doorbell");
    }
    t->bell = map_fd(fd, 4096);
    close(fd);
    if (!t->bell) {
        shm_unlink(t->bell_name);
        free(t);
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "mmap shared-memory doorbell");
    }
    atomic_store(&t->bell->sleeping, 0);
    t->bell->pid = (int32_t)getpid();
    atomic_store(&t->bell->magic, BELL_MAGIC);
    *out = t;
    return STRATA_OK;
}

static void shm_close_tp(st_ep_t *ep, st_transport_t *t)
{
    (void)ep;
    munmap(t->bell, 4096);
    shm_unlink(t->bell_name);
    free(t);
}

static void shm_address(st_transport_t *t, char *buf, size_t len)
{
    (void)t;
    if (len)
        buf[0] = '\0';
}

static bool shm_can_connect(st_ep_t *ep, st_transport_t *t, const st_peer_t *peer)
{
    (void)t;
    // The self peer carries this process's own host identity.
    return !st_ep_force_tcp(ep) && st_ep_peer(ep, st_ep_rank(ep))->host_hash == peer->host_hash;
}

/* Waits (bounded) for a condition another process establishes during attach. */
static bool wait_for(bool (*cond)(void *), void *arg, long long timeout_ms)
{
    uint64_t deadline = st_deadline_ms(timeout_ms < 0 ? 60000 : timeout_ms);
    while (!cond(arg)) {
        if (st_now_ns() > deadline)
            return false;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return true;
}

typedef struct { int fd; size_t size; } size_wait_t;
static bool fd_has_size(void *arg)
{
    size_wait_t *w = arg;
    struct stat st;
    return fstat(w->fd, &st) == 0 && (size_t)st.st_size >= w->size;
}
static bool magic_set(void *arg)
{
    return atomic_load_explicit((atomic_uint *)arg, memory_order_acquire) != 0;
}

static strata_status_t open_peer_bell(st_ep_t *ep, shm_conn_t *c, int rank)
{
    char name[160];
    bell_name(ep, rank, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_PEER_FAILED, errno, "opening the doorbell %s of rank %d",
                              name, rank);
    size_wait_t w = {fd, 4096};
    bool ok = wait_for(fd_has_size, &w, st_ep_timeout_ms(ep));
    c->peer_bell = ok ? map_fd(fd, 4096) : NULL;
    close(fd);
    if (c->peer_bell && !wait_for(magic_set, &c->peer_bell->magic, st_ep_timeout_ms(ep))) {
        munmap(c->peer_bell, 4096);
        c->peer_bell = NULL;
    }
    if (!c->peer_bell)
        return st_error(STRATA_ERR_PEER_FAILED, "cannot map the doorbell of rank %d", rank);
    return STRATA_OK;
}

static strata_status_t shm_connect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    int me = st_ep_rank(ep), lo = ST_MIN(me, peer->rank), hi = ST_MAX(me, peer->rank);
    shm_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    c->pidfd = -1;
    snprintf(c->name, sizeof c->name, "/strata-%s-%d-%d", st_ep_job_id(ep), lo, hi);
    strata_status_t rc = STRATA_OK;
    size_t size = seg_size(t->nslots, t->slot_bytes);
    int fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
        c->created = true;
        if (ftruncate(fd, (off_t)size) != 0) {
            rc = st_error_errno(STRATA_ERR_SYSTEM, errno, "ftruncate %s to %zu bytes", c->name, size);
            goto fail;
        }
    } else if (errno == EEXIST) {
        fd = shm_open(c->name, O_RDWR, 0600);
        size_wait_t w = {fd, size};
        if (fd < 0 || !wait_for(fd_has_size, &w, st_ep_timeout_ms(ep))) {
            rc = st_error(STRATA_ERR_PEER_FAILED, "segment %s of rank %d never became ready",
                          c->name, peer->rank);
            goto fail;
        }
    } else {
        rc = st_error_errno(STRATA_ERR_SYSTEM, errno, "shm_open %s", c->name);
        goto fail;
    }
    c->base = map_fd(fd, size);
    if (!c->base) {
        rc = st_error_errno(STRATA_ERR_SYSTEM, errno, "mmap %zu bytes of %s", size, c->name);
        goto fail;
    }
    c->size = size;
    seg_hdr_t *h = c->base;
    if (c->created) {
        h->nslots = t->nslots;
        h->slot_bytes = t->slot_bytes;
        atomic_store_explicit(&h->magic, SEG_MAGIC, memory_order_release);
    } else {
        if (!wait_for(magic_set, &h->magic, st_ep_timeout_ms(ep))) {
            rc = st_error(STRATA_ERR_PEER_FAILED, "segment %s was never initialised", c->name);
            goto fail;
        }
        if (h->nslots != t->nslots || h->slot_bytes != t->slot_bytes) {
            rc = st_error(STRATA_ERR_INVALID_ARG,
                          "rank %d uses %u shm slots of %u bytes, this rank %u of %u: set "
                          "STRATA_SHM_SLOTS and STRATA_SHM_SLOT_BYTES alike on every rank",
                          peer->rank, h->nslots, h->slot_bytes, t->nslots, t->slot_bytes);
            goto fail;
        }
        shm_unlink(c->name); // both sides are attached: the name is no longer needed
    }
    close(fd);
    fd = -1;
    ring_t *rings = (ring_t *)((char *)c->base + 64);
    slot_hdr_t *hdrs = (slot_hdr_t *)(rings + 2);
    char *slots = (char *)c->base + seg_head_size(t->nslots);
    size_t ring_bytes = (size_t)t->nslots * t->slot_bytes;
    int dir = me == lo ? 0 : 1; // ring 0 carries lo -> hi
    c->tx = &rings[dir];
    c->rx = &rings[1 - dir];
    c->tx_hdrs = hdrs + (size_t)dir * t->nslots;
    c->rx_hdrs = hdrs + (size_t)(1 - dir) * t->nslots;
    c->tx_slots = slots + (size_t)dir * ring_bytes;
    c->rx_slots = slots + (size_t)(1 - dir) * ring_bytes;
    ST_TRY_GOTO(open_peer_bell(ep, c, peer->rank), rc, fail);
    // Only now may a creator that lingers for us leave: its doorbell is mapped too.
    if (!c->created)
        atomic_store_explicit(&h->attached, 1, memory_order_release);
    if (!peer->pid)
        peer->pid = c->peer_bell->pid;
    c->pidfd = (int)syscall(SYS_pidfd_open, peer->pid, 0);
    peer->conn = c;
    return STRATA_OK;
fail:
    if (fd >= 0)
        close(fd);
    if (c->base)
        munmap(c->base, size);
    if (c->created)
        shm_unlink(c->name);
    free(c);
    return rc;
}

/* True while what this rank sent lives only in a segment the peer has not mapped yet: unlinking
 * the name now would lose it (a rank whose last send completed into the ring may leave before its
 * peer, busy elsewhere, comes to read it). */
static bool unattached_data(void *arg)
{
    shm_conn_t *c = arg;
    const seg_hdr_t *h = c->base;
    if (atomic_load_explicit(&h->attached, memory_order_acquire) ||
        atomic_load_explicit(&c->tx->tail, memory_order_acquire) ==
            atomic_load_explicit(&c->tx->head, memory_order_relaxed))
        return false;
    struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
    return c->pidfd >= 0 && !(poll(&p, 1, 0) == 1 && (p.revents & POLLIN)); // the peer lives
}
static bool delivered(void *arg) { return !unattached_data(arg); }

static void shm_disconnect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)t;
    shm_conn_t *c = peer->conn;
    if (!c)
        return;
    // A clean exit lingers (bounded by the timeout) until the peer has attached: once mapped by
    // both, the segment and its data outlive this process. A failed endpoint leaves at once.
    if (c->created && st_ep_error(ep) == STRATA_OK)
        wait_for(delivered, c, st_ep_timeout_ms(ep));
    if (c->created)
        shm_unlink(c->name); // the peer may never have attached
    munmap(c->base, c->size);
    if (c->peer_bell)
        munmap(c->peer_bell, 4096);
    if (c->pidfd >= 0)
        close(c->pidfd);
    free(c);
    peer->conn = NULL;
}

/* Where slot i's payload lives: inline in its header for a small message, else in its slot. */
static char *slot_data(slot_hdr_t *h, char *slots, size_t i, uint32_t slot_bytes, uint64_t msg_bytes)
{
    return msg_bytes <= INLINE_MAX ? h->inline_data : slots + i * slot_bytes;
}

static strata_status_t push_sends(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, shm_conn_t *c,
                                  bool *moved)
{
    bool published = false;
    while (peer->sendq) {
        st_msg_t *m = peer->sendq;
        uint64_t head = atomic_load_explicit(&c->tx->head, memory_order_relaxed);
        do {
            uint64_t tail = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
            if (head - tail >= t->nslots)
                goto out; // ring full: the consumer will ring our bell when it frees a slot
            size_t i = head % t->nslots;
            size_t len = ST_MIN((size_t)t->slot_bytes, m->bytes - m->done);
            slot_hdr_t *h = &c->tx_hdrs[i];
            h->tag = m->tag;
            h->msg_bytes = m->bytes;
            h->off = m->done;
            h->len = len;
            char *data = slot_data(h, c->tx_slots, i, t->slot_bytes, m->bytes);
            if (len)
                memcpy(data, (const char *)m->sbuf + m->done, len);
            atomic_store_explicit(&c->tx->head, ++head, memory_order_release);
            m->done += len;
            published = true;
        } while (m->done < m->bytes);
        peer->sendq = m->next;
        if (!peer->sendq)
            peer->sendq_tail = NULL;
        st_msg_complete(ep, m);
    }
out:
    if (published) {
        *moved = true;
        ring_bell(c->peer_bell);
    }
    return STRATA_OK;
}

static strata_status_t pull_recvs(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, shm_conn_t *c,
                                  bool drain, bool *moved)
{
    uint64_t tail = atomic_load_explicit(&c->rx->tail, memory_order_relaxed);
    bool consumed = false;
    for (;;) {
        uint64_t head = atomic_load_explicit(&c->rx->head, memory_order_acquire);
        if (tail == head)
            break;
        size_t i = tail % t->nslots;
        slot_hdr_t *h = &c->rx_hdrs[i];
        if (!c->rx_cur) {
            c->rx_cur = st_ep_match(ep, peer, h->tag, h->msg_bytes, drain);
            if (!c->rx_cur) {
                strata_status_t rc = st_ep_error(ep);
                if (rc < 0)
                    return rc;
                break; // nobody wants it yet: leave it in the ring
            }
        }
        bool last = h->off + h->len >= h->msg_bytes;
        st_msg_deliver(ep, c->rx_cur, h->off,
                       slot_data(h, c->rx_slots, i, t->slot_bytes, h->msg_bytes), h->len);
        if (last)
            c->rx_cur = NULL;
        atomic_store_explicit(&c->rx->tail, ++tail, memory_order_release);
        consumed = true;
    }
    if (consumed) {
        *moved = true;
        ring_bell(c->peer_bell); // the producer may be waiting for a free slot
    }
    return STRATA_OK;
}

static strata_status_t shm_progress(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, bool drain,
                                    bool *moved)
{
    shm_conn_t *c = peer->conn;
    ST_TRY(pull_recvs(ep, t, peer, c, drain, moved));
    return push_sends(ep, t, peer, c, moved);
}

static strata_status_t shm_check_peer(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)t;
    shm_conn_t *c = peer->conn;
    if (c->pidfd < 0)
        return STRATA_OK;
    struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
    if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
        return STRATA_OK;
    // A peer that finished its part and left may have left what it sent us in the ring, for a
    // receive posted after it arrived: the peer is lost only once nothing of it is left to read.
    uint64_t tail = atomic_load_explicit(&c->rx->tail, memory_order_relaxed);
    if (atomic_load_explicit(&c->rx->head, memory_order_acquire) != tail)
        return STRATA_OK;
    return st_ep_peer_lost(ep, peer->rank, "exited while this rank was exchanging data with it");
}

static void shm_wake(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)ep;
    (void)t;
    shm_conn_t *c = peer->conn;
    if (c && c->peer_bell)
        ring_bell(c->peer_bell);
}

const st_transport_ops_t st_shm_ops = {
    .name = "shm",
    .open = shm_open_tp,
    .address = shm_address,
    .can_connect = shm_can_connect,
    .connect = shm_connect,
    .progress = shm_progress,
    .needs_poll = false,
    .wake = shm_wake,
    .check_peer = shm_check_peer,
    .disconnect = shm_disconnect,
    .close = shm_close_tp,
};
