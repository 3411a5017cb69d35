/* TCP transport between hosts (or between local ranks when STRATA_COMM_TRANSPORT=tcp).
 *
 * Each direction of a pair has its own connections, opened by the sender on its first send; the
 * receiver accepts them and learns who they are from a hello carrying the sender's rank, a hash of
 * the job secret and the connection's lane. One direction per socket means no connect races and no
 * ordering handshake.
 *
 * Several lanes per direction (STRATA_TCP_CONNS): on a fabric with ECMP, each connection's 4-tuple
 * hashes to its own path, so one flow cannot pin a large transfer to one (possibly congested) path.
 * Lane 0 carries every message header, in order, and every small message whole; a large message
 * (st_tcp_stripes) is cut into k contiguous slices, slice 0 after its header on lane 0 and slice i
 * on lane i. Both ends take one message at a time per direction, so lanes stay in step and messages
 * still match in the order they were sent; the slice count travels in the header, so the sender
 * alone decides it. Contiguous slices need one header per message and let each lane's bytes land
 * straight in place; the price is that a message waits for its slowest lane.
 *
 * Anyone on the network can connect to a rank's port, so a stranger must cost the rank bounded
 * descriptors, memory and time, and never stall its progress loop. The listener defers accepting
 * (TCP_DEFER_ACCEPT) until a connection has sent data, so the kernel, not the rank, holds silent
 * ones for a while; an accepted connection's hello is read without blocking, then and on later
 * passes, with a deadline (STRATA_TCP_HELLO_MS). At most PENDING_MAX connections wait for their
 * hello; a newcomer evicts the one that has waited longest (a peer sends its hello with the
 * connection, so the longest silent is the likeliest stranger), so strangers cannot lock peers
 * out. Bad hellos, silence and evictions close that socket and are logged; the job never notices.
 * The deadline is long (20 s) because closing a peer's connection loses what it already sent on
 * it, and the peer is not told: its receiver waits for that message until the communicator's
 * timeout. A congested link that drops the hello and TCP's retransmissions of it for 2 s (the old
 * deadline) did that on the emulated cluster. Eviction, not the deadline, bounds what strangers
 * hold.
 *
 * Sockets are non-blocking; a message is a 16-byte header (tag; size and slice count) followed by
 * its bytes, streamed straight from the sender's buffer and, for plain receives, straight into the
 * receiver's buffer. A receive that reduces goes through a staging buffer per lane, reducing whole
 * elements as they arrive, so large messages are pipelined either way. Large messages are timed on
 * the way, from the kernel's receive stamps, for the per-link meter (strata_comm_link_stats).
 * Every socket gets TCP_USER_TIMEOUT and keepalive from the communicator timeout (tcp_opts.h), so a
 * host that goes silent is found as a failed peer in time, not after the kernel's minutes.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/transport/tcp_opts.h"
#include "comm/transport/transport.h"

#define HELLO_MAGIC  0x53545443u /* "STTC" */
#define STAGE_BYTES  (256u << 10)
#define PENDING_MAX  32 /* accepted connections waiting for their hello */
#define ACCEPT_BATCH 16 /* accepts per pass, so a flood cannot hold a rank in accept() */
#define SIZE_BITS    56 /* a header's second word: size, then the slice count above it */

typedef struct hello {
    uint32_t magic;
    int32_t rank;
    uint64_t secret_hash;
    uint32_t lane; /* which of the sender's connections to this rank */
    uint32_t reserved;
} hello_t;

/* An accepted connection whose hello has not arrived whole yet. */
typedef struct pending {
    int fd;
    uint64_t since_ns;
    size_t got;
    hello_t hello;
    char from[48]; /* "ip:port", for the log */
} pending_t;

struct st_transport {
    int listen_fd;
    char addr[64];
    uint64_t secret_hash;
    unsigned tick;
    bool want_accept;
    st_tcp_opts_t opts;
    uint64_t hello_ns; /* how long an accepted connection may take to say hello */
    pending_t pending[PENDING_MAX];
    int npending;
    unsigned long strangers; /* connections dropped; the first is logged at warn, the rest at debug */
};

/* One connection of a direction, and its slice of the message in flight. */
typedef struct lane {
    int fd;
    size_t off, len; /* the slice: bytes [off, off + len) of the message */
    size_t got;      /* bytes of the slice moved */
    size_t delivered; /* receive: bytes of the slice handed to the matcher */
    char *stage;     /* receive-reduce staging */
} lane_t;

typedef struct tcp_conn {
    lane_t tx[ST_TCP_CONNS_MAX];
    int tx_k;              /* slices of the message being sent (0: none begun) */
    uint8_t tx_hdr[16];
    size_t tx_hdr_done;
    lane_t rx[ST_TCP_CONNS_MAX];
    int rx_k;              /* slices of the message being received */
    uint8_t rx_hdr[16];
    size_t rx_hdr_done;
    uint64_t rx_tag;
    size_t rx_bytes, rx_got, rx_left; /* its size, bytes read, bytes not yet delivered */
    st_msg_t *rx_cur;
    size_t rx_first_got;  /* a timed message: bytes its first read brought (0: not begun) */
    uint64_t rx_first_ns; /* ... and when the last of them arrived */
    bool rx_stamped;      /* ... by the kernel's stamp (else the clock at the read) */
} tcp_conn_t;

static uint64_t hash_secret(const char *job, const char *secret)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *s = secret; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    for (const char *s = job; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void tune_socket(st_transport_t *t, int fd)
{
    const st_tcp_opts_t *o = &t->opts;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (o->bufsize > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->bufsize, sizeof o->bufsize);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->bufsize, sizeof o->bufsize);
    }
    // Best effort, like the buffers: a kernel without them keeps its own limits.
    if (o->user_timeout_ms > 0)
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &o->user_timeout_ms,
                   sizeof o->user_timeout_ms);
    if (o->keepidle_s > 0) {
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &o->keepidle_s, sizeof o->keepidle_s);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &o->keepintvl_s, sizeof o->keepintvl_s);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &o->keepcnt, sizeof o->keepcnt);
    }
}

static strata_status_t split_addr(const char *addr, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return st_error(STRATA_ERR_INVALID_ARG, "bad tcp address '%s' (want ip:port)", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "bad tcp address '%s' (want an IPv4 address)",
                        addr);
    return STRATA_OK;
}

static strata_status_t tcp_open(st_ep_t *ep, st_transport_t **out)
{
    st_transport_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    t->secret_hash = hash_secret(st_ep_job_id(ep), st_ep_secret(ep));
    strata_status_t rc = st_tcp_opts_read(st_ep_timeout_ms(ep), &t->opts);
    if (rc < 0) {
        free(t);
        return rc;
    }
    t->hello_ns = (uint64_t)ST_MAX(st_knob_int("STRATA_TCP_HELLO_MS", 20000), 1ll) * 1000000ull;
    // Listen on the interface that reaches the store unless told otherwise: on a cluster that is
    // the interface peers can reach too.
    struct sockaddr_in sa = {.sin_family = AF_INET};
    const char *ifaddr = st_knob_str("STRATA_TCP_IFADDR");
    if (*ifaddr) {
        if (inet_pton(AF_INET, ifaddr, &sa.sin_addr) != 1) {
            free(t);
            return st_error(STRATA_ERR_INVALID_ARG, "STRATA_TCP_IFADDR=%s is not an IPv4 address",
                            ifaddr);
        }
    } else {
        struct sockaddr_in local;
        socklen_t len = sizeof local;
        if (getsockname(st_store_fd(st_ep_store(ep)), (struct sockaddr *)&local, &len) == 0 &&
            local.sin_family == AF_INET)
            sa.sin_addr = local.sin_addr;
    }
    t->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (t->listen_fd < 0 || bind(t->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(t->listen_fd, SOMAXCONN) != 0) {
        int e = errno;
        if (t->listen_fd >= 0)
            close(t->listen_fd);
        free(t);
        return st_error_errno(STRATA_ERR_SYSTEM, e, "tcp transport: cannot listen");
    }
#ifdef TCP_DEFER_ACCEPT
    // Best effort: without it, silent connections reach the pending list at once.
    int defer_s = (int)((t->hello_ns + 999999999ull) / 1000000000ull);
    setsockopt(t->listen_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof defer_s);
#endif
    socklen_t len = sizeof sa;
    getsockname(t->listen_fd, (struct sockaddr *)&sa, &len);
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    snprintf(t->addr, sizeof t->addr, "%s:%d", ip, ntohs(sa.sin_port));
    *out = t;
    return STRATA_OK;
}

static void tcp_close_tp(st_ep_t *ep, st_transport_t *t)
{
    (void)ep;
    for (int i = 0; i < t->npending; i++)
        close(t->pending[i].fd);
    close(t->listen_fd);
    free(t);
}

static void tcp_address(st_transport_t *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s", t->addr);
}

static bool tcp_can_connect(st_ep_t *ep, st_transport_t *t, const st_peer_t *peer)
{
    (void)ep;
    (void)t;
    return peer->addr[0] != '\0';
}

static tcp_conn_t *conn_new(void)
{
    tcp_conn_t *c = calloc(1, sizeof *c);
    for (int i = 0; c && i < ST_TCP_CONNS_MAX; i++)
        c->tx[i].fd = c->rx[i].fd = -1;
    return c;
}

static strata_status_t tcp_connect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)ep;
    (void)t;
    if (peer->conn)
        return STRATA_OK; // already adopted through an accepted connection
    peer->conn = conn_new();
    return peer->conn ? STRATA_OK : st_error(STRATA_ERR_NO_MEMORY, "out of memory");
}

/* Opens sending lane `lane`: connect with the endpoint's timeout, then the hello. */
static strata_status_t open_tx(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, tcp_conn_t *c,
                               int lane)
{
    struct sockaddr_in sa;
    ST_TRY(split_addr(peer->addr, &sa));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "socket");
    tune_socket(t, fd);
    int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (r != 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        long long to = st_ep_timeout_ms(ep);
        ST_RETRY_EINTR(r, poll(&p, 1, to < 0 ? -1 : (int)ST_MIN(to, 1 << 30)));
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        r = (r == 1 && err == 0) ? 0 : -1;
        errno = r == 0 ? 0 : (err ? err : ETIMEDOUT);
    }
    if (r != 0) {
        int e = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_PEER_FAILED, e, "connecting to %s at %s",
                              st_ep_peer_name(ep, peer->rank), peer->addr);
    }
    hello_t h = {.magic = HELLO_MAGIC, .rank = st_ep_rank(ep), .secret_hash = t->secret_hash,
                 .lane = (uint32_t)lane};
    // The hello fits any socket buffer, so a non-blocking send writes it whole.
    if (send(fd, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) {
        int e = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_PEER_FAILED, e, "greeting %s",
                              st_ep_peer_name(ep, peer->rank));
    }
    c->tx[lane].fd = fd;
    return STRATA_OK;
}

static strata_status_t peer_lost(st_ep_t *ep, st_peer_t *peer, int err, const char *what)
{
    if (err)
        return st_ep_peer_lost(ep, peer->rank, "failed (%s) while %s", strerror(err), what);
    return st_ep_peer_lost(ep, peer->rank, "closed its connection while %s", what);
}

/* Begins sending `m`: cuts it into slices, opens the lanes they need, writes the header. */
static strata_status_t begin_send(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, tcp_conn_t *c,
                                  st_msg_t *m)
{
    if (m->bytes >> SIZE_BITS)
        return st_ep_fail(ep, STRATA_ERR_INVALID_ARG, "a %zu-byte message is too large for tcp",
                          m->bytes);
    size_t slice;
    int k = st_tcp_stripes(m->bytes, t->opts.conns, t->opts.stripe_min, &slice);
    for (int i = 0; i < k; i++) {
        lane_t *l = &c->tx[i];
        if (l->fd < 0) {
            strata_status_t rc = open_tx(ep, t, peer, c, i);
            // An unreachable peer has usually exited after a failure elsewhere: let the endpoint
            // report that root cause, as it does for a connection that closes.
            if (rc == STRATA_ERR_PEER_FAILED)
                return st_ep_peer_lost(ep, peer->rank, "could not be reached (%s)",
                                       strata_last_error());
            if (rc < 0)
                return st_ep_fail(ep, rc, "%s", strata_last_error());
        }
        l->off = ST_MIN((size_t)i * slice, m->bytes);
        l->len = ST_MIN(slice, m->bytes - l->off);
        l->got = 0;
    }
    uint64_t hdr[2] = {m->tag, m->bytes | (uint64_t)k << SIZE_BITS};
    memcpy(c->tx_hdr, hdr, sizeof hdr);
    c->tx_hdr_done = 0;
    c->tx_k = k;
    return STRATA_OK;
}

/* Writes what lane i's socket takes of its slice of `m` (and of the header, on lane 0). */
static strata_status_t push_lane(st_ep_t *ep, st_peer_t *peer, tcp_conn_t *c, int i, st_msg_t *m,
                                 bool *moved)
{
    lane_t *l = &c->tx[i];
    size_t *hdr_done = i == 0 ? &c->tx_hdr_done : NULL;
    while ((hdr_done && *hdr_done < 16) || l->got < l->len) {
        struct iovec iov[2];
        int n = 0;
        if (hdr_done && *hdr_done < 16)
            iov[n++] = (struct iovec){c->tx_hdr + *hdr_done, 16 - *hdr_done};
        if (l->got < l->len)
            iov[n++] = (struct iovec){(char *)m->sbuf + l->off + l->got, l->len - l->got};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(l->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return STRATA_OK;
            return peer_lost(ep, peer, errno, "sending");
        }
        *moved = true;
        size_t hdr_part = hdr_done ? ST_MIN((size_t)w, 16 - *hdr_done) : 0;
        if (hdr_done)
            *hdr_done += hdr_part;
        l->got += (size_t)w - hdr_part;
        m->done += (size_t)w - hdr_part;
    }
    return STRATA_OK;
}

/* Sends the queued messages in order, one at a time, each over its lanes. */
static strata_status_t push_sends(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, tcp_conn_t *c,
                                  bool *moved)
{
    while (peer->sendq) {
        st_msg_t *m = peer->sendq;
        if (c->tx_k == 0)
            ST_TRY(begin_send(ep, t, peer, c, m));
        bool whole = true;
        for (int i = 0; i < c->tx_k; i++) {
            ST_TRY(push_lane(ep, peer, c, i, m, moved));
            whole &= c->tx[i].got == c->tx[i].len;
        }
        if (!whole || c->tx_hdr_done < 16)
            return STRATA_OK;
        c->tx_k = 0;
        peer->sendq = m->next;
        if (!peer->sendq)
            peer->sendq_tail = NULL;
        st_msg_complete(ep, m);
    }
    return STRATA_OK;
}

/* recv() that also says when the last byte it read arrived: the kernel's receive stamp
 * (SO_TIMESTAMPNS, set on every receiving socket), nanoseconds of the realtime clock; 0 when there
 * is none. */
static ssize_t recv_stamped(int fd, void *buf, size_t len, uint64_t *arrived_ns)
{
    struct iovec iov = {buf, len};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT);
    *arrived_ns = 0;
    for (struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof ts);
            *arrived_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    return r;
}

/* Meters the link from `peer` on a large message (strata_link_stats_t): the bytes after its first
 * read, over the time from the arrival of that read's last byte to the arrival of the message's
 * last byte, as the kernel stamped them. The clock starts with data in hand, so a late sender does
 * not count; stamps say when bytes arrived, not when they were read, so a late reader does not
 * either; and the bytes of the first read, which may have waited in the socket for a while, are
 * left out. Without stamps the clock at the reads stands in; a message that arrives whole in one
 * read is not timed. A striped message is timed as a whole, over all its lanes: the stamps of
 * different sockets read the same clock. */
static void time_payload(st_peer_t *peer, tcp_conn_t *c, size_t got, bool last,
                         uint64_t arrived_ns)
{
    if (c->rx_first_got == 0) { // the first read
        if (!last) {
            c->rx_first_got = got;
            c->rx_stamped = arrived_ns != 0;
            c->rx_first_ns = c->rx_stamped ? arrived_ns : st_now_ns();
        }
        return;
    }
    if (!last)
        return;
    uint64_t end_ns = c->rx_stamped ? arrived_ns : st_now_ns();
    if (end_ns > c->rx_first_ns) { // else a stamp went missing
        peer->rx_meter.messages++;
        peer->rx_meter.bytes += c->rx_bytes - c->rx_first_got;
        peer->rx_meter.ns += end_ns - c->rx_first_ns;
    }
    c->rx_first_got = 0;
}

/* Reads what lane i's socket holds of its slice of the message being received, handing whole
 * elements on as they arrive. */
static strata_status_t pull_lane(st_ep_t *ep, st_peer_t *peer, tcp_conn_t *c, int i, bool *moved)
{
    lane_t *l = &c->rx[i];
    st_msg_t *m = c->rx_cur;
    bool staged = m->reduce && !m->unexpected;
    bool timed = c->rx_bytes >= STRATA_LINK_TIMED_BYTES;
    if (staged && !l->stage && !(l->stage = malloc(STAGE_BYTES)))
        return st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory for the tcp staging buffer");
    while (l->got < l->len) {
        size_t want = l->len - l->got;
        char *dst;
        if (staged) {
            size_t fill = l->got - l->delivered;
            dst = l->stage + fill;
            want = ST_MIN(want, STAGE_BYTES - fill);
        } else {
            dst = (char *)m->rbuf + l->off + l->got;
        }
        uint64_t arrived_ns = 0;
        ssize_t r = timed ? recv_stamped(l->fd, dst, want, &arrived_ns)
                          : recv(l->fd, dst, want, MSG_DONTWAIT);
        if (r <= 0) {
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return STRATA_OK;
            return peer_lost(ep, peer, r < 0 ? errno : 0, "receiving a message");
        }
        *moved = true;
        l->got += (size_t)r;
        c->rx_got += (size_t)r;
        if (timed)
            time_payload(peer, c, (size_t)r, c->rx_got == c->rx_bytes, arrived_ns);
        size_t ready = l->got - l->delivered;
        if (staged && l->got < l->len)
            ready -= ready % m->esize; // reduce whole elements only; keep the rest staged
        if (ready == 0)
            continue;
        const char *src = staged ? l->stage : (char *)m->rbuf + l->off + l->delivered;
        size_t off = l->off + l->delivered;
        l->delivered += ready;
        c->rx_left -= ready;
        if (c->rx_left == 0)
            c->rx_cur = NULL; // deliver may free an unexpected message once complete
        st_msg_deliver(ep, m, off, src, ready);
        if (!c->rx_cur)
            return STRATA_OK;
        if (staged && l->got > l->delivered)
            memmove(l->stage, l->stage + ready, l->got - l->delivered);
    }
    return STRATA_OK;
}

/* Reads a message header from lane 0; false when it has not arrived whole. */
static strata_status_t pull_header(st_ep_t *ep, st_peer_t *peer, tcp_conn_t *c, bool *whole,
                                   bool *moved)
{
    *whole = false;
    lane_t *l0 = &c->rx[0];
    ssize_t r = recv(l0->fd, c->rx_hdr + c->rx_hdr_done, 16 - c->rx_hdr_done, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return STRATA_OK;
    if (r <= 0) {
        if (r == 0 && c->rx_hdr_done == 0 && !peer->recvq) {
            close(l0->fd); // a clean goodbye between messages
            l0->fd = -1;
            return STRATA_OK;
        }
        return peer_lost(ep, peer, r < 0 ? errno : 0, "waiting for a message");
    }
    *moved = true;
    c->rx_hdr_done += (size_t)r;
    if (c->rx_hdr_done < 16)
        return STRATA_OK;
    uint64_t hdr[2];
    memcpy(hdr, c->rx_hdr, sizeof hdr);
    c->rx_tag = hdr[0];
    c->rx_bytes = hdr[1] & ((1ull << SIZE_BITS) - 1);
    c->rx_k = (int)(hdr[1] >> SIZE_BITS);
    size_t slice;
    // The sender cut it as st_tcp_stripes does for k lanes; anything else is not our peer talking.
    if (c->rx_k < 1 || c->rx_k > ST_TCP_CONNS_MAX ||
        (c->rx_k > 1 && st_tcp_stripes(c->rx_bytes, c->rx_k, 1, &slice) != c->rx_k))
        return st_ep_fail(ep, STRATA_ERR_INTERNAL,
                          "tcp: a message header from %s names %d slices for %zu bytes",
                          st_ep_peer_name(ep, peer->rank), c->rx_k, c->rx_bytes);
    if (c->rx_k == 1)
        slice = c->rx_bytes;
    for (int i = 0; i < c->rx_k; i++) {
        lane_t *l = &c->rx[i];
        l->off = ST_MIN((size_t)i * slice, c->rx_bytes);
        l->len = ST_MIN(slice, c->rx_bytes - l->off);
        l->got = l->delivered = 0;
    }
    c->rx_got = 0;
    c->rx_left = c->rx_bytes;
    c->rx_first_got = 0;
    *whole = true;
    return STRATA_OK;
}

/* Receives messages in order, one at a time: the header from lane 0, then each slice from its lane.
 * A message nobody wants yet (and !drain) waits in the sockets. */
static strata_status_t pull_recvs(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, tcp_conn_t *c,
                                  bool drain, bool *moved)
{
    for (;;) {
        if (c->rx_hdr_done < 16) {
            if (c->rx[0].fd < 0) {
                if (peer->recvq)
                    t->want_accept = true;
                return STRATA_OK;
            }
            bool whole;
            ST_TRY(pull_header(ep, peer, c, &whole, moved));
            if (!whole)
                return STRATA_OK;
        }
        if (!c->rx_cur) {
            c->rx_cur = st_ep_match(ep, peer, c->rx_tag, c->rx_bytes, drain);
            if (!c->rx_cur)
                return st_ep_error(ep); // error, or nobody wants it yet: it waits in the socket
            if (c->rx_bytes == 0) {
                st_msg_t *m = c->rx_cur;
                c->rx_cur = NULL;
                st_msg_deliver(ep, m, 0, NULL, 0);
            }
        }
        for (int i = 0; c->rx_cur && i < c->rx_k; i++) {
            if (c->rx[i].got == c->rx[i].len)
                continue;
            if (c->rx[i].fd < 0) {
                t->want_accept = true; // its connection is not accepted yet
                continue;
            }
            ST_TRY(pull_lane(ep, peer, c, i, moved));
        }
        if (c->rx_cur)
            return STRATA_OK;
        c->rx_hdr_done = 0;
    }
}

static strata_status_t tcp_progress(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, bool drain,
                                    bool *moved)
{
    tcp_conn_t *c = peer->conn;
    ST_TRY(pull_recvs(ep, t, peer, c, drain, moved));
    return push_sends(ep, t, peer, c, moved);
}

/* Closes pending connection i (the last one takes its place) and logs why. */
ST_PRINTF(3, 4) static void drop_pending(st_transport_t *t, int i, const char *fmt, ...)
{
    char why[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    // A port scanner or a flood must not flood the log: the first stranger is news, not the rest.
    bool first = t->strangers++ == 0;
    ST_LOG(first ? ST_LOG_WARN : ST_LOG_DEBUG, ST_SUB_NET,
           "closed a connection to the tcp port from %s: %s%s", t->pending[i].from, why,
           first ? " (further ones are logged at debug level)" : "");
    close(t->pending[i].fd);
    t->pending[i] = t->pending[--t->npending];
}

/* Hands a connection that said a valid hello to its peer as receiving lane `lane`. */
static strata_status_t adopt(st_ep_t *ep, st_transport_t *t, int fd, int rank, int lane)
{
    st_peer_t *peer = st_ep_peer(ep, rank);
    if (!peer->conn) {
        if (!(peer->conn = conn_new())) {
            close(fd);
            return st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory");
        }
        st_ep_adopt_peer(ep, peer, &st_tcp_ops);
    }
    tcp_conn_t *c = peer->conn;
    if (c->rx[lane].fd >= 0)
        close(c->rx[lane].fd);
    tune_socket(t, fd);
    int one = 1; // receive stamps for the link meter (time_payload); without them, the clock
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    c->rx[lane].fd = fd;
    return STRATA_OK;
}

/* Reads what pending connection i has sent of its hello, without blocking; a complete hello is
 * checked and adopted or dropped, and so is a connection that closes or errs. */
static strata_status_t read_hello(st_ep_t *ep, st_transport_t *t, int i, bool *moved)
{
    pending_t *p = &t->pending[i];
    ssize_t r;
    ST_RETRY_EINTR(r, recv(p->fd, (char *)&p->hello + p->got, sizeof p->hello - p->got,
                           MSG_DONTWAIT));
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return STRATA_OK;
    if (r <= 0) {
        drop_pending(t, i, "%s after %zu bytes of its hello", r == 0 ? "closed" : strerror(errno),
                     p->got);
        return STRATA_OK;
    }
    p->got += (size_t)r;
    if (p->got < sizeof p->hello)
        return STRATA_OK;
    const hello_t *h = &p->hello;
    if (h->magic != HELLO_MAGIC) {
        drop_pending(t, i, "not a strata hello (magic %08x)", h->magic);
    } else if (h->secret_hash != t->secret_hash) {
        drop_pending(t, i, "wrong job or secret (claimed rank %d)", h->rank);
    } else if (h->rank < 0 || h->rank >= st_ep_size(ep)) {
        drop_pending(t, i, "rank %d is not in this job of %d", h->rank, st_ep_size(ep));
    } else if (h->lane >= ST_TCP_CONNS_MAX) {
        drop_pending(t, i, "lane %u of rank %d is beyond the %d a peer may open", h->lane, h->rank,
                     ST_TCP_CONNS_MAX);
    } else {
        int fd = p->fd, rank = h->rank, lane = (int)h->lane;
        t->pending[i] = t->pending[--t->npending];
        *moved = true;
        return adopt(ep, t, fd, rank, lane);
    }
    return STRATA_OK;
}

/* Reads the hellos that arrived (one poll() for all pending connections) and closes the
 * connections that stayed silent past their deadline. */
static strata_status_t serve_pending(st_ep_t *ep, st_transport_t *t, bool *moved)
{
    if (t->npending == 0)
        return STRATA_OK;
    struct pollfd fds[PENDING_MAX];
    int n = t->npending;
    for (int i = 0; i < n; i++)
        fds[i] = (struct pollfd){.fd = t->pending[i].fd, .events = POLLIN};
    int r;
    ST_RETRY_EINTR(r, poll(fds, (nfds_t)n, 0));
    uint64_t now = st_now_ns();
    // Backwards, so a connection dropped or adopted (replaced by the last) is not visited twice.
    for (int i = n - 1; i >= 0; i--) {
        if (r > 0 && fds[i].revents)
            ST_TRY(read_hello(ep, t, i, moved));
        else if (now - t->pending[i].since_ns >= t->hello_ns)
            drop_pending(t, i, "sent no hello within %llu ms",
                         (unsigned long long)(t->hello_ns / 1000000));
    }
    return STRATA_OK;
}

/* Accepts up to ACCEPT_BATCH connections and reads their hellos at once (a peer's is usually
 * there already). When PENDING_MAX connections wait, the one that waited longest is evicted. */
static strata_status_t accept_some(st_ep_t *ep, st_transport_t *t, bool *moved)
{
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        struct sockaddr_in sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(t->listen_fd, (struct sockaddr *)&sa, &salen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return STRATA_OK; // nothing waiting; out of descriptors leaves it in the backlog
        if (t->npending == PENDING_MAX) {
            int oldest = 0;
            for (int i = 1; i < t->npending; i++)
                if (t->pending[i].since_ns < t->pending[oldest].since_ns)
                    oldest = i;
            drop_pending(t, oldest, "evicted: %d newer connections were waiting for their hello",
                         PENDING_MAX);
        }
        pending_t *p = &t->pending[t->npending++];
        *p = (pending_t){.fd = fd, .since_ns = st_now_ns()};
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        snprintf(p->from, sizeof p->from, "%s:%d", ip, ntohs(sa.sin_port));
        ST_TRY(read_hello(ep, t, t->npending - 1, moved));
    }
    return STRATA_OK;
}

static strata_status_t tcp_progress_global(st_ep_t *ep, st_transport_t *t, bool *moved)
{
    // accept() is a system call: try it when a receive waits for a connection, else now and then;
    // pending hellos and their deadlines are looked at on the same occasions.
    if (st_ep_single_host(ep) || (!t->want_accept && (++t->tick & 255) != 0))
        return STRATA_OK;
    t->want_accept = false;
    ST_TRY(serve_pending(ep, t, moved));
    return accept_some(ep, t, moved);
}

static int tcp_pollfds(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, struct pollfd *fds, int max)
{
    (void)ep;
    (void)t;
    tcp_conn_t *c = peer->conn;
    int n = 0;
    // Lane 0 always (headers, and a close); the other lanes only while they owe a slice: an idle
    // lane the peer closed would otherwise wake every poll.
    if (c->rx[0].fd >= 0 && n < max)
        fds[n++] = (struct pollfd){.fd = c->rx[0].fd, .events = POLLIN};
    for (int i = 1; c->rx_cur && i < c->rx_k && n < max; i++)
        if (c->rx[i].fd >= 0 && c->rx[i].got < c->rx[i].len)
            fds[n++] = (struct pollfd){.fd = c->rx[i].fd, .events = POLLIN};
    for (int i = 0; peer->sendq && i < c->tx_k && n < max; i++)
        if (c->tx[i].got < c->tx[i].len || (i == 0 && c->tx_hdr_done < 16))
            fds[n++] = (struct pollfd){.fd = c->tx[i].fd, .events = POLLOUT};
    return n;
}

static int tcp_pollfds_global(st_ep_t *ep, st_transport_t *t, struct pollfd *fds, int max)
{
    if (st_ep_single_host(ep) || max < 1)
        return 0;
    t->want_accept = true; // whatever wakes us, look at the listener and the hellos next pass
    int n = 0;
    fds[n++] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
    for (int i = 0; i < t->npending && n < max; i++)
        fds[n++] = (struct pollfd){.fd = t->pending[i].fd, .events = POLLIN};
    return n;
}

static void tcp_disconnect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)ep;
    (void)t;
    tcp_conn_t *c = peer->conn;
    if (!c)
        return;
    for (int i = 0; i < ST_TCP_CONNS_MAX; i++) {
        if (c->tx[i].fd >= 0)
            close(c->tx[i].fd);
        if (c->rx[i].fd >= 0)
            close(c->rx[i].fd);
        free(c->rx[i].stage);
    }
    free(c);
    peer->conn = NULL;
}

const st_transport_ops_t st_tcp_ops = {
    .name = "tcp",
    .open = tcp_open,
    .address = tcp_address,
    .can_connect = tcp_can_connect,
    .connect = tcp_connect,
    .progress = tcp_progress,
    .progress_global = tcp_progress_global,
    .pollfds = tcp_pollfds,
    .pollfds_global = tcp_pollfds_global,
    .needs_poll = true,
    .disconnect = tcp_disconnect,
    .close = tcp_close_tp,
};
