/* UDP plumbing shared by node and client: addresses, sockets, path-MTU discovery, and the
 * keyed hash of the HELLO handshake. */
#ifndef ST_POOL_NET_H
#define ST_POOL_NET_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool/proto.h"
#include "strata/status.h"

/* A datagram in a batch: its bytes and its peer (destination or source). */
typedef struct pn_dgram {
    _Alignas(64) uint8_t buf[PL_MAX_DGRAM];
    size_t len; /* received: SIZE_MAX when it was longer than any valid datagram */
    struct sockaddr_in addr;
} pn_dgram_t;

/* Sends d[0..n) with sendmmsg; returns how many went out (the rest are dropped, as the network
 * drops: a full socket buffer is loss the protocol repairs). */
int pn_send_batch(int fd, pn_dgram_t *d, int n);
/* Receives up to n datagrams without waiting (recvmmsg); returns how many (0 when none). */
int pn_recv_batch(int fd, pn_dgram_t *d, int n);

/* Parses "ADDR:PORT" (IPv4 dotted or a host name) into *out; `what` names it in the error. */
strata_status_t pn_parse_addr(const char *text, const char *what, struct sockaddr_in *out);
/* "a.b.c.d:port" into buf (32 bytes are enough); returns buf. */
const char *pn_format(const struct sockaddr_in *a, char *buf, size_t size);
/* A non-blocking UDP socket bound to *bind_to, with large buffers; bound to a specific address,
 * its multicast leaves by that address's interface. */
strata_status_t pn_socket(const struct sockaddr_in *bind_to, int *fd_out);
/* This host's address on the way to *toward (a connected socket's local address). */
strata_status_t pn_local_addr(const struct sockaddr_in *toward, struct in_addr *out);
/* A socket that receives multicast group *group (bound to it, shared with the host's other
 * members), joined on the interface that leads to *toward. */
strata_status_t pn_join_group(const struct sockaddr_in *group, const struct sockaddr_in *toward,
                              int *fd_out);
/* The path MTU towards dst, discovered with IP_PMTUDISC_DO on a connected socket (loopback:
 * 65536); the knob STRATA_POOL_MTU caps it. */
int pn_path_mtu(const struct sockaddr_in *dst);
/* out[0..32) = HMAC-SHA256(secret, label || a || b), the nonces 16 bytes each. */
void pn_mac(const char *secret, const char *label, const uint8_t *a, const uint8_t *b,
            uint8_t out[32]);
/* Constant-time comparison of two 32-byte MACs. */
int pn_mac_equal(const uint8_t *a, const uint8_t *b);
/* n random bytes (getrandom). */
strata_status_t pn_random(void *buf, size_t n);

#endif
