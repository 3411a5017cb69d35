/* The bootstrap store's server: one poll() loop over a non-blocking listener and its clients, a
 * hash table of keys to byte values, and the job's failure detector.
 *
 * Each client has an input and an output buffer, so partial reads and writes never block the loop.
 * A GET or WAIT for a key that is not set yet is parked on that key's waiter list and answered when
 * the key is set. When a ranked client disappears without BYE, or sends ABORT, every other client
 * is sent one NOTICE naming it, and clients that connect later get the notices too (the job is
 * dead). Misbehaving connections (bad magic, wrong secret, oversized or malformed frames, silence
 * before HELLO) are closed and logged at warn; the others do not notice.
 *
 * Until it has said HELLO a connection may be anyone's, so it costs bounded resources: the kernel
 * holds one that has sent nothing for a while (TCP_DEFER_ACCEPT), a client's HELLO is read as soon
 * as it is accepted, at most ST_STORE_HELLO_MAX bytes are read before HELLO, at most
 * ST_STORE_PENDING_MAX connections wait for theirs (a newcomer closes the one that waited longest:
 * a real client sends HELLO with its connection, so strangers cannot lock it out), and each gets
 * the hello timeout. After the first, such strangers are logged at debug level.
 *
 * Handlers only queue output and mark clients "doomed"; flushing and closing happen at fixed points
 * of a poll round, so no handler ever frees a client that a caller up the stack still uses. The
 * wire format is in store_proto.h; the client is store_client.c. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_proto.h"

typedef struct entry entry_t;
typedef struct park park_t;
typedef struct client client_t;

/* One key. Entries are created by the first SET, ADD, GET or WAIT naming the key and live until the
 * server closes, so parked requests may point at them. */
struct entry {
    entry_t *next; /* hash chain */
    uint64_t hash;
    uint8_t *val;
    size_t vlen;
    bool has_value;
    park_t **waiters; /* parked requests missing this key; a WAIT naming it twice is here twice */
    int nwait, capwait;
    uint32_t klen;
    char key[]; /* klen bytes and a NUL, for messages */
};

/* A GET or WAIT waiting for `remaining` of its keys to be set. */
struct park {
    park_t *next; /* in its client's list */
    client_t *c;
    uint32_t id;
    uint8_t type;
    int remaining;
    int nkeys;
    entry_t *keys[];
};

#define ACCEPT_BATCH   64 /* connections accepted per poll round */
#define DEFER_ACCEPT_S 2  /* the kernel keeps a connection that sent nothing ~3 s (SYN-ACK retries) */

#define ST_STORE_MAX_OUTPUT                                              \
    (4 * (size_t)ST_STORE_MAX_FRAME) /* per client, before it is dropped \
                                      */

struct client {
    int fd;
    bool hello_done;
    bool said_bye;
    bool reported;  /* another rank reported it failed (stopped, cut off): close() does not wait */
    bool refused;   /* HELLO refused: send the answer, then close */
    bool doomed;    /* close at the next safe point */
    bool violation; /* doomed for breaking the protocol (logged at warn) */
    char why[160];  /* why it is doomed */
    int rank;       /* -1 = a tool */
    int pid;
    char host[64];
    char place[ST_STORE_PLACE_MAX + 1]; /* on the fabric, "" if it did not say */
    char peer[64]; /* "ip:port" of the connection */
    uint64_t hello_deadline;
    st_buf_t in, out;
    park_t *parks;
};

/* A notice as sent: the rank it names (-1 for a tool's abort) and its text. */
typedef struct notice {
    int rank;
    char *text;
} notice_t;

struct strata_store_server {
    int listen_fd;
    int port;
    char *secret;
    size_t secret_len;
    int hello_timeout_ms;
    uint64_t accept_pause_until; /* out of descriptors: stop accepting until then */
    unsigned long strangers;     /* connections closed before HELLO for misbehaving */

    client_t **clients;
    int nclients, capclients;
    struct pollfd *pfds;
    int cappfds;

    entry_t **buckets; /* power-of-two chained hash table */
    size_t nbuckets, nentries;

    notice_t *notices; /* every notice sent so far, replayed to newcomers */
    int nnotices;
    int *failed_ranks; /* ranks already announced, so each is announced once */
    int nfailed;

    pthread_t thread;
    bool thread_started;
    int wake_fd;
    atomic_bool stop;
    uint64_t linger_deadline; /* written by close() before `stop` is raised */

    atomic_int n_clients, n_live, n_waiting, n_keys, n_notices;
};

/* ---- clients: identity, dooming, replies ----------------------------------------------------- */

/* "rank 3 (host foo pid 1234)", "rank 3 (host foo pid 1234, rack1/foo)", "tool (host foo pid
 * 1234)" or, before HELLO, "client 1.2.3.4:5". */
static const char *describe(const client_t *c, char *buf, size_t cap)
{
    if (!c->hello_done)
        snprintf(buf, cap, "client %s", c->peer);
    else if (c->rank >= 0 && c->place[0])
        snprintf(buf, cap, "rank %d (host %s pid %d, %s)", c->rank, c->host, c->pid, c->place);
    else if (c->rank >= 0)
        snprintf(buf, cap, "rank %d (host %s pid %d)", c->rank, c->host, c->pid);
    else
        snprintf(buf, cap, "tool (host %s pid %d)", c->host, c->pid);
    return buf;
}

/* Marks a client to be closed at the next safe point; the first reason wins. `violation` means it
 * broke the protocol (a warning) rather than simply went away. */
ST_PRINTF(3, 4) static void doom(client_t *c, bool violation, const char *fmt, ...)
{
    if (c->doomed)
        return;
    c->doomed = true;
    c->violation = violation;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

/* Appends a complete frame to a client's output, or dooms it if memory runs out or it has stopped
 * reading (a client pipelining GETs of a large value must not grow the server without bound). */
static void queue_frame(client_t *c, uint8_t type, uint32_t id, const void *payload, size_t len)
{
    if (c->doomed)
        return;
    if (st_buf_avail(&c->out) > ST_STORE_MAX_OUTPUT) {
        doom(c, true, "does not read its answers (%zu bytes queued)", st_buf_avail(&c->out));
        return;
    }
    size_t start = st_frame_begin(&c->out, type);
    st_buf_put_u32(&c->out, id);
    st_buf_put(&c->out, payload, len);
    if (!st_frame_end(&c->out, start))
        doom(c, false, "ran out of memory for its output");
}

static void reply_ok(client_t *c, uint32_t id, const void *payload, size_t len)
{
    queue_frame(c, ST_MSG_OK, id, payload, len);
}

ST_PRINTF(3, 4) static void reply_err(client_t *c, uint32_t id, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    queue_frame(c, ST_MSG_ERR, id, text, n < 0 ? 0 : ST_MIN((size_t)n, sizeof text - 1));
}

static void queue_notice(client_t *c, int rank, const char *text)
{
    // A notice has the same layout as a reply, with the rank where the id would be.
    queue_frame(c, ST_MSG_NOTICE, (uint32_t)rank, text, strlen(text));
}

/* ---- key table ------------------------------------------------------------------------------- */

static uint64_t hash_key(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)key[i]) * 1099511628211ull;
    return h;
}

static bool table_grow(st_store_server_t *srv)
{
    size_t n = srv->nbuckets ? srv->nbuckets * 2 : 64;
    entry_t **b = calloc(n, sizeof *b);
    if (!b)
        return false;
    for (size_t i = 0; i < srv->nbuckets; i++) {
        for (entry_t *e = srv->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(srv->buckets);
    srv->buckets = b;
    srv->nbuckets = n;
    return true;
}

/* The entry for `key`, created (without a value) if missing; NULL only when out of memory. */
static entry_t *table_get(st_store_server_t *srv, const char *key, uint32_t klen)
{
    uint64_t h = hash_key(key, klen);
    if (srv->nbuckets) {
        for (entry_t *e = srv->buckets[h & (srv->nbuckets - 1)]; e; e = e->next)
            if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
                return e;
    }
    if (srv->nentries >= srv->nbuckets && !table_grow(srv))
        return NULL;
    entry_t *e = calloc(1, sizeof *e + klen + 1);
    if (!e)
        return NULL;
    e->hash = h;
    e->klen = klen;
    memcpy(e->key, key, klen);
    e->next = srv->buckets[h & (srv->nbuckets - 1)];
    srv->buckets[h & (srv->nbuckets - 1)] = e;
    srv->nentries++;
    return e;
}

static void table_free(st_store_server_t *srv)
{
    for (size_t i = 0; i < srv->nbuckets; i++) {
        for (entry_t *e = srv->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e->val);
            free(e->waiters);
            free(e);
        }
    }
    free(srv->buckets);
    srv->buckets = NULL;
    srv->nbuckets = srv->nentries = 0;
}

/* ---- parked requests ------------------------------------------------------------------------- */

static void park_unlink(st_store_server_t *srv, park_t *p)
{
    for (park_t **pp = &p->c->parks; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    free(p);
    atomic_fetch_sub(&srv->n_waiting, 1);
}

/* Withdraws a request its client gave up on (CANCEL) or can no longer receive (closed). */
static void park_cancel(st_store_server_t *srv, park_t *p)
{
    for (int i = 0; i < p->nkeys; i++) {
        entry_t *e = p->keys[i];
        if (e->has_value)
            continue; // its waiter list was handed over when the value arrived
        for (int j = 0; j < e->nwait; j++) {
            if (e->waiters[j] == p) {
                e->waiters[j] = e->waiters[--e->nwait];
                break;
            }
        }
    }
    park_unlink(srv, p);
}

/* Answers a request whose keys are all set. */
static void park_finish(st_store_server_t *srv, park_t *p)
{
    if (p->type == ST_MSG_GET)
        reply_ok(p->c, p->id, p->keys[0]->val, p->keys[0]->vlen);
    else
        reply_ok(p->c, p->id, NULL, 0);
    park_unlink(srv, p);
}

/* Parks request `id` of client c until every entry in keys[] has a value (at least one has not). */
static void park_add(st_store_server_t *srv, client_t *c, uint32_t id, uint8_t type,
                     entry_t *const *keys, int nkeys)
{
    park_t *p = malloc(sizeof *p + (size_t)nkeys * sizeof p->keys[0]);
    if (!p) {
        doom(c, false, "ran out of memory for a parked request");
        return;
    }
    *p = (park_t){.c = c, .id = id, .type = type, .nkeys = nkeys};
    memcpy(p->keys, keys, (size_t)nkeys * sizeof keys[0]);
    p->next = c->parks;
    c->parks = p;
    atomic_fetch_add(&srv->n_waiting, 1);
    for (int i = 0; i < nkeys; i++) {
        entry_t *e = keys[i];
        if (e->has_value)
            continue;
        if (e->nwait == e->capwait) {
            int cap = e->capwait ? 2 * e->capwait : 4;
            park_t **w = realloc(e->waiters, (size_t)cap * sizeof *w);
            if (!w) {
                park_cancel(srv, p); // unregisters from the keys done so far
                doom(c, false, "ran out of memory for a parked request");
                return;
            }
            e->waiters = w;
            e->capwait = cap;
        }
        e->waiters[e->nwait++] = p;
        p->remaining++;
    }
}

/* Gives `e` a value and answers every request that was waiting only for it. */
static bool entry_set(st_store_server_t *srv, entry_t *e, const void *val, size_t vlen)
{
    uint8_t *copy = malloc(vlen ? vlen : 1);
    if (!copy)
        return false;
    if (vlen)
        memcpy(copy, val, vlen);
    free(e->val);
    e->val = copy;
    e->vlen = vlen;
    if (e->has_value)
        return true;
    e->has_value = true;
    atomic_fetch_add(&srv->n_keys, 1);
    // Take the list first: finishing a request frees it, and a WAIT naming this key twice is in
    // the list twice, finishing (and being freed) at its last occurrence.
    park_t **w = e->waiters;
    int n = e->nwait;
    e->waiters = NULL;
    e->nwait = e->capwait = 0;
    for (int i = 0; i < n; i++)
        if (--w[i]->remaining == 0)
            park_finish(srv, w[i]);
    free(w);
    return true;
}

/* ---- failure notices ------------------------------------------------------------------------- */

/* Tells every client but `culprit` (may be NULL) that `rank` failed or aborted: "<who> <verb>:
 * <reason>". A rank is announced once; later clients get the notice on HELLO. */
static void publish(st_store_server_t *srv, int rank, const char *who, const client_t *culprit,
                    const char *verb, const char *reason)
{
    if (rank >= 0) {
        for (int i = 0; i < srv->nfailed; i++)
            if (srv->failed_ranks[i] == rank)
                return;
        int *fr = realloc(srv->failed_ranks, (size_t)(srv->nfailed + 1) * sizeof *fr);
        if (fr) {
            srv->failed_ranks = fr;
            fr[srv->nfailed++] = rank;
        }
    }
    char text[ST_STORE_NOTICE_MAX];
    snprintf(text, sizeof text, "%s %s: %s", who, verb, reason);
    // The first failure is the news; ranks leaving a dead job afterwards are its echo.
    ST_LOG(srv->nnotices == 0 ? ST_LOG_WARN : ST_LOG_INFO, ST_SUB_STORE, "%s", text);
    notice_t *n = realloc(srv->notices, (size_t)(srv->nnotices + 1) * sizeof *n);
    if (n) {
        srv->notices = n;
        n[srv->nnotices] = (notice_t){.rank = rank, .text = strdup(text)};
        if (n[srv->nnotices].text)
            srv->nnotices++;
    }
    atomic_fetch_add(&srv->n_notices, 1);
    for (int i = 0; i < srv->nclients; i++) {
        client_t *o = srv->clients[i];
        if (o != culprit && o->fd >= 0 && o->hello_done)
            queue_notice(o, rank, text);
    }
}

/* Tells every other client that c failed or aborted: "rank 3 (host h pid 42) failed: <reason>". */
static void announce(st_store_server_t *srv, client_t *c, const char *verb, const char *reason)
{
    char who[320];
    publish(srv, c->rank, describe(c, who, sizeof who), c, verb, reason);
}

/* ---- request handlers ------------------------------------------------------------------------ */

/* Constant-time in the secret's content: a mismatch at byte 0 and at byte 30 take the same time. */
static bool secret_ok(const st_store_server_t *srv, const char *s, uint32_t len)
{
    if (srv->secret_len == 0)
        return true;
    unsigned diff = len != srv->secret_len;
    for (size_t i = 0; i < srv->secret_len; i++)
        diff |= (uint8_t)srv->secret[i] ^ (i < len ? (uint8_t)s[i] : 0u);
    return diff == 0;
}

static void refuse(client_t *c, uint32_t id, const char *why)
{
    char who[320];
    ST_LOG_WARN(ST_SUB_STORE, "refused %s (rank %d host %s pid %d): %s",
                describe(c, who, sizeof who), c->rank, c->host, c->pid, why);
    reply_err(c, id, "%s", why);
    c->refused = true;
}

static void on_hello(st_store_server_t *srv, client_t *c, st_rd_t *r)
{
    uint32_t id = st_rd_u32(r);
    uint32_t magic = st_rd_u32(r);
    uint32_t version = st_rd_u32(r);
    int32_t rank = (int32_t)st_rd_u32(r);
    int32_t pid = (int32_t)st_rd_u32(r);
    uint32_t slen, hlen;
    const char *secret = st_rd_str(r, &slen);
    const char *host = st_rd_str(r, &hlen);
    uint32_t plen;
    const char *place = st_rd_str(r, &plen);
    if (r->bad || magic != ST_STORE_MAGIC) {
        doom(c, true, "does not speak the store protocol (bad HELLO)");
        return;
    }
    c->rank = rank;
    c->pid = pid;
    snprintf(c->host, sizeof c->host, "%.*s", (int)hlen, host);
    snprintf(c->place, sizeof c->place, "%.*s", (int)plen, place);
    if (version != ST_STORE_VERSION) {
        char why[96];
        snprintf(why, sizeof why, "protocol version %u is not supported (the store speaks %u)",
                 version, ST_STORE_VERSION);
        refuse(c, id, why);
    } else if (!secret_ok(srv, secret, slen)) {
        refuse(c, id, "wrong secret (check STRATA_SECRET)");
    } else if (rank < -1) {
        refuse(c, id, "invalid rank");
    } else {
        c->hello_done = true;
        if (rank >= 0)
            atomic_fetch_add(&srv->n_live, 1);
        char who[320];
        ST_LOG_DEBUG(ST_SUB_STORE, "%s connected from %s", describe(c, who, sizeof who), c->peer);
        reply_ok(c, id, NULL, 0);
        for (int i = 0; i < srv->nnotices; i++)
            queue_notice(c, srv->notices[i].rank, srv->notices[i].text);
    }
}

/* Reads a non-empty key; on failure answers ERR (empty) or leaves r->bad set (truncated). */
static entry_t *read_key(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    uint32_t klen;
    const char *key = st_rd_str(r, &klen);
    if (r->bad)
        return NULL;
    if (klen == 0) {
        reply_err(c, id, "empty key");
        return NULL;
    }
    entry_t *e = table_get(srv, key, klen);
    if (!e)
        doom(c, false, "ran out of memory for key table");
    return e;
}

static void on_set(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    entry_t *e = read_key(srv, c, id, r);
    size_t vlen;
    const uint8_t *val = st_rd_rest(r, &vlen);
    if (!e)
        return;
    if (!entry_set(srv, e, val, vlen))
        reply_err(c, id, "out of memory storing %zu bytes for key '%.200s'", vlen, e->key);
    else
        reply_ok(c, id, NULL, 0);
}

static void on_get(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    entry_t *e = read_key(srv, c, id, r);
    if (!e)
        return;
    if (e->has_value)
        reply_ok(c, id, e->val, e->vlen);
    else
        park_add(srv, c, id, ST_MSG_GET, &e, 1);
}

/* Parses a stored value as a decimal int64 ("" and missing count as 0). */
static bool parse_i64(const uint8_t *val, size_t len, int64_t *out)
{
    char text[32];
    if (len >= sizeof text)
        return false;
    memcpy(text, val, len);
    text[len] = '\0';
    if (len == 0) {
        *out = 0;
        return true;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static void on_add(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    entry_t *e = read_key(srv, c, id, r);
    int64_t delta = st_rd_i64(r);
    if (!e || r->bad)
        return;
    int64_t cur = 0, sum;
    if (e->has_value && !parse_i64(e->val, e->vlen, &cur)) {
        reply_err(c, id, "key '%.200s' does not hold a decimal integer", e->key);
        return;
    }
    if (__builtin_add_overflow(cur, delta, &sum)) {
        reply_err(c, id, "adding %lld to key '%.200s' (%lld) overflows", (long long)delta, e->key,
                  (long long)cur);
        return;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%lld", (long long)sum);
    if (!entry_set(srv, e, text, (size_t)n)) {
        reply_err(c, id, "out of memory updating key '%.200s'", e->key);
        return;
    }
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)sum >> (8 * i));
    reply_ok(c, id, le, sizeof le);
}

static void on_wait(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    uint32_t n = st_rd_u32(r);
    if (r->bad || n > r->left / 4) { // each key takes at least its 4-byte length
        r->bad = true;
        return;
    }
    entry_t **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) {
        doom(c, false, "ran out of memory for a WAIT");
        return;
    }
    int missing = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!(keys[i] = read_key(srv, c, id, r)))
            goto out; // truncated (r->bad), empty key (answered) or out of memory (doomed)
        missing += !keys[i]->has_value;
    }
    if (missing == 0)
        reply_ok(c, id, NULL, 0);
    else
        park_add(srv, c, id, ST_MSG_WAIT, keys, (int)n);
out:
    free(keys);
}

static void on_cancel(st_store_server_t *srv, client_t *c, uint32_t id)
{
    for (park_t *p = c->parks; p; p = p->next) {
        if (p->id == id) {
            park_cancel(srv, p);
            queue_frame(c, ST_MSG_CANCELLED, id, NULL, 0);
            return;
        }
    }
    // Already answered: that answer is the one the client waits for.
}

static void on_abort(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    size_t len;
    const char *reason = (const char *)st_rd_rest(r, &len);
    char text[ST_STORE_NOTICE_MAX / 2] = "no reason given";
    if (reason && len)
        snprintf(text, sizeof text, "%.*s", (int)ST_MIN(len, sizeof text - 1), reason);
    announce(srv, c, "aborted", text);
    reply_ok(c, id, NULL, 0);
}

/* A rank saw another die. The first failure announced is the root cause: a later report is the
 * echo of it (the reported rank most likely left because of it) and changes nothing. */
static void on_report(st_store_server_t *srv, client_t *c, uint32_t id, st_rd_t *r)
{
    int32_t rank = (int32_t)st_rd_u32(r);
    size_t len;
    const char *what = (const char *)st_rd_rest(r, &len);
    if (r->bad)
        return;
    if (srv->nnotices == 0 && rank >= 0 && c->rank >= 0) {
        client_t *culprit = NULL;
        for (int i = 0; i < srv->nclients && !culprit; i++) {
            client_t *o = srv->clients[i];
            if (o->hello_done && o->rank == rank && !o->said_bye)
                culprit = o;
        }
        char who[320], reason[ST_STORE_NOTICE_MAX / 2];
        if (culprit)
            describe(culprit, who, sizeof who);
        else
            snprintf(who, sizeof who, "rank %d", rank);
        snprintf(reason, sizeof reason, "%.*s (seen by rank %d)",
                 (int)ST_MIN(len, sizeof reason - 32), what ? what : "", c->rank);
        publish(srv, rank, who, culprit, "failed", reason);
        if (culprit)
            culprit->reported = true;
    }
    reply_ok(c, id, NULL, 0);
}

static void on_bye(st_store_server_t *srv, client_t *c, uint32_t id)
{
    if (c->rank >= 0 && !c->said_bye)
        atomic_fetch_sub(&srv->n_live, 1);
    c->said_bye = true;
    reply_ok(c, id, NULL, 0);
}

static const char *msg_name(uint8_t type)
{
    static const char *const names[] = {"?",    "HELLO",  "SET",   "GET", "ADD",
                                        "WAIT", "CANCEL", "ABORT", "BYE",  "REPORT"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

static void handle_frame(st_store_server_t *srv, client_t *c, uint8_t type, const uint8_t *body,
                         size_t len)
{
    st_rd_t r = {.p = body, .left = len};
    if (!c->hello_done) {
        if (type == ST_MSG_HELLO)
            on_hello(srv, c, &r);
        else
            doom(c, true, "sent a %s frame (type %u) before HELLO", msg_name(type), type);
        return;
    }
    uint32_t id = st_rd_u32(&r);
    switch (type) {
    case ST_MSG_SET:
        on_set(srv, c, id, &r);
        break;
    case ST_MSG_GET:
        on_get(srv, c, id, &r);
        break;
    case ST_MSG_ADD:
        on_add(srv, c, id, &r);
        break;
    case ST_MSG_WAIT:
        on_wait(srv, c, id, &r);
        break;
    case ST_MSG_CANCEL:
        on_cancel(srv, c, id);
        break;
    case ST_MSG_ABORT:
        on_abort(srv, c, id, &r);
        break;
    case ST_MSG_BYE:
        on_bye(srv, c, id);
        break;
    case ST_MSG_REPORT:
        on_report(srv, c, id, &r);
        break;
    default:
        doom(c, true, "sent a frame of unknown type %u", type);
        return;
    }
    if (r.bad)
        doom(c, true, "sent a truncated %s frame of %zu bytes", msg_name(type), len + 1);
}

/* ---- connections ----------------------------------------------------------------------------- */

/* Handles everything buffered from c, stopping at the first incomplete frame. */
static void process_input(st_store_server_t *srv, client_t *c)
{
    while (!c->doomed && !c->refused) {
        uint8_t type;
        const uint8_t *body;
        size_t body_len, frame_bytes;
        if (!c->hello_done && st_buf_avail(&c->in) >= 4 &&
            st_le32_load(c->in.data + c->in.off) > ST_STORE_HELLO_MAX) {
            doom(c, true, "announced a frame of %u bytes before HELLO (the limit is %u)",
                 st_le32_load(c->in.data + c->in.off), ST_STORE_HELLO_MAX);
            return;
        }
        st_frame_state_t s = st_frame_next(&c->in, &type, &body, &body_len, &frame_bytes);
        if (s == ST_FRAME_PARTIAL)
            return;
        if (s == ST_FRAME_BAD) {
            doom(c, true, "announced a frame of %zu bytes (the limit is %u)", frame_bytes,
                 ST_STORE_MAX_FRAME);
            return;
        }
        handle_frame(srv, c, type, body, body_len);
        st_buf_consume(&c->in, frame_bytes);
    }
}

static void read_client(st_store_server_t *srv, client_t *c)
{
    // Before HELLO a client may be anyone: it gets room for one HELLO and not a byte more.
    size_t room = c->hello_done ? st_frame_missing(&c->in)
                                : 4 + ST_STORE_HELLO_MAX - ST_MIN(st_buf_avail(&c->in),
                                                                  4 + (size_t)ST_STORE_HELLO_MAX);
    if (room == 0) {
        doom(c, true, "sent more than a HELLO before HELLO was done");
        return;
    }
    if (!st_buf_reserve(&c->in, room)) {
        doom(c, false, "ran out of memory for its input");
        return;
    }
    if (c->hello_done)
        room = c->in.cap - c->in.len;
    ssize_t n;
    ST_RETRY_EINTR(n, recv(c->fd, c->in.data + c->in.len, room, MSG_DONTWAIT));
    if (n > 0) {
        c->in.len += (size_t)n;
        process_input(srv, c);
    } else if (n == 0) {
        doom(c, false, "lost its connection to the store");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        doom(c, false, "lost its connection to the store (%s)", strerror(errno));
    }
}

static void flush_client(client_t *c)
{
    while (!c->doomed && st_buf_avail(&c->out) > 0) {
        ssize_t n;
        ST_RETRY_EINTR(n, send(c->fd, c->out.data + c->out.off, st_buf_avail(&c->out),
                               MSG_NOSIGNAL | MSG_DONTWAIT));
        if (n > 0)
            st_buf_consume(&c->out, (size_t)n);
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        else
            doom(c, false, "lost its connection to the store (%s)", strerror(errno));
    }
    if (c->refused && !c->doomed && st_buf_avail(&c->out) == 0)
        doom(c, false, "was refused");
}

/* Closes a doomed client: withdraws its parked requests and, if it was a rank that had not said
 * goodbye, tells everyone else it failed. The struct is freed later by compact_clients(). */
static void drop_client(st_store_server_t *srv, client_t *c)
{
    // A rank's failure is announced, and logged once, by announce(). A port scanner or a flood
    // must not flood the log: the first stranger is news, the rest are not.
    bool failure = c->hello_done && c->rank >= 0 && !c->said_bye;
    bool stranger = c->violation && !c->hello_done;
    bool first = stranger && srv->strangers++ == 0;
    char who[320];
    describe(c, who, sizeof who);
    ST_LOG(c->violation && !failure && (!stranger || first) ? ST_LOG_WARN : ST_LOG_DEBUG,
           ST_SUB_STORE, "closing %s%s%s: it %s%s", who, c->hello_done ? " from " : "",
           c->hello_done ? c->peer : "", c->why,
           first ? " (further connections failing before HELLO are logged at debug level)" : "");
    while (c->parks)
        park_cancel(srv, c->parks);
    close(c->fd);
    c->fd = -1;
    atomic_fetch_sub(&srv->n_clients, 1);
    if (failure) {
        atomic_fetch_sub(&srv->n_live, 1);
        char reason[200];
        if (c->violation)
            snprintf(reason, sizeof reason, "was dropped by the store: it %s", c->why);
        else
            snprintf(reason, sizeof reason, "%s", c->why);
        announce(srv, c, "failed", reason);
    }
}

/* Flushes pending output, then closes doomed clients, until closing one (which may queue notices
 * to the rest) dooms no one new. Terminates: every round closes at least one client. */
static void settle_clients(st_store_server_t *srv)
{
    for (;;) {
        for (int i = 0; i < srv->nclients; i++)
            if (srv->clients[i]->fd >= 0)
                flush_client(srv->clients[i]);
        int dropped = 0;
        for (int i = 0; i < srv->nclients; i++) {
            client_t *c = srv->clients[i];
            if (c->fd >= 0 && c->doomed) {
                drop_client(srv, c);
                dropped++;
            }
        }
        if (!dropped)
            return;
    }
}

static void free_client(client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    st_buf_free(&c->in);
    st_buf_free(&c->out);
    free(c);
}

/* Frees closed clients and packs the array. */
static void compact_clients(st_store_server_t *srv)
{
    int k = 0;
    for (int i = 0; i < srv->nclients; i++) {
        if (srv->clients[i]->fd >= 0)
            srv->clients[k++] = srv->clients[i];
        else
            free_client(srv->clients[i]);
    }
    srv->nclients = k;
}

/* True for a connection that has yet to say HELLO and is not on its way out. */
static bool waits_for_hello(const client_t *c)
{
    return c->fd >= 0 && !c->hello_done && !c->refused && !c->doomed;
}

/* Closes the connection that has waited longest for its HELLO, to make room for a newcomer. It is
 * closed at once: it has nothing to flush and nobody to tell. */
static void evict_oldest(st_store_server_t *srv)
{
    client_t *oldest = NULL;
    for (int i = 0; i < srv->nclients; i++) {
        client_t *c = srv->clients[i];
        if (waits_for_hello(c) && (!oldest || c->hello_deadline < oldest->hello_deadline))
            oldest = c;
    }
    if (!oldest)
        return;
    doom(oldest, true, "was evicted: %d newer connections were waiting to say HELLO",
         ST_STORE_PENDING_MAX);
    drop_client(srv, oldest);
}

/* Accepts up to ACCEPT_BATCH connections and reads each one's HELLO at once (a client sends it
 * with its connection), keeping at most ST_STORE_PENDING_MAX waiting for theirs. */
static strata_status_t accept_clients(st_store_server_t *srv)
{
    int pending = 0;
    for (int i = 0; i < srv->nclients; i++)
        pending += waits_for_hello(srv->clients[i]);
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd =
            accept4(srv->listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return STRATA_OK;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // Leave the rest in the backlog for a while rather than spin on a readable
                // listener.
                ST_LOG_WARN(ST_SUB_STORE, "store cannot accept more connections (%s); pausing",
                            strerror(errno));
                srv->accept_pause_until = st_deadline_ms(100);
                return STRATA_OK;
            }
            return st_error_errno(STRATA_ERR_SYSTEM, errno, "accept on the store's port %d",
                                  srv->port);
        }
        client_t *c = calloc(1, sizeof *c);
        if (c && srv->nclients == srv->capclients) {
            int cap = srv->capclients ? 2 * srv->capclients : 16;
            client_t **cl = realloc(srv->clients, (size_t)cap * sizeof *cl);
            if (cl) {
                srv->clients = cl;
                srv->capclients = cap;
            }
        }
        if (!c || srv->nclients == srv->capclients) {
            ST_LOG_WARN(ST_SUB_STORE, "out of memory accepting a store client");
            free(c);
            close(fd);
            continue;
        }
        if (pending >= ST_STORE_PENDING_MAX) {
            evict_oldest(srv);
            pending--;
        }
        c->fd = fd;
        c->rank = -1;
        c->hello_deadline = st_deadline_ms(srv->hello_timeout_ms);
        char ip[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
            port = ntohs(in->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
            port = ntohs(in6->sin6_port);
        }
        snprintf(c->peer, sizeof c->peer, "%s:%d", ip, port);
        srv->clients[srv->nclients++] = c;
        atomic_fetch_add(&srv->n_clients, 1);
        read_client(srv, c);
        if (!c->hello_done) {
            flush_client(c); // the answer to a refused HELLO
            if (c->doomed) {
                drop_client(srv, c); // now, not at the end of the round: a batch of garbage
                continue;            // must not hold a batch of descriptors
            }
        }
        pending += waits_for_hello(c);
    }
    return STRATA_OK;
}

/* ---- the loop -------------------------------------------------------------------------------- */

strata_status_t st_store_server_poll(st_store_server_t *srv, int timeout_ms)
{
    // One poll() round: wait up to timeout_ms for activity (or the next HELLO deadline), serve what
    // is ready, return. Callers loop; the harness interleaves waitpid() between rounds.
    int n = 0, nfixed = 0;
    if (srv->cappfds < srv->nclients + 2) {
        int cap = srv->nclients + 64;
        struct pollfd *p = realloc(srv->pfds, (size_t)cap * sizeof *p);
        if (!p)
            return st_error(STRATA_ERR_NO_MEMORY, "store: no memory to poll %d clients",
                            srv->nclients);
        srv->pfds = p;
        srv->cappfds = cap;
    }
    uint64_t now = st_now_ns();
    uint64_t wake_at = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
    bool listening = now >= srv->accept_pause_until;
    srv->pfds[n++] = (struct pollfd){.fd = listening ? srv->listen_fd : -1, .events = POLLIN};
    if (srv->wake_fd >= 0)
        srv->pfds[n++] = (struct pollfd){.fd = srv->wake_fd, .events = POLLIN};
    if (!listening)
        wake_at = ST_MIN(wake_at, srv->accept_pause_until);
    nfixed = n;
    for (int i = 0; i < srv->nclients; i++) {
        client_t *c = srv->clients[i];
        short ev = c->refused ? 0 : POLLIN;
        if (st_buf_avail(&c->out))
            ev |= POLLOUT;
        if (!c->hello_done)
            wake_at = ST_MIN(wake_at, c->hello_deadline);
        srv->pfds[n++] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    int nclients = srv->nclients; // accept_clients() may append; those are not in pfds

    int rc = poll(srv->pfds, (nfds_t)n, st_store_ms_until(wake_at));
    if (rc < 0) {
        if (errno == EINTR)
            return STRATA_OK;
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "store: poll");
    }
    strata_status_t status = STRATA_OK;
    if (srv->wake_fd >= 0 && (srv->pfds[1].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(srv->wake_fd, &v, sizeof v);
        (void)r;
    }
    if (srv->pfds[0].revents & (POLLERR | POLLNVAL))
        status =
            st_error(STRATA_ERR_SYSTEM, "store: the listening socket on port %d failed", srv->port);
    else if (srv->pfds[0].revents & POLLIN)
        status = accept_clients(srv);
    for (int i = 0; i < nclients; i++) {
        client_t *c = srv->clients[i];
        short rev = srv->pfds[nfixed + i].revents;
        if (rev & POLLOUT)
            flush_client(c);
        if (!c->doomed && (rev & (POLLIN | POLLHUP | POLLERR)))
            read_client(srv, c); // a hang-up or error shows as EOF or an errno
    }
    now = st_now_ns();
    for (int i = 0; i < srv->nclients; i++) {
        client_t *c = srv->clients[i];
        if (!c->hello_done && now >= c->hello_deadline)
            doom(c, true, "sent no HELLO within %d ms", srv->hello_timeout_ms);
    }
    settle_clients(srv);
    compact_clients(srv);
    return status;
}

/* True while a rank is connected that has not said goodbye and was not reported failed: one whose
 * failure is the job's news (stopped, or cut off without a FIN) may hold its connection open for
 * as long as it is stopped, and the job has already been told it is gone. */
static bool awaits_ranks(const st_store_server_t *srv)
{
    for (int i = 0; i < srv->nclients; i++) {
        const client_t *c = srv->clients[i];
        if (c->fd >= 0 && c->hello_done && c->rank >= 0 && !c->said_bye && !c->reported)
            return true;
    }
    return false;
}

/* Serves while awaits_ranks(), until the deadline. */
static void serve_linger(st_store_server_t *srv, uint64_t deadline)
{
    while (awaits_ranks(srv) && st_now_ns() < deadline) {
        int ms = st_store_ms_until(deadline);
        if (st_store_server_poll(srv, ms < 0 ? 1000 : ST_MIN(ms, 1000)) < 0) {
            ST_LOG_ERROR(ST_SUB_STORE, "%s", strata_last_error());
            return;
        }
    }
}

static void *serve_thread(void *arg)
{
    st_store_server_t *srv = arg;
    while (!atomic_load(&srv->stop)) {
        if (st_store_server_poll(srv, -1) < 0) {
            ST_LOG_ERROR(ST_SUB_STORE, "store thread stops: %s", strata_last_error());
            return NULL;
        }
    }
    serve_linger(srv, srv->linger_deadline);
    return NULL;
}

/* ---- lifetime -------------------------------------------------------------------------------- */

/* Binds and listens; the port is read back so "host:0" works. */
static strata_status_t open_listener(const char *addr, int *fd_out, int *port_out)
{
    char host[ST_STORE_HOST_MAX], port_text[16];
    int port;
    if (!st_store_split_addr(addr, host, sizeof host, &port))
        return st_error(STRATA_ERR_INVALID_ARG, "store address '%s' is not HOST:PORT",
                        addr ? addr : "(null)");
    snprintf(port_text, sizeof port_text, "%d", port);
    struct addrinfo hints = {.ai_family = *host ? AF_UNSPEC : AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(*host ? host : NULL, port_text, &hints, &res);
    if (gai != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "store address '%s': %s", addr, gai_strerror(gai));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        freeaddrinfo(res);
        return st_error_errno(STRATA_ERR_SYSTEM, err, "store: socket for %s", addr);
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
#ifdef TCP_DEFER_ACCEPT
    // Best effort: silent connections then cost the kernel a little, not this process a descriptor.
    int defer_s = DEFER_ACCEPT_S;
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof defer_s);
#endif
    // SOMAXCONN: a whole job's ranks connect at once, and a full backlog means SYN retries (1 s+).
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int err = errno;
        freeaddrinfo(res);
        close(fd);
        return st_error_errno(STRATA_ERR_SYSTEM, err, "store: cannot listen on %s", addr);
    }
    freeaddrinfo(res);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) != 0) {
        int err = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_SYSTEM, err, "store: getsockname on %s", addr);
    }
    *port_out = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    *fd_out = fd;
    return STRATA_OK;
}

strata_status_t st_store_server_open(const char *addr, const char *secret, st_store_server_t **out)
{
    *out = NULL;
    st_store_server_t *srv = calloc(1, sizeof *srv);
    if (!srv || !(srv->secret = strdup(secret ? secret : ""))) {
        free(srv);
        return st_error(STRATA_ERR_NO_MEMORY, "store: out of memory");
    }
    srv->secret_len = strlen(srv->secret);
    srv->hello_timeout_ms = ST_STORE_HELLO_MS;
    srv->wake_fd = -1;
    strata_status_t rc = open_listener(addr, &srv->listen_fd, &srv->port);
    if (rc < 0) {
        free(srv->secret);
        free(srv);
        return rc;
    }
    ST_LOG_INFO(ST_SUB_STORE, "store listening on %s (port %d)", addr, srv->port);
    *out = srv;
    return STRATA_OK;
}

int st_store_server_port(const st_store_server_t *srv)
{
    return srv->port;
}

int st_store_server_live_ranks(const st_store_server_t *srv)
{
    return atomic_load(&srv->n_live);
}

void st_store_server_stats(const st_store_server_t *srv, st_store_server_stats_t *out)
{
    *out = (st_store_server_stats_t){
        .clients = atomic_load(&srv->n_clients),
        .live_ranks = atomic_load(&srv->n_live),
        .waiting = atomic_load(&srv->n_waiting),
        .keys = atomic_load(&srv->n_keys),
        .notices = atomic_load(&srv->n_notices),
    };
}

void st_store_server_set_hello_timeout(st_store_server_t *srv, int timeout_ms)
{
    srv->hello_timeout_ms = timeout_ms > 0 ? timeout_ms : ST_STORE_HELLO_MS;
}

strata_status_t st_store_server_start_thread(st_store_server_t *srv)
{
    if (srv->thread_started)
        return st_error(STRATA_ERR_INVALID_ARG, "store: the server thread is already running");
    srv->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (srv->wake_fd < 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "store: eventfd");
    int err = pthread_create(&srv->thread, NULL, serve_thread, srv);
    if (err) {
        close(srv->wake_fd);
        srv->wake_fd = -1;
        return st_error_errno(STRATA_ERR_SYSTEM, err, "store: cannot start the server thread");
    }
    srv->thread_started = true;
    return STRATA_OK;
}

/* Frees everything; sockets are closed unless the caller already did. */
static void server_free(st_store_server_t *srv)
{
    for (int i = 0; i < srv->nclients; i++) {
        client_t *c = srv->clients[i];
        for (park_t *p = c->parks, *next; p; p = next) {
            next = p->next;
            free(p);
        }
        free_client(c);
    }
    free(srv->clients);
    free(srv->pfds);
    table_free(srv);
    for (int i = 0; i < srv->nnotices; i++)
        free(srv->notices[i].text);
    free(srv->notices);
    free(srv->failed_ranks);
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    if (srv->wake_fd >= 0)
        close(srv->wake_fd);
    free(srv->secret);
    free(srv);
}

void st_store_server_close(st_store_server_t *srv, int linger_ms)
{
    if (!srv)
        return;
    uint64_t deadline = st_deadline_ms(linger_ms);
    if (srv->thread_started) {
        srv->linger_deadline = deadline;
        atomic_store(&srv->stop, true); // publishes linger_deadline to the thread
        uint64_t one = 1;
        ssize_t w = write(srv->wake_fd, &one, sizeof one);
        (void)w;
        pthread_join(srv->thread, NULL);
    } else {
        serve_linger(srv, deadline);
    }
    if (atomic_load(&srv->n_live) > 0)
        ST_LOG_INFO(ST_SUB_STORE, "store closing with %d rank(s) still connected",
                    atomic_load(&srv->n_live));
    server_free(srv);
}

void st_store_server_atfork_child(st_store_server_t *srv)
{
    if (!srv)
        return;
    // The parent's thread (if any) does not exist here; closing the copies is all there is to do.
    srv->thread_started = false;
    server_free(srv);
}
