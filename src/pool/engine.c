/* The pool client's engine: a window of sequenced packets sent in batches, retransmitted until
 * answered, answers matched to their packet by (flow, seq); a call fails within the timeout of
 * silence, naming the node that went quiet (docs/pool.md). */
#include <arpa/inet.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "pool/client.h"
#include "pool/kernels.h"
#include "pool/node.h"

/* ---- sending and receiving ----------------------------------------------------------------------- */

static void flush(strata_pool_t *p)
{
    pn_send_batch(p->fd, p->tx, p->ntx);
    p->ntx = 0;
}

void pc_queue(strata_pool_t *p, const struct sockaddr_in *to, pl_hdr_t h, const pl_hop_t *hops,
                  const pl_dest_t *dests, const void *payload, uint8_t zero_dtype)
{
    if (p->ntx == PC_TX_BATCH)
        flush(p);
    size_t plen = payload ? pl_payload_len(&h) : 0;
    if (plen && (h.op == PL_WRITE || h.op == PL_ADD || h.op == PL_REDUCE) &&
        pk_is_zero(zero_dtype, payload, plen, h.op == PL_WRITE ? 0.0f : p->zero_threshold)) {
        h.flags |= PL_F_ZERO;
        plen = 0;
    }
    pn_dgram_t *d = &p->tx[p->ntx++];
    d->len = pl_encode(d->buf, &h, hops, dests, payload, plen);
    d->addr = *to;
}


int pc_receive(strata_pool_t *p, long long wait_ms, pc_on_msg_fn fn, void *ctx)
{
    flush(p);
    // The client's own socket and its multicast group's (poll skips a negative fd).
    struct pollfd pfd[2] = {{.fd = p->fd, .events = POLLIN}, {.fd = p->mfd, .events = POLLIN}};
    if (poll(pfd, 2, (int)ST_MIN(wait_ms, INT_MAX)) <= 0)
        return 0;
    int progress = 0;
    for (int s = 0; s < 2; s++)
        for (int rounds = 0; (pfd[s].revents & POLLIN) && rounds < 16; rounds++) {
            int r = pn_recv_batch(pfd[s].fd, p->rx, PC_RX_BATCH);
            for (int i = 0; i < r; i++) {
                pl_msg_t m;
                if (p->rx[i].len != SIZE_MAX && pl_decode(p->rx[i].buf, p->rx[i].len, &m))
                    progress += fn(ctx, &m, &p->rx[i].addr);
            }
            if (r < PC_RX_BATCH)
                break;
        }
    flush(p); // what the handlers queued (resends, acknowledgements)
    return progress;
}

bool pc_same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* ---- congestion control -------------------------------------------------------------------------- */

uint64_t pc_rto_ns(const strata_pool_t *p)
{
    double floor = (double)p->retry_ms * 1e6;
    return (uint64_t)(p->srtt_ns > 0 ? fmax(floor, p->srtt_ns + 4 * p->rttvar_ns) : floor);
}

/* An answer to a packet sent once: a round-trip sample, and the window grows. */
static void on_answer(strata_pool_t *p, const item_t *it, uint64_t now)
{
    if (it->tries == 1) {
        double rtt = (double)(now - it->sent_ns);
        if (p->srtt_ns <= 0) {
            p->srtt_ns = rtt;
            p->rttvar_ns = rtt / 2;
        } else {
            p->rttvar_ns = 0.75 * p->rttvar_ns + 0.25 * fabs(p->srtt_ns - rtt);
            p->srtt_ns = 0.875 * p->srtt_ns + 0.125 * rtt;
        }
    }
    p->cwnd += p->cwnd < p->ssthresh ? 1 : 1 / p->cwnd;
    p->cwnd = fmin(p->cwnd, p->window);
}

/* A packet presumed lost (its timeout passed): the window halves, once for all the packets that
 * were in flight together. */
static void on_loss(strata_pool_t *p, const item_t *it, uint64_t now)
{
    if (it->sent_ns < p->recovery_ns)
        return;
    p->ssthresh = fmax(2, p->cwnd / 2);
    p->cwnd = p->ssthresh;
    p->recovery_ns = now;
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
        int nd = o->has_group ? 1 : r->ndests; // one copy to the group, or one to each
        for (int k = 0; k < nd; k++) {
            const struct sockaddr_in *d = o->has_group ? &o->group : &o->dests[k];
            dests[k] = (pl_dest_t){d->sin_addr.s_addr, d->sin_port};
        }
        h.hops = (uint8_t)r->hops;
        h.ndest = (uint8_t)nd;
        h.flags = r->store ? PL_F_STORE : 0;
        h.token = hops[0].token;
        h.addr = it->off;
        h.aux = (uint32_t)o->n;
        pc_queue(p, &p->addr[it->node], h, hops, dests, payload, o->dtype);
    } else if (o->kind == PL_ADAMW) {
        const strata_pool_adamw_t *a = o->adamw;
        pl_adamw_args_t args = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_scale,
                                a->step, it->laddr + (uint64_t)o->adamw_delta[0],
                                it->laddr + (uint64_t)o->adamw_delta[1],
                                it->laddr + (uint64_t)o->adamw_delta[2]};
        uint8_t buf[PL_ADAMW_ARGS];
        pl_adamw_put(buf, &args);
        h.token = p->token[it->node];
        pc_queue(p, &p->addr[it->node], h, NULL, NULL, buf, 0);
    } else {
        h.token = p->token[it->node];
        if (o->kind == PL_STATS)
            h.len = 0;
        bool bodiless = o->kind == PL_READ || o->kind == PL_SUMSQ;
        pc_queue(p, &p->addr[it->node], h, NULL, NULL, bodiless ? NULL : payload,
              o->kind == PL_ADD ? o->dtype : 0);
    }
    it->sent = true;
    it->sent_ns = st_now_ns();
    if (it->tries < UINT8_MAX)
        it->tries++;
}

static const char *error_text(uint32_t code)
{
    return code == PL_E_RANGE   ? "the block lies outside its memory"
           : code == PL_E_ALIGN ? "the address is not aligned to the element size"
           : code == PL_E_OVERLAP ? "the ranges of an update overlap"
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
        // Every destination may ask for the same block: it goes again once per timeout, and
        // only as fast as the congestion window lets (pc_run), never as one burst. A block the
        // window has not reached yet is on its way anyway: sending it out of turn would answer
        // packets the window does not count (it counts from `next` down to `ndone`).
        uint64_t now = st_now_ns(), rto = pc_rto_ns(p);
        for (size_t k = 0; k + 4 <= m->payload_len; k += 4) {
            uint32_t s;
            memcpy(&s, m->payload + k, 4);
            if (s < o->next && !o->items[s].wanted && now - o->items[s].sent_ns >= rto) {
                o->items[s].wanted = true;
                o->nwanted++;
            }
        }
        // A destination whose NACKs list fewer blocks each time is being repaired: progress,
        // however long its repair takes (it used to fail the call after the timeout at high
        // loss). One that asks for the same blocks again is not.
        uint32_t missing = (uint32_t)(m->payload_len / 4);
        for (int k = 0; k < o->red->ndests; k++)
            if (pc_same_addr(&o->dests[k], from)) {
                bool fewer = missing && (!o->dest_missing[k] || missing < o->dest_missing[k]);
                if (fewer)
                    o->dest_missing[k] = missing;
                return fewer;
            }
        return false;
    }
    if (o->kind == PL_REDUCE && h->op == PL_DONE) {
        pl_hdr_t ack = {.op = PL_ACK, .flow = o->flow};
        pc_queue(p, from, ack, NULL, NULL, NULL, 0);
        for (int k = 0; k < o->red->ndests; k++)
            if (!o->dest_done[k] && pc_same_addr(&o->dests[k], from)) {
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
                     : o->kind == PL_SUMSQ  ? PL_SUMSQ_REPLY
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
    } else if (h->op == PL_SUMSQ_REPLY) {
        if (h->addr != it->laddr || m->payload_len != sizeof(double))
            return false;
        memcpy(&o->sums[h->seq], m->payload, sizeof(double));
    } else if (h->op == PL_STATS_REPLY) {
        uint64_t v[PL_STATS_FIELDS];
        if (m->payload_len != sizeof v)
            return false;
        memcpy(v, m->payload, sizeof v);
        pl_stats_unpack(v, o->stats);
    }
    it->done = true;
    o->ndone++;
    on_answer(p, it, st_now_ns());
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

/* Resends the blocks destinations asked for, a window's worth per round trip at most. */
static void resend_wanted(op_t *o, uint64_t now)
{
    strata_pool_t *p = o->p;
    uint64_t rto = pc_rto_ns(p);
    if (now - o->repair_epoch_ns >= rto) {
        o->repair_epoch_ns = now;
        o->repair_budget = p->cwnd;
    }
    for (size_t i = 0; i < o->n && o->nwanted && o->repair_budget >= 1; i++) {
        if (!o->items[i].wanted)
            continue;
        o->items[i].wanted = false;
        o->nwanted--;
        o->repair_budget--;
        send_item(o, i);
    }
}

strata_status_t pc_run(op_t *o)
{
    strata_pool_t *p = o->p;
    uint64_t last_progress = st_now_ns();
    size_t first_undone = 0;
    int dests = o->red ? o->red->ndests : 0;
    while (o->ndone < o->n || o->ndests_done < dests) {
        while (first_undone < o->n && o->items[first_undone].done)
            first_undone++;
        // Never past the node's dedup window from the oldest unanswered packet: a node forgets
        // seqs that fall off it, and must still recognise that one's retransmission.
        while (o->next < o->n && (double)(o->next - o->ndone) < p->cwnd &&
               o->next < first_undone + PL_DEDUP_WINDOW)
            send_item(o, o->next++);
        // A packet unanswered for its timeout goes again, the timeout doubling with every try, up
        // to a tenth of the call's timeout: a lost packet must get several tries before silence
        // is taken for a dead node.
        uint64_t now = st_now_ns(), rto = pc_rto_ns(p);
        uint64_t most = ST_MAX(rto, (uint64_t)p->timeout_ms * 100000ull);
        for (size_t i = first_undone; i < o->next; i++) {
            item_t *it = &o->items[i];
            if (!it->done && now - it->sent_ns >= ST_MIN(rto << ST_MIN(it->tries - 1, 6), most)) {
                on_loss(p, it, now);
                send_item(o, i);
            }
        }
        if (o->nwanted)
            resend_wanted(o, now);
        if (pc_receive(p, p->retry_ms, on_reply, o) > 0)
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
    // Every destination has confirmed. The acknowledgement of the last DONE (or of any sent just
    // before) may be lost, and nobody answers a repeated DONE once this call returns: a last
    // acknowledgement to every destination, sent twice, so a destination rarely waits out its DONEs.
    for (int copy = 0; copy < PC_FINAL_ACKS; copy++)
        for (int k = 0; k < dests; k++)
            pc_queue(p, &o->dests[k], (pl_hdr_t){.op = PL_ACK, .flow = o->flow}, NULL, NULL, NULL,
                     0);
    flush(p);
    return STRATA_OK;
}

