/* The pool node: serves one memory region over UDP (READ, WRITE, ADD, REDUCE-FORWARD, ADAMW,
 * SUMSQ, STATS), answers only authenticated sessions, applies ADD, WRITE and ADAMW once per
 * (session, flow, seq), and
 * can drop, duplicate and reorder what it receives from a seed (docs/pool.md). */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/adamw.h"
#include "base/base.h"
#include "pool/kernels.h"
#include "pool/net.h"
#include "pool/node.h"
#include "pool/proto.h"

#define SESSIONS 64    /* the oldest idle session is evicted beyond this */
#define SEEN     PL_DEDUP_WINDOW
#define RX_BATCH 32
#define TX_BATCH 64

typedef struct session {
    uint64_t token, last_used;
    struct sockaddr_in peer;
    uint8_t nonce_c[PL_NONCE]; /* a repeated AUTH gets the same token back */
    bool flow_valid;
    uint32_t flow, base; /* seqs [base, base + SEEN) of flow are tracked in seen */
    uint64_t seen[SEEN / 64];
} session_t;

struct strata_pool_node {
    int fd;
    uint8_t *mem;
    size_t bytes;
    char *secret;
    uint8_t nonce_key[32]; /* node nonces are a keyed hash of the client's: no state before AUTH */
    session_t sess[SESSIONS];
    uint64_t tick;
    float zero_threshold;
    double drop, dup, reorder;
    uint64_t rng;
    pn_dgram_t held; /* the datagram the reorder fault holds back */
    bool has_held;
    pn_dgram_t *rx, *tx;
    int ntx;
    _Alignas(64) uint8_t work[PL_MAX_PAYLOAD];
    strata_pool_stats_t st;
};

/* ---- sessions ------------------------------------------------------------------------------------ */

static session_t *session_find(strata_pool_node_t *n, uint64_t token)
{
    if (!token)
        return NULL;
    for (int i = 0; i < SESSIONS; i++)
        if (n->sess[i].token == token) {
            n->sess[i].last_used = ++n->tick;
            return &n->sess[i];
        }
    return NULL;
}

/* True when (flow, seq) was applied already in this session; marks it applied otherwise. */
static bool seen_before(session_t *s, uint32_t flow, uint32_t seq)
{
    if (!s->flow_valid || flow != s->flow) {
        if (s->flow_valid && (int32_t)(flow - s->flow) < 0)
            return true; // an earlier flow: the client finished it, so this is a late copy
        s->flow_valid = true;
        s->flow = flow;
        s->base = 0;
        memset(s->seen, 0, sizeof s->seen);
    }
    if (seq < s->base)
        return true;
    if (seq - s->base >= SEEN) { // slide the window forward, forgetting what falls off
        uint32_t shift = seq - s->base - SEEN + 1;
        if (shift >= SEEN)
            memset(s->seen, 0, sizeof s->seen);
        else
            for (uint32_t q = s->base; q < s->base + shift; q++)
                s->seen[(q % SEEN) / 64] &= ~(1ull << (q % 64));
        s->base += shift;
    }
    uint64_t bit = 1ull << (seq % 64), *w = &s->seen[(seq % SEEN) / 64];
    bool was = *w & bit;
    *w |= bit;
    return was;
}

/* ---- sending ------------------------------------------------------------------------------------- */

static void flush(strata_pool_node_t *n)
{
    n->st.tx_packets += (uint64_t)pn_send_batch(n->fd, n->tx, n->ntx);
    n->ntx = 0;
}

/* Queues a datagram to `to`; the payload is sent as a ZERO record when the filter allows. */
static void send_msg(strata_pool_node_t *n, const struct sockaddr_in *to, pl_hdr_t h,
                     const pl_hop_t *hops, const pl_dest_t *dests, const void *payload)
{
    if (n->ntx == TX_BATCH)
        flush(n);
    size_t plen = payload ? h.len : 0;
    if (plen && h.op != PL_STATS_REPLY && h.op != PL_SUMSQ_REPLY &&
        pk_is_zero(h.op == PL_READ_REPLY ? 0 : h.dtype, payload, plen, n->zero_threshold)) {
        h.flags |= PL_F_ZERO;
        plen = 0;
        n->st.zero_out++;
    }
    pn_dgram_t *d = &n->tx[n->ntx++];
    d->len = pl_encode(d->buf, &h, hops, dests, payload, plen);
    d->addr = *to;
    if (n->ntx == TX_BATCH)
        flush(n);
}

static void reply_error(strata_pool_node_t *n, const struct sockaddr_in *to, const pl_hdr_t *req,
                        uint32_t code)
{
    pl_hdr_t h = {.op = PL_ERROR, .flow = req->flow, .seq = req->seq, .addr = req->addr,
                  .len = 0, .aux = code};
    send_msg(n, to, h, NULL, NULL, NULL);
}

/* ---- operations ---------------------------------------------------------------------------------- */

static void on_hello(strata_pool_node_t *n, const pl_msg_t *m, const struct sockaddr_in *from)
{
    if (m->payload_len != PL_NONCE) {
        n->st.malformed++;
        return;
    }
    uint8_t who[16] = {0}, mac[32], both[2 * PL_NONCE];
    memcpy(who, &from->sin_addr, 4);
    memcpy(who + 4, &from->sin_port, 2);
    pn_mac((const char *)n->nonce_key, "nonce", m->payload, who, mac);
    memcpy(both, m->payload, PL_NONCE);
    memcpy(both + PL_NONCE, mac, PL_NONCE);
    pl_hdr_t h = {.op = PL_CHALLENGE, .flow = m->h.flow, .len = sizeof both};
    send_msg(n, from, h, NULL, NULL, both);
}

static void on_auth(strata_pool_node_t *n, const pl_msg_t *m, const struct sockaddr_in *from)
{
    if (m->payload_len != 2 * PL_NONCE + PL_MAC) {
        n->st.malformed++;
        return;
    }
    const uint8_t *nc = m->payload, *nn = m->payload + PL_NONCE, *proof = nn + PL_NONCE;
    uint8_t who[16] = {0}, expect[32];
    memcpy(who, &from->sin_addr, 4);
    memcpy(who + 4, &from->sin_port, 2);
    pn_mac((const char *)n->nonce_key, "nonce", nc, who, expect);
    bool ours = memcmp(expect, nn, PL_NONCE) == 0;
    pn_mac(n->secret, "client", nc, nn, expect);
    if (!ours || !pn_mac_equal(expect, proof)) {
        n->st.unauthorized++;
        return;
    }
    session_t *s = NULL, *oldest = &n->sess[0];
    for (int i = 0; i < SESSIONS && !s; i++) {
        session_t *c = &n->sess[i];
        if (c->token && !memcmp(c->nonce_c, nc, PL_NONCE) &&
            c->peer.sin_addr.s_addr == from->sin_addr.s_addr && c->peer.sin_port == from->sin_port)
            s = c; // the WELCOME was lost: same session again
        if (c->last_used < oldest->last_used)
            oldest = c;
    }
    if (!s) {
        s = oldest;
        memset(s, 0, sizeof *s);
        while (!s->token)
            if (pn_random(&s->token, sizeof s->token) != STRATA_OK)
                return;
        s->peer = *from;
        memcpy(s->nonce_c, nc, PL_NONCE);
        n->st.sessions++;
    }
    s->last_used = ++n->tick;
    uint8_t node_proof[32];
    pn_mac(n->secret, "node", nc, nn, node_proof);
    pl_hdr_t h = {.op = PL_WELCOME, .token = s->token, .flow = m->h.flow, .addr = n->bytes,
                  .len = sizeof node_proof};
    send_msg(n, from, h, NULL, NULL, node_proof);
}

/* The request's block [addr, addr + len) is inside the region and aligned to its elements. */
static uint32_t check_block(const strata_pool_node_t *n, uint64_t addr, uint32_t len, uint8_t dtype)
{
    if (addr > n->bytes || len > n->bytes - addr)
        return PL_E_RANGE;
    size_t es = pl_dtype_size(dtype);
    if (es && addr % es)
        return PL_E_ALIGN;
    return 0;
}

static void on_rw(strata_pool_node_t *n, session_t *s, const pl_msg_t *m,
                  const struct sockaddr_in *from)
{
    const pl_hdr_t *q = &m->h;
    uint32_t err = check_block(n, q->addr, q->len, q->op == PL_ADD ? q->dtype : 0);
    if (err) {
        reply_error(n, from, q, err);
        return;
    }
    uint8_t *dst = n->mem + q->addr;
    if (q->op == PL_READ) {
        pl_hdr_t h = {.op = PL_READ_REPLY, .flow = q->flow, .seq = q->seq, .addr = q->addr,
                      .len = q->len};
        send_msg(n, from, h, NULL, NULL, dst);
        return;
    }
    if (q->flags & PL_F_ZERO)
        n->st.zero_in++;
    if (seen_before(s, q->flow, q->seq)) {
        n->st.duplicates++;
    } else if (q->op == PL_WRITE) {
        if (q->flags & PL_F_ZERO)
            memset(dst, 0, q->len);
        else
            memcpy(dst, m->payload, q->len);
    } else if (!(q->flags & PL_F_ZERO)) {
        // The payload sits 8-byte aligned in the 64-byte aligned receive buffer: added in place.
        pk_add(q->dtype, dst, m->payload, q->len);
        n->st.adds++;
    }
    pl_hdr_t h = {.op = PL_ACK, .flow = q->flow, .seq = q->seq, .addr = q->addr, .len = 0};
    send_msg(n, from, h, NULL, NULL, NULL);
}

/* AdamW over one block of node-local float32 ranges: parameters at addr, m, v and the summed
 * gradient where the arguments say; then the gradient is zeroed for the next step's ADDs. */
static void on_adamw(strata_pool_node_t *n, session_t *s, const pl_msg_t *m,
                     const struct sockaddr_in *from)
{
    const pl_hdr_t *q = &m->h;
    pl_adamw_args_t a;
    pl_adamw_get(m->payload, &a);
    uint64_t at[4] = {q->addr, a.m, a.v, a.g};
    uint32_t err = 0;
    for (int i = 0; i < 4 && !err; i++)
        err = check_block(n, at[i], q->len, STRATA_POOL_F32);
    for (int i = 0; i < 4 && !err; i++) // the update reads and writes them as distinct arrays
        for (int j = i + 1; j < 4 && !err; j++)
            if (q->len && at[i] < at[j] + q->len && at[j] < at[i] + q->len)
                err = PL_E_OVERLAP;
    if (err) {
        reply_error(n, from, q, err);
        return;
    }
    if (seen_before(s, q->flow, q->seq)) {
        n->st.duplicates++;
    } else {
        st_adamw_t k = st_adamw_make(a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                                     a.grad_scale);
        float *g = (float *)(n->mem + a.g);
        st_adamw_apply(&k, (float *)(n->mem + q->addr), (float *)(n->mem + a.m),
                       (float *)(n->mem + a.v), g, q->len / 4);
        memset(g, 0, q->len);
    }
    pl_hdr_t h = {.op = PL_ACK, .flow = q->flow, .seq = q->seq, .addr = q->addr, .len = 0};
    send_msg(n, from, h, NULL, NULL, NULL);
}

/* The sum of squares of one block of node-local float32. */
static void on_sumsq(strata_pool_node_t *n, const pl_msg_t *m, const struct sockaddr_in *from)
{
    const pl_hdr_t *q = &m->h;
    uint32_t err = check_block(n, q->addr, q->len, STRATA_POOL_F32);
    if (err) {
        reply_error(n, from, q, err);
        return;
    }
    double ss = pk_sumsq_f32((const float *)(n->mem + q->addr), q->len / 4);
    pl_hdr_t h = {.op = PL_SUMSQ_REPLY, .flow = q->flow, .seq = q->seq, .addr = q->addr,
                  .len = sizeof ss};
    send_msg(n, from, h, NULL, NULL, &ss);
}

static void on_reduce(strata_pool_node_t *n, session_t *s, const pl_msg_t *m,
                      const struct sockaddr_in *from)
{
    pl_hdr_t h = m->h;
    if (!h.origin_port) { // the first hop: the sender is the origin
        h.origin_ip = from->sin_addr.s_addr;
        h.origin_port = from->sin_port;
    }
    struct sockaddr_in origin = {.sin_family = AF_INET, .sin_port = h.origin_port,
                                 .sin_addr.s_addr = h.origin_ip};
    if (h.flags & PL_F_ZERO)
        n->st.zero_in++;
    // This hop and every one after it that names this node again (same address, as the client
    // wrote them) are served here at once: the packet leaves the node once, not once per hop.
    bool zero = h.flags & PL_F_ZERO;
    int k = 0;
    for (;; k++) {
        const pl_hop_t *me = &m->hop[k];
        uint32_t err = check_block(n, me->addr, h.len, h.dtype);
        if (err) {
            reply_error(n, &origin, &h, err);
            return;
        }
        uint8_t *block = n->mem + me->addr;
        bool last = h.hops - k == 1, store = last && (h.flags & PL_F_STORE);
        if (store && seen_before(s, h.flow, h.seq)) {
            // Stored already: the block holds the sum, which is the result; never add twice.
            n->st.duplicates++;
            memcpy(n->work, block, h.len);
        } else {
            if (k == 0 && zero)
                memcpy(n->work, block, h.len);
            else if (k == 0) {
                memcpy(n->work, m->payload, h.len);
                pk_add(h.dtype, n->work, block, h.len);
            } else {
                pk_add(h.dtype, n->work, block, h.len);
            }
            n->st.adds++;
            if (store)
                memcpy(block, n->work, h.len);
        }
        if (last || m->hop[k + 1].ip != m->hop[0].ip || m->hop[k + 1].port != m->hop[0].port)
            break;
    }
    h.flags &= (uint8_t)~PL_F_ZERO;
    if (h.hops - k > 1) {
        h.hops = (uint8_t)(h.hops - k - 1);
        h.token = m->hop[k + 1].token;
        struct sockaddr_in next = {.sin_family = AF_INET, .sin_port = m->hop[k + 1].port,
                                   .sin_addr.s_addr = m->hop[k + 1].ip};
        send_msg(n, &next, h, &m->hop[k + 1], m->dest, n->work);
        n->st.forwards++;
        return;
    }
    pl_hdr_t r = h;
    r.op = PL_RESULT;
    r.hops = 0;
    r.ndest = 0;
    r.token = 0;
    r.flags = 0;
    send_msg(n, &origin, r, NULL, NULL, n->work);
    for (int i = 0; i < h.ndest; i++) {
        struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = m->dest[i].port,
                                .sin_addr.s_addr = m->dest[i].ip};
        send_msg(n, &d, r, NULL, NULL, n->work);
    }
    n->st.results++;
}

static void on_stats(strata_pool_node_t *n, const pl_msg_t *m, const struct sockaddr_in *from)
{
    uint64_t v[PL_STATS_FIELDS];
    pl_stats_pack(&n->st, v);
    pl_hdr_t h = {.op = PL_STATS_REPLY, .flow = m->h.flow, .seq = m->h.seq, .len = sizeof v};
    send_msg(n, from, h, NULL, NULL, v);
}

static void handle(strata_pool_node_t *n, const uint8_t *buf, size_t len,
                   const struct sockaddr_in *from)
{
    pl_msg_t m;
    if (!pl_decode(buf, len, &m)) {
        n->st.malformed++;
        return;
    }
    if (m.h.op == PL_HELLO) {
        on_hello(n, &m, from);
        return;
    }
    if (m.h.op == PL_AUTH) {
        on_auth(n, &m, from);
        return;
    }
    session_t *s = session_find(n, m.h.token);
    if (!s) {
        n->st.unauthorized++;
        return;
    }
    switch (m.h.op) {
    case PL_READ:
    case PL_WRITE:
    case PL_ADD: on_rw(n, s, &m, from); break;
    case PL_REDUCE: on_reduce(n, s, &m, from); break;
    case PL_ADAMW: on_adamw(n, s, &m, from); break;
    case PL_SUMSQ: on_sumsq(n, &m, from); break;
    case PL_STATS: on_stats(n, &m, from); break;
    default: n->st.malformed++; break; // a reply or client-to-client message sent to a node
    }
}

/* ---- the fault mode and the loop ----------------------------------------------------------------- */

static double next_uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull); // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static void deliver(strata_pool_node_t *n, pn_dgram_t *d)
{
    n->st.rx_packets++;
    if (n->drop + n->dup + n->reorder > 0) {
        double u = next_uniform(&n->rng);
        if (u < n->drop) {
            n->st.injected_drops++;
            return;
        }
        if (u < n->drop + n->dup) {
            n->st.injected_dups++;
            handle(n, d->buf, d->len, &d->addr);
        } else if (u < n->drop + n->dup + n->reorder && !n->has_held) {
            n->st.injected_reorders++;
            memcpy(n->held.buf, d->buf, d->len);
            n->held.len = d->len;
            n->held.addr = d->addr;
            n->has_held = true;
            return;
        }
    }
    handle(n, d->buf, d->len, &d->addr);
    if (n->has_held && d != &n->held) { // the held one goes after the one that overtook it
        n->has_held = false;
        handle(n, n->held.buf, n->held.len, &n->held.addr);
    }
}

strata_status_t strata_pool_node_poll(strata_pool_node_t *n, int timeout_ms)
{
    struct pollfd pfd = {.fd = n->fd, .events = POLLIN};
    int pr = poll(&pfd, 1, timeout_ms);
    if (pr < 0 && errno != EINTR)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "pool node: poll");
    // At most 16 batches (512 datagrams) a call: the caller gets control back regularly.
    for (int rounds = 0; pr > 0 && rounds < 16; rounds++) {
        int r = pn_recv_batch(n->fd, n->rx, RX_BATCH);
        if (r <= 0)
            break;
        for (int i = 0; i < r; i++) {
            if (n->rx[i].len == SIZE_MAX) { // oversized: longer than any valid datagram
                n->st.rx_packets++;
                n->st.malformed++;
                continue;
            }
            deliver(n, &n->rx[i]);
        }
        flush(n);
    }
    if (n->has_held) { // nothing overtook it in this round: serve it now rather than stall
        n->has_held = false;
        handle(n, n->held.buf, n->held.len, &n->held.addr);
    }
    flush(n);
    return STRATA_OK;
}

strata_status_t strata_pool_node_open(const strata_pool_node_config_t *cfg,
                                      strata_pool_node_t **out)
{
    *out = NULL;
    if (!cfg || !cfg->bytes)
        return st_error(STRATA_ERR_INVALID_ARG, "pool node: --bytes must be at least 1");
    if (!(cfg->drop >= 0 && cfg->dup >= 0 && cfg->reorder >= 0 &&
          cfg->drop + cfg->dup + cfg->reorder < 1))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool node: drop, dup and reorder are probabilities >= 0 summing below 1 "
                        "(got %g, %g, %g)", cfg->drop, cfg->dup, cfg->reorder);
    struct sockaddr_in addr;
    ST_TRY(pn_parse_addr(cfg->listen, "pool node listen address", &addr));
    strata_pool_node_t *n = calloc(1, sizeof *n);
    if (!n)
        return st_error(STRATA_ERR_NO_MEMORY, "pool node: out of memory");
    n->fd = -1;
    n->bytes = cfg->bytes;
    n->mem = aligned_alloc(64, (cfg->bytes + 63) / 64 * 64);
    n->secret = strdup(cfg->secret ? cfg->secret : "");
    n->rx = aligned_alloc(64, sizeof(pn_dgram_t) * RX_BATCH);
    n->tx = aligned_alloc(64, sizeof(pn_dgram_t) * TX_BATCH);
    strata_status_t rc = STRATA_OK;
    if (!n->mem || !n->secret || !n->rx || !n->tx) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pool node: cannot allocate %zu bytes", cfg->bytes);
        goto fail;
    }
    memset(n->mem, 0, cfg->bytes);
    n->zero_threshold = pl_zero_threshold();
    n->drop = cfg->drop;
    n->dup = cfg->dup;
    n->reorder = cfg->reorder;
    n->rng = cfg->seed;
    // The nonce key is random bytes used as a string key: no NUL inside.
    ST_TRY_GOTO(pn_random(n->nonce_key, sizeof n->nonce_key - 1), rc, fail);
    for (size_t i = 0; i + 1 < sizeof n->nonce_key; i++)
        n->nonce_key[i] = (uint8_t)(n->nonce_key[i] % 255 + 1);
    ST_TRY_GOTO(pn_socket(&addr, &n->fd), rc, fail);
    *out = n;
    return STRATA_OK;
fail:
    strata_pool_node_close(n);
    return rc;
}

int strata_pool_node_port(const strata_pool_node_t *n)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(n->fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    return ntohs(a.sin_port);
}

void strata_pool_node_stats(const strata_pool_node_t *n, strata_pool_stats_t *out)
{
    *out = n->st;
}

void strata_pool_node_close(strata_pool_node_t *n)
{
    if (!n)
        return;
    if (n->fd >= 0)
        close(n->fd);
    free(n->mem);
    free(n->secret);
    free(n->rx);
    free(n->tx);
    free(n);
}
