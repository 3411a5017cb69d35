/* The allreduce through the pool (strata/pool.h, docs/pool.md): the ranks but the first write
 * their buffers into pool blocks, the first rank pushes its own through the chain of those blocks,
 * every hop adds its block in flight, and the last hop sends the sum to every rank.
 *
 * Each chunk of the buffer takes four rounds:
 *   1. ranks 1..n-1 write the chunk into their block and tell rank 0 where their results go (the
 *      message is also the barrier: rank 0 reduces only once every block holds its data);
 *   2. rank 0 tells every rank whether the reduction goes ahead (every write succeeded) and where
 *      it comes from; if not, every rank fails with rank 0's reason, naming the rank and node;
 *   3. rank 0 runs the chained reduction with every other rank as a destination; they receive;
 *   4. rank 0 tells everyone the reduction is over. Until then it may still repair a packet some
 *      receiver missed by sending it through the chain again, so no rank may overwrite its block.
 *
 * Blocks: every world rank owns one slot of the pool, on node (world rank mod N), so communicators
 * with different members never share one. A rank runs one pool allreduce at a time.
 *
 * The result: with STRATA_POOL_MULTICAST, the last hop sends it once to the communicator's
 * multicast group (the base group plus the communicator's context in the low 12 bits) and the
 * network copies it; when any rank could not join, to each rank. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/algo.h"
#include "strata/pool.h"

struct st_pool_conn {
    int n;                 /* nodes STRATA_POOL_NODES names */
    int world_size;
    strata_pool_t *client; /* opened on the first pool allreduce */
    char self[64];         /* "ADDR:PORT" where this rank's results arrive */
    size_t slot;           /* bytes of one world rank's slot */
    char group[64];        /* the communicator's multicast group; "" for none */
    bool joined;           /* this rank receives the group */
};

/* This rank's slot is in use from its write until rank 0 says the reduction is over (rank 0
 * itself writes no slot: its part travels in the packets). */
static atomic_bool slot_busy;

/* The communicator's group: STRATA_POOL_MULTICAST's address plus ctx in its low 12 bits. */
static void group_of(uint32_t ctx, char *out, size_t len)
{
    const char *base = st_knob_str("STRATA_POOL_MULTICAST");
    char host[64];
    const char *colon = strrchr(base, ':');
    struct in_addr a;
    size_t hl = colon ? (size_t)(colon - base) : 0;
    out[0] = '\0';
    if (!*base)
        return;
    if (!colon || hl >= sizeof host || (memcpy(host, base, hl), host[hl] = '\0',
                                        inet_pton(AF_INET, host, &a) != 1) ||
        !IN_MULTICAST(ntohl(a.s_addr))) {
        ST_LOG_WARN(ST_SUB_COMM, "STRATA_POOL_MULTICAST '%s' is not a multicast ADDR:PORT; the "
                    "pool allreduce sends its results by unicast", base);
        return;
    }
    a.s_addr = htonl((ntohl(a.s_addr) & ~0xfffu) | (ctx & 0xfffu));
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    snprintf(out, len, "%s%s", ip, colon);
}

st_pool_conn_t *st_pool_conn_new(int world_size, uint32_t ctx)
{
    int n = strata_pool_env_nodes();
    st_pool_conn_t *c = n > 0 ? calloc(1, sizeof *c) : NULL;
    if (!c)
        return NULL;
    c->n = n;
    c->world_size = world_size;
    group_of(ctx, c->group, sizeof c->group);
    return c;
}

void st_pool_conn_free(st_pool_conn_t *c)
{
    if (!c)
        return;
    strata_pool_close(c->client);
    free(c);
}

int st_pool_conn_nodes(const st_pool_conn_t *c)
{
    return c ? c->n : 0;
}

bool st_pool_conn_multicast(const st_pool_conn_t *c)
{
    return c && c->group[0];
}

/* Opens the client on first use and sizes the slots: the capacity of a node split evenly among
 * the world ranks it holds, in whole blocks. */
static strata_status_t conn_open(st_pool_conn_t *c)
{
    if (c->client)
        return STRATA_OK;
    strata_pool_t *p;
    ST_TRY(strata_pool_open_env(-1, &p));
    size_t block = strata_pool_block_bytes(p);
    uint64_t per_node = strata_pool_capacity(p) / (uint64_t)c->n;
    uint64_t ranks_per_node = ((uint64_t)c->world_size + (uint64_t)c->n - 1) / (uint64_t)c->n;
    c->slot = (size_t)(per_node / ranks_per_node / block * block);
    if (c->slot == 0) {
        strata_pool_close(p);
        return st_error(STRATA_ERR_NO_MEMORY,
                        "pool allreduce: %d ranks need at least %llu bytes on each of the %d pool "
                        "nodes (one %zu-byte block per rank); they have %llu",
                        c->world_size, (unsigned long long)(ranks_per_node * block), c->n, block,
                        (unsigned long long)per_node);
    }
    strata_status_t rc = strata_pool_address(p, c->self, sizeof c->self);
    if (rc < 0) {
        strata_pool_close(p);
        return rc;
    }
    c->client = p;
    if (c->group[0]) {
        c->joined = strata_pool_join(p, c->group) == STRATA_OK;
        if (!c->joined)
            ST_LOG_WARN(ST_SUB_COMM, "pool allreduce: results come by unicast: %s",
                        strata_last_error());
    }
    return STRATA_OK;
}

/* What a rank tells rank 0 after writing its block (and rank 0 tells every rank). */
typedef struct ready {
    int32_t status;
    int32_t joined; /* it receives the communicator's multicast group */
    char addr[64];  /* where its result goes (rank 0: where the reduction comes from) */
    char error[184];
} ready_t;

/* One chunk of one rank's allreduce. */
typedef struct chunk {
    st_pool_conn_t *conn;
    const char *src;
    char *dst;
    size_t count;
    strata_pool_dtype_t dtype;
    int rank, n;
    bool first, last; /* chunks of this call */
    ready_t mine;     /* ranks 1..n-1: sent to rank 0; rank 0: sent to every rank */
    ready_t *peers;   /* rank 0: from ranks 1..n-1, [rank]; others: [0] from rank 0 */
    int32_t over;     /* rank 0 -> all: the reduction is over */
} chunk_t;

static uint64_t slot_addr(const st_pool_conn_t *c, int world_rank)
{
    return (uint64_t)(world_rank / c->n) * c->slot;
}

static strata_status_t claim_slot(chunk_t *k)
{
    bool was = false;
    if (k->first && !atomic_compare_exchange_strong(&slot_busy, &was, true))
        return st_error(STRATA_ERR_INVALID_ARG, "pool allreduce: this rank already has one in "
                        "flight; the pool allows one at a time per rank (docs/pool.md)");
    return STRATA_OK;
}

/* Round 1, ranks 1..n-1: the chunk into this rank's slot, and the note to rank 0. A failure goes to
 * rank 0 in the note (which then fails naming this rank) and is returned here in round 2, once the
 * note is sent. */
static strata_status_t write_block(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    (void)s;
    chunk_t *k = arg;
    ST_TRY(claim_slot(k));
    st_pool_conn_t *c = k->conn;
    int w = st_ep_rank(ep);
    (void)world;
    strata_status_t rc = strata_pool_write_node(c->client, w % c->n, slot_addr(c, w), k->src,
                                                k->count * (k->dtype == STRATA_POOL_F32 ? 4 : 2));
    k->mine.status = rc;
    k->mine.joined = c->joined;
    snprintf(k->mine.addr, sizeof k->mine.addr, "%s", c->self);
    if (rc < 0) {
        snprintf(k->mine.error, sizeof k->mine.error, "%s", strata_last_error());
        atomic_store(&slot_busy, false);
    }
    return STRATA_OK;
}

/* Round 2, rank 0: whether every write succeeded, in the message every rank gets next (a failure
 * is returned in round 3, once the message is sent). */
static strata_status_t check_writes(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    (void)s;
    (void)ep;
    (void)world;
    chunk_t *k = arg;
    for (int r = 1; r < k->n && k->mine.status >= 0; r++)
        if (k->peers[r].status < 0) {
            k->peers[r].error[sizeof k->peers[r].error - 1] = '\0';
            k->mine.status = k->peers[r].status;
            // A long reason is cut to the message's room; the rank's own log has it whole.
            if (snprintf(k->mine.error, sizeof k->mine.error,
                         "pool allreduce: rank %d could not write its block: %s", r,
                         k->peers[r].error) < 0)
                k->mine.error[0] = '\0';
        }
    return STRATA_OK;
}

/* Round 3, rank 0: the chain through every other rank's block, grouped by node so a packet
 * crosses between nodes as seldom as it can, with every other rank as a destination. */
static strata_status_t reduce_chain(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    (void)s;
    (void)ep;
    chunk_t *k = arg;
    st_pool_conn_t *c = k->conn;
    strata_pool_hop_t route[STRATA_POOL_MAX_HOPS];
    const char *dests[STRATA_POOL_MAX_DESTS];
    if (k->mine.status < 0)
        return st_error(k->mine.status, "%s", k->mine.error);
    int hops = 0;
    for (int node = 0; node < c->n; node++)
        for (int r = 1; r < k->n; r++)
            if (world[r] % c->n == node)
                route[hops++] = (strata_pool_hop_t){node, slot_addr(c, world[r])};
    bool all_joined = c->group[0];
    for (int r = 1; r < k->n; r++) {
        k->peers[r].addr[sizeof k->peers[r].addr - 1] = '\0';
        dests[r - 1] = k->peers[r].addr;
        all_joined &= k->peers[r].joined != 0;
    }
    strata_pool_reduce_t op = {.src = k->src, .dst = k->dst, .count = k->count, .dtype = k->dtype,
                               .route = route, .hops = hops, .dests = dests, .ndests = k->n - 1,
                               .group = all_joined ? c->group : NULL};
    strata_status_t rc = strata_pool_reduce(c->client, &op);
    k->over = rc;
    return rc;
}

/* Round 3, ranks 1..n-1: the result, unless this rank's write or another's failed. */
static strata_status_t receive(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    (void)s;
    (void)ep;
    (void)world;
    chunk_t *k = arg;
    if (k->mine.status < 0)
        return st_error(k->mine.status, "%s", k->mine.error);
    k->peers[0].error[sizeof k->peers[0].error - 1] = '\0';
    if (k->peers[0].status < 0) {
        atomic_store(&slot_busy, false);
        return st_error(k->peers[0].status, "%s", k->peers[0].error);
    }
    k->peers[0].addr[sizeof k->peers[0].addr - 1] = '\0';
    strata_status_t rc = strata_pool_receive_from(k->conn->client, k->peers[0].addr, k->dst,
                                                  k->count, k->dtype);
    if (rc < 0) {
        atomic_store(&slot_busy, false);
        return st_error(rc, "pool allreduce: the result of rank 0's reduction did not arrive (its "
                        "log says why): %s", strata_last_error());
    }
    return rc;
}

/* Round 4, ranks 1..n-1: the slot is free again once rank 0 says so. */
static strata_status_t release(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    (void)s;
    (void)ep;
    (void)world;
    chunk_t *k = arg;
    if (k->last || k->over < 0)
        atomic_store(&slot_busy, false);
    return k->over < 0 ? st_error(k->over, "pool allreduce: rank 0's reduction failed (see its log)")
                       : STRATA_OK;
}

static bool pool_serves(const st_coll_args_t *a)
{
    return a->pool && a->count > 0 && a->nranks - 1 <= STRATA_POOL_MAX_HOPS &&
           a->nranks - 1 <= STRATA_POOL_MAX_DESTS &&
           (a->op == STRATA_OP_SUM || a->op == STRATA_OP_AVG) &&
           (a->dtype == STRATA_DTYPE_F32 || a->dtype == STRATA_DTYPE_BF16);
}

static strata_status_t allreduce_pool(st_sched_t *s, const st_coll_args_t *a)
{
    st_pool_conn_t *c = a->pool;
    ST_TRY(conn_open(c));
    const int n = a->nranks, r = a->rank;
    const strata_pool_dtype_t dtype = a->dtype == STRATA_DTYPE_F32 ? STRATA_POOL_F32
                                                                   : STRATA_POOL_BF16;
    const size_t per = c->slot / a->esize, nchunks = (a->count + per - 1) / per;
    const size_t npeers = r == 0 ? (size_t)n : 1;
    chunk_t *chunks = st_sched_scratch(s, nchunks * (sizeof *chunks + npeers * sizeof(ready_t)));
    if (!chunks)
        return s->build_rc;
    ready_t *peers = (ready_t *)(chunks + nchunks);
    for (size_t i = 0; i < nchunks; i++) {
        chunk_t *k = &chunks[i];
        size_t off = i * per;
        *k = (chunk_t){.conn = c,
                       .src = (const char *)a->sendbuf + off * a->esize,
                       .dst = (char *)a->recvbuf + off * a->esize,
                       .count = ST_MIN(per, a->count - off),
                       .dtype = dtype,
                       .rank = r,
                       .n = n,
                       .first = i == 0,
                       .last = i + 1 == nchunks,
                       .peers = peers + i * npeers};
        uint32_t tag = 2 * (uint32_t)i;
        if (r == 0) {
            snprintf(k->mine.addr, sizeof k->mine.addr, "%s", c->self);
            for (int p = 1; p < n; p++)
                st_sched_recv(s, p, tag, &k->peers[p], sizeof(ready_t));
            st_sched_round(s);
            st_sched_call(s, check_writes, k);
            for (int p = 1; p < n; p++)
                st_sched_send(s, p, tag, &k->mine, sizeof k->mine);
            st_sched_round(s);
            st_sched_call(s, reduce_chain, k);
            st_sched_round(s);
            for (int p = 1; p < n; p++)
                st_sched_send(s, p, tag + 1, &k->over, sizeof k->over);
        } else {
            st_sched_call(s, write_block, k);
            st_sched_send(s, 0, tag, &k->mine, sizeof k->mine);
            st_sched_round(s);
            st_sched_recv(s, 0, tag, &k->peers[0], sizeof(ready_t));
            st_sched_round(s);
            st_sched_call(s, receive, k);
            st_sched_round(s);
            st_sched_recv(s, 0, tag + 1, &k->over, sizeof k->over);
            st_sched_round(s);
            st_sched_call(s, release, k);
        }
        st_sched_round(s);
    }
    return s->build_rc;
}

const st_algo_t st_algo_allreduce_pool = {
    "pool",
    "through strata pool nodes (STRATA_POOL_NODES): the chain adds every rank's block in flight, "
    "the last node sends the result to all (float32/bfloat16 sum, at most 9 ranks)",
    STRATA_COLL_ALLREDUCE, STRATA_ALGO_POOL, pool_serves, allreduce_pool};
