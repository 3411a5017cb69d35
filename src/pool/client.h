/* Internals of the pool client shared by its files: the client's state, an operation as a window
 * of sequenced packets (items), and the engine that sends, retransmits and collects them
 * (engine.c). client.c maps addresses and opens; reduce.c runs chained reductions; optim.c the
 * optimizer's ADAMW and SUMSQ. */
#ifndef ST_POOL_CLIENT_H
#define ST_POOL_CLIENT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/net.h"
#include "pool/proto.h"
#include "strata/pool.h"

#define PC_RX_BATCH 32
#define PC_TX_BATCH 64
/* A destination sends its DONE at most PC_DONE_TRIES times, each wait twice the one before (from a
 * retransmission timeout, up to PC_DONE_GAP_MAX of them), and then returns without the origin's
 * acknowledgement (reduce.c); the origin, as it returns, sends every destination PC_FINAL_ACKS
 * more acknowledgements (engine.c). */
#define PC_DONE_TRIES   8
#define PC_DONE_GAP_MAX 8
#define PC_FINAL_ACKS   2

struct strata_pool {
    int fd, n;
    int mfd; /* the multicast group's socket (strata_pool_join); -1: none */
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
    /* Congestion control (engine.c), kept from one operation to the next: the smoothed round trip
     * and its variation (as TCP's, RFC 6298) set the retransmission timeout, and the window of
     * packets in flight grows by one per answer up to ssthresh, then by one per window, and halves
     * once per round trip that loses a packet (AIMD), between 1 and `window`. */
    double srtt_ns, rttvar_ns, cwnd, ssthresh;
    uint64_t recovery_ns; /* losses of packets sent before this were already answered by a halving */
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
    uint8_t tries; /* transmissions; a round trip is measured on the first only (Karn) */
    bool sent, done;
    bool wanted;   /* a destination asked for it again (NACK): resent as the window allows */
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
    const strata_pool_adamw_t *adamw;
    int64_t adamw_delta[3]; /* node-local m, v, grads minus node-local params (same on every node) */
    double *sums;           /* SUMSQ: each item's answer */
    struct sockaddr_in dests[STRATA_POOL_MAX_DESTS];
    struct sockaddr_in group; /* the result goes here once when has_group (the dests confirm) */
    bool has_group;
    bool dest_done[STRATA_POOL_MAX_DESTS];
    int ndests_done;
    uint32_t dest_missing[STRATA_POOL_MAX_DESTS]; /* the fewest blocks a destination's NACKs listed
                                                     (0: none yet) */
    strata_pool_stats_t *stats;
    strata_status_t err;
    size_t nwanted;          /* items wanted again by a destination, not yet resent */
    double repair_budget;    /* resends for destinations allowed until repair_epoch_ns + timeout */
    uint64_t repair_epoch_ns;
} op_t;

/* Splits [addr, addr + bytes) of the global space into per-block items (an error names `what` when
 * the range leaves the pool). */
strata_status_t pc_split(strata_pool_t *p, const char *what, uint64_t addr, size_t bytes,
                         item_t **out, size_t *n);

/* Queues a datagram to `to` (sent at the next receive or when the batch is full) with its payload
 * (pl_payload_len bytes of it); the payload goes as a ZERO record when it is a WRITE/ADD/REDUCE payload the zero filter passes. */
void pc_queue(strata_pool_t *p, const struct sockaddr_in *to, pl_hdr_t h, const pl_hop_t *hops,
              const pl_dest_t *dests, const void *payload, uint8_t zero_dtype);

/* Sends what is queued, waits up to wait_ms for datagrams and hands each valid one to fn; returns
 * how many fn counted as progress. */
typedef bool (*pc_on_msg_fn)(void *ctx, const pl_msg_t *m, const struct sockaddr_in *from);
int pc_receive(strata_pool_t *p, long long wait_ms, pc_on_msg_fn fn, void *ctx);

bool pc_same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b);

/* The retransmission timeout in ns: the measured round trip plus four times its variation, at
 * least STRATA_POOL_RETRY_MS (also the timeout before the first measurement). */
uint64_t pc_rto_ns(const strata_pool_t *p);

/* Runs an operation to completion: every item answered (and, for a reduction, every destination
 * done), or an error naming the silent node after the timeout. */
strata_status_t pc_run(op_t *o);

#endif
