/* UDP sockets, addresses, path MTU and the handshake's HMAC for the pool (net.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "pool/net.h"

#define SOCK_BUF_BYTES (4 << 20) /* a window of jumbo datagrams in flight, both ways */

strata_status_t pn_parse_addr(const char *text, const char *what, struct sockaddr_in *out)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == text || !end || *end || end == colon + 1 || port < 0 || port > 65535)
        return st_error(STRATA_ERR_INVALID_ARG, "%s '%s': expected ADDR:PORT, e.g. 127.0.0.1:7700",
                        what, text ? text : "(null)");
    char host[256];
    size_t hl = (size_t)(colon - text);
    if (hl >= sizeof host)
        return st_error(STRATA_ERR_INVALID_ARG, "%s '%s': host name too long", what, text);
    memcpy(host, text, hl);
    host[hl] = '\0';
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &out->sin_addr) == 1)
        return STRATA_OK;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return st_error(STRATA_ERR_INVALID_ARG, "%s '%s': cannot resolve '%s': %s", what, text,
                        host, gai_strerror(rc));
    out->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return STRATA_OK;
}

const char *pn_format(const struct sockaddr_in *a, char *buf, size_t size)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(buf, size, "%s:%u", ip, ntohs(a->sin_port));
    return buf;
}

/* A non-blocking UDP socket with large buffers, bound to *bind_to; `shared`: other sockets may
 * bind the same address (a multicast group's receivers on one host). */
static strata_status_t open_socket(const struct sockaddr_in *bind_to, bool shared, int *fd_out)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "pool: socket");
    int sz = SOCK_BUF_BYTES, one = 1;
    // Best effort: the kernel caps these at net.core.[rw]mem_max (about 200 KiB, a few dozen
    // datagrams), except for a process allowed to force them (CAP_NET_ADMIN).
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    if ((shared && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) ||
        bind(fd, (const struct sockaddr *)bind_to, sizeof *bind_to) != 0) {
        int err = errno;
        char a[32];
        close(fd);
        return st_error_errno(STRATA_ERR_SYSTEM, err, "pool: cannot bind %s",
                              pn_format(bind_to, a, sizeof a));
    }
    // Multicast leaves by the interface of a specific bound address, not by the routing table,
    // which may have no route for multicast (a namespace with only its subnet's).
    if (bind_to->sin_addr.s_addr != htonl(INADDR_ANY) && !IN_MULTICAST(ntohl(bind_to->sin_addr.s_addr)))
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &bind_to->sin_addr, sizeof bind_to->sin_addr);
    *fd_out = fd;
    return STRATA_OK;
}

strata_status_t pn_socket(const struct sockaddr_in *bind_to, int *fd_out)
{
    return open_socket(bind_to, false, fd_out);
}

strata_status_t pn_local_addr(const struct sockaddr_in *toward, struct in_addr *out)
{
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)toward, sizeof *toward) != 0 ||
        getsockname(fd, (struct sockaddr *)&me, &len) != 0) {
        int err = errno;
        char a[32];
        if (fd >= 0)
            close(fd);
        return st_error_errno(STRATA_ERR_IO, err, "pool: no route to %s",
                              pn_format(toward, a, sizeof a));
    }
    close(fd);
    *out = me.sin_addr;
    return STRATA_OK;
}

strata_status_t pn_join_group(const struct sockaddr_in *group, const struct sockaddr_in *toward,
                              int *fd_out)
{
    char a[32];
    if (!IN_MULTICAST(ntohl(group->sin_addr.s_addr)))
        return st_error(STRATA_ERR_INVALID_ARG, "pool: %s is not a multicast group (224.0.0.0/4)",
                        pn_format(group, a, sizeof a));
    struct ip_mreq mr = {.imr_multiaddr = group->sin_addr};
    ST_TRY(pn_local_addr(toward, &mr.imr_interface));
    int fd = -1;
    ST_TRY(open_socket(group, true, &fd));
    if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) {
        int err = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_IO, err, "pool: cannot join multicast group %s",
                              pn_format(group, a, sizeof a));
    }
    *fd_out = fd;
    return STRATA_OK;
}

int pn_path_mtu(const struct sockaddr_in *dst)
{
    int mtu = 1500; // what we assume when the kernel cannot tell
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int pmtu = IP_PMTUDISC_DO, v = 0;
        socklen_t len = sizeof v;
        if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) == 0 &&
            connect(fd, (const struct sockaddr *)dst, sizeof *dst) == 0 &&
            getsockopt(fd, IPPROTO_IP, IP_MTU, &v, &len) == 0 && v >= 576)
            mtu = v;
        close(fd);
    }
    long long cap = st_knob_int("STRATA_POOL_MTU", 0);
    if (cap >= 576 && cap < mtu)
        mtu = (int)cap;
    return mtu;
}

void pn_mac(const char *secret, const char *label, const uint8_t *a, const uint8_t *b,
            uint8_t out[32])
{
    uint8_t msg[64];
    size_t ll = strlen(label);
    memcpy(msg, label, ll);
    memcpy(msg + ll, a, 16);
    memcpy(msg + ll + 16, b, 16);
    unsigned int n = 32;
    secret = secret ? secret : "";
    HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, ll + 32, out, &n);
}

int pn_mac_equal(const uint8_t *a, const uint8_t *b)
{
    return CRYPTO_memcmp(a, b, 32) == 0;
}

strata_status_t pn_random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return st_error_errno(STRATA_ERR_SYSTEM, errno, "pool: getrandom");
        }
        p += r;
        n -= (size_t)r;
    }
    return STRATA_OK;
}

int pn_send_batch(int fd, pn_dgram_t *d, int n)
{
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    int done = 0;
    while (done < n) {
        int k = ST_MIN(n - done, 64);
        for (int i = 0; i < k; i++) {
            iov[i] = (struct iovec){d[done + i].buf, d[done + i].len};
            msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &d[done + i].addr,
                                                   .msg_namelen = sizeof(struct sockaddr_in),
                                                   .msg_iov = &iov[i],
                                                   .msg_iovlen = 1}};
        }
        int r = sendmmsg(fd, msgs, (unsigned)k, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        done += r;
    }
    return done;
}

int pn_recv_batch(int fd, pn_dgram_t *d, int n)
{
    struct mmsghdr msgs[64];
    struct iovec iov[64];
    n = ST_MIN(n, 64);
    for (int i = 0; i < n; i++) {
        iov[i] = (struct iovec){d[i].buf, sizeof d[i].buf};
        msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &d[i].addr,
                                               .msg_namelen = sizeof(struct sockaddr_in),
                                               .msg_iov = &iov[i],
                                               .msg_iovlen = 1}};
    }
    int r = recvmmsg(fd, msgs, (unsigned)n, MSG_DONTWAIT, NULL);
    if (r <= 0)
        return 0;
    for (int i = 0; i < r; i++) {
        bool bad = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ||
                   msgs[i].msg_hdr.msg_namelen != sizeof(struct sockaddr_in);
        d[i].len = bad ? SIZE_MAX : msgs[i].msg_len;
    }
    return r;
}
