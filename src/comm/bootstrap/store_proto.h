/* The bootstrap store's wire format, shared by store_server.c and store_client.c and by nobody else
 * (tests may include it to speak the protocol badly on purpose): message types, a growable byte
 * buffer that encodes frames, a bounds-checked reader that decodes them, and the "host:port"
 * parser.
 *
 * A frame is u32 length (the bytes after the length field: 1 + body, at most ST_STORE_MAX_FRAME),
 * u8 type, body. Integers are little endian; a string is a u32 length and its bytes (no NUL).
 *
 *   client -> server                                  server -> client
 *   HELLO  id magic version rank pid secret host place  OK        id payload
 *   SET    id key value (the rest of the frame)       ERR       id text (the rest)
 *   GET    id key                                     CANCELLED id
 *   ADD    id key i64 delta                           NOTICE    rank text (the rest), unsolicited
 *   WAIT   id u32 n, then n keys
 *   CANCEL id   (of a GET/WAIT the client stops waiting for)
 *   ABORT  id reason (the rest)
 *   BYE    id
 *   REPORT id u32 rank, text (the rest): the sender saw `rank` die
 *
 * Every request but CANCEL is answered once by OK or ERR carrying its id; OK's payload is the value
 * for GET, the new i64 for ADD and empty otherwise. Parked GET/WAITs are answered in whatever order
 * their keys arrive. CANCEL makes the server answer the named request CANCELLED if it is still
 * parked (and nothing if it was answered already), so a client whose timeout expired learns whether
 * the key arrived after all; answers to requests a client gave up on are recognised by id.
 *
 * REPORT makes the store the judge of a failure's root cause: the server announces the reported
 * rank as failed unless some failure was announced already, and answers only after that, so the
 * reporter has received the job's first notice before its OK. A rank that gives up on a failure
 * thus leaves the cause recorded before it exits, and whoever then finds that rank gone learns the
 * cause, not the echo, from its own REPORT.
 */
#ifndef ST_STORE_PROTO_H
#define ST_STORE_PROTO_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define ST_STORE_MAGIC      0x31525453u /* "STR1" on the wire */
#define ST_STORE_VERSION    2u  /* 2: HELLO carries the client's place on the fabric */
#define ST_STORE_MAX_FRAME  (64u << 20) /* a frame's length field may not exceed this */
#define ST_STORE_PLACE_MAX  127u        /* a client's place as the store keeps it */
#define ST_STORE_HELLO_MAX  4096u       /* nor this before HELLO: a stranger is read no further */
#define ST_STORE_HELLO_MS   5000        /* a new connection must say HELLO within this */
#define ST_STORE_HOST_MAX   256         /* "host:port" text, for buffers */
#define ST_STORE_NOTICE_MAX 512         /* longest notice text kept */

enum {
    ST_MSG_HELLO = 1,
    ST_MSG_SET,
    ST_MSG_GET,
    ST_MSG_ADD,
    ST_MSG_WAIT,
    ST_MSG_CANCEL,
    ST_MSG_ABORT,
    ST_MSG_BYE,
    ST_MSG_REPORT,
    ST_MSG_OK = 64,
    ST_MSG_ERR,
    ST_MSG_NOTICE,
    ST_MSG_CANCELLED,
};

/* ---- encoding -------------------------------------------------------------------------------- */

/* A byte buffer with a consumed prefix [0, off) and data [off, len). Appends after an allocation
 * failure are dropped and set `oom`, so an encoder checks once at the end. */
typedef struct st_buf {
    uint8_t *data;
    size_t off, len, cap;
    bool oom;
} st_buf_t;

static inline void st_buf_free(st_buf_t *b)
{
    free(b->data);
    *b = (st_buf_t){0};
}

/* Bytes not consumed yet. */
static inline size_t st_buf_avail(const st_buf_t *b)
{
    return b->len - b->off;
}

/* Marks n bytes consumed; an emptied buffer starts over at 0. */
static inline void st_buf_consume(st_buf_t *b, size_t n)
{
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
}

/* Makes room for `extra` more bytes after len, first sliding unconsumed data to the front. */
static inline bool st_buf_reserve(st_buf_t *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->off > 0 && b->cap - b->len < extra) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->cap - b->len >= extra)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

static inline void st_buf_put(st_buf_t *b, const void *p, size_t n)
{
    if (n && st_buf_reserve(b, n)) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }
}

static inline void st_le32_store(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t st_le32_load(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void st_buf_put_u32(st_buf_t *b, uint32_t v)
{
    uint8_t t[4];
    st_le32_store(t, v);
    st_buf_put(b, t, 4);
}

static inline void st_buf_put_i64(st_buf_t *b, int64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)((uint64_t)v >> (8 * i));
    st_buf_put(b, t, 8);
}

static inline void st_buf_put_str(st_buf_t *b, const char *s, size_t n)
{
    st_buf_put_u32(b, (uint32_t)n);
    st_buf_put(b, s, n);
}

/* Starts a frame: reserves its length field, writes the type; returns where the frame starts. */
static inline size_t st_frame_begin(st_buf_t *b, uint8_t type)
{
    size_t start = b->len;
    st_buf_put_u32(b, 0);
    st_buf_put(b, &type, 1);
    return start;
}

/* Patches the length of the frame started at `start`. False if encoding failed (out of memory) or
 * the frame exceeds ST_STORE_MAX_FRAME; the frame is then removed again. */
static inline bool st_frame_end(st_buf_t *b, size_t start)
{
    if (b->oom || b->len - start - 4 > ST_STORE_MAX_FRAME) {
        if (!b->oom)
            b->len = start;
        return false;
    }
    st_le32_store(b->data + start, (uint32_t)(b->len - start - 4));
    return true;
}

/* ---- decoding -------------------------------------------------------------------------------- */

/* What st_frame_next() found at the front of a buffer. */
typedef enum st_frame_state { ST_FRAME_PARTIAL = 0, ST_FRAME_READY, ST_FRAME_BAD } st_frame_state_t;

/* Looks at the unconsumed bytes of `b`: READY fills type/body/body_len (body points into b and
 * stays valid until b is appended to) and *frame_bytes (to consume); BAD means a zero or oversized
 * length field, whose value is left in *frame_bytes for messages. */
static inline st_frame_state_t st_frame_next(const st_buf_t *b, uint8_t *type, const uint8_t **body,
                                             size_t *body_len, size_t *frame_bytes)
{
    size_t avail = st_buf_avail(b);
    if (avail < 4)
        return ST_FRAME_PARTIAL;
    const uint8_t *p = b->data + b->off;
    uint32_t n = st_le32_load(p);
    if (n == 0 || n > ST_STORE_MAX_FRAME) {
        *frame_bytes = n;
        return ST_FRAME_BAD;
    }
    if (avail - 4 < n)
        return ST_FRAME_PARTIAL;
    *type = p[4];
    *body = p + 5;
    *body_len = n - 1;
    *frame_bytes = (size_t)n + 4;
    return ST_FRAME_READY;
}

/* Bytes still needed to complete the frame at the front of `b` (64 KiB when its length is not known
 * or not sane), so a reader can make room for a large value in one step. */
static inline size_t st_frame_missing(const st_buf_t *b)
{
    size_t avail = st_buf_avail(b);
    if (avail >= 4) {
        uint32_t n = st_le32_load(b->data + b->off);
        if (n <= ST_STORE_MAX_FRAME && (size_t)n + 4 > avail)
            return ST_MAX((size_t)n + 4 - avail, (size_t)4096);
    }
    return 64 << 10;
}

/* A cursor over a frame body; reading past the end sets `bad` and yields zeros. */
typedef struct st_rd {
    const uint8_t *p;
    size_t left;
    bool bad;
} st_rd_t;

static inline const uint8_t *st_rd_bytes(st_rd_t *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static inline uint32_t st_rd_u32(st_rd_t *r)
{
    const uint8_t *p = st_rd_bytes(r, 4);
    return p ? st_le32_load(p) : 0;
}

static inline int64_t st_rd_i64(st_rd_t *r)
{
    const uint8_t *p = st_rd_bytes(r, 8);
    uint64_t v = 0;
    for (int i = 0; p && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return (int64_t)v;
}

/* A string's bytes (not NUL-terminated) and length. */
static inline const char *st_rd_str(st_rd_t *r, uint32_t *len)
{
    *len = st_rd_u32(r);
    const char *s = (const char *)st_rd_bytes(r, *len);
    if (!s)
        *len = 0;
    return s;
}

/* Everything left (the open-ended last field of SET, ERR, NOTICE and ABORT). */
static inline const uint8_t *st_rd_rest(st_rd_t *r, size_t *len)
{
    *len = r->left;
    return st_rd_bytes(r, r->left);
}

/* ---- helpers --------------------------------------------------------------------------------- */

/* Splits "host:port", "[v6addr]:port" or ":port" into host (possibly "") and a port in 0..65535. */
static inline bool st_store_split_addr(const char *addr, char *host, size_t host_cap, int *port)
{
    if (!addr)
        return false;
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return false;
    const char *h = addr;
    size_t hlen = (size_t)(colon - addr);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen)) {
        return false; // a bare IPv6 address is ambiguous: ask for brackets
    }
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (hlen >= host_cap || end == colon + 1 || *end || p < 0 || p > 65535)
        return false;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)p;
    return true;
}

/* Milliseconds until a st_deadline_ms() deadline, rounded up, for poll(): -1 for "never", 0 once
 * it has passed. */
static inline int st_store_ms_until(uint64_t deadline)
{
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = st_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

#endif
