/* The pool node's ADD throughput against this machine's memory bandwidth.
 *
 * The peer is the plain loop a[i] += b[i] over float arrays as large as the node's region, on one
 * core: the rate at which one core can add data into memory at all. The pool side is a node served
 * by one thread of this process and a client in another adding a buffer of the same size into it
 * over loopback UDP (jumbo blocks, 2048 float32 each); the node's rate is the payload bytes it
 * added per second of its own thread's CPU time, i.e. per core. Both count payload bytes (b).
 *
 *   strata_pool_add [SIZE[K|M|G]] [ITERS]   default 64M 5; prints one JSON line:
 *   {"bytes":S,"mem_add_GBps":...,"node_add_GBps_per_core":...,"node_wall_GBps":...,"ratio":...}
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strata/strata.h"

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct node_run {
    strata_pool_node_t *node;
    atomic_int stop;
    double cpu_s; /* the node thread's CPU time while serving */
} node_run_t;

static void *serve(void *arg)
{
    node_run_t *r = arg;
    double t0 = now(CLOCK_THREAD_CPUTIME_ID);
    while (!atomic_load(&r->stop))
        strata_pool_node_poll(r->node, 5);
    r->cpu_s = now(CLOCK_THREAD_CPUTIME_ID) - t0;
    return NULL;
}

static void add_loop(float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
}

int main(int argc, char **argv)
{
    long long bytes = 64ll << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 5;
    if ((argc > 1 && !strata_parse_size(argv[1], &bytes)) || bytes < 8192 || iters < 1) {
        fprintf(stderr, "usage: strata_pool_add [SIZE[K|M|G]] [ITERS]\n");
        return 2;
    }
    size_t n = (size_t)bytes / 4;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    if (!a || !b)
        return 1;
    for (size_t i = 0; i < n; i++)
        a[i] = 0, b[i] = (float)(i & 7) + 1; // no zero blocks: the filter must not help
    add_loop(a, b, n); // warm-up
    double t0 = now(CLOCK_MONOTONIC);
    for (int k = 0; k < iters; k++)
        add_loop(a, b, n);
    double mem = (double)bytes * iters / (now(CLOCK_MONOTONIC) - t0) / 1e9;

    strata_pool_node_config_t cfg = {.listen = "127.0.0.1:0", .bytes = (size_t)bytes,
                                     .secret = "bench"};
    node_run_t r = {0};
    if (strata_pool_node_open(&cfg, &r.node) != STRATA_OK) {
        fprintf(stderr, "strata_pool_add: %s\n", strata_last_error());
        return 1;
    }
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", strata_pool_node_port(r.node));
    const char *nodes[1] = {addr};
    pthread_t tid;
    pthread_create(&tid, NULL, serve, &r);
    strata_pool_t *p = NULL;
    int rc = 0;
    double wall = 0;
    if (strata_pool_open(nodes, 1, "bench", -1, &p) != STRATA_OK ||
        strata_pool_add(p, 0, b, n, STRATA_POOL_F32) != STRATA_OK) { // warm-up: touches the region
        fprintf(stderr, "strata_pool_add: %s\n", strata_last_error());
        rc = 1;
    } else {
        t0 = now(CLOCK_MONOTONIC);
        for (int k = 0; k < iters && !rc; k++)
            if (strata_pool_add(p, 0, b, n, STRATA_POOL_F32) != STRATA_OK) {
                fprintf(stderr, "strata_pool_add: %s\n", strata_last_error());
                rc = 1;
            }
        wall = now(CLOCK_MONOTONIC) - t0;
    }
    strata_pool_close(p);
    atomic_store(&r.stop, 1);
    pthread_join(tid, NULL);
    strata_pool_node_close(r.node);
    if (!rc) {
        // The node's CPU time covers the warm-up pass too: iters + 1 passes.
        double node = (double)bytes * (iters + 1) / r.cpu_s / 1e9;
        printf("{\"bytes\":%lld,\"mem_add_GBps\":%.2f,\"node_add_GBps_per_core\":%.2f,"
               "\"node_wall_GBps\":%.2f,\"ratio\":%.3f}\n",
               bytes, mem, node, (double)bytes * iters / wall / 1e9, node / mem);
    }
    free(a);
    free(b);
    return rc;
}
