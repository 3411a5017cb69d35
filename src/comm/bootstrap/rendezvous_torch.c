/* A client of torch's TCPStore (torchrun's agent store), enough to meet there: SET, and WAIT then
 * GET. The wire (torch 1.13 to 2.x, host byte order, as torch writes it): a query is one type byte
 * (SET 0, GET 2, WAIT 5), then its strings as a u64 length and the bytes; WAIT sends a u64 count of
 * keys before them and is answered by one byte (0: every key is there) once they exist; GET is
 * answered by the value as a u64 length and the bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/bootstrap/rendezvous.h"
#include "comm/bootstrap/store.h"

enum { Q_SET = 0, Q_GET = 2, Q_WAIT = 5 };

static bool put_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool get_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

static bool put_str(int fd, const char *s, size_t n)
{
    uint64_t len = n;
    return put_all(fd, &len, sizeof len) && put_all(fd, s, n);
}

strata_status_t st_rdzv_torch(const char *hostport, bool set, const char *key, char *val,
                              size_t size, long long timeout_ms)
{
    int fd = -1;
    strata_status_t rc = st_store_dial(hostport, st_deadline_ms(timeout_ms), timeout_ms, &fd);
    if (rc < 0)
        return st_error(rc, "rendezvous: torchrun's agent store at %s: %s", hostport,
                        strata_last_error());
    if (timeout_ms >= 0) { // WAIT answers only once rank 0 has set the key
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    uint8_t q;
    bool ok = true;
    if (set) {
        q = Q_SET;
        ok = put_all(fd, &q, 1) && put_str(fd, key, strlen(key)) && put_str(fd, val, strlen(val));
        // SET has no answer; a WAIT on our own key makes sure the store has it before we go on.
    }
    uint64_t one = 1, len = 0;
    uint8_t answer = 1;
    q = Q_WAIT;
    ok = ok && put_all(fd, &q, 1) && put_all(fd, &one, sizeof one) &&
         put_str(fd, key, strlen(key)) && get_all(fd, &answer, 1) && answer == 0;
    if (ok && !set) {
        q = Q_GET;
        ok = put_all(fd, &q, 1) && put_str(fd, key, strlen(key)) && get_all(fd, &len, sizeof len) &&
             len < size && get_all(fd, val, (size_t)len);
        if (ok)
            val[len] = 0;
    }
    int err = errno;
    close(fd);
    if (!ok)
        return st_error(err == EAGAIN || err == EWOULDBLOCK ? STRATA_ERR_TIMEOUT : STRATA_ERR_REMOTE,
                        "rendezvous: torchrun's agent store at %s: %s key %s failed%s (is it a "
                        "torch TCPStore, torchrun's default static rendezvous?)", hostport,
                        set ? "setting" : "waiting for", key,
                        err == EAGAIN || err == EWOULDBLOCK ? ": no answer within the timeout" : "");
    return STRATA_OK;
}
