/* Fuzz target: the pool node (src/pool/node.c) and its datagram decoder (src/pool/proto.c), which
 * read whatever arrives on a node's UDP port. Each input runs against a fresh node on loopback
 * with a session opened by a real handshake (secret "fuzz"), so authenticated operations reach the
 * code behind the token check.
 *
 * The input is a script of records: u16 length (little endian), u8 mode, then that many bytes,
 * sent to the node as one datagram. mode bit 0: the session's token is written over bytes 8..16
 * (when the datagram is that long). After each record the node serves what arrived and the
 * replies are drained. Invariants: the decoder never reports a payload beyond the datagram nor an
 * ADAMW without its whole arguments (the node's update reads four ranges it names), and after
 * the script the node still answers a valid READ. */
#include "common.h"

#include "pool/net.h"
#include "pool/proto.h"
#include "strata/pool.h"

#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static uint8_t reply[PL_MAX_DGRAM + 64];

/* Serves what arrived, then returns the first reply of kind `op` (its length) or 0. */
static size_t serve_and_drain(strata_pool_node_t *node, int fd, uint8_t op)
{
    strata_pool_node_poll(node, 0);
    size_t found = 0;
    for (;;) {
        ssize_t n = recv(fd, reply, sizeof reply, MSG_DONTWAIT);
        if (n <= 0)
            return found;
        if (!found && n >= PL_HDR && reply[4] == op)
            found = (size_t)n;
        if (found)
            return found; // keep the reply in the buffer for the caller
    }
}

static void send_dgram(int fd, const struct sockaddr_in *to, const void *buf, size_t len)
{
    if (sendto(fd, buf, len, 0, (const struct sockaddr *)to, sizeof *to) != (ssize_t)len)
        abort();
}

/* The handshake by hand; returns the session token. */
static uint64_t handshake(strata_pool_node_t *node, int fd, const struct sockaddr_in *to)
{
    static uint8_t buf[PL_MAX_DGRAM];
    uint8_t nc[PL_NONCE] = "fuzz-nonce-01234", auth[2 * PL_NONCE + PL_MAC];
    pl_hdr_t h = {.op = PL_HELLO, .len = PL_NONCE};
    send_dgram(fd, to, buf, pl_encode(buf, &h, NULL, NULL, nc, PL_NONCE));
    size_t n = serve_and_drain(node, fd, PL_CHALLENGE);
    FUZZ_CHECK(n == PL_HDR + 2 * PL_NONCE);
    memcpy(auth, nc, PL_NONCE);
    memcpy(auth + PL_NONCE, reply + PL_HDR + PL_NONCE, PL_NONCE);
    pn_mac("fuzz", "client", auth, auth + PL_NONCE, auth + 2 * PL_NONCE);
    h = (pl_hdr_t){.op = PL_AUTH, .len = sizeof auth};
    send_dgram(fd, to, buf, pl_encode(buf, &h, NULL, NULL, auth, sizeof auth));
    n = serve_and_drain(node, fd, PL_WELCOME);
    FUZZ_CHECK(n == PL_HDR + PL_MAC);
    uint64_t token;
    memcpy(&token, reply + 8, 8);
    return token;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strata_pool_node_config_t cfg = {.listen = "127.0.0.1:0", .bytes = 64 << 10, .secret = "fuzz"};
    strata_pool_node_t *node = NULL;
    if (strata_pool_node_open(&cfg, &node) != STRATA_OK)
        abort();
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)strata_pool_node_port(node)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        abort();
    uint64_t token = handshake(node, fd, &to);
    static uint8_t dg[65536];
    size_t off = 0;
    while (off + 3 <= size) {
        size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
        uint8_t mode = data[off + 2];
        off += 3;
        len = len < size - off ? len : size - off;
        memcpy(dg, data + off, len);
        off += len;
        if ((mode & 1) && len >= 16)
            memcpy(dg + 8, &token, 8);
        pl_msg_t m;
        if (pl_decode(dg, len, &m)) {
            FUZZ_CHECK(m.payload_len <= len && (!m.payload || m.payload + m.payload_len <= dg + len));
            // An ADAMW's arguments are all there: the node reads them without another check.
            FUZZ_CHECK(m.h.op != PL_ADAMW || m.payload_len == PL_ADAMW_ARGS);
        }
        send_dgram(fd, &to, dg, len);
        serve_and_drain(node, fd, 0);
    }
    // The node still serves its session.
    pl_hdr_t h = {.op = PL_READ, .token = token, .flow = 0x7fffffff, .len = 64};
    send_dgram(fd, &to, dg, pl_encode(dg, &h, NULL, NULL, NULL, 0));
    FUZZ_CHECK(serve_and_drain(node, fd, PL_READ_REPLY) > 0);
    close(fd);
    strata_pool_node_close(node);
    return 0;
}
