/* strata pool: a memory pool over plain UDP that reduces data as it passes through a chain of nodes
 * (the software form of NetDAM; docs/pool.md has the protocol).
 *
 * A pool node serves one memory region: READ, WRITE, ADD (float32 / bfloat16 elementwise into its
 * memory), ADAMW and SUMSQ (an optimizer step and a sum of squares over its own float32), and
 * REDUCE-FORWARD, whose packet carries the rest of its route: each hop adds its local block to the
 * payload and forwards it, the last one optionally stores the sum and sends it to the
 * destinations. A client opened on N nodes sees one global address space, consecutive blocks (one
 * packet payload each) on successive nodes. Lost packets are repaired by retransmission from the
 * source; ADD, WRITE and ADAMW apply exactly once. Nodes answer only clients that prove the job's
 * secret.
 */
#ifndef STRATA_POOL_H
#define STRATA_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- a pool node --------------------------------------------------------------------------------- */

typedef struct strata_pool_node strata_pool_node_t;

typedef struct strata_pool_node_config {
    const char *listen; /* "ADDR:PORT" (port 0 picks one) */
    size_t bytes;       /* size of the served memory region */
    const char *secret; /* the job secret clients must prove; NULL or "" means the empty secret */
    /* Seeded fault injection on received datagrams (0 = off), for tests: each arriving datagram
     * is dropped with probability drop, else processed twice with probability dup, else held back
     * and processed after the next one with probability reorder. */
    double drop, dup, reorder;
    uint64_t seed;
} strata_pool_node_config_t;

/* Counters of a node (also returned to clients by the STATS operation). */
typedef struct strata_pool_stats {
    uint64_t rx_packets, tx_packets;
    uint64_t malformed;      /* dropped: too short, too long, bad magic/version, bad fields */
    uint64_t unauthorized;   /* dropped: unknown session token or failed HELLO proof */
    uint64_t injected_drops; /* dropped by the seeded fault mode */
    uint64_t injected_dups, injected_reorders;
    uint64_t duplicates;     /* ADD/WRITE retransmissions recognised and not applied again */
    uint64_t zero_in, zero_out; /* ZERO records received / sent instead of a payload */
    uint64_t adds, forwards, results;
    uint64_t sessions;       /* sessions opened since start */
} strata_pool_stats_t;

/* Opens a node: binds the UDP socket and allocates the zeroed memory region. */
STRATA_API strata_status_t strata_pool_node_open(const strata_pool_node_config_t *cfg,
                                                 strata_pool_node_t **out);
/* The UDP port the node listens on. */
STRATA_API int strata_pool_node_port(const strata_pool_node_t *node);
/* Waits up to timeout_ms for datagrams and serves every one that arrived (batched). A malformed or
 * unauthorised datagram is counted and dropped, never an error. */
STRATA_API strata_status_t strata_pool_node_poll(strata_pool_node_t *node, int timeout_ms);
/* The node's counters. A node is not thread-safe: call this from the thread that polls it, or
 * after that thread has stopped; from anywhere else, ask the node itself (strata_pool_stats). */
STRATA_API void strata_pool_node_stats(const strata_pool_node_t *node, strata_pool_stats_t *out);
STRATA_API void strata_pool_node_close(strata_pool_node_t *node);

/* ---- a client ------------------------------------------------------------------------------------ */

typedef struct strata_pool strata_pool_t;

typedef enum strata_pool_dtype {
    STRATA_POOL_F32 = 1,
    STRATA_POOL_BF16 = 2, /* added in float32, rounded to nearest even */
} strata_pool_dtype_t;

/* Opens a client on nodes[0..n) ("ADDR:PORT" each), authenticating with the secret (NULL: the empty
 * one) and discovering the path MTU, which sets the block size (at most 8192 bytes, the 2048
 * float32 of a 9000-byte frame; STRATA_POOL_MTU forces a smaller MTU). Every later call fails
 * after timeout_ms of silence (< 0: STRATA_POOL_TIMEOUT_MS) with an error naming the node; a
 * reduction then asks each hop in turn (up to half the timeout) to name the silent one. */
STRATA_API strata_status_t strata_pool_open(const char *const *nodes, int n, const char *secret,
                                            long long timeout_ms, strata_pool_t **out);
STRATA_API void strata_pool_close(strata_pool_t *pool);

/* The job's pool, as the communicator (the pool allreduce) and the trainer (--optimizer-in-pool)
 * reach it: STRATA_POOL_NODES lists the nodes ("ADDR:PORT,ADDR:PORT,..."), STRATA_POOL_SECRET is
 * their secret (unset: STRATA_SECRET). strata_pool_env_nodes() is how many nodes the list names
 * (0: unset), without opening anything. strata_pool_open_env opens a client on them like
 * strata_pool_open; errors: STRATA_ERR_INVALID_ARG for an unset list, an empty entry or more than
 * 64 nodes, then those of strata_pool_open. */
STRATA_API int strata_pool_env_nodes(void);
STRATA_API strata_status_t strata_pool_open_env(long long timeout_ms, strata_pool_t **out);

/* Bytes of one block (one packet payload): the interleaving unit. */
STRATA_API size_t strata_pool_block_bytes(const strata_pool_t *pool);
/* Bytes of the global address space: blocks of all nodes, interleaved. */
STRATA_API uint64_t strata_pool_capacity(const strata_pool_t *pool);
/* The UDP port of the client's socket (where reduce results for it arrive). */
STRATA_API int strata_pool_port(const strata_pool_t *pool);
/* "ADDR:PORT" of the client's socket as the pool's first node reaches it: what other clients name
 * as a reduction's destination, and as the origin they receive from. */
STRATA_API strata_status_t strata_pool_address(const strata_pool_t *pool, char *buf, size_t len);

/* Reads / writes bytes at a global address. */
STRATA_API strata_status_t strata_pool_read(strata_pool_t *pool, uint64_t addr, void *buf,
                                            size_t bytes);
STRATA_API strata_status_t strata_pool_write(strata_pool_t *pool, uint64_t addr, const void *buf,
                                             size_t bytes);
/* Reads / writes bytes at an address in node i's own memory (not interleaved): how the ranks of an
 * allreduce place their buffers in the blocks a route names. */
STRATA_API strata_status_t strata_pool_read_node(strata_pool_t *pool, int node, uint64_t addr,
                                                 void *buf, size_t bytes);
STRATA_API strata_status_t strata_pool_write_node(strata_pool_t *pool, int node, uint64_t addr,
                                                  const void *buf, size_t bytes);
/* pool[addr..] += buf elementwise (count elements of dtype), exactly once per element even when
 * packets are lost or duplicated. addr must be a multiple of the element size. */
STRATA_API strata_status_t strata_pool_add(strata_pool_t *pool, uint64_t addr, const void *buf,
                                           size_t count, strata_pool_dtype_t dtype);

/* One hop of a chained reduction: a node of the pool (index into the open list) and the address
 * in that node's own memory of the block it adds (node-local, not interleaved). */
typedef struct strata_pool_hop {
    int node;
    uint64_t addr;
} strata_pool_hop_t;

/* The most hops of a route and destinations of a result. */
#define STRATA_POOL_MAX_HOPS  8
#define STRATA_POOL_MAX_DESTS 16

typedef struct strata_pool_reduce {
    const void *src;     /* the caller's contribution (count elements), read until the call ends */
    void *dst;           /* the reduced result for the caller (may alias src: it is then staged
                            and written when the call ends; NULL: not wanted) */
    size_t count;
    strata_pool_dtype_t dtype;
    const strata_pool_hop_t *route; /* 1..STRATA_POOL_MAX_HOPS hops, in order */
    int hops;
    bool store;          /* the last hop also writes the sum over its own block */
    /* Other receivers ("ADDR:PORT" of their strata_pool_port), each calling strata_pool_receive;
     * the call returns once every one of them has the whole result. */
    const char *const *dests;
    int ndests;
    /* A multicast group ("ADDR:PORT" in 224.0.0.0/4) every destination has joined
     * (strata_pool_join): the last hop sends the result there once instead of once to each
     * destination, and the network copies it (the dests still confirm). NULL: unicast. */
    const char *group;
} strata_pool_reduce_t;

/* dst = src + the blocks of every hop, through the chain: the packets travel client -> hop 1 ->
 * ... -> last hop -> the caller and dests. A lost packet is resent from src (the caller's copy is
 * the source), a receiver missing one asks the caller for it again. This is the allreduce path:
 * the ranks write their buffers to the hops' blocks, one rank reduces, every rank receives. */
STRATA_API strata_status_t strata_pool_reduce(strata_pool_t *pool, const strata_pool_reduce_t *op);
/* Receives the result of one reduction (count elements of dtype) that another client sends here
 * as a destination. */
STRATA_API strata_status_t strata_pool_receive(strata_pool_t *pool, void *dst, size_t count,
                                               strata_pool_dtype_t dtype);
/* The same, taking only the result of the reduction that `origin` ("ADDR:PORT" of the caller of
 * strata_pool_reduce as the pool sees it) runs: what a member of a shared multicast group uses. */
STRATA_API strata_status_t strata_pool_receive_from(strata_pool_t *pool, const char *origin,
                                                    void *dst, size_t count,
                                                    strata_pool_dtype_t dtype);

/* Joins multicast group "ADDR:PORT" (224.0.0.0/4) on the interface that leads to the pool's first
 * node: results a reduction sends to the group (strata_pool_reduce_t.group) then arrive for
 * strata_pool_receive too. One group per client. Errors: STRATA_ERR_INVALID_ARG for an address
 * that is not a multicast group or a second group; STRATA_ERR_IO / STRATA_ERR_SYSTEM when the host
 * refuses (no multicast there: use unicast). */
STRATA_API strata_status_t strata_pool_join(strata_pool_t *pool, const char *group);

/* Asks node i for its counters. */
STRATA_API strata_status_t strata_pool_stats(strata_pool_t *pool, int node,
                                             strata_pool_stats_t *out);

/* ---- the optimizer in the pool (docs/pool.md, "Optimizer state in the pool") ---------------------
 * AdamW's state lives in the pool: the fp32 master parameters, the moments m and v, and a gradient
 * region the ranks add their gradients into. Each pool node updates the blocks it holds, so only
 * gradients in and parameters out cross the network. An update needs the four values of an element
 * on one node: the four ranges must start at the same offset within a stripe (block * nodes
 * bytes), which strata_pool_optim_layout's regions do. */

/* Four regions of one size, from global address 0: params | m | v | grads, each count float32
 * rounded up to whole stripes, so element i of every region is on the same node. */
typedef struct strata_pool_optim_layout {
    uint64_t params, m, v, grads; /* global addresses of the regions */
    uint64_t region_bytes;        /* bytes of each region (count * 4 rounded up to a stripe) */
} strata_pool_optim_layout_t;

/* The layout for count parameters. Errors: STRATA_ERR_INVALID_ARG when the four regions exceed
 * the pool's capacity (the message says how many bytes each node must serve). */
STRATA_API strata_status_t strata_pool_optim_layout(const strata_pool_t *pool, size_t count,
                                                    strata_pool_optim_layout_t *out);

/* One AdamW step over count float32 elements, applied by the pool nodes exactly as
 * strata_adamw_update applies it to a tensor (the gradient times grad_scale, bias corrections of
 * `step`, the decay factor 1 - lr * weight_decay on the parameters; weight_decay 0 for a tensor
 * without decay), after which the gradient range is zero. */
typedef struct strata_pool_adamw {
    uint64_t params, m, v, grads; /* global addresses (multiples of 4, congruent modulo a stripe) */
    size_t count;
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;
} strata_pool_adamw_t;

/* Runs op on the nodes holding its blocks, once per element even when packets are lost or
 * duplicated. Errors: STRATA_ERR_INVALID_ARG for misaligned, overlapping, incongruent or
 * out-of-pool ranges; STRATA_ERR_PEER_FAILED naming a node that does not answer. */
STRATA_API strata_status_t strata_pool_adamw(strata_pool_t *pool, const strata_pool_adamw_t *op);

/* *out = the sum of squares of count float32 at global address addr (a multiple of 4), in double,
 * each node summing its own blocks: a global gradient norm without reading the gradients back. */
STRATA_API strata_status_t strata_pool_sumsq(strata_pool_t *pool, uint64_t addr, size_t count,
                                             double *out);

#ifdef __cplusplus
}
#endif
#endif
