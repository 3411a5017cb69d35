/* Chained reduction through the pool (REDUCE-FORWARD): the caller's source pushed through a route
 * of hops, the result to the caller and to other receivers, with receivers asking the source for
 * blocks they miss (docs/pool.md). */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "pool/client.h"
#include "pool/kernels.h"
#include "pool/node.h"

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
    if (r->group) {
        ST_TRY(pn_parse_addr(r->group, "pool reduce multicast group", &o.group));
        if (!IN_MULTICAST(ntohl(o.group.sin_addr.s_addr)))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "pool reduce: group %s is not a multicast address (224.0.0.0/4)",
                            r->group);
        o.has_group = true;
    }
    o.n = (bytes + p->block - 1) / p->block;
    // A receiver that misses a block is served from the source until every receiver is done, so
    // a result over its own source collects in a buffer of its own until then.
    const uint8_t *s8 = r->src, *d8 = r->dst;
    bool overlap = d8 && d8 < s8 + bytes && s8 < d8 + bytes;
    uint8_t *stage = overlap ? malloc(bytes ? bytes : 1) : NULL;
    o.items = calloc(o.n ? o.n : 1, sizeof *o.items);
    if (!o.items || (overlap && !stage)) {
        free(o.items);
        free(stage);
        return st_error(STRATA_ERR_NO_MEMORY, "pool reduce: out of memory");
    }
    if (overlap)
        o.dst = stage;
    for (size_t i = 0; i < o.n; i++)
        o.items[i] = (item_t){.node = r->route[0].node, .off = i * p->block,
                              .len = ST_MIN(p->block, bytes - i * p->block)};
    strata_status_t rc = pc_run(&o);
    if (rc == STRATA_OK && overlap)
        memcpy(r->dst, stage, bytes);
    free(stage);
    free(o.items);
    return rc;
}

typedef struct recv_state {
    strata_pool_t *p;
    uint8_t *dst;
    size_t bytes, got_blocks, nblocks;
    uint8_t dtype;
    bool have_origin, acked;
    bool from_known;                /* only results of this origin count */
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
        if (s->have_origin && h->flow == s->flow && pc_same_addr(from, &s->origin))
            s->acked = true;
        return false;
    }
    if (h->op != PL_RESULT || h->dtype != s->dtype)
        return false;
    if (!s->have_origin) {
        if (s->from_known && !pc_same_addr(&origin, &s->origin))
            return false; // another origin's, on a group this client shares
        if (pc_same_addr(&origin, &s->p->last_origin) && (int32_t)(h->flow - s->p->last_flow) <= 0)
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
    if (!pc_same_addr(&origin, &s->origin) || h->flow != s->flow || h->seq >= s->nblocks ||
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

/* Tells the origin, which waits for every destination before it lets go of its source, that the
 * result is here. The origin acknowledges every DONE, and once more to every destination when it
 * returns; an acknowledgement lost after it returned is never repeated, and waiting for one until
 * the timeout stalled the whole job 10 s (about 1 call in 50 on the emulated cluster at 1% loss).
 * So a DONE goes PC_DONE_TRIES times (client.h: about 1 s in all), and then this destination
 * returns: its result is complete either way, and only the loss of every DONE leaves the origin
 * without it (the origin then fails, naming this destination). */
static void confirm(strata_pool_t *p, recv_state_t *s)
{
    uint64_t rto = pc_rto_ns(p), gap = rto, timeout_ns = (uint64_t)p->timeout_ms * 1000000ull;
    uint64_t start = st_now_ns();
    for (int tries = 0; !s->acked && tries < PC_DONE_TRIES;
         tries++, gap = ST_MIN(2 * gap, PC_DONE_GAP_MAX * rto)) {
        pl_hdr_t h = {.op = PL_DONE, .flow = s->flow};
        pc_queue(p, &s->origin, h, NULL, NULL, NULL, 0);
        uint64_t now = st_now_ns(), until = ST_MIN(now + gap, start + timeout_ns);
        for (; !s->acked && now < until; now = st_now_ns())
            pc_receive(p, (long long)((until - now + 999999) / 1000000), on_result, s);
    }
}

strata_status_t strata_pool_receive(strata_pool_t *p, void *dst, size_t count,
                                    strata_pool_dtype_t dtype)
{
    return strata_pool_receive_from(p, NULL, dst, count, dtype);
}

strata_status_t strata_pool_receive_from(strata_pool_t *p, const char *origin, void *dst,
                                         size_t count, strata_pool_dtype_t dtype)
{
    size_t es = pl_dtype_size((uint8_t)dtype);
    if (!es || !dst || !count)
        return st_error(STRATA_ERR_INVALID_ARG, "pool receive: needs a buffer, a count and a dtype");
    recv_state_t s = {.p = p, .dst = dst, .bytes = count * es, .dtype = (uint8_t)dtype};
    if (origin) {
        ST_TRY(pn_parse_addr(origin, "pool receive origin", &s.origin));
        s.from_known = true;
    }
    uint64_t last_progress = st_now_ns(), timeout_ns = (uint64_t)p->timeout_ms * 1000000ull;
    uint64_t last_nack = 0;
    int nacks = 0; // since the last progress: each waits twice as long as the one before
    strata_status_t rc = STRATA_OK;
    while (!s.have_origin || s.got_blocks < s.nblocks) {
        if (pc_receive(p, p->retry_ms, on_result, &s) > 0) {
            last_progress = st_now_ns();
            nacks = 0;
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
        uint64_t now = st_now_ns();
        uint64_t wait = ST_MIN(pc_rto_ns(p) << ST_MIN(nacks, 6),
                               ST_MAX(pc_rto_ns(p), timeout_ns / 10)); // as the engine's retries
        if (s.have_origin && now - ST_MAX(last_nack, last_progress) >= wait) {
            // stalled: ask the origin, which holds the source, for the rest
            last_nack = now;
            nacks++;
            uint32_t missing[PL_MAX_PAYLOAD / 4];
            size_t k = 0;
            for (size_t i = 0; i < s.nblocks && k < sizeof missing / 4; i++)
                if (!s.got[i])
                    missing[k++] = (uint32_t)i;
            pl_hdr_t h = {.op = PL_NACK, .flow = s.flow, .len = (uint32_t)(k * 4)};
            pc_queue(p, &s.origin, h, NULL, NULL, missing, 0);
        }
    }
    p->last_origin = s.origin;
    p->last_flow = s.flow;
    confirm(p, &s);
out:
    free(s.got);
    return rc;
}

