/* Fuzz target: the bootstrap store's server (src/comm/bootstrap/store_server.c), which parses
 * every frame its clients send (wire format in store_proto.h). The server is driven as in a job:
 * over loopback sockets, polled step by step, with up to three clients, so a frame is parsed in
 * its real context (HELLO and the secret first, keys parked by one client and set by another,
 * clients vanishing with requests parked).
 *
 * The input is a script of records: u8 op, u16 length (little endian), then that many bytes.
 * op % 3 picks the client (connected on first use, again after a close); (op / 4) % 4 is what it
 * does: 0 send the bytes, 1 send them and close, 2 close, 3 send them and shut down the sending
 * side (the server sees the end of the stream while replies can still arrive).
 * After each record the server runs a few poll rounds. The job secret is "fuzz". */
#include "common.h"

#include "comm/bootstrap/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NCLIENTS 3

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) {
        perror("fuzz_store: socket");
        abort();
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    // libFuzzer's timer signal can interrupt connect(); it then completes in the background.
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = errno;
    socklen_t len = sizeof err;
    if (err == EINTR) {
        while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
            ;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
            return fd;
    }
    fprintf(stderr, "fuzz_store: connect: %s\n", strerror(err));
    abort();
}

/* Closes with a reset, not a FIN: thousands of runs a second would otherwise fill the ephemeral
 * ports with TIME_WAIT connections until no listener can bind. The server sees a lost connection
 * either way; action 3 (shutdown) gives it the orderly end of stream. */
static void hang_up(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void drain(int fd)
{
    char buf[65536];
    while (fd >= 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        ;
}

static void pump(st_store_server_t *srv, const int *fds)
{
    for (int round = 0; round < 4; round++) {
        FUZZ_CHECK(st_store_server_poll(srv, 0) == STRATA_OK);
        for (int i = 0; i < NCLIENTS; i++)
            drain(fds[i]);
    }
}

static void send_all(st_store_server_t *srv, int *fds, int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pump(srv, fds);
        } else {
            return; // the server closed this connection: what is left is not read anyway
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_store_server_t *srv;
    if (st_store_server_open("127.0.0.1:0", "fuzz", &srv) < 0) {
        fprintf(stderr, "fuzz_store: %s\n", strata_last_error());
        abort();
    }
    int port = st_store_server_port(srv);
    int fds[NCLIENTS] = {-1, -1, -1};
    size_t off = 0;
    while (off + 3 <= size) {
        uint8_t op = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        len = len < size - off ? len : size - off;
        int c = op % NCLIENTS, act = (op / 4) % 4;
        if (fds[c] < 0) {
            fds[c] = connect_to(port);
            pump(srv, fds); // accept it
        }
        if (act != 2)
            send_all(srv, fds, fds[c], data + off, len);
        off += len;
        if (act == 1 || act == 2) {
            hang_up(fds[c]);
            fds[c] = -1;
        } else if (act == 3) {
            shutdown(fds[c], SHUT_WR);
        }
        pump(srv, fds);
    }
    for (int i = 0; i < NCLIENTS; i++) {
        if (fds[i] >= 0)
            hang_up(fds[i]);
        fds[i] = -1;
    }
    pump(srv, fds);
    st_store_server_close(srv, 0);
    return 0;
}
