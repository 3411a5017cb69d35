/* The pool client: authenticates to every node (HELLO challenge-response), discovers the block
 * size from the path MTU, and maps the interleaved global address space onto the nodes for
 * read, write, add and stats (docs/pool.md). The engine is engine.c, reductions reduce.c, the
 * optimizer's operations optim.c. */
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

#define IP_UDP_HDR 28

/* ---- interleaved addressing ---------------------------------------------------------------------- */

strata_status_t pc_split(strata_pool_t *p, const char *what, uint64_t addr, size_t bytes,
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
    strata_status_t rc = pc_run(&o);
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
    ST_TRY(pc_split(p, names[kind], addr, bytes, &o.items, &o.n));
    strata_status_t rc = pc_run(&o);
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
    return pc_run(&o);
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
        !pc_same_addr(from, &s->p->addr[s->node]))
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
        pc_queue(p, &p->addr[s->node], h, NULL, NULL, payload, 0);
        pc_receive(p, p->retry_ms, on_hello_reply, s);
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
    p->fd = p->mfd = -1;
    p->n = n;
    p->addr = calloc((size_t)n, sizeof *p->addr);
    p->name = calloc((size_t)n, sizeof *p->name);
    p->token = calloc((size_t)n, sizeof *p->token);
    p->node_bytes = calloc((size_t)n, sizeof *p->node_bytes);
    p->rx = aligned_alloc(64, sizeof(pn_dgram_t) * PC_RX_BATCH);
    p->tx = aligned_alloc(64, sizeof(pn_dgram_t) * PC_TX_BATCH);
    strata_status_t rc = STRATA_OK;
    if (!p->addr || !p->name || !p->token || !p->node_bytes || !p->rx || !p->tx) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pool open: out of memory");
        goto fail;
    }
    p->timeout_ms = timeout_ms >= 0 ? timeout_ms : st_knob_int("STRATA_POOL_TIMEOUT_MS", 10000);
    p->retry_ms = ST_MAX(1, st_knob_int("STRATA_POOL_RETRY_MS", 20));
    p->window = (int)ST_MIN(ST_MAX(1, st_knob_int("STRATA_POOL_WINDOW", 64)), 256);
    p->cwnd = ST_MIN(8, p->window);
    p->ssthresh = p->window;
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

strata_status_t strata_pool_join(strata_pool_t *p, const char *group)
{
    struct sockaddr_in g;
    ST_TRY(pn_parse_addr(group, "pool multicast group", &g));
    if (p->mfd >= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "pool join %s: the client is in a group already",
                        group);
    return pn_join_group(&g, &p->addr[0], &p->mfd);
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

#define ENV_MAX_NODES 64

int strata_pool_env_nodes(void)
{
    const char *list = st_knob_str("STRATA_POOL_NODES");
    int n = *list ? 1 : 0;
    for (const char *s = list; *s; s++)
        n += *s == ',';
    return n;
}

strata_status_t strata_pool_open_env(long long timeout_ms, strata_pool_t **out)
{
    *out = NULL;
    const char *list = st_knob_str("STRATA_POOL_NODES");
    if (!list[0])
        return st_error(STRATA_ERR_INVALID_ARG, "no pool nodes: set STRATA_POOL_NODES to the comma "
                        "list of ADDR:PORT that each `strata pool serve` printed");
    char *buf = strdup(list);
    if (!buf)
        return st_error(STRATA_ERR_NO_MEMORY, "pool open: out of memory");
    const char *nodes[ENV_MAX_NODES];
    int n = 0;
    strata_status_t rc = STRATA_OK;
    for (char *s = buf, *next; s && rc == STRATA_OK; s = next) {
        next = strchr(s, ',');
        if (next)
            *next++ = 0;
        if (!s[0] || n == ENV_MAX_NODES)
            rc = st_error(STRATA_ERR_INVALID_ARG, "STRATA_POOL_NODES '%s': %s", list,
                          s[0] ? "more than 64 nodes"
                               : "an empty entry (expected ADDR:PORT,ADDR:PORT,...)");
        else
            nodes[n++] = s;
    }
    const char *secret = st_knob_str("STRATA_POOL_SECRET");
    if (rc == STRATA_OK)
        rc = strata_pool_open(nodes, n, secret[0] ? secret : st_knob_str("STRATA_SECRET"),
                              timeout_ms, out);
    free(buf);
    return rc;
}

strata_status_t strata_pool_address(const strata_pool_t *p, char *buf, size_t len)
{
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)strata_pool_port(p))};
    ST_TRY(pn_local_addr(&p->addr[0], &me.sin_addr));
    char text[32];
    if ((size_t)snprintf(buf, len, "%s", pn_format(&me, text, sizeof text)) >= len)
        return st_error(STRATA_ERR_INVALID_ARG, "pool address: %zu bytes are too few for %s", len,
                        text);
    return STRATA_OK;
}

void strata_pool_close(strata_pool_t *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    if (p->mfd >= 0)
        close(p->mfd);
    free(p->addr);
    free(p->name);
    free(p->token);
    free(p->node_bytes);
    free(p->rx);
    free(p->tx);
    free(p);
}

