/* The pool's wire format (docs/pool.md): a 48-byte header, the route and destinations of a
 * REDUCE, then the payload. Little-endian integers, addresses (IPv4, port) in network order. */
#ifndef ST_POOL_PROTO_H
#define ST_POOL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/pool.h"

#define PL_MAGIC   0x4c505453u /* "STPL" */
#define PL_VERSION 1
#define PL_HDR     48
#define PL_HOP     24 /* ipv4 u32, port u16, pad u16, token u64, addr u64 */
#define PL_DEST    8  /* ipv4 u32, port u16, pad u16 */
#define PL_MAX_PAYLOAD 8192 /* 2048 float32: fits a 9000-byte frame with the header and a route */
/* Room kept below the MTU for the IP/UDP headers, the pool header and the longest route. */
#define PL_ROUTE_ROOM (PL_HOP * STRATA_POOL_MAX_HOPS + PL_DEST * STRATA_POOL_MAX_DESTS)
#define PL_MAX_DGRAM  (PL_HDR + PL_ROUTE_ROOM + PL_MAX_PAYLOAD)
/* Seqs of the current flow a node remembers per session, to apply ADD/WRITE once; a client never
 * sends a seq this far past its oldest unanswered one. */
#define PL_DEDUP_WINDOW 1024
#define PL_NONCE 16
#define PL_MAC   32

typedef enum pl_op {
    PL_HELLO = 1,   /* client -> node: client nonce */
    PL_CHALLENGE,   /* node -> client: node nonce */
    PL_AUTH,        /* client -> node: both nonces, HMAC(secret, "client" || nonces) */
    PL_WELCOME,     /* node -> client: token, region size, HMAC(secret, "node" || nonces) */
    PL_READ,        /* addr, len -> READ_REPLY */
    PL_READ_REPLY,
    PL_WRITE,       /* addr, payload -> ACK */
    PL_ADD,         /* addr, dtype, payload -> ACK */
    PL_ACK,
    PL_REDUCE,      /* route, dests, payload: hop adds and forwards; the last sends RESULT */
    PL_RESULT,      /* last hop -> origin and dests */
    PL_NACK,        /* receiver -> origin: seqs still missing */
    PL_DONE,        /* receiver -> origin: whole result received */
    PL_STATS,       /* -> STATS_REPLY */
    PL_STATS_REPLY,
    PL_ERROR,       /* reply: aux holds the error code */
    PL_ADAMW,       /* addr (params), len (range bytes), payload pl_adamw_args_t -> ACK */
    PL_SUMSQ,       /* addr, len -> SUMSQ_REPLY */
    PL_SUMSQ_REPLY, /* payload: the double sum of squares of the range's float32 */
    PL_OP_END
} pl_op_t;

enum {
    PL_F_ZERO = 1u << 0,  /* payload omitted: len bytes of zeros */
    PL_F_STORE = 1u << 1, /* REDUCE: the last hop writes the sum over its block */
};

/* Error codes in an ERROR reply's aux. */
enum { PL_E_RANGE = 1, PL_E_ALIGN = 2, PL_E_DTYPE = 3, PL_E_OVERLAP = 4 };

typedef struct pl_hdr {
    uint8_t op, dtype, flags, hops; /* hops: route entries that follow */
    uint64_t token;                 /* the session at the receiving node */
    uint32_t flow, seq;
    uint64_t addr; /* node-local address; REDUCE/RESULT: byte offset within the operation */
    uint32_t len;  /* logical payload bytes */
    uint32_t aux;  /* ERROR: code; REDUCE/RESULT: blocks in the flow */
    uint32_t origin_ip; /* REDUCE/RESULT: the client that started it (set by the first hop) */
    uint16_t origin_port;
    uint8_t ndest;
} pl_hdr_t;

typedef struct pl_hop {
    uint32_t ip;
    uint16_t port;
    uint64_t token, addr;
} pl_hop_t;

typedef struct pl_dest {
    uint32_t ip;
    uint16_t port;
} pl_dest_t;

/* A decoded datagram: views into the caller's buffer. */
typedef struct pl_msg {
    pl_hdr_t h;
    pl_hop_t hop[STRATA_POOL_MAX_HOPS];
    pl_dest_t dest[STRATA_POOL_MAX_DESTS];
    const uint8_t *payload; /* where the payload starts (payload_len bytes, 0 for ZERO) */
    size_t payload_len;     /* bytes present on the wire */
} pl_msg_t;

/* The payload of an ADAMW request: the step's hyper-parameters and the node-local addresses of the
 * range's optimizer state and summed gradient (the parameters are at the header's addr; all four
 * ranges hold len bytes of float32). 56 bytes on the wire: six f32, i64 step, three u64. */
#define PL_ADAMW_ARGS 56
typedef struct pl_adamw_args {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;
    uint64_t m, v, g;
} pl_adamw_args_t;

void pl_adamw_put(uint8_t out[PL_ADAMW_ARGS], const pl_adamw_args_t *a);
void pl_adamw_get(const uint8_t in[PL_ADAMW_ARGS], pl_adamw_args_t *a);

/* The payload bytes a datagram with header h carries on the wire: none for a ZERO record, a READ
 * or a SUMSQ, the arguments for an ADAMW, len otherwise. */
size_t pl_payload_len(const pl_hdr_t *h);

/* Decodes and validates a datagram of n bytes; false when it is malformed (bad magic, version,
 * op, counts, or a payload length that disagrees with the header). */
bool pl_decode(const uint8_t *buf, size_t n, pl_msg_t *m);

/* Encodes header, route, dests and payload (NULL: none, e.g. ZERO) into buf (PL_MAX_DGRAM bytes);
 * returns the datagram length. */
size_t pl_encode(uint8_t *buf, const pl_hdr_t *h, const pl_hop_t *hops, const pl_dest_t *dests,
                 const void *payload, size_t payload_len);

/* Element size of a dtype; 0 when unknown. */
size_t pl_dtype_size(uint8_t dtype);

#endif
