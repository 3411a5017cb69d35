/* The meeting places' dispatch (rendezvous.h): which client serves a scheme, and the key the store's
 * address is published under. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/bootstrap/rendezvous.h"

bool st_rdzv_scheme(const char *store_addr)
{
    return store_addr && (!strncmp(store_addr, "torch:", 6) || !strcmp(store_addr, "pmix:") ||
                          !strcmp(store_addr, "pmi:"));
}

/* The key for torch's store: one per torchrun run and restart, so a restarted group never reads
 * the address of the store of the attempt before. */
static void torch_key(char *key, size_t size)
{
    const char *run = getenv("TORCHELASTIC_RUN_ID"), *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    snprintf(key, size, "/strata/%s/%s/store", run && *run ? run : "none",
             restart && *restart ? restart : "0");
}

static strata_status_t exchange(const char *how, bool set, char *val, size_t size,
                                long long timeout_ms)
{
    if (!strncmp(how, "torch:", 6)) {
        char key[256];
        torch_key(key, sizeof key);
        return st_rdzv_torch(how + 6, set, key, val, size, timeout_ms);
    }
    if (!strcmp(how, "pmix:"))
        return st_rdzv_pmix(set, "strata.store", val, size);
    if (!strcmp(how, "pmi:"))
        return st_rdzv_pmi(set, "strata_store", val, size);
    return st_error(STRATA_ERR_INVALID_ARG, "rendezvous: unknown meeting place '%s'", how);
}

strata_status_t st_rdzv_publish(const char *how, const char *addr, long long timeout_ms)
{
    char v[256];
    snprintf(v, sizeof v, "%s", addr);
    return exchange(how, true, v, sizeof v, timeout_ms);
}

strata_status_t st_rdzv_lookup(const char *how, char *out, size_t size, long long timeout_ms)
{
    return exchange(how, false, out, size, timeout_ms);
}
