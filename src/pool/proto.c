/* Encoding and validating the pool's datagrams (layout in proto.h and docs/pool.md). */
#include <string.h>

#include "pool/proto.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

size_t pl_dtype_size(uint8_t dtype)
{
    return dtype == STRATA_POOL_F32 ? 4 : dtype == STRATA_POOL_BF16 ? 2 : 0;
}

void pl_adamw_put(uint8_t out[PL_ADAMW_ARGS], const pl_adamw_args_t *a)
{
    const float f[6] = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->grad_scale};
    memcpy(out, f, sizeof f);
    put64(out + 24, (uint64_t)a->step);
    put64(out + 32, a->m);
    put64(out + 40, a->v);
    put64(out + 48, a->g);
}

void pl_adamw_get(const uint8_t in[PL_ADAMW_ARGS], pl_adamw_args_t *a)
{
    float f[6];
    memcpy(f, in, sizeof f);
    *a = (pl_adamw_args_t){f[0], f[1], f[2], f[3], f[4], f[5], (int64_t)get64(in + 24),
                           get64(in + 32), get64(in + 40), get64(in + 48)};
}

size_t pl_payload_len(const pl_hdr_t *h)
{
    if ((h->flags & PL_F_ZERO) || h->op == PL_READ || h->op == PL_SUMSQ)
        return 0;
    return h->op == PL_ADAMW ? PL_ADAMW_ARGS : h->len;
}

size_t pl_encode(uint8_t *buf, const pl_hdr_t *h, const pl_hop_t *hops, const pl_dest_t *dests,
                 const void *payload, size_t payload_len)
{
    put32(buf, PL_MAGIC);
    buf[4] = h->op;
    buf[5] = h->dtype;
    buf[6] = h->flags;
    buf[7] = h->hops;
    put64(buf + 8, h->token);
    put32(buf + 16, h->flow);
    put32(buf + 20, h->seq);
    put64(buf + 24, h->addr);
    put32(buf + 32, h->len);
    put32(buf + 36, h->aux);
    put32(buf + 40, h->origin_ip);
    put16(buf + 44, h->origin_port);
    buf[46] = h->ndest;
    buf[47] = PL_VERSION;
    size_t off = PL_HDR;
    for (int i = 0; i < h->hops; i++, off += PL_HOP) {
        put32(buf + off, hops[i].ip);
        put16(buf + off + 4, hops[i].port);
        put16(buf + off + 6, 0);
        put64(buf + off + 8, hops[i].token);
        put64(buf + off + 16, hops[i].addr);
    }
    for (int i = 0; i < h->ndest; i++, off += PL_DEST) {
        put32(buf + off, dests[i].ip);
        put16(buf + off + 4, dests[i].port);
        put16(buf + off + 6, 0);
    }
    if (payload_len)
        memcpy(buf + off, payload, payload_len);
    return off + payload_len;
}

bool pl_decode(const uint8_t *buf, size_t n, pl_msg_t *m)
{
    if (n < PL_HDR || n > PL_MAX_DGRAM || get32(buf) != PL_MAGIC || buf[47] != PL_VERSION)
        return false;
    pl_hdr_t *h = &m->h;
    h->op = buf[4];
    h->dtype = buf[5];
    h->flags = buf[6];
    h->hops = buf[7];
    h->token = get64(buf + 8);
    h->flow = get32(buf + 16);
    h->seq = get32(buf + 20);
    h->addr = get64(buf + 24);
    h->len = get32(buf + 32);
    h->aux = get32(buf + 36);
    h->origin_ip = get32(buf + 40);
    h->origin_port = get16(buf + 44);
    h->ndest = buf[46];
    if (h->op < PL_HELLO || h->op >= PL_OP_END || h->len > PL_MAX_PAYLOAD ||
        h->hops > STRATA_POOL_MAX_HOPS || h->ndest > STRATA_POOL_MAX_DESTS ||
        (h->flags & ~(unsigned)(PL_F_ZERO | PL_F_STORE)))
        return false;
    if ((h->op == PL_REDUCE) != (h->hops > 0))
        return false;
    if (h->ndest && h->op != PL_REDUCE)
        return false;
    size_t off = PL_HDR + (size_t)h->hops * PL_HOP + (size_t)h->ndest * PL_DEST;
    if (off > n)
        return false;
    for (int i = 0; i < h->hops; i++) {
        const uint8_t *p = buf + PL_HDR + (size_t)i * PL_HOP;
        m->hop[i] = (pl_hop_t){get32(p), get16(p + 4), get64(p + 8), get64(p + 16)};
    }
    for (int i = 0; i < h->ndest; i++) {
        const uint8_t *p = buf + PL_HDR + (size_t)h->hops * PL_HOP + (size_t)i * PL_DEST;
        m->dest[i] = (pl_dest_t){get32(p), get16(p + 4)};
    }
    m->payload_len = n - off;
    m->payload = buf + off; // never NULL, even when empty: memcpy(dst, payload, 0) stays defined
    // ADAMW and SUMSQ name float32 ranges and take no flags (no ZERO record of their arguments).
    bool ranged = h->op == PL_ADAMW || h->op == PL_SUMSQ;
    if (ranged && (h->flags || h->dtype != STRATA_POOL_F32))
        return false;
    // The payload on the wire is all of it, none (a ZERO record, a READ or SUMSQ request) or the
    // ADAMW arguments.
    if (m->payload_len != pl_payload_len(h))
        return false;
    // Typed payloads and ranges hold whole elements.
    if (h->op == PL_ADD || h->op == PL_REDUCE || h->op == PL_RESULT || ranged) {
        size_t es = pl_dtype_size(h->dtype);
        if (!es || h->len % es)
            return false;
    }
    return true;
}
