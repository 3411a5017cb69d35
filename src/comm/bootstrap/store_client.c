/* The bootstrap store's client: one TCP connection per process, used by one thread at a time.
 *
 * Requests are sent whole and answered in any order by id (store_proto.h), which lets a GET that
 * timed out or was interrupted by a failure notice be cancelled without confusing the next request.
 * The server may push NOTICE frames at any moment; whatever reads the socket records the first one
 * (sticky), so a pending or later GET/WAIT fails with STRATA_ERR_PEER_FAILED and the notice's text,
 * and st_store_check_notice() can look for one without blocking. Losing the connection without
 * having said goodbye counts as a notice about the store itself. Timeouts are enforced with poll()
 * on the blocking socket; sends use MSG_NOSIGNAL so a dead store is an error, not a SIGPIPE. */
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_proto.h"

#define HOUSEKEEPING_MS 10000 /* cap on waits for CANCEL and BYE answers */

struct st_store {
    int fd;
    char addr[ST_STORE_HOST_MAX]; /* as given, for messages */
    long long timeout_ms;         /* for answers to SET, ADD, ABORT and BYE */
    uint32_t next_id;
    bool lost;                 /* the connection is gone (EOF, error, or a broken frame) */
    bool said_bye;             /* BYE acknowledged: EOF from now on is expected */
    strata_status_t notice_rc; /* STRATA_OK until the first notice or the loss of the store */
    int notice_rank;
    char notice[ST_STORE_NOTICE_MAX];
    st_buf_t in, out;
};

/* An answer to one request: OK, ERR or CANCELLED and what follows the id. Points into st->in. */
typedef struct reply {
    uint8_t type;
    const uint8_t *data;
    size_t len;
} reply_t;

static void record_notice(st_store_t *st, int rank, const char *text, size_t len)
{
    if (st->notice_rc != STRATA_OK)
        return;
    st->notice_rc = STRATA_ERR_PEER_FAILED;
    st->notice_rank = rank;
    snprintf(st->notice, sizeof st->notice, "%.*s", (int)ST_MIN(len, sizeof st->notice - 1), text);
    if (!st->notice[0]) // an empty text (or one starting with NUL) would be an empty error message
        snprintf(st->notice, sizeof st->notice, "the store at %s reported rank %d failed, without "
                 "a reason", st->addr, rank);
    ST_LOG_DEBUG(ST_SUB_STORE, "notice from the store at %s: %s", st->addr, st->notice);
}

/* The connection is unusable; unless we said goodbye, that is a failure of the store. */
static void mark_lost(st_store_t *st, const char *detail)
{
    st->lost = true;
    if (st->said_bye)
        return;
    char text[ST_STORE_NOTICE_MAX];
    int n = snprintf(text, sizeof text, "lost connection to the store at %s%s%s", st->addr,
                     detail ? ": " : "", detail ? detail : "");
    record_notice(st, -1, text, n < 0 ? 0 : (size_t)n);
}

/* Takes the next complete frame off st->in. NOTICEs are recorded and skipped; returns true with
 * an answer (OK, ERR, CANCELLED) whose id is in *id, false when no complete answer is buffered. */
static bool next_answer(st_store_t *st, uint32_t *id, reply_t *out)
{
    // Frames that arrived before an EOF are still taken: the last words of a store that shuts
    // down may be the notice explaining why.
    for (;;) {
        uint8_t type;
        const uint8_t *body;
        size_t len, frame_bytes;
        st_frame_state_t s = st_frame_next(&st->in, &type, &body, &len, &frame_bytes);
        if (s == ST_FRAME_PARTIAL)
            return false;
        if (s == ST_FRAME_BAD || len < 4 ||
            (type != ST_MSG_OK && type != ST_MSG_ERR && type != ST_MSG_CANCELLED &&
             type != ST_MSG_NOTICE)) {
            mark_lost(st, "it sent a malformed frame");
            st->in.off = st->in.len = 0; // nothing after it can be trusted
            return false;
        }
        st_buf_consume(&st->in, frame_bytes); // body stays readable until the next append
        if (type == ST_MSG_NOTICE) {
            record_notice(st, (int32_t)st_le32_load(body), (const char *)body + 4, len - 4);
            continue;
        }
        *id = st_le32_load(body);
        *out = (reply_t){.type = type, .data = body + 4, .len = len - 4};
        return true;
    }
}

/* Waits up to timeout_ms (0 = just look, -1 = forever) for bytes and appends them to st->in.
 * Returns false if nothing arrived; EOF and errors mark the connection lost. */
static bool read_some(st_store_t *st, int timeout_ms)
{
    if (st->lost)
        return false;
    struct pollfd pfd = {.fd = st->fd, .events = POLLIN};
    int rc;
    ST_RETRY_EINTR(rc, poll(&pfd, 1, timeout_ms));
    if (rc <= 0)
        return false;
    if (!st_buf_reserve(&st->in, st_frame_missing(&st->in))) {
        mark_lost(st, "out of memory for its answer");
        return false;
    }
    ssize_t n;
    ST_RETRY_EINTR(n,
                   recv(st->fd, st->in.data + st->in.len, st->in.cap - st->in.len, MSG_DONTWAIT));
    if (n > 0) {
        st->in.len += (size_t)n;
        return true;
    }
    if (n == 0)
        mark_lost(st, NULL);
    else if (errno != EAGAIN && errno != EWOULDBLOCK)
        mark_lost(st, strerror(errno));
    return false;
}

/* Reads whatever has arrived without blocking, recording notices. Answers are dropped, so this is
 * only for when no request awaits one (or the connection is failing anyway). */
static void drain(st_store_t *st)
{
    uint32_t id;
    reply_t r;
    do {
        while (next_answer(st, &id, &r)) {
        }
    } while (read_some(st, 0));
}

/* Sends st->out whole, or fails naming `req` ("SET 'k'"). */
static strata_status_t send_out(st_store_t *st, uint64_t deadline, const char *req)
{
    if (st->out.oom)
        return st_error(STRATA_ERR_NO_MEMORY, "store client: out of memory encoding %s", req);
    size_t done = 0;
    while (done < st->out.len) {
        if (st->lost)
            break;
        ssize_t n;
        ST_RETRY_EINTR(
            n, send(st->fd, st->out.data + done, st->out.len - done, MSG_NOSIGNAL | MSG_DONTWAIT));
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            int err = errno;
            drain(st); // a notice explaining why may be waiting; it wins over "lost"
            mark_lost(st, strerror(err));
            break;
        }
        // Wait for room. Incoming bytes are left alone: they may hold the answer to a request
        // still awaited (a cancelled GET's), and the server never blocks on its own writes, so
        // not reading cannot deadlock.
        struct pollfd pfd = {.fd = st->fd, .events = POLLOUT};
        int rc;
        ST_RETRY_EINTR(rc, poll(&pfd, 1, st_store_ms_until(deadline)));
        if (rc == 0) {
            // Part of a frame may have gone out, and the stream cannot be resynchronised.
            mark_lost(st, "it stopped reading");
            return st_error(STRATA_ERR_TIMEOUT, "timed out sending %s to the store at %s", req,
                            st->addr);
        }
    }
    st->out.len = 0;
    if (st->lost)
        return st_error(STRATA_ERR_PEER_FAILED, "%s (sending %s)", st->notice, req);
    return STRATA_OK;
}

/* Waits for the answer to request `id`: STRATA_OK with an OK or CANCELLED answer in *out, or an
 * error. `what` names what is awaited ("key 'k'") for timeout messages and `req` the request
 * ("GET 'k'") for refusals. With `fail_on_notice`, a failure notice (recorded before or during the
 * wait) ends it with STRATA_ERR_PEER_FAILED. */
static strata_status_t await_answer(st_store_t *st, uint32_t id, uint64_t deadline,
                                    long long timeout_ms, bool fail_on_notice, const char *what,
                                    const char *req, reply_t *out)
{
    for (;;) {
        uint32_t got;
        while (next_answer(st, &got, out)) {
            if (got != id)
                continue; // the late answer to a request we gave up on
            if (out->type == ST_MSG_ERR)
                return st_error(STRATA_ERR_REMOTE, "the store at %s refused %s: %.*s", st->addr,
                                req, (int)ST_MIN(out->len, 400), (const char *)out->data);
            return STRATA_OK;
        }
        if (st->lost || (fail_on_notice && st->notice_rc != STRATA_OK))
            return st_error(STRATA_ERR_PEER_FAILED, "%s (while waiting for %s)", st->notice, what);
        int ms = st_store_ms_until(deadline);
        if (ms == 0)
            return st_error(STRATA_ERR_TIMEOUT,
                            "timed out after %lld ms waiting for %s from the store at %s",
                            timeout_ms, what, st->addr);
        read_some(st, ms);
    }
}

/* How long CANCEL and BYE may take: the client's timeout, but never long enough for a hung store
 * to hang a caller that is giving up or exiting. */
static long long housekeeping_ms(const st_store_t *st)
{
    return st->timeout_ms < 0 ? HOUSEKEEPING_MS
                              : ST_MIN(st->timeout_ms, (long long)HOUSEKEEPING_MS);
}

/* Starts a request frame in st->out and returns its id. */
static uint32_t begin_request(st_store_t *st, uint8_t type, size_t *start)
{
    st->out.len = 0;
    uint32_t id = ++st->next_id;
    *start = st_frame_begin(&st->out, type);
    st_buf_put_u32(&st->out, id);
    return id;
}

/* Finishes the request begun at `start`; STRATA_ERR_INVALID_ARG if it is too large for a frame. */
static strata_status_t end_request(st_store_t *st, size_t start, const char *req)
{
    if (!st_frame_end(&st->out, start) && !st->out.oom)
        return st_error(STRATA_ERR_INVALID_ARG, "%s is larger than the store's %u-byte frames", req,
                        ST_STORE_MAX_FRAME);
    return STRATA_OK;
}

/* Asks the server to withdraw parked request `id`; keeps the caller's error message. */
static strata_status_t send_cancel(st_store_t *st, uint32_t id)
{
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", strata_last_error());
    st->out.len = 0;
    size_t start = st_frame_begin(&st->out, ST_MSG_CANCEL);
    st_buf_put_u32(&st->out, id); // the id of the request to withdraw
    strata_status_t rc = STRATA_ERR_NO_MEMORY;
    if (st_frame_end(&st->out, start))
        rc = send_out(st, st_deadline_ms(housekeeping_ms(st)), "CANCEL");
    st_error_set(saved);
    return rc;
}

/* Sends a request built in st->out and waits for its answer. For a GET/WAIT (`parked`) whose
 * timeout expires, the request is withdrawn and its final answer taken: a key set just before the
 * server saw the CANCEL still counts, a timeout of 0 means "only if already there", and no answer
 * is left in flight to confuse the next request. */
static strata_status_t roundtrip(st_store_t *st, uint32_t id, long long timeout_ms, bool parked,
                                 const char *what, const char *req, reply_t *out)
{
    uint64_t deadline = st_deadline_ms(timeout_ms);
    ST_TRY(send_out(st, deadline, req));
    strata_status_t rc = await_answer(st, id, deadline, timeout_ms, parked, what, req, out);
    if (!parked)
        return rc;
    if (rc == STRATA_ERR_PEER_FAILED) {
        send_cancel(st, id); // best effort: the job is failing; the answer, if any, is dropped
        return rc;
    }
    if (rc != STRATA_ERR_TIMEOUT)
        return rc;
    char timeout_msg[1024];
    snprintf(timeout_msg, sizeof timeout_msg, "%s", strata_last_error());
    if (send_cancel(st, id) == STRATA_OK) {
        long long ms = housekeeping_ms(st);
        rc = await_answer(st, id, st_deadline_ms(ms), ms, true, what, req, out);
        if (rc != STRATA_OK && rc != STRATA_ERR_TIMEOUT)
            return rc; // the job failed meanwhile: say so rather than "timed out"
        if (rc == STRATA_OK && out->type == ST_MSG_OK)
            return STRATA_OK;
    }
    return st_error(STRATA_ERR_TIMEOUT, "%s", timeout_msg);
}

static strata_status_t check_key(const st_store_t *st, const char *key)
{
    if (!st || !key || !*key)
        return st_error(STRATA_ERR_INVALID_ARG, "store: %s", !st ? "no store" : "empty key");
    return STRATA_OK;
}

/* ---- connecting ------------------------------------------------------------------------------ */

/* One connection attempt to one address; returns a connected blocking socket or -1 with *err. */
static int try_connect(const struct addrinfo *ai, uint64_t deadline, int *err)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = errno;
            close(fd);
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int rc;
        ST_RETRY_EINTR(rc, poll(&pfd, 1, st_store_ms_until(deadline)));
        int so = ETIMEDOUT;
        socklen_t len = sizeof so;
        if (rc > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0)
            so = errno;
        if (so != 0) {
            *err = so;
            close(fd);
            return -1;
        }
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

strata_status_t st_store_dial(const char *addr, uint64_t deadline, long long timeout_ms, int *fd_out)
{
    char host[ST_STORE_HOST_MAX], port[16];
    int p;
    if (!st_store_split_addr(addr, host, sizeof host, &p) || p == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "store address '%s' is not HOST:PORT",
                        addr ? addr : "(null)");
    snprintf(port, sizeof port, "%d", p);
    long backoff_ms = 5;
    int err = 0;
    const char *why = NULL;
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int gai = getaddrinfo(*host ? host : NULL, port, &hints, &res);
        if (gai == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = try_connect(ai, deadline, &err);
                if (fd >= 0) {
                    freeaddrinfo(res);
                    *fd_out = fd;
                    return STRATA_OK;
                }
            }
            freeaddrinfo(res);
            why = strerror(err);
        } else if (gai == EAI_AGAIN) {
            why = gai_strerror(gai);
        } else {
            return st_error(STRATA_ERR_INVALID_ARG, "cannot resolve the store address %s: %s", addr,
                            gai_strerror(gai));
        }
        int left = st_store_ms_until(deadline);
        if (left == 0)
            return st_error(STRATA_ERR_TIMEOUT,
                            "could not connect to the store at %s within %lld ms: %s", addr,
                            timeout_ms, why);
        long ms = left < 0 ? backoff_ms : ST_MIN(backoff_ms, (long)left);
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff_ms = ST_MIN(backoff_ms * 2, 250L);
    }
}

strata_status_t st_store_connect(const char *addr, const char *secret, int rank,
                                 long long timeout_ms, st_store_t **out)
{
    return st_store_connect_at(addr, secret, rank, "", timeout_ms, out);
}

strata_status_t st_store_connect_at(const char *addr, const char *secret, int rank,
                                    const char *place, long long timeout_ms, st_store_t **out)
{
    *out = NULL;
    if (rank < -1)
        return st_error(STRATA_ERR_INVALID_ARG, "store: invalid rank %d", rank);
    st_store_t *st = calloc(1, sizeof *st);
    if (!st)
        return st_error(STRATA_ERR_NO_MEMORY, "store client: out of memory");
    snprintf(st->addr, sizeof st->addr, "%s", addr ? addr : "");
    st->timeout_ms = timeout_ms;
    uint64_t deadline = st_deadline_ms(timeout_ms);
    strata_status_t rc;
    ST_TRY_GOTO(st_store_dial(addr, deadline, timeout_ms, &st->fd), rc, fail_nofd);

    char host[64] = "";
    gethostname(host, sizeof host - 1);
    secret = secret ? secret : "";
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_HELLO, &start);
    st_buf_put_u32(&st->out, ST_STORE_MAGIC);
    st_buf_put_u32(&st->out, ST_STORE_VERSION);
    st_buf_put_u32(&st->out, (uint32_t)rank);
    st_buf_put_u32(&st->out, (uint32_t)getpid());
    st_buf_put_str(&st->out, secret, strlen(secret));
    st_buf_put_str(&st->out, host, strlen(host));
    place = place ? place : "";
    st_buf_put_str(&st->out, place, strnlen(place, ST_STORE_PLACE_MAX));
    ST_TRY_GOTO(end_request(st, start, "HELLO"), rc, fail);
    if (st->out.len - start - 4 > ST_STORE_HELLO_MAX) {
        // The store reads no more than this from a client it does not know yet.
        rc = st_error(STRATA_ERR_INVALID_ARG,
                      "the job secret is %zu bytes, too long for the store's HELLO (at most %u "
                      "bytes with the host name): use a shorter STRATA_SECRET",
                      strlen(secret), ST_STORE_HELLO_MAX);
        goto fail;
    }
    reply_t r;
    ST_TRY_GOTO(send_out(st, deadline, "HELLO"), rc, fail);
    rc = await_answer(st, id, deadline, timeout_ms, false, "the answer to HELLO", "the connection",
                      &r);
    if (rc == STRATA_ERR_PEER_FAILED)
        rc = st_error(STRATA_ERR_REMOTE,
                      "the store at %s closed the connection during the handshake (is it a strata "
                      "store of the same version?)",
                      st->addr);
    if (rc < 0)
        goto fail;
    ST_LOG_DEBUG(ST_SUB_STORE, "connected to the store at %s as rank %d", st->addr, rank);
    *out = st;
    return STRATA_OK;
fail:
    close(st->fd);
fail_nofd:
    st_buf_free(&st->in);
    st_buf_free(&st->out);
    free(st);
    return rc;
}

/* ---- requests -------------------------------------------------------------------------------- */

/* Encodes SET key=val into st->out (req: "SET 'k'", for messages); returns the request's id. */
static strata_status_t encode_set(st_store_t *st, const char *key, const void *val, size_t len,
                                  char *req, size_t reqlen, uint32_t *id)
{
    ST_TRY(check_key(st, key));
    if (len && !val)
        return st_error(STRATA_ERR_INVALID_ARG, "store: SET '%.200s' of %zu bytes from NULL", key,
                        len);
    snprintf(req, reqlen, "SET '%.200s'", key);
    if (len > ST_STORE_MAX_FRAME)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: a %zu-byte value exceeds the %u-byte limit",
                        req, len, ST_STORE_MAX_FRAME);
    size_t start;
    *id = begin_request(st, ST_MSG_SET, &start);
    st_buf_put_str(&st->out, key, strlen(key));
    st_buf_put(&st->out, val, len);
    return end_request(st, start, req);
}

strata_status_t st_store_set(st_store_t *st, const char *key, const void *val, size_t len)
{
    char req[256], what[300];
    uint32_t id = 0;
    ST_TRY(encode_set(st, key, val, len, req, sizeof req, &id));
    snprintf(what, sizeof what, "the answer to %s", req);
    reply_t r;
    return roundtrip(st, id, st->timeout_ms, false, what, req, &r);
}

strata_status_t st_store_post_set(st_store_t *st, const char *key, const void *val, size_t len)
{
    char req[256];
    uint32_t id = 0;
    ST_TRY(encode_set(st, key, val, len, req, sizeof req, &id));
    // The answer is left to whatever reads next, which drops it as one nobody awaits.
    return send_out(st, st_deadline_ms(housekeeping_ms(st)), req);
}

strata_status_t st_store_get(st_store_t *st, const char *key, void **val, size_t *len,
                             long long timeout_ms)
{
    *val = NULL;
    *len = 0;
    ST_TRY(check_key(st, key));
    char req[256], what[256];
    snprintf(req, sizeof req, "GET '%.200s'", key);
    snprintf(what, sizeof what, "key '%.200s'", key);
    if (st->notice_rc != STRATA_OK) // the job is dead; do not wait for keys it will never set
        return st_error(STRATA_ERR_PEER_FAILED, "%s (while waiting for %s)", st->notice, what);
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_GET, &start);
    st_buf_put_str(&st->out, key, strlen(key));
    ST_TRY(end_request(st, start, req));
    reply_t r;
    ST_TRY(roundtrip(st, id, timeout_ms, true, what, req, &r));
    char *copy = malloc(r.len + 1);
    if (!copy)
        return st_error(STRATA_ERR_NO_MEMORY, "%s: no memory for a %zu-byte value", req, r.len);
    memcpy(copy, r.data, r.len);
    copy[r.len] = '\0';
    *val = copy;
    *len = r.len;
    return STRATA_OK;
}

strata_status_t st_store_add(st_store_t *st, const char *key, int64_t delta, int64_t *result)
{
    ST_TRY(check_key(st, key));
    char req[256], what[300];
    snprintf(req, sizeof req, "ADD '%.200s'", key);
    snprintf(what, sizeof what, "the answer to %s", req);
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_ADD, &start);
    st_buf_put_str(&st->out, key, strlen(key));
    st_buf_put_i64(&st->out, delta);
    ST_TRY(end_request(st, start, req));
    reply_t r;
    ST_TRY(roundtrip(st, id, st->timeout_ms, false, what, req, &r));
    st_rd_t rd = {.p = r.data, .left = r.len};
    int64_t v = st_rd_i64(&rd);
    if (rd.bad)
        return st_error(STRATA_ERR_REMOTE, "the store at %s sent a malformed answer to %s",
                        st->addr, req);
    if (result)
        *result = v;
    return STRATA_OK;
}

strata_status_t st_store_wait(st_store_t *st, const char *const *keys, int nkeys,
                              long long timeout_ms)
{
    if (!st || nkeys < 0 || (nkeys > 0 && !keys))
        return st_error(STRATA_ERR_INVALID_ARG, "store: bad arguments to wait");
    // Name the first few keys in messages: "keys 'a', 'b', 'c' and 5 more".
    char what[400];
    int o = snprintf(what, sizeof what, "%s", nkeys == 1 ? "key" : "keys");
    for (int i = 0; i < nkeys; i++) {
        ST_TRY(check_key(st, keys[i]));
        if (i < 3 && o < (int)sizeof what)
            o += snprintf(what + o, sizeof what - (size_t)o, "%s '%.80s'", i ? "," : "", keys[i]);
    }
    if (nkeys > 3 && o < (int)sizeof what)
        snprintf(what + o, sizeof what - (size_t)o, " and %d more", nkeys - 3);
    if (st->notice_rc != STRATA_OK)
        return st_error(STRATA_ERR_PEER_FAILED, "%s (while waiting for %s)", st->notice, what);
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_WAIT, &start);
    st_buf_put_u32(&st->out, (uint32_t)nkeys);
    for (int i = 0; i < nkeys; i++)
        st_buf_put_str(&st->out, keys[i], strlen(keys[i]));
    ST_TRY(end_request(st, start, "WAIT"));
    reply_t r;
    return roundtrip(st, id, timeout_ms, true, what, "WAIT", &r);
}

strata_status_t st_store_abort(st_store_t *st, const char *reason)
{
    if (!st)
        return st_error(STRATA_ERR_INVALID_ARG, "store: no store");
    reason = reason ? reason : "";
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_ABORT, &start);
    st_buf_put(&st->out, reason, ST_MIN(strlen(reason), (size_t)ST_STORE_NOTICE_MAX));
    ST_TRY(end_request(st, start, "ABORT"));
    reply_t r;
    return roundtrip(st, id, st->timeout_ms, false, "the answer to ABORT", "ABORT", &r);
}

strata_status_t st_store_report(st_store_t *st, int rank, const char *what)
{
    if (!st)
        return st_error(STRATA_ERR_INVALID_ARG, "store: no store");
    what = what ? what : "";
    size_t start;
    uint32_t id = begin_request(st, ST_MSG_REPORT, &start);
    st_buf_put_u32(&st->out, (uint32_t)rank);
    st_buf_put(&st->out, what, ST_MIN(strlen(what), (size_t)ST_STORE_NOTICE_MAX / 2));
    ST_TRY(end_request(st, start, "REPORT"));
    reply_t r;
    return roundtrip(st, id, st->timeout_ms, false, "the answer to REPORT", "REPORT", &r);
}

long long st_store_timeout(const st_store_t *st)
{
    return st->timeout_ms;
}

void st_store_set_timeout(st_store_t *st, long long timeout_ms)
{
    st->timeout_ms = timeout_ms;
}

bool st_store_lost(const st_store_t *st)
{
    return st && st->lost && !st->said_bye;
}

int st_store_fd(const st_store_t *st)
{
    return st ? st->fd : -1;
}

strata_status_t st_store_check_notice(st_store_t *st, int *failed_rank)
{
    if (!st)
        return st_error(STRATA_ERR_INVALID_ARG, "store: no store");
    drain(st);
    if (st->notice_rc == STRATA_OK)
        return STRATA_OK;
    if (failed_rank)
        *failed_rank = st->notice_rank;
    return st_error(st->notice_rc, "%s", st->notice);
}

void st_store_close(st_store_t *st, bool goodbye)
{
    if (!st)
        return;
    if (goodbye && !st->lost) {
        // Wait for the acknowledgement: once it is here the server has recorded the goodbye, so
        // our FIN cannot be mistaken for a crash however the two race. Bounded: a hung store must
        // not hang our exit.
        size_t start;
        uint32_t id = begin_request(st, ST_MSG_BYE, &start);
        reply_t r;
        if (st_frame_end(&st->out, start) && roundtrip(st, id, housekeeping_ms(st), false,
                                                       "the answer to BYE", "BYE", &r) == STRATA_OK)
            st->said_bye = true;
        else
            ST_LOG_DEBUG(ST_SUB_STORE, "goodbye to the store at %s not acknowledged: %s", st->addr,
                         strata_last_error());
    }
    close(st->fd);
    st_buf_free(&st->in);
    st_buf_free(&st->out);
    free(st);
}
