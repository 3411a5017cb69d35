/* The pool client: authenticates to every node, maps the interleaved global address space onto
 * them, and runs each operation as a window of sequenced packets retransmitted until answered
 * (docs/pool.md). A call fails within the timeout of silence, naming the node that went quiet. */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "pool/kernels.h"
#include "pool/net.h"
#include "pool/node.h"
#include "pool/proto.h"

#define RX_BATCH 32
#define TX_BATCH 64
#define IP_UDP_HDR 28

struct strata_pool {
    int fd, n;
    struct sockaddr_in *addr;
    char (*name)[32];
    uint64_t *token, *node_bytes;
    size_t block;
    uint64_t capacity;
    long long timeout_ms, retry_ms;
    int window;
    uint32_t flow;
    float zero_threshold;
    pn_dgram_t *rx, *tx;
    int ntx;
    /* The last reduction received as a destination, so its late copies are not taken for a new one. */
    struct sockaddr_in last_origin;
    uint32_t last_flow;
};

/* One packet of an operation and its answer. */
typedef struct item {
    int node;
    uint64_t laddr; /* node-local address (read/write/add) */
    size_t off, len; /* bytes of the caller's buffer */
    uint64_t sent_ns;
    bool sent, done;
} item_t;

typedef struct op {
    strata_pool_t *p;
    uint8_t kind, dtype;
    uint32_t flow;
    item_t *items;
    size_t n, ndone, next;
    const uint8_t *src;
    uint8_t *dst;
    const strata_pool_reduce_t *red;
    struct sockaddr_in dests[STRATA_POOL_MAX_DESTS];
    bool dest_done[STRATA_POOL_MAX_DESTS];
    int ndests_done;
    strata_pool_stats_t *stats;
    strata_status_t err;
} op_t;

/* ---- sending and receiving ----------------------------------------------------------------------- */

static void flush(strata_pool_t *p)
{
    pn_send_batch(p->fd, p->tx, p->ntx);
    p->ntx = 0;
}

static void queue(strata_pool_t *p, const struct sockaddr_in *to, pl_hdr_t h, const pl_hop_t *hops,
                  const pl_dest_t *dests, const void *payload, uint8_t zero_dtype)
{
    if (p->ntx == TX_BATCH)
        flush(p);
    size_t plen = payload ? h.len : 0;
    if (plen && (h.op == PL_WRITE || h.op == PL_ADD || h.op == PL_REDUCE) &&
        pk_is_zero(zero_dtype, payload, plen, h.op == PL_WRITE ? 0.0f : p->zero_threshold)) {
        h.flags |= PL_F_ZERO;
        plen = 0;
    }
    pn_dgram_t *d = &p->tx[p->ntx++];
    d->len = pl_encode(d->buf, &h, hops, dests, payload, plen);
    d->addr = *to;
}

/* Waits up to wait_ms for datagrams and hands each valid one to fn; returns how many fn accepted
 * as progress. */
typedef bool (*on_msg_fn)(void *ctx, const pl_msg_t *m, const struct sockaddr_in *from);

static int receive(strata_pool_t *p, long long wait_ms, on_msg_fn fn, void *ctx)
{
    flush(p);
    struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)ST_MIN(wait_ms, INT_MAX)) <= 0)
        return 0;
    int progress = 0;
    for (int rounds = 0; rounds < 16; rounds++) {
        int r = pn_recv_batch(p->fd, p->rx, RX_BATCH);
        for (int i = 0; i < r; i++) {
            pl_msg_t m;
            if (p->rx[i].len != SIZE_MAX && pl_decode(p->rx[i].buf, p->rx[i].len, &m))
                progress += fn(ctx, &m, &p->rx[i].addr);
        }
        if (r < RX_BATCH)
            break;
    }
    flush(p); // what the handlers queued (resends, acknowledgements)
    return progress;
}

static bool same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* ---- the operation engine ------------------------------------------------------------------------ */

static void send_item(op_t *o, size_t i)
{
    strata_pool_t *p = o->p;
    item_t *it = &o->items[i];
    pl_hdr_t h = {.op = o->kind, .dtype = o->dtype, .flow = o->flow, .seq = (uint32_t)i,
                  .addr = it->laddr, .len = (uint32_t)it->len};
    const void *payload = o->src ? o->src + it->off : NULL;
    if (o->kind == PL_REDUCE) {
        const strata_pool_reduce_t *r = o->red;
        pl_hop_t hops[STRATA_POOL_MAX_HOPS];
        pl_dest_t dests[STRATA_POOL_MAX_DESTS];
        for (int k = 0; k < r->hops; k++) {
            int nd = r->route[k].node;
            hops[k] = (pl_hop_t){p->addr[nd].sin_addr.s_addr, p->addr[nd].sin_port, p->token[nd],
                                 r->route[k].addr + it->off};
        }
        for (int k = 0; k < r->ndests; k++)
            dests[k] = (pl_dest_t){o->dests[k].sin_addr.s_addr, o->dests[k].sin_port};
        h.hops = (uint8_t)r->hops;
        h.ndest = (uint8_t)r->ndests;
        h.flags = r->store ? PL_F_STORE : 0;
        h.token = hops[0].token;
        h.addr = it->off;
        h.aux = (uint32_t)o->n;
        queue(p, &p->addr[it->node], h, hops, dests, payload, o->dtype);
    } else {
        h.token = p->token[it->node];
        if (o->kind == PL_STATS)
            h.len = 0;
        queue(p, &p->addr[it->node], h, NULL, NULL, o->kind == PL_READ ? NULL : payload,
              o->kind == PL_ADD ? o->dtype : 0);
    }
    it->sent = true;
    it->sent_ns = st_now_ns();
}

static const char *error_text(uint32_t code)
{
    return code == PL_E_RANGE   ? "the block lies outside its memory"
           : code == PL_E_ALIGN ? "the address is not aligned to the element size"
                                : "it refused the request";
}

static bool on_reply(void *ctx, const pl_msg_t *m, const struct sockaddr_in *from)
{
    op_t *o = ctx;
    strata_pool_t *p = o->p;
    const pl_hdr_t *h = &m->h;
    if (h->flow != o->flow)
        return false; // a late copy from an earlier operation
    char who[32];
    if (h->op == PL_ERROR) {
        if (!o->err)
            o->err = st_error(STRATA_ERR_REMOTE, "pool node %s rejected packet %u: %s",
                              pn_format(from, who, sizeof who), h->seq, error_text(h->aux));
        return true;
    }
    if (o->kind == PL_REDUCE && h->op == PL_NACK) { // a destination asks for blocks again
        for (size_t k = 0; k + 4 <= m->payload_len; k += 4) {
            uint32_t s;
            memcpy(&s, m->payload + k, 4);
            if (s < o->n)
                send_item(o, s);
        }
        return false;
    }
    if (o->kind == PL_REDUCE && h->op == PL_DONE) {
        pl_hdr_t ack = {.op = PL_ACK, .flow = o->flow};
        queue(p, from, ack, NULL, NULL, NULL, 0);
        for (int k = 0; k < o->red->ndests; k++)
            if (!o->dest_done[k] && same_addr(&o->dests[k], from)) {
                o->dest_done[k] = true;
                o->ndests_done++;
                return true;
            }
        return false;
    }
    if (h->seq >= o->n || o->items[h->seq].done)
        return false;
    item_t *it = &o->items[h->seq];
    uint8_t expect = o->kind == PL_READ     ? PL_READ_REPLY
                     : o->kind == PL_REDUCE ? PL_RESULT
                     : o->kind == PL_STATS  ? PL_STATS_REPLY
                                            : PL_ACK;
    if (h->op != expect)
        return false;
    if (h->op == PL_READ_REPLY || h->op == PL_RESULT) {
        uint64_t off = h->op == PL_RESULT ? h->addr : it->laddr;
        if (h->len != it->len || off != (h->op == PL_RESULT ? it->off : it->laddr))
            return false;
        if (o->dst) {
            if (h->flags & PL_F_ZERO)
                memset(o->dst + it->off, 0, it->len);
            else
                memcpy(o->dst + it->off, m->payload, it->len);
        }
    } else if (h->op == PL_STATS_REPLY) {
        uint64_t v[PL_STATS_FIELDS];
        if (m->payload_len != sizeof v)
            return false;
        memcpy(v, m->payload, sizeof v);
        pl_stats_unpack(v, o->stats);
    }
    it->done = true;
    o->ndone++;
    return true;
}

/* Which hop of a reduction is silent: asks each for its counters; the first that does not answer
 * is named. */
static strata_status_t name_silent_hop(op_t *o)
{
    strata_pool_t *p = o->p;
    const strata_pool_reduce_t *r = o->red;
    long long saved = p->timeout_ms;
    p->timeout_ms = ST_MAX(p->retry_ms * 4, saved / 2); // a live hop answers at once
    int silent = -1;
    for (int k = 0; k < r->hops && silent < 0; k++) {
        strata_pool_stats_t s;
        if (strata_pool_stats(p, r->route[k].node, &s) != STRATA_OK)
            silent = k;
    }
    p->timeout_ms = saved;
    if (silent >= 0)
        return st_error(STRATA_ERR_PEER_FAILED,
                        "pool node %s (hop %d of %d) does not answer: the reduction got no result "
                        "within %lld ms",
                        p->name[r->route[silent].node], silent + 1, r->hops, saved);
    if (o->ndone == o->n)
        for (int k = 0; k < r->ndests; k++)
            if (!o->dest_done[k]) {
                char who[32];
                return st_error(STRATA_ERR_PEER_FAILED,
                                "pool destination %s did not confirm the reduction's result within "
                                "%lld ms",
                                pn_format(&o->dests[k], who, sizeof who), saved);
            }
    return st_error(STRATA_ERR_TIMEOUT,
                    "pool reduction: no result within %lld ms though every hop answers", saved);
}

static strata_status_t run(op_t *o)
{
    strata_pool_t *p = o->p;
    uint64_t retry_ns = (uint64_t)p->retry_ms * 1000000ull;
    uint64_t last_progress = st_now_ns();
    size_t first_undone = 0;
    int dests = o->red ? o->red->ndests : 0;
    while (o->ndone < o->n || o->ndests_done < dests) {
        while (o->next < o->n && o->next - o->ndone < (size_t)p->window)
            send_item(o, o->next++);
        while (first_undone < o->n && o->items[first_undone].done)
            first_undone++;
        uint64_t now = st_now_ns();
        for (size_t i = first_undone; i < o->next; i++)
            if (!o->items[i].done && now - o->items[i].sent_ns >= retry_ns)
                send_item(o, i);
        if (receive(p, p->retry_ms, on_reply, o) > 0)
            last_progress = st_now_ns();
        if (o->err)
            return o->err;
        if (st_now_ns() - last_progress > (uint64_t)p->timeout_ms * 1000000ull) {
            if (o->kind == PL_REDUCE)
                return name_silent_hop(o);
            size_t i = first_undone < o->n ? first_undone : 0;
            return st_error(STRATA_ERR_PEER_FAILED,
                            "pool node %s does not answer: no reply within %lld ms",
                            p->name[o->items[i].node], p->timeout_ms);
        }
    }
    return STRATA_OK;
}

/* ---- interleaved addressing ---------------------------------------------------------------------- */

/* Splits [addr, addr + bytes) of the global space into per-block items. */
static strata_status_t split(strata_pool_t *p, const char *what, uint64_t addr, size_t bytes,
                             item_t **out, size_t *n)
{
    if (addr > p->capacity || bytes > p->capacity - addr)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool %s of %zu bytes at %llu: outside the pool's %llu bytes", what, bytes,
                        (unsigned long long)addr, (unsigned long long)p->capacity);
    size_t B = p->block, cnt = 0;
    for (uint64_t g = addr; g < addr + bytes; g = (g / B + 1) * B)
        cnt++;
    item_t *it = calloc(cnt ? cnt : 1, sizeof *it);
    if (!it)
        return st_error(STRATA_ERR_NO_MEMORY, "pool %s: out of memory", what);
    size_t i = 0;
    for (uint64_t g = addr; g < addr + bytes; g = (g / B + 1) * B, i++) {
        uint64_t k = g / B, in = g % B;
        it[i].node = (int)(k % (uint64_t)p->n);
        it[i].laddr = k / (uint64_t)p->n * B + in;
        it[i].off = (size_t)(g - addr);
        it[i].len = (size_t)ST_MIN(B - in, addr + bytes - g);
    }
    *out = it;
    *n = cnt;
    return STRATA_OK;
}

/* Splits [addr, addr + bytes) of node i's own memory into block-sized items. */
static strata_status_t split_node(strata_pool_t *p, const char *what, int node, uint64_t addr,
                                  size_t bytes, item_t **out, size_t *n)
{
    if (node < 0 || node >= p->n)
        return st_error(STRATA_ERR_INVALID_ARG, "pool %s: node %d of %d", what, node, p->n);
    if (addr > p->node_bytes[node] || bytes > p->node_bytes[node] - addr)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool %s of %zu bytes at %llu: outside node %s's %llu bytes", what, bytes,
                        (unsigned long long)addr, p->name[node],
                        (unsigned long long)p->node_bytes[node]);
    size_t cnt = (bytes + p->block - 1) / p->block;
    item_t *it = calloc(cnt ? cnt : 1, sizeof *it);
    if (!it)
        return st_error(STRATA_ERR_NO_MEMORY, "pool %s: out of memory", what);
    for (size_t i = 0; i < cnt; i++)
        it[i] = (item_t){.node = node, .laddr = addr + i * p->block, .off = i * p->block,
                         .len = ST_MIN(p->block, bytes - i * p->block)};
    *out = it;
    *n = cnt;
    return STRATA_OK;
}

static strata_status_t node_op(strata_pool_t *p, uint8_t kind, int node, uint64_t addr,
                               const void *src, void *dst, size_t bytes)
{
    op_t o = {.p = p, .kind = kind, .flow = ++p->flow, .src = src, .dst = dst};
    ST_TRY(split_node(p, kind == PL_READ ? "read" : "write", node, addr, bytes, &o.items, &o.n));
    strata_status_t rc = run(&o);
    free(o.items);
    return rc;
}

strata_status_t strata_pool_read_node(strata_pool_t *p, int node, uint64_t addr, void *buf,
                                      size_t bytes)
{
    return node_op(p, PL_READ, node, addr, NULL, buf, bytes);
}

strata_status_t strata_pool_write_node(strata_pool_t *p, int node, uint64_t addr, const void *buf,
                                       size_t bytes)
{
    return node_op(p, PL_WRITE, node, addr, buf, NULL, bytes);
}

static strata_status_t global_op(strata_pool_t *p, uint8_t kind, uint8_t dtype, uint64_t addr,
                                 const void *src, void *dst, size_t bytes)
{
    static const char *names[PL_OP_END] = {[PL_READ] = "read", [PL_WRITE] = "write",
                                           [PL_ADD] = "add"};
    op_t o = {.p = p, .kind = kind, .dtype = dtype, .flow = ++p->flow, .src = src, .dst = dst};
    ST_TRY(split(p, names[kind], addr, bytes, &o.items, &o.n));
    strata_status_t rc = run(&o);
    free(o.items);
    return rc;
}

strata_status_t strata_pool_read(strata_pool_t *p, uint64_t addr, void *buf, size_t bytes)
{
    return global_op(p, PL_READ, 0, addr, NULL, buf, bytes);
}

strata_status_t strata_pool_write(strata_pool_t *p, uint64_t addr, const void *buf, size_t bytes)
{
    return global_op(p, PL_WRITE, 0, addr, buf, NULL, bytes);
}

strata_status_t strata_pool_add(strata_pool_t *p, uint64_t addr, const void *buf, size_t count,
                                strata_pool_dtype_t dtype)
{
    size_t es = pl_dtype_size((uint8_t)dtype);
    if (!es)
        return st_error(STRATA_ERR_INVALID_ARG, "pool add: unknown dtype %d", (int)dtype);
    if (addr % es)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool add at %llu: not a multiple of the element size %zu",
                        (unsigned long long)addr, es);
    return global_op(p, PL_ADD, (uint8_t)dtype, addr, buf, NULL, count * es);
}

strata_status_t strata_pool_stats(strata_pool_t *p, int node, strata_pool_stats_t *out)
{
    if (node < 0 || node >= p->n)
        return st_error(STRATA_ERR_INVALID_ARG, "pool stats: node %d of %d", node, p->n);
    item_t it = {.node = node};
    op_t o = {.p = p, .kind = PL_STATS, .flow = ++p->flow, .items = &it, .n = 1, .stats = out};
    return run(&o);
}

/* ---- chained reduction --------------------------------------------------------------------------- */

strata_status_t strata_pool_reduce(strata_pool_t *p, const strata_pool_reduce_t *r)
{
    size_t es = pl_dtype_size((uint8_t)r->dtype);
    if (!es || !r->src || r->hops < 1 || r->hops > STRATA_POOL_MAX_HOPS || r->ndests < 0 ||
        r->ndests > STRATA_POOL_MAX_DESTS || (r->ndests && !r->dests))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pool reduce: needs a source, a dtype, 1-%d hops and 0-%d destinations "
                        "(got %d hops, %d destinations)",
                        STRATA_POOL_MAX_HOPS, STRATA_POOL_MAX_DESTS, r->hops, r->ndests);
    size_t bytes = r->count * es;
    for (int k = 0; k < r->hops; k++) {
        const strata_pool_hop_t *h = &r->route[k];
        if (h->node < 0 || h->node >= p->n)
            return st_error(STRATA_ERR_INVALID_ARG, "pool reduce: hop %d names node %d of %d",
                            k + 1, h->node, p->n);
        if (h->addr % es || h->addr > p->node_bytes[h->node] ||
            bytes > p->node_bytes[h->node] - h->addr)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "pool reduce: hop %d: %zu bytes at %llu do not fit node %s's %llu "
                            "bytes aligned to %zu",
                            k + 1, bytes, (unsigned long long)h->addr, p->name[h->node],
                            (unsigned long long)p->node_bytes[h->node], es);
    }
    op_t o = {.p = p, .kind = PL_REDUCE, .dtype = (uint8_t)r->dtype, .flow = ++p->flow,
              .src = r->src, .dst = r->dst, .red = r};
    for (int k = 0; k < r->ndests; k++)
        ST_TRY(pn_parse_addr(r->dests[k], "pool reduce destination", &o.dests[k]));
    o.n = (bytes + p->block - 1) / p->block;
    o.items = calloc(o.n ? o.n : 1, sizeof *o.items);
    if (!o.items)
        return st_error(STRATA_ERR_NO_MEMORY, "pool reduce: out of memory");
    for (size_t i = 0; i < o.n; i++)
        o.items[i] = (item_t){.node = r->route[0].node, .off = i * p->block,
                              .len = ST_MIN(p->block, bytes - i * p->block)};
    strata_status_t rc = run(&o);
    free(o.items);
    return rc;
}

typedef struct recv_state {
    strata_pool_t *p;
    uint8_t *dst;
    size_t bytes, got_blocks, nblocks;
    uint8_t dtype;
    bool have_origin, acked;
    struct sockaddr_in origin;
    uint32_t flow;
    uint8_t *got; /* per block */
} recv_state_t;

static bool on_result(void *ctx, const pl_msg_t *m, const struct sockaddr_in *from)
{
    recv_state_t *s = ctx;
    const pl_hdr_t *h = &m->h;
    struct sockaddr_in origin = {.sin_family = AF_INET, .sin_port = h->origin_port,
                                 .sin_addr.s_addr = h->origin_ip};
    if (h->op == PL_ACK) { // the origin confirms our DONE
        if (s->have_origin && h->flow == s->flow && same_addr(from, &s->origin))
            s->acked = true;
        return false;
    }
    if (h->op != PL_RESULT || h->dtype != s->dtype)
        return false;
    if (!s->have_origin) {
        if (same_addr(&origin, &s->p->last_origin) && (int32_t)(h->flow - s->p->last_flow) <= 0)
            return false; // a late copy of the reduction received before
        size_t B = s->p->block;
        if (h->aux == 0 || h->aux != (s->bytes + B - 1) / B)
            return false; // not ours: another size (or another block size)
        s->have_origin = true;
        s->origin = origin;
        s->flow = h->flow;
        s->nblocks = h->aux;
        s->got = calloc(s->nblocks, 1);
        if (!s->got)
            return false;
    }
    if (!same_addr(&origin, &s->origin) || h->flow != s->flow || h->seq >= s->nblocks ||
        s->got[h->seq] || h->addr != (uint64_t)h->seq * s->p->block || h->addr > s->bytes ||
        h->len != ST_MIN(s->p->block, s->bytes - h->addr))
        return false;
    if (h->flags & PL_F_ZERO)
        memset(s->dst + h->addr, 0, h->len);
    else
        memcpy(s->dst + h->addr, m->payload, h->len);
    s->got[h->seq] = 1;
    s->got_blocks++;
    return true;
}

strata_status_t strata_pool_receive(strata_pool_t *p, void *dst, size_t count,
                                    strata_pool_dtype_t dtype)
{
    size_t es = pl_dtype_size((uint8_t)dtype);
    if (!es || !dst || !count)
        return st_error(STRATA_ERR_INVALID_ARG, "pool receive: needs a buffer, a count and a dtype");
    recv_state_t s = {.p = p, .dst = dst, .bytes = count * es, .dtype = (uint8_t)dtype};
    uint64_t last_progress = st_now_ns(), timeout_ns = (uint64_t)p->timeout_ms * 1000000ull;
    strata_status_t rc = STRATA_OK;
    while (!s.have_origin || s.got_blocks < s.nblocks) {
        if (receive(p, p->retry_ms, on_result, &s) > 0) {
            last_progress = st_now_ns();
            continue;
        }
        if (st_now_ns() - last_progress > timeout_ns) {
            char who[32];
            rc = s.have_origin
                     ? st_error(STRATA_ERR_PEER_FAILED,
                                "pool receive: %zu of %zu blocks from %s within %lld ms",
                                s.got_blocks, s.nblocks, pn_format(&s.origin, who, sizeof who),
                                p->timeout_ms)
                     : st_error(STRATA_ERR_TIMEOUT,
                                "pool receive: no reduction result arrived within %lld ms",
                                p->timeout_ms);
            goto out;
        }
        if (s.have_origin) { // stalled: ask the origin, which holds the source, for the rest
            uint32_t missing[PL_MAX_PAYLOAD / 4];
            size_t k = 0;
            for (size_t i = 0; i < s.nblocks && k < sizeof missing / 4; i++)
                if (!s.got[i])
                    missing[k++] = (uint32_t)i;
            pl_hdr_t h = {.op = PL_NACK, .flow = s.flow, .len = (uint32_t)(k * 4)};
            queue(p, &s.origin, h, NULL, NULL, missing, 0);
        }
    }
    p->last_origin = s.origin;
    p->last_flow = s.flow;
    // Tell the origin, which waits for every destination before it lets go of its source; give up
    // on its acknowledgement after the timeout (the result is here either way).
    last_progress = st_now_ns();
    while (!s.acked && st_now_ns() - last_progress <= timeout_ns) {
        pl_hdr_t h = {.op = PL_DONE, .flow = s.flow};
        queue(p, &s.origin, h, NULL, NULL, NULL, 0);
        receive(p, p->retry_ms, on_result, &s);
    }
out:
    free(s.got);
    return rc;
}

/* ---- opening ------------------------------------------------------------------------------------- */

typedef struct hello_state {
    int node;
    uint32_t flow;
    uint8_t want;
    const pl_msg_t *reply;
    pl_msg_t msg;
    uint8_t copy[PL_MAX_DGRAM];
    bool got;
    strata_pool_t *p;
} hello_state_t;

static bool on_hello_reply(void *ctx, const pl_msg_t *m, const struct sockaddr_in *from)
{
    hello_state_t *s = ctx;
    if (s->got || m->h.op != s->want || m->h.flow != s->flow ||
        !same_addr(from, &s->p->addr[s->node]))
        return false;
    s->msg = *m;
    if (m->payload_len) { // the receive buffer is reused: keep the payload
        memcpy(s->copy, m->payload, m->payload_len);
        s->msg.payload = s->copy;
    }
    s->got = true;
    return true;
}

/* Sends a handshake message until the reply of kind `want` arrives or the timeout passes. */
static strata_status_t exchange(strata_pool_t *p, hello_state_t *s, pl_hdr_t h, const void *payload)
{
    uint64_t deadline = st_now_ns() + (uint64_t)p->timeout_ms * 1000000ull;
    s->got = false;
    while (!s->got) {
        if (st_now_ns() > deadline)
            return st_error(STRATA_ERR_PEER_FAILED,
                            "pool node %s did not complete the handshake within %lld ms: it is "
                            "down, unreachable, or holds another secret",
                            p->name[s->node], p->timeout_ms);
        queue(p, &p->addr[s->node], h, NULL, NULL, payload, 0);
        receive(p, p->retry_ms, on_hello_reply, s);
    }
    return STRATA_OK;
}

static strata_status_t handshake(strata_pool_t *p, int i, const char *secret)
{
    hello_state_t s = {.node = i, .flow = ++p->flow, .p = p};
    uint8_t nc[PL_NONCE], auth[2 * PL_NONCE + PL_MAC], proof[PL_MAC];
    ST_TRY(pn_random(nc, sizeof nc));
    s.want = PL_CHALLENGE;
    ST_TRY(exchange(p, &s, (pl_hdr_t){.op = PL_HELLO, .flow = s.flow, .len = PL_NONCE}, nc));
    if (s.msg.payload_len != 2 * PL_NONCE || memcmp(s.msg.payload, nc, PL_NONCE))
        return st_error(STRATA_ERR_REMOTE, "pool node %s: malformed handshake challenge",
                        p->name[i]);
    memcpy(auth, nc, PL_NONCE);
    memcpy(auth + PL_NONCE, s.msg.payload + PL_NONCE, PL_NONCE);
    pn_mac(secret, "client", auth, auth + PL_NONCE, auth + 2 * PL_NONCE);
    s.want = PL_WELCOME;
    ST_TRY(exchange(p, &s, (pl_hdr_t){.op = PL_AUTH, .flow = s.flow, .len = sizeof auth}, auth));
    pn_mac(secret, "node", auth, auth + PL_NONCE, proof);
    if (s.msg.payload_len != PL_MAC || !pn_mac_equal(s.msg.payload, proof) || !s.msg.h.token)
        return st_error(STRATA_ERR_REMOTE,
                        "pool node %s could not prove it holds the job's secret", p->name[i]);
    p->token[i] = s.msg.h.token;
    p->node_bytes[i] = s.msg.h.addr;
    return STRATA_OK;
}

strata_status_t strata_pool_open(const char *const *nodes, int n, const char *secret,
                                 long long timeout_ms, strata_pool_t **out)
{
    *out = NULL;
    if (!nodes || n < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "pool open: needs at least one node");
    strata_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return st_error(STRATA_ERR_NO_MEMORY, "pool open: out of memory");
    p->fd = -1;
    p->n = n;
    p->addr = calloc((size_t)n, sizeof *p->addr);
    p->name = calloc((size_t)n, sizeof *p->name);
    p->token = calloc((size_t)n, sizeof *p->token);
    p->node_bytes = calloc((size_t)n, sizeof *p->node_bytes);
    p->rx = aligned_alloc(64, sizeof(pn_dgram_t) * RX_BATCH);
    p->tx = aligned_alloc(64, sizeof(pn_dgram_t) * TX_BATCH);
    strata_status_t rc = STRATA_OK;
    if (!p->addr || !p->name || !p->token || !p->node_bytes || !p->rx || !p->tx) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pool open: out of memory");
        goto fail;
    }
    p->timeout_ms = timeout_ms >= 0 ? timeout_ms : st_knob_int("STRATA_POOL_TIMEOUT_MS", 10000);
    p->retry_ms = ST_MAX(1, st_knob_int("STRATA_POOL_RETRY_MS", 20));
    p->window = (int)ST_MIN(ST_MAX(1, st_knob_int("STRATA_POOL_WINDOW", 64)), 256);
    p->zero_threshold = pl_zero_threshold();
    int mtu = 65536;
    for (int i = 0; i < n; i++) {
        ST_TRY_GOTO(pn_parse_addr(nodes[i], "pool node", &p->addr[i]), rc, fail);
        pn_format(&p->addr[i], p->name[i], sizeof p->name[i]);
        mtu = ST_MIN(mtu, pn_path_mtu(&p->addr[i]));
    }
    // The largest block whose REDUCE datagram (header, longest route, payload) fits the MTU.
    long room = (long)mtu - IP_UDP_HDR - PL_HDR - PL_ROUTE_ROOM;
    p->block = (size_t)ST_MIN(PL_MAX_PAYLOAD, ST_MAX(256, room / 256 * 256));
    struct sockaddr_in any = {.sin_family = AF_INET};
    ST_TRY_GOTO(pn_socket(&any, &p->fd), rc, fail);
    for (int i = 0; i < n; i++)
        ST_TRY_GOTO(handshake(p, i, secret), rc, fail);
    uint64_t per_node = UINT64_MAX;
    for (int i = 0; i < n; i++)
        per_node = ST_MIN(per_node, p->node_bytes[i] / p->block);
    p->capacity = per_node * p->block * (uint64_t)n;
    *out = p;
    return STRATA_OK;
fail:
    strata_pool_close(p);
    return rc;
}

size_t strata_pool_block_bytes(const strata_pool_t *p)
{
    return p->block;
}

uint64_t strata_pool_capacity(const strata_pool_t *p)
{
    return p->capacity;
}

int strata_pool_port(const strata_pool_t *p)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(p->fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    return ntohs(a.sin_port);
}

void strata_pool_close(strata_pool_t *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    free(p->addr);
    free(p->name);
    free(p->token);
    free(p->node_bytes);
    free(p->rx);
    free(p->tx);
    free(p);
}
