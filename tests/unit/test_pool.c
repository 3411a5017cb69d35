/* Unit tests of strata pool (src/pool): the kernels and the wire format against references, and
 * nodes served from threads of this process on loopback: every operation against a reference
 * (float32 and bfloat16), interleaved addressing, zero records, chained reductions over 1..8 nodes
 * against the serial sum, the same under the nodes' seeded drop/duplicate/reorder mode (results
 * still exact, ADD applied once), an allreduce whose result reaches other clients, a node that
 * stops mid-operation (the error names it), a wrong secret, and stray or malformed datagrams
 * (dropped and counted; the node still serves); the optimizer's ADAMW and SUMSQ against
 * strata_adamw_update and a serial sum over 1..4 nodes, with and without the fault mode. No
 * assertion on elapsed time. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/st_test.h"

#include "base/base.h"
#include "base/bf16.h"
#include "pool/kernels.h"
#include "pool/proto.h"

#define SECRET  "pool-s3cret"
#define LONG_MS 30000 /* generous: never reached when passing */
#define NODE_BYTES (1 << 20)
#define MAXN 8

/* ---- nodes in threads ---------------------------------------------------------------------------- */

typedef struct node_thread {
    strata_pool_node_t *node;
    pthread_t tid;
    atomic_int stop;
    _Atomic uint64_t stop_after_rx; /* stop serving once this many datagrams arrived (0: never) */
    char addr[32];
} node_thread_t;

static void *serve(void *arg)
{
    node_thread_t *t = arg;
    while (!atomic_load(&t->stop)) {
        strata_pool_node_poll(t->node, 10);
        strata_pool_stats_t s;
        strata_pool_node_stats(t->node, &s);
        uint64_t limit = atomic_load(&t->stop_after_rx);
        if (limit && s.rx_packets >= limit)
            break; // the node "dies": it stops answering with its socket still open
    }
    return NULL;
}

static void start_nodes(node_thread_t *t, int n, double drop, double dup, double reorder)
{
    for (int i = 0; i < n; i++) {
        strata_pool_node_config_t cfg = {.listen = "127.0.0.1:0", .bytes = NODE_BYTES,
                                         .secret = SECRET, .drop = drop, .dup = dup,
                                         .reorder = reorder, .seed = 1234 + (uint64_t)i};
        atomic_store(&t[i].stop, 0);
        assert_int_equal(strata_pool_node_open(&cfg, &t[i].node), STRATA_OK);
        snprintf(t[i].addr, sizeof t[i].addr, "127.0.0.1:%d", strata_pool_node_port(t[i].node));
        assert_int_equal(pthread_create(&t[i].tid, NULL, serve, &t[i]), 0);
    }
}

/* Stops the nodes' threads: from then on their counters may be read from this thread. */
static void halt_nodes(node_thread_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        atomic_store(&t[i].stop, 1);
        pthread_join(t[i].tid, NULL);
    }
}

static void close_nodes(node_thread_t *t, int n)
{
    for (int i = 0; i < n; i++)
        strata_pool_node_close(t[i].node);
}

static void stop_nodes(node_thread_t *t, int n)
{
    halt_nodes(t, n);
    close_nodes(t, n);
}

static strata_pool_t *open_pool(node_thread_t *t, int n, long long timeout_ms)
{
    const char *addrs[MAXN];
    for (int i = 0; i < n; i++)
        addrs[i] = t[i].addr;
    strata_pool_t *p = NULL;
    if (strata_pool_open(addrs, n, SECRET, timeout_ms, &p) != STRATA_OK)
        fail_msg("open: %s", strata_last_error());
    return p;
}

static void fill(float *v, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(rand() % 2001 - 1000) / 64.0f;
}

/* bfloat16 rounding written independently of the kernel: the nearer of the two neighbours in
 * double precision, ties to the even one. */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)f - (double)st_bf16_to_f32(lo));
    double dh = fabs((double)st_bf16_to_f32(hi) - (double)f);
    if ((u & 0xffff) == 0)
        return lo;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* ---- kernels and wire format --------------------------------------------------------------------- */

static void test_bf16_rounding(void **state)
{
    (void)state;
    // 1 + 2^-8 lies halfway between bf16 1.0 and 1.0078125: ties go to the even one, 1.0.
    assert_int_equal(st_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    // 1 + 3 * 2^-8 lies halfway between 1.0078125 (odd) and 1.015625 (even): up.
    assert_int_equal(st_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    srand(7);
    for (int i = 0; i < 100000; i++) {
        float f = (float)(rand() - RAND_MAX / 2) / (float)(rand() % 1000 + 1);
        assert_int_equal(st_f32_to_bf16(f), ref_bf16(f));
    }
    uint16_t a[37], b[37];
    for (int i = 0; i < 37; i++) {
        a[i] = st_f32_to_bf16((float)i * 1.37f);
        b[i] = st_f32_to_bf16((float)i * -0.51f + 3);
    }
    uint16_t c[37];
    memcpy(c, a, sizeof a);
    pk_add_bf16(c, b, 37);
    for (int i = 0; i < 37; i++)
        assert_int_equal(c[i], ref_bf16(st_bf16_to_f32(a[i]) + st_bf16_to_f32(b[i])));
}

static void test_zero_test(void **state)
{
    (void)state;
    float v[64] = {0};
    assert_true(pk_is_zero(STRATA_POOL_F32, v, sizeof v, 0));
    v[63] = 1e-3f;
    assert_false(pk_is_zero(STRATA_POOL_F32, v, sizeof v, 0));
    assert_true(pk_is_zero(STRATA_POOL_F32, v, sizeof v, 1e-2f));
    v[0] = NAN;
    assert_false(pk_is_zero(STRATA_POOL_F32, v, sizeof v, 1e-2f));
    v[0] = -0.0f;
    assert_false(pk_is_zero(0, v, sizeof v, 0)); // bytes: 1e-3f is not zero bytes
}

static void test_wire_format(void **state)
{
    (void)state;
    static uint8_t buf[PL_MAX_DGRAM];
    float payload[16];
    fill(payload, 16, 3);
    pl_hdr_t h = {.op = PL_REDUCE, .dtype = STRATA_POOL_F32, .hops = 2, .ndest = 1, .token = 77,
                  .flow = 5, .seq = 9, .addr = 4096, .len = sizeof payload, .aux = 3};
    pl_hop_t hops[2] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    pl_dest_t dest = {9, 10};
    size_t n = pl_encode(buf, &h, hops, &dest, payload, sizeof payload);
    assert_int_equal(n, PL_HDR + 2 * PL_HOP + PL_DEST + sizeof payload);
    pl_msg_t m;
    assert_true(pl_decode(buf, n, &m));
    assert_int_equal(m.h.seq, 9);
    assert_int_equal(m.hop[1].token, 7);
    assert_int_equal(m.hop[1].addr, 8);
    assert_int_equal(m.dest[0].port, 10);
    assert_memory_equal(m.payload, payload, sizeof payload);
    // Truncated anywhere: header, route, payload.
    for (size_t cut = 0; cut < n; cut += 7)
        assert_false(pl_decode(buf, cut, &m));
    buf[47] = 2; // another version
    assert_false(pl_decode(buf, n, &m));
    buf[47] = PL_VERSION;
    buf[7] = STRATA_POOL_MAX_HOPS + 1; // too many hops
    assert_false(pl_decode(buf, n, &m));
    buf[7] = 2;
    buf[5] = 9; // unknown dtype for a typed op
    assert_false(pl_decode(buf, n, &m));
    buf[5] = STRATA_POOL_F32;
    assert_true(pl_decode(buf, n, &m));
    // ADAMW: a float32 range and its 56 bytes of arguments, which survive the round trip.
    pl_adamw_args_t a = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.25f, 123456789012LL, 8, 16, 1ull << 40}, b;
    uint8_t args[PL_ADAMW_ARGS];
    pl_adamw_put(args, &a);
    h = (pl_hdr_t){.op = PL_ADAMW, .dtype = STRATA_POOL_F32, .token = 1, .len = 4096};
    n = pl_encode(buf, &h, NULL, NULL, args, pl_payload_len(&h));
    assert_int_equal(n, PL_HDR + PL_ADAMW_ARGS);
    assert_true(pl_decode(buf, n, &m));
    pl_adamw_get(m.payload, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_false(pl_decode(buf, n - 1, &m)); // arguments cut short
    buf[6] = PL_F_ZERO; // no ZERO record of the arguments
    assert_false(pl_decode(buf, n, &m));
    buf[6] = 0;
    buf[5] = STRATA_POOL_BF16; // float32 only
    assert_false(pl_decode(buf, n, &m));
    // SUMSQ: a range without payload, of whole float32.
    h = (pl_hdr_t){.op = PL_SUMSQ, .dtype = STRATA_POOL_F32, .token = 1, .len = 4096};
    n = pl_encode(buf, &h, NULL, NULL, NULL, 0);
    assert_true(pl_decode(buf, n, &m));
    h.len = 4098;
    n = pl_encode(buf, &h, NULL, NULL, NULL, 0);
    assert_false(pl_decode(buf, n, &m));
    h.len = 8;
    n = pl_encode(buf, &h, NULL, NULL, args, 8); // a payload it must not carry
    assert_false(pl_decode(buf, n, &m));
}

/* ---- operations ---------------------------------------------------------------------------------- */

static void test_read_write_add(void **state)
{
    (void)state;
    node_thread_t t[3] = {0};
    start_nodes(t, 3, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 3, LONG_MS);
    size_t B = strata_pool_block_bytes(p);
    assert_int_equal(B, 8192); // loopback: the jumbo block
    assert_int_equal(strata_pool_capacity(p), 3 * (NODE_BYTES / B) * B);
    // Unaligned bytes across block and node boundaries.
    size_t nb = 5 * B + 333;
    uint8_t *w = malloc(nb), *r = malloc(nb);
    for (size_t i = 0; i < nb; i++)
        w[i] = (uint8_t)(i * 31 + 7);
    assert_int_equal(strata_pool_write(p, 1000, w, nb), STRATA_OK);
    assert_int_equal(strata_pool_read(p, 1000, r, nb), STRATA_OK);
    assert_memory_equal(r, w, nb);
    // float32 add twice at an element-aligned address against the reference.
    size_t n = 3 * B / 4 + 5;
    float *base = malloc(n * 4), *x = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    fill(base, n, 1);
    fill(x, n, 2);
    uint64_t a = 64 * 1024 + 12;
    assert_int_equal(strata_pool_write(p, a, base, n * 4), STRATA_OK);
    assert_int_equal(strata_pool_add(p, a, x, n, STRATA_POOL_F32), STRATA_OK);
    assert_int_equal(strata_pool_add(p, a, x, n, STRATA_POOL_F32), STRATA_OK);
    for (size_t i = 0; i < n; i++)
        ref[i] = (base[i] + x[i]) + x[i];
    assert_int_equal(strata_pool_read(p, a, got, n * 4), STRATA_OK);
    assert_memory_equal(got, ref, n * 4);
    // bfloat16 add.
    uint16_t *bb = malloc(n * 2), *bx = malloc(n * 2), *bref = malloc(n * 2), *bgot = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        bb[i] = st_f32_to_bf16(base[i]);
        bx[i] = st_f32_to_bf16(x[i] / 3);
        bref[i] = ref_bf16(st_bf16_to_f32(bb[i]) + st_bf16_to_f32(bx[i]));
    }
    assert_int_equal(strata_pool_write(p, 2, bb, n * 2), STRATA_OK);
    assert_int_equal(strata_pool_add(p, 2, bx, n, STRATA_POOL_BF16), STRATA_OK);
    assert_int_equal(strata_pool_read(p, 2, bgot, n * 2), STRATA_OK);
    assert_memory_equal(bgot, bref, n * 2);
    // Bad requests: beyond the capacity, misaligned add.
    assert_int_equal(strata_pool_read(p, strata_pool_capacity(p) - 4, r, 8), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "outside the pool"));
    assert_int_equal(strata_pool_add(p, 3, x, 4, STRATA_POOL_F32), STRATA_ERR_INVALID_ARG);
    strata_pool_close(p);
    stop_nodes(t, 3);
    free(w), free(r), free(base), free(x), free(ref), free(got);
    free(bb), free(bx), free(bref), free(bgot);
}

/* Consecutive blocks live on successive nodes: a client of one node sees its share. */
static void test_interleaving(void **state)
{
    (void)state;
    node_thread_t t[3] = {0};
    start_nodes(t, 3, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 3, LONG_MS);
    size_t B = strata_pool_block_bytes(p);
    size_t nb = 7 * B;
    uint8_t *w = malloc(nb), *r = malloc(B);
    for (size_t i = 0; i < nb; i++)
        w[i] = (uint8_t)(i / B + 1); // block k holds k + 1
    assert_int_equal(strata_pool_write(p, 0, w, nb), STRATA_OK);
    for (int k = 0; k < 7; k++) {
        strata_pool_t *one = open_pool(&t[k % 3], 1, LONG_MS);
        assert_int_equal(strata_pool_read(one, (uint64_t)(k / 3) * B, r, B), STRATA_OK);
        assert_memory_equal(r, w + (size_t)k * B, B);
        strata_pool_close(one);
    }
    strata_pool_close(p);
    stop_nodes(t, 3);
    free(w), free(r);
}

static void test_zero_records(void **state)
{
    (void)state;
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 1, LONG_MS);
    size_t B = strata_pool_block_bytes(p), n = 4 * B / 4;
    float *z = calloc(n, 4), *x = malloc(n * 4), *got = malloc(n * 4);
    fill(x, n, 9);
    for (size_t i = B / 4; i < 2 * B / 4; i++)
        x[i] = 0; // block 1 is all zero
    strata_pool_stats_t s0, s1;
    assert_int_equal(strata_pool_stats(p, 0, &s0), STRATA_OK);
    assert_int_equal(strata_pool_add(p, 0, z, n, STRATA_POOL_F32), STRATA_OK); // 4 zero blocks
    assert_int_equal(strata_pool_add(p, 0, x, n, STRATA_POOL_F32), STRATA_OK); // 1 zero block
    assert_int_equal(strata_pool_read(p, 0, got, n * 4), STRATA_OK); // block 1 read back as ZERO
    assert_memory_equal(got, x, n * 4);
    assert_int_equal(strata_pool_stats(p, 0, &s1), STRATA_OK);
    assert_int_equal(s1.zero_in - s0.zero_in, 5);
    assert_int_equal(s1.zero_out - s0.zero_out, 1);
    strata_pool_close(p);
    stop_nodes(t, 1);
    free(z), free(x), free(got);
}

/* Writes a distinct block to each node's local address 0 (through a client of that node alone),
 * reduces src through the chain and compares with the serial sum; with store, the last hop's
 * block holds the sum afterwards. */
static void chain_check(node_thread_t *t, int hops, size_t count, strata_pool_dtype_t dt,
                        bool store)
{
    size_t es = dt == STRATA_POOL_F32 ? 4 : 2, bytes = count * es;
    float *f = malloc(count * 4);
    uint8_t *blocks[MAXN], *src = malloc(bytes), *ref = malloc(bytes), *got = malloc(bytes);
    for (int h = 0; h <= hops; h++) {
        uint8_t *dst = h == 0 ? src : (blocks[h - 1] = malloc(bytes));
        fill(f, count, 100u + (unsigned)h);
        for (size_t i = 0; i < count; i++)
            if (dt == STRATA_POOL_F32)
                ((float *)dst)[i] = f[i];
            else
                ((uint16_t *)dst)[i] = st_f32_to_bf16(f[i]);
    }
    memcpy(ref, src, bytes);
    for (int h = 0; h < hops; h++) // serial sum, in chain order, with the reference rounding
        for (size_t i = 0; i < count; i++)
            if (dt == STRATA_POOL_F32)
                ((float *)ref)[i] += ((float *)blocks[h])[i];
            else
                ((uint16_t *)ref)[i] = ref_bf16(st_bf16_to_f32(((uint16_t *)ref)[i]) +
                                                st_bf16_to_f32(((uint16_t *)blocks[h])[i]));
    strata_pool_hop_t route[MAXN];
    for (int h = 0; h < hops; h++) {
        strata_pool_t *one = open_pool(&t[h], 1, LONG_MS);
        assert_int_equal(strata_pool_write(one, 0, blocks[h], bytes), STRATA_OK);
        strata_pool_close(one);
        route[h] = (strata_pool_hop_t){.node = h, .addr = 0};
    }
    strata_pool_t *p = open_pool(t, hops, LONG_MS);
    strata_pool_reduce_t op = {.src = src, .dst = got, .count = count, .dtype = dt,
                               .route = route, .hops = hops, .store = store};
    if (strata_pool_reduce(p, &op) != STRATA_OK)
        fail_msg("reduce over %d hops: %s", hops, strata_last_error());
    assert_memory_equal(got, ref, bytes);
    if (store) {
        memset(got, 0, bytes);
        strata_pool_t *last = open_pool(&t[hops - 1], 1, LONG_MS);
        assert_int_equal(strata_pool_read(last, 0, got, bytes), STRATA_OK);
        assert_memory_equal(got, ref, bytes);
        strata_pool_close(last);
    }
    strata_pool_close(p);
    for (int h = 0; h < hops; h++)
        free(blocks[h]);
    free(f), free(src), free(ref), free(got);
}

static void test_chain_1_to_8(void **state)
{
    (void)state;
    node_thread_t t[MAXN] = {0};
    start_nodes(t, MAXN, 0, 0, 0);
    for (int hops = 1; hops <= MAXN; hops++) {
        chain_check(t, hops, 5 * 2048 + 17, STRATA_POOL_F32, hops % 2);
        chain_check(t, hops, 3 * 4096 + 3, STRATA_POOL_BF16, hops % 2 == 0);
    }
    stop_nodes(t, MAXN);
}

/* A forced 1500-byte MTU: blocks of 1024 bytes, still exact. */
static void test_small_mtu(void **state)
{
    (void)state;
    setenv("STRATA_POOL_MTU", "1500", 1);
    node_thread_t t[3] = {0};
    start_nodes(t, 3, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 3, LONG_MS);
    assert_int_equal(strata_pool_block_bytes(p), 1024);
    strata_pool_close(p);
    chain_check(t, 3, 10000, STRATA_POOL_F32, true);
    stop_nodes(t, 3);
    unsetenv("STRATA_POOL_MTU");
}

/* Seeded loss, duplication and reordering in every node: every result still exact, ADD once. */
static void test_faults_exact(void **state)
{
    (void)state;
    node_thread_t t[4] = {0};
    start_nodes(t, 4, 0.1, 0.1, 0.1);
    strata_pool_t *p = open_pool(t, 4, LONG_MS);
    size_t n = 64 * 2048;
    float *base = malloc(n * 4), *x = malloc(n * 4), *got = malloc(n * 4);
    fill(base, n, 5);
    fill(x, n, 6);
    if (strata_pool_write(p, 0, base, n * 4) != STRATA_OK)
        fail_msg("write: %s", strata_last_error());
    for (int k = 0; k < 3; k++)
        assert_int_equal(strata_pool_add(p, 0, x, n, STRATA_POOL_F32), STRATA_OK);
    assert_int_equal(strata_pool_read(p, 0, got, n * 4), STRATA_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(got[i] == ((base[i] + x[i]) + x[i]) + x[i]);
    strata_pool_close(p);
    chain_check(t, 4, 40 * 2048 + 1, STRATA_POOL_F32, true);
    chain_check(t, 4, 30 * 4096, STRATA_POOL_BF16, false);
    // The fault mode really acted, and the duplicates it made were not applied twice.
    uint64_t drops = 0, dups = 0, reorders = 0, suppressed = 0;
    halt_nodes(t, 4);
    for (int i = 0; i < 4; i++) {
        strata_pool_stats_t s;
        strata_pool_node_stats(t[i].node, &s);
        drops += s.injected_drops;
        dups += s.injected_dups;
        reorders += s.injected_reorders;
        suppressed += s.duplicates;
    }
    close_nodes(t, 4);
    assert_true(drops > 0 && dups > 0 && reorders > 0 && suppressed > 0);
    free(base), free(x), free(got);
}

/* ---- allreduce through the chain to several clients ---------------------------------------------- */

#define RANKS 4

typedef struct rank_arg {
    node_thread_t *t;
    int rank;
    size_t count;
    float *in, *out;
    pthread_barrier_t *written, *ports_known;
    int *ports;
    const char *group; /* the result by multicast to it (NULL: to each rank) */
    strata_status_t rc;
    char err[256];
} rank_arg_t;

static void *rank_main(void *arg)
{
    rank_arg_t *a = arg;
    const char *addrs[RANKS - 1];
    for (int i = 0; i < RANKS - 1; i++)
        addrs[i] = a->t[i].addr;
    strata_pool_t *p = NULL;
    a->rc = strata_pool_open(addrs, RANKS - 1, SECRET, LONG_MS, &p);
    if (a->rc == STRATA_OK && a->rank > 0) // rank r's buffer goes to node r - 1's block
        a->rc = strata_pool_write_node(p, a->rank - 1, 0, a->in, a->count * 4);
    if (a->rc == STRATA_OK && a->rank > 0 && a->group)
        a->rc = strata_pool_join(p, a->group);
    a->ports[a->rank] = p ? strata_pool_port(p) : 0;
    pthread_barrier_wait(a->written);
    if (a->rc == STRATA_OK) {
        if (a->rank == 0) {
            strata_pool_hop_t route[RANKS - 1];
            char dest_buf[RANKS - 1][32];
            const char *dests[RANKS - 1];
            for (int h = 0; h < RANKS - 1; h++) {
                route[h] = (strata_pool_hop_t){.node = h, .addr = 0};
                snprintf(dest_buf[h], 32, "127.0.0.1:%d", a->ports[h + 1]);
                dests[h] = dest_buf[h];
            }
            strata_pool_reduce_t op = {.src = a->in, .dst = a->out, .count = a->count,
                                       .dtype = STRATA_POOL_F32, .route = route,
                                       .hops = RANKS - 1, .dests = dests, .ndests = RANKS - 1,
                                       .group = a->group};
            a->rc = strata_pool_reduce(p, &op);
        } else {
            a->rc = strata_pool_receive(p, a->out, a->count, STRATA_POOL_F32);
        }
    }
    if (a->rc != STRATA_OK)
        snprintf(a->err, sizeof a->err, "%s", strata_last_error());
    strata_pool_close(p);
    return NULL;
}

static void allreduce_check(double drop, double dup, double reorder, const char *group)
{
    node_thread_t t[RANKS - 1] = {0};
    start_nodes(t, RANKS - 1, drop, dup, reorder);
    size_t count = 20 * 2048 + 9;
    pthread_barrier_t written;
    pthread_barrier_init(&written, NULL, RANKS);
    int ports[RANKS];
    rank_arg_t a[RANKS];
    pthread_t tid[RANKS];
    float *ref = malloc(count * 4);
    for (int r = 0; r < RANKS; r++) {
        a[r] = (rank_arg_t){.t = t, .rank = r, .count = count, .written = &written, .ports = ports,
                            .group = group};
        a[r].in = malloc(count * 4);
        a[r].out = malloc(count * 4);
        fill(a[r].in, count, 40u + (unsigned)r);
    }
    memcpy(ref, a[0].in, count * 4);
    for (int r = 1; r < RANKS; r++) // chain order: rank 0's buffer, then node 0, 1, 2
        for (size_t i = 0; i < count; i++)
            ref[i] += a[r].in[i];
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(pthread_create(&tid[r], NULL, rank_main, &a[r]), 0);
    for (int r = 0; r < RANKS; r++)
        pthread_join(tid[r], NULL);
    for (int r = 0; r < RANKS; r++) {
        if (a[r].rc != STRATA_OK)
            fail_msg("rank %d: %s", r, a[r].err);
        assert_memory_equal(a[r].out, ref, count * 4);
        free(a[r].in), free(a[r].out);
    }
    pthread_barrier_destroy(&written);
    stop_nodes(t, RANKS - 1);
    free(ref);
}

static void test_allreduce_to_every_rank(void **state)
{
    (void)state;
    allreduce_check(0, 0, 0, NULL);
    allreduce_check(0.1, 0.1, 0.1, NULL);
}

/* The result by multicast: the last hop sends each block once, to a group the receivers joined
 * (on loopback here), with the same faults; a group that is not multicast is refused. */
static void test_allreduce_multicast(void **state)
{
    (void)state;
    allreduce_check(0, 0, 0, "239.192.77.1:47101");
    allreduce_check(0.1, 0.1, 0.1, "239.192.77.2:47102");
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    const char *addrs[1] = {t[0].addr};
    strata_pool_t *p;
    assert_int_equal(strata_pool_open(addrs, 1, SECRET, LONG_MS, &p), STRATA_OK);
    assert_int_equal(strata_pool_join(p, "127.0.0.1:47103"), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "not a multicast group"));
    float x[4] = {1, 2, 3, 4};
    strata_pool_hop_t hop = {0, 0};
    strata_pool_reduce_t op = {.src = x, .dst = x, .count = 4, .dtype = STRATA_POOL_F32,
                               .route = &hop, .hops = 1, .group = "127.0.0.1:47104"};
    assert_int_equal(strata_pool_reduce(p, &op), STRATA_ERR_INVALID_ARG);
    strata_pool_close(p);
    stop_nodes(t, 1);
}

/* A destination that misses a block asks the origin for it (NACK) and still gets the whole result.
 * A relay stands in for the destination's address: it passes everything between the receiver and
 * the origin (rewriting the origin in RESULT headers to itself) and drops the first copy of one
 * block. The origin already holds every block and waits only for the destination's DONE, so
 * nothing but the NACK repair can complete the receive. */
/* A UDP socket on a free loopback port, its "ADDR:PORT" in addr: a stand-in for a pool client. */
static int loopback_socket(char *addr, size_t len)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

/* A one-hop reduction (node 0, address 0) of src into out with one destination, dest: what the
 * tests of a destination played by a thread of their own run as the origin. */
static strata_status_t reduce_to(strata_pool_t *origin, const float *src, float *out, size_t count,
                                 const char *dest)
{
    strata_pool_hop_t hop = {0, 0};
    const char *dests[1] = {dest};
    strata_pool_reduce_t op = {.src = src, .dst = out, .count = count, .dtype = STRATA_POOL_F32,
                               .route = &hop, .hops = 1, .dests = dests, .ndests = 1};
    return strata_pool_reduce(origin, &op);
}

/* Where a RESULT's origin (the caller of the reduction) takes NACKs and DONEs. */
static struct sockaddr_in result_origin(const pl_msg_t *m)
{
    return (struct sockaddr_in){.sin_family = AF_INET, .sin_port = m->h.origin_port,
                                .sin_addr.s_addr = m->h.origin_ip};
}

/* A scripted destination's word to the origin of flow: a NACK listing the k blocks in missing, or
 * DONE when k is 0. */
static void tell_origin(int fd, const struct sockaddr_in *origin, uint32_t flow,
                        const uint32_t *missing, uint32_t k)
{
    pl_hdr_t h = {.op = k ? PL_NACK : PL_DONE, .flow = flow, .len = 4 * k};
    uint8_t out[PL_MAX_DGRAM];
    size_t len = pl_encode(out, &h, NULL, NULL, k ? missing : NULL, h.len);
    sendto(fd, out, len, 0, (const struct sockaddr *)origin, sizeof *origin);
}

typedef struct relay {
    int fd, receiver_port;
    int drop_block;  /* the first copy of this block is lost (-1: none) */
    int drop_acks;   /* this many acknowledgements to the receiver are lost (-1: all) */
    struct sockaddr_in origin;
    bool have_origin;
    atomic_int stop, dropped, acks_dropped, acks_passed;
} relay_t;

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    static uint8_t buf[PL_MAX_DGRAM];
    struct sockaddr_in self, recv_addr = {.sin_family = AF_INET,
                                          .sin_port = htons((uint16_t)r->receiver_port),
                                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof self;
    getsockname(r->fd, (struct sockaddr *)&self, &sl);
    self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (!atomic_load(&r->stop)) {
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(r->fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0) {
            usleep(1000);
            continue;
        }
        if (from.sin_port == recv_addr.sin_port) { // receiver -> origin (NACK, DONE)
            if (r->have_origin)
                sendto(r->fd, buf, (size_t)n, 0, (struct sockaddr *)&r->origin, sizeof r->origin);
            continue;
        }
        if (n >= PL_HDR && buf[4] == PL_RESULT) {
            r->origin = (struct sockaddr_in){.sin_family = AF_INET};
            memcpy(&r->origin.sin_addr.s_addr, buf + 40, 4);
            memcpy(&r->origin.sin_port, buf + 44, 2);
            r->have_origin = true;
            memcpy(buf + 40, &self.sin_addr.s_addr, 4); // replies go through the relay
            memcpy(buf + 44, &self.sin_port, 2);
            uint32_t seq;
            memcpy(&seq, buf + 20, 4);
            if ((int)seq == r->drop_block && atomic_fetch_add(&r->dropped, 1) == 0)
                continue; // the first copy of the block is lost
        }
        if (n >= PL_HDR && buf[4] == PL_ACK) {
            if (r->drop_acks < 0 || atomic_load(&r->acks_dropped) < r->drop_acks) {
                atomic_fetch_add(&r->acks_dropped, 1);
                continue;
            }
            atomic_fetch_add(&r->acks_passed, 1);
        }
        sendto(r->fd, buf, (size_t)n, 0, (struct sockaddr *)&recv_addr, sizeof recv_addr);
    }
    return NULL;
}

typedef struct receiver_arg {
    node_thread_t *t;
    strata_pool_t *p;
    float *out;
    size_t count;
    strata_status_t rc;
    char err[256];
} receiver_arg_t;

static void *receiver_main(void *arg)
{
    receiver_arg_t *a = arg;
    a->rc = strata_pool_receive(a->p, a->out, a->count, STRATA_POOL_F32);
    if (a->rc != STRATA_OK)
        snprintf(a->err, sizeof a->err, "%s", strata_last_error());
    return NULL;
}

/* In place (the origin's result over its source) the repair must still send the source, not the
 * result the origin already wrote there for that block. */
static void nack_repair(bool in_place)
{
    node_thread_t t[2] = {0};
    start_nodes(t, 2, 0, 0, 0);
    strata_pool_t *origin = open_pool(t, 2, LONG_MS), *dest = open_pool(t, 2, LONG_MS);
    size_t count = 8 * 2048;
    float *src = malloc(count * 4), *blk = malloc(count * 4), *ref = malloc(count * 4),
          *got = malloc(count * 4), *mine = malloc(count * 4);
    fill(src, count, 61);
    fill(blk, count, 62);
    assert_int_equal(strata_pool_write_node(origin, 0, 0, blk, count * 4), STRATA_OK);
    assert_int_equal(strata_pool_write_node(origin, 1, 0, blk, count * 4), STRATA_OK);
    for (size_t i = 0; i < count; i++)
        ref[i] = (src[i] + blk[i]) + blk[i];
    relay_t r = {.receiver_port = strata_pool_port(dest), .drop_block = 3};
    char relay_addr[32];
    r.fd = loopback_socket(relay_addr, sizeof relay_addr);
    pthread_t relay_tid, recv_tid;
    receiver_arg_t ra = {.t = t, .p = dest, .out = got, .count = count};
    assert_int_equal(pthread_create(&relay_tid, NULL, relay_main, &r), 0);
    assert_int_equal(pthread_create(&recv_tid, NULL, receiver_main, &ra), 0);
    strata_pool_hop_t route[2] = {{0, 0}, {1, 0}};
    const char *dests[1] = {relay_addr};
    float *out = in_place ? src : mine;
    strata_pool_reduce_t op = {.src = src, .dst = out, .count = count, .dtype = STRATA_POOL_F32,
                               .route = route, .hops = 2, .dests = dests, .ndests = 1};
    strata_status_t rc = strata_pool_reduce(origin, &op);
    char err[256];
    snprintf(err, sizeof err, "%s", rc ? strata_last_error() : "");
    pthread_join(recv_tid, NULL);
    atomic_store(&r.stop, 1);
    pthread_join(relay_tid, NULL);
    close(r.fd);
    if (rc != STRATA_OK)
        fail_msg("origin: %s", err);
    if (ra.rc != STRATA_OK)
        fail_msg("receiver: %s", ra.err);
    assert_true(atomic_load(&r.dropped) >= 1);
    assert_memory_equal(out, ref, count * 4);
    assert_memory_equal(got, ref, count * 4);
    strata_pool_close(origin);
    strata_pool_close(dest);
    stop_nodes(t, 2);
    free(src), free(blk), free(ref), free(got), free(mine);
}

static void test_receiver_repairs_by_nack(void **state)
{
    (void)state;
    nack_repair(false);
    nack_repair(true);
}

/* The origin's acknowledgement of a destination's DONE is lost (a relay drops it). The origin has
 * every block and returns at that DONE, so nobody answers the destination's next DONE. With the
 * first acknowledgement lost, the ones the origin sends every destination as it returns reach it;
 * with every acknowledgement lost, it returns after its few DONEs, not after the call's timeout
 * (30 s here: it used to wait all of it, and so did every rank of the job after it). */
static void lost_ack(int drop_acks)
{
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    strata_pool_t *origin = open_pool(t, 1, LONG_MS), *dest = open_pool(t, 1, LONG_MS);
    size_t count = 4 * 2048;
    float *src = malloc(count * 4), *got = malloc(count * 4), *mine = malloc(count * 4);
    fill(src, count, 71);
    assert_int_equal(strata_pool_write_node(origin, 0, 0, src, count * 4), STRATA_OK);
    relay_t r = {.receiver_port = strata_pool_port(dest), .drop_block = -1,
                 .drop_acks = drop_acks};
    char relay_addr[32];
    r.fd = loopback_socket(relay_addr, sizeof relay_addr);
    pthread_t relay_tid, recv_tid;
    receiver_arg_t ra = {.t = t, .p = dest, .out = got, .count = count};
    assert_int_equal(pthread_create(&relay_tid, NULL, relay_main, &r), 0);
    uint64_t t0 = st_now_ns();
    assert_int_equal(pthread_create(&recv_tid, NULL, receiver_main, &ra), 0);
    strata_status_t rc = reduce_to(origin, src, mine, count, relay_addr);
    char err[256];
    snprintf(err, sizeof err, "%s", rc ? strata_last_error() : "");
    pthread_join(recv_tid, NULL);
    double secs = (double)(st_now_ns() - t0) / 1e9;
    atomic_store(&r.stop, 1);
    pthread_join(relay_tid, NULL);
    close(r.fd);
    if (rc != STRATA_OK)
        fail_msg("origin: %s", err);
    if (ra.rc != STRATA_OK)
        fail_msg("receiver: %s", ra.err);
    for (size_t i = 0; i < count; i++)
        assert_true(got[i] == src[i] + src[i] && mine[i] == got[i]);
    assert_true(atomic_load(&r.acks_dropped) >= 1);
    if (drop_acks > 0) // the origin's last acknowledgements, sent after the one that was lost
        assert_true(atomic_load(&r.acks_passed) >= 1);
    if (secs > LONG_MS / 4 / 1e3)
        fail_msg("the destination returned after %.1f s with %d acknowledgements lost", secs,
                 atomic_load(&r.acks_dropped));
    strata_pool_close(origin);
    strata_pool_close(dest);
    stop_nodes(t, 1);
    free(src), free(got), free(mine);
}

static void test_lost_acknowledgement(void **state)
{
    (void)state;
    lost_ack(1);
    lost_ack(-1);
}

/* A destination that asks, at its first block, for every block of the flow (and later, as any
 * receiver, for what it misses), while the node drops a fifth of what arrives: the call completes
 * and the blocks are not sent twice over. Blocks the origin's window has not reached must not go
 * out of turn: they used to, outside the window's count, and one that was lost was never sent
 * again, so the origin stalled (the emulated cluster at 0.1% loss, 64 MiB by unicast, 1 run in 4).
 * This test does not reproduce that stall, which needed the receivers' NACKs to stop covering the
 * lost block; bench/pool_allreduce.sh at 0.1% and 1% loss does. */
typedef struct greedy_dest {
    int fd;
    size_t nblocks, got;
    atomic_int stop;
} greedy_dest_t;

static void *greedy_main(void *arg)
{
    greedy_dest_t *g = arg;
    static uint8_t buf[PL_MAX_DGRAM];
    uint8_t *seen = calloc(g->nblocks, 1);
    bool asked = false, have = false;
    struct sockaddr_in origin = {0};
    uint32_t flow = 0;
    while (!atomic_load(&g->stop)) {
        struct pollfd pfd = {.fd = g->fd, .events = POLLIN};
        ssize_t n = poll(&pfd, 1, 20) > 0 ? recv(g->fd, buf, sizeof buf, 0) : -1;
        pl_msg_t m;
        bool fresh = n > 0 && pl_decode(buf, (size_t)n, &m) && m.h.op == PL_RESULT;
        if (fresh) {
            origin = result_origin(&m);
            flow = m.h.flow;
            have = true;
            if (m.h.seq < g->nblocks && !seen[m.h.seq]) {
                seen[m.h.seq] = 1;
                g->got++;
            }
        }
        if (!have || (fresh && asked && g->got < g->nblocks))
            continue;
        // The first block: every block, at once. Later, after 20 ms of silence: the missing
        // ones, as a receiver does. Once complete: DONE until the test ends.
        uint32_t list[64];
        uint32_t k = 0;
        for (uint32_t i = 0; i < g->nblocks && i < 64; i++)
            if (!asked || !seen[i])
                list[k++] = i;
        tell_origin(g->fd, &origin, flow, list, k);
        asked = true;
    }
    free(seen);
    return NULL;
}

static void test_nack_ahead_of_window(void **state)
{
    (void)state;
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0.2, 0, 0);
    setenv("STRATA_POOL_WINDOW", "2", 1);
    strata_pool_t *origin = open_pool(t, 1, 5000);
    unsetenv("STRATA_POOL_WINDOW");
    size_t block = strata_pool_block_bytes(origin), nblocks = 64, count = nblocks * block / 4;
    float *src = malloc(count * 4), *out = malloc(count * 4);
    fill(src, count, 71);
    greedy_dest_t g = {.nblocks = nblocks};
    char dest[32];
    g.fd = loopback_socket(dest, sizeof dest);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, greedy_main, &g), 0);
    strata_status_t rc = reduce_to(origin, src, out, count, dest);
    char err[256];
    snprintf(err, sizeof err, "%s", rc ? strata_last_error() : "");
    atomic_store(&g.stop, 1);
    pthread_join(tid, NULL);
    close(g.fd);
    strata_pool_stats_t st;
    assert_int_equal(strata_pool_stats(origin, 0, &st), STRATA_OK);
    strata_pool_close(origin);
    stop_nodes(t, 1);
    if (rc != STRATA_OK)
        fail_msg("origin: %s (destination got %zu of %zu)", err, g.got, nblocks);
    assert_memory_equal(out, src, count * 4); // the node's block is zero
    if (st.adds >= 2 * nblocks)
        fail_msg("%llu adds for %zu blocks: blocks went out of turn", (unsigned long long)st.adds,
                 nblocks);
    free(src), free(out);
}

/* A destination repaired slowly: a scripted one that, having seen the origin's first block, NACKs
 * every 50 ms quiet for 2 s (40 times), each NACK listing one block fewer when it shrinks, the
 * same blocks when not, then sends DONE. The origin's timeout is 1 s and it holds every block of its
 * own at once, so only the NACKs can keep the call alive: shrinking ones must (the call used to fail
 * after 1 s however the destination progressed), repeated ones must not (a destination stuck asking
 * cannot hold the origin past its timeout). */
typedef struct scripted_dest {
    int fd;
    uint32_t nblocks;
    bool shrink;
    atomic_int stop;
} scripted_dest_t;

static void *scripted_main(void *arg)
{
    scripted_dest_t *d = arg;
    static uint8_t buf[PL_MAX_DGRAM];
    struct sockaddr_in origin = {0};
    uint32_t flow = 0, sent = 0;
    bool have = false;
    while (!atomic_load(&d->stop)) {
        struct pollfd pfd = {.fd = d->fd, .events = POLLIN};
        ssize_t n = poll(&pfd, 1, 50) > 0 ? recv(d->fd, buf, sizeof buf, 0) : -1;
        pl_msg_t m;
        if (!have && n > 0 && pl_decode(buf, (size_t)n, &m) && m.h.op == PL_RESULT) {
            origin = result_origin(&m);
            flow = m.h.flow;
            have = true;
        }
        if (!have || n > 0)
            continue; // a NACK or DONE each time 50 ms pass quietly
        uint32_t list[64], k = 0, first = d->shrink ? sent : 0;
        for (uint32_t i = first; sent < d->nblocks && i < d->nblocks && k < 64; i++)
            list[k++] = i;
        sent++;
        tell_origin(d->fd, &origin, flow, list, k);
    }
    return NULL;
}

static strata_status_t slow_repair(bool shrink, double *secs)
{
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    strata_pool_t *origin = open_pool(t, 1, 1000);
    size_t block = strata_pool_block_bytes(origin), nblocks = 40, count = nblocks * block / 4;
    float *src = calloc(count, 4), *out = malloc(count * 4);
    scripted_dest_t d = {.nblocks = (uint32_t)nblocks, .shrink = shrink};
    char dest[32];
    d.fd = loopback_socket(dest, sizeof dest);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, scripted_main, &d), 0);
    uint64_t t0 = st_now_ns();
    strata_status_t rc = reduce_to(origin, src, out, count, dest);
    *secs = (double)(st_now_ns() - t0) / 1e9;
    if (rc != STRATA_OK)
        print_message("    %s after %.2f s: %s\n", shrink ? "shrinking" : "repeating", *secs,
                      strata_last_error());
    atomic_store(&d.stop, 1);
    pthread_join(tid, NULL);
    close(d.fd);
    strata_pool_close(origin);
    stop_nodes(t, 1);
    free(src), free(out);
    return rc;
}

static void test_slow_repair_is_progress(void **state)
{
    (void)state;
    double secs;
    assert_int_equal(slow_repair(true, &secs), STRATA_OK);
    assert_true(secs >= 1.9); // it waited for the DONE at the end of the script
    assert_int_equal(slow_repair(false, &secs), STRATA_ERR_PEER_FAILED);
    assert_true(secs < 1.9); // failed at its timeout, not at the script's DONE
}

/* ---- failures ------------------------------------------------------------------------------------ */

/* A node that stops answering mid-operation: the call fails, naming it, within its timeout. Node 1
 * stops once it has served 10 datagrams of the adds; a poll serves at most 512, and the adds send
 * it far more, so one of them is cut short whatever the machine's load. */
static void test_dead_node_named(void **state)
{
    (void)state;
    node_thread_t t[3] = {0};
    start_nodes(t, 3, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 3, 5000);
    strata_pool_stats_t s;
    assert_int_equal(strata_pool_stats(p, 1, &s), STRATA_OK);
    atomic_store(&t[1].stop_after_rx, s.rx_packets + 10);
    size_t n = strata_pool_capacity(p) / 4; // 128 blocks on each node per add
    float *x = calloc(n, 4);
    for (size_t i = 0; i < n; i++)
        x[i] = 1;
    strata_status_t rc = STRATA_OK;
    for (int k = 0; k < 8 && rc == STRATA_OK; k++) // 1024 datagrams for node 1 in all
        rc = strata_pool_add(p, 0, x, n, STRATA_POOL_F32);
    assert_int_equal(rc, STRATA_ERR_PEER_FAILED);
    assert_non_null(strstr(strata_last_error(), t[1].addr));
    // A reduction whose second hop is dead names that hop.
    strata_pool_hop_t route[3] = {{0, 0}, {1, 0}, {2, 0}};
    strata_pool_reduce_t op = {.src = x, .dst = x, .count = 4096, .dtype = STRATA_POOL_F32,
                               .route = route, .hops = 3};
    assert_int_equal(strata_pool_reduce(p, &op), STRATA_ERR_PEER_FAILED);
    assert_non_null(strstr(strata_last_error(), t[1].addr));
    assert_non_null(strstr(strata_last_error(), "hop 2 of 3"));
    strata_pool_close(p);
    stop_nodes(t, 3);
    free(x);
}

static void test_wrong_secret(void **state)
{
    (void)state;
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    const char *addr = t[0].addr;
    strata_pool_t *p = NULL;
    assert_int_equal(strata_pool_open(&addr, 1, "not-the-secret", 300, &p), STRATA_ERR_PEER_FAILED);
    assert_null(p);
    assert_non_null(strstr(strata_last_error(), addr));
    strata_pool_stats_t s;
    halt_nodes(t, 1);
    strata_pool_node_stats(t[0].node, &s);
    close_nodes(t, 1);
    assert_true(s.unauthorized > 0);
    assert_int_equal(s.sessions, 0);
}

/* Random bytes, truncated headers, an oversized datagram, another version, an unknown token and a
 * reply sent to a node: each dropped and counted, and the node still serves. */
static void test_malformed_datagrams(void **state)
{
    (void)state;
    node_thread_t t[1] = {0};
    start_nodes(t, 1, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 1, LONG_MS);
    strata_pool_stats_t s0, s1;
    assert_int_equal(strata_pool_stats(p, 0, &s0), STRATA_OK);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)strata_pool_node_port(t[0].node)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static uint8_t buf[65000];
    srand(11);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)rand();
    buf[0] = 0; // not the magic
    int malformed = 0, unauthorized = 0;
#define SEND(len) assert_int_equal(sendto(fd, buf, (len), 0, (struct sockaddr *)&to, sizeof to), (len))
    SEND(1000), malformed++;  // random bytes
    SEND(65000), malformed++; // oversized
    pl_hdr_t h = {.op = PL_READ, .token = 42, .flow = 1, .addr = 0, .len = 64};
    size_t n = pl_encode(buf, &h, NULL, NULL, NULL, 0);
    for (size_t cut = 0; cut < PL_HDR; cut += 11)
        SEND(cut), malformed++; // truncated headers (0 bytes included)
    SEND(n), unauthorized++;    // a well-formed READ with an unknown token
    buf[47] = 7;
    SEND(n), malformed++;       // another version
    h = (pl_hdr_t){.op = PL_WRITE, .token = 42, .len = 100};
    n = pl_encode(buf, &h, NULL, NULL, buf + 2000, 50); // payload shorter than its len
    SEND(n), malformed++;
    h = (pl_hdr_t){.op = PL_HELLO, .len = 3};
    n = pl_encode(buf, &h, NULL, NULL, buf + 2000, 3); // a HELLO without its 16-byte nonce
    SEND(n), malformed++;
#undef SEND
    close(fd);
    assert_int_equal(strata_pool_stats(p, 0, &s1), STRATA_OK);
    assert_int_equal(s1.malformed - s0.malformed, (uint64_t)malformed);
    assert_int_equal(s1.unauthorized - s0.unauthorized, (uint64_t)unauthorized);
    float x[300], got[300];
    fill(x, 300, 8);
    assert_int_equal(strata_pool_write(p, 0, x, sizeof x), STRATA_OK);
    assert_int_equal(strata_pool_read(p, 0, got, sizeof got), STRATA_OK);
    assert_memory_equal(got, x, sizeof x);
    strata_pool_close(p);
    stop_nodes(t, 1);
}

/* ---- the optimizer in the pool ------------------------------------------------------------------- */

/* A small GPT whose arena (its tensors, with and without weight decay) is what the pool updates. */
static strata_gpt_t *small_model(void)
{
    strata_gpt_config_t cfg = strata_gpt_config_default();
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.d_model = 32;
    cfg.max_seq = 16;
    strata_gpt_t *m = NULL;
    assert_int_equal(strata_model_create(&cfg, 1, 5, &m), STRATA_OK);
    return m;
}

/* Two clients (two ranks) on n nodes: each adds its gradient into the pool's gradient region, the
 * norm comes from SUMSQ, and ADAMW runs tensor by tensor (decay per tensor, split between the
 * clients) for several steps. Parameters, m and v must equal strata_adamw_update's on the summed
 * gradient bit for bit, the gradient region must be zero after each step, and under the fault mode
 * the nodes must have met duplicates: applied twice, an update would give other bits. */
static void adamw_check(int n, double drop, double dup, double reorder)
{
    node_thread_t t[4] = {0};
    start_nodes(t, n, drop, dup, reorder);
    strata_pool_t *c[2] = {open_pool(t, n, LONG_MS), open_pool(t, n, LONG_MS)};
    strata_gpt_t *model = small_model();
    size_t P = strata_model_nparams(model);
    strata_optim_config_t oc = strata_optim_config_default();
    strata_pool_optim_layout_t L;
    assert_int_equal(strata_pool_optim_layout(c[0], P, &L), STRATA_OK);
    float *p = malloc(P * 4), *m = calloc(P, 4), *v = calloc(P, 4), *g[2] = {malloc(P * 4),
                                                                             malloc(P * 4)};
    float *gsum = malloc(P * 4), *got = malloc(P * 4);
    memcpy(p, strata_model_param_arena(model), P * 4);
    assert_int_equal(strata_pool_write(c[0], L.params, p, P * 4), STRATA_OK);
    assert_int_equal(strata_pool_write(c[0], L.m, m, P * 4), STRATA_OK);
    assert_int_equal(strata_pool_write(c[0], L.v, v, P * 4), STRATA_OK);
    assert_int_equal(strata_pool_write(c[0], L.grads, m, P * 4), STRATA_OK);
    for (int step = 1; step <= 3; step++) {
        float lr = 1e-2f / (float)step, scale = 0.5f;
        fill(g[0], P, 100u + (unsigned)step);
        fill(g[1], P, 200u + (unsigned)step);
        double ref_ss = 0;
        for (size_t i = 0; i < P; i++) {
            gsum[i] = g[0][i] + g[1][i]; // the pool's order: 0 + g0, then + g1
            ref_ss += (double)gsum[i] * gsum[i];
        }
        for (int r = 0; r < 2; r++)
            assert_int_equal(strata_pool_add(c[r], L.grads, g[r], P, STRATA_POOL_F32), STRATA_OK);
        double ss;
        assert_int_equal(strata_pool_sumsq(c[1], L.grads, P, &ss), STRATA_OK);
        // The blocks' sums in another order than the serial loop: a few units in the last place.
        assert_true(fabs(ss - ref_ss) <= 1e-12 * ref_ss);
        assert_int_equal(strata_adamw_update(model, &oc, p, gsum, m, v, 0, P, lr, step, scale),
                         STRATA_OK);
        for (int ti = 0; ti < strata_model_ntensors(model); ti++) {
            const strata_tensor_info_t *ts = strata_model_tensor(model, ti);
            uint64_t off = ts->offset * 4;
            strata_pool_adamw_t op = {L.params + off, L.m + off, L.v + off, L.grads + off,
                                      ts->count, lr, oc.beta1, oc.beta2, oc.eps,
                                      ts->decay ? oc.weight_decay : 0.f, scale, step};
            if (strata_pool_adamw(c[ti % 2], &op) != STRATA_OK)
                fail_msg("adamw: %s", strata_last_error());
        }
        assert_int_equal(strata_pool_read(c[0], L.params, got, P * 4), STRATA_OK);
        assert_memory_equal(got, p, P * 4);
        assert_int_equal(strata_pool_read(c[1], L.m, got, P * 4), STRATA_OK);
        assert_memory_equal(got, m, P * 4);
        assert_int_equal(strata_pool_read(c[0], L.v, got, P * 4), STRATA_OK);
        assert_memory_equal(got, v, P * 4);
        assert_int_equal(strata_pool_sumsq(c[0], L.grads, P, &ss), STRATA_OK);
        assert_true(ss == 0);
    }
    strata_pool_close(c[0]);
    strata_pool_close(c[1]);
    halt_nodes(t, n);
    uint64_t suppressed = 0;
    for (int i = 0; i < n; i++) {
        strata_pool_stats_t s;
        strata_pool_node_stats(t[i].node, &s);
        suppressed += s.duplicates;
    }
    close_nodes(t, n);
    if (dup > 0)
        assert_true(suppressed > 0);
    strata_model_destroy(model);
    free(p), free(m), free(v), free(g[0]), free(g[1]), free(gsum), free(got);
}

static void test_adamw_matches_optimizer(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++)
        adamw_check(n, 0, 0, 0);
}

static void test_adamw_faults_exact(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++)
        adamw_check(n, 0.1, 0.1, 0.1);
}

/* Requests the client refuses before sending anything, each with a message saying why; and a
 * layout larger than the pool, whose message says what each node must serve. */
static void test_adamw_bad_requests(void **state)
{
    (void)state;
    node_thread_t t[2] = {0};
    start_nodes(t, 2, 0, 0, 0);
    strata_pool_t *p = open_pool(t, 2, LONG_MS);
    strata_pool_optim_layout_t L;
    assert_int_equal(strata_pool_optim_layout(p, 1000, &L), STRATA_OK);
    uint64_t stripe = 2 * strata_pool_block_bytes(p);
    assert_int_equal(L.region_bytes, stripe);
    assert_true(L.m == L.params + stripe && L.v == L.m + stripe && L.grads == L.v + stripe);
    strata_pool_adamw_t ok = {L.params, L.m, L.v, L.grads, 1000, 1e-3f, 0.9f, 0.999f, 1e-8f,
                              0.01f, 1, 1};
    strata_pool_adamw_t op = ok;
    op.m += 2;
    assert_int_equal(strata_pool_adamw(p, &op), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "not a multiple of 4"));
    op = ok;
    op.v = L.m + 4; // an element further: the same node only by accident of a block boundary
    assert_int_equal(strata_pool_adamw(p, &op), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "same offset within a stripe"));
    op = ok;
    op.count = stripe / 4 + 1; // m's range runs into v's
    assert_int_equal(strata_pool_adamw(p, &op), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "overlap"));
    op = ok;
    op.grads = strata_pool_capacity(p); // congruent, but past the end
    assert_int_equal(strata_pool_adamw(p, &op), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "outside the pool"));
    double ss;
    assert_int_equal(strata_pool_sumsq(p, 2, 4, &ss), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_pool_adamw(p, &ok), STRATA_OK);
    assert_int_equal(strata_pool_optim_layout(p, 2 * NODE_BYTES / 4, &L), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "needs 4194304 bytes on each of the 2 pool nodes"));
    strata_pool_close(p);
    stop_nodes(t, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_zero_test),
        cmocka_unit_test(test_wire_format),
        cmocka_unit_test(test_read_write_add),
        cmocka_unit_test(test_interleaving),
        cmocka_unit_test(test_zero_records),
        cmocka_unit_test(test_chain_1_to_8),
        cmocka_unit_test(test_small_mtu),
        cmocka_unit_test(test_faults_exact),
        cmocka_unit_test(test_allreduce_to_every_rank),
        cmocka_unit_test(test_allreduce_multicast),
        cmocka_unit_test(test_receiver_repairs_by_nack),
        cmocka_unit_test(test_lost_acknowledgement),
        cmocka_unit_test(test_slow_repair_is_progress),
        cmocka_unit_test(test_nack_ahead_of_window),
        cmocka_unit_test(test_dead_node_named),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_malformed_datagrams),
        cmocka_unit_test(test_adamw_matches_optimizer),
        cmocka_unit_test(test_adamw_faults_exact),
        cmocka_unit_test(test_adamw_bad_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
