/* The bootstrap store's server as the public API offers it (comm.h: strata_store_server_*), for
 * `strata store` and anything else that serves a job's store from a process of its own. The
 * server itself is store_server.c. */
#include "comm/bootstrap/store.h"

strata_status_t strata_store_server_open(const char *addr, const char *secret,
                                         strata_store_server_t **out)
{
    return st_store_server_open(addr, secret, out);
}

int strata_store_server_port(const strata_store_server_t *srv)
{
    return st_store_server_port(srv);
}

strata_status_t strata_store_server_poll(strata_store_server_t *srv, int timeout_ms)
{
    return st_store_server_poll(srv, timeout_ms);
}

void strata_store_server_stats(const strata_store_server_t *srv, strata_store_stats_t *out)
{
    st_store_server_stats(srv, out);
}

void strata_store_server_close(strata_store_server_t *srv)
{
    if (srv)
        st_store_server_close(srv, 0);
}
