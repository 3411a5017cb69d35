/* Fuzz target: Slurm hostlist expressions (src/topo/hostlist.c, strata_hostlist_expand). Every
 * expanded name must be non-empty and fit STRATA_HOSTNAME_MAX, and strata_hostname_cmp must order
 * the names consistently (antisymmetric, zero only for equal names). */
#include "common.h"

#include "strata/topo.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) // a hostlist is one line
        return 0;
    char *text = fuzz_cstr(data, size);
    char **names;
    int n;
    if (strata_hostlist_expand(text, &names, &n) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        FUZZ_CHECK(names == NULL && n == 0);
        free(text);
        return 0;
    }
    FUZZ_CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        FUZZ_CHECK(len >= 1 && len < STRATA_HOSTNAME_MAX);
    }
    for (int i = 0; i + 1 < n && i < 256; i++) {
        int ab = strata_hostname_cmp(names[i], names[i + 1]);
        int ba = strata_hostname_cmp(names[i + 1], names[i]);
        FUZZ_CHECK(ab == -ba);
        FUZZ_CHECK(ab != 0 || strcmp(names[i], names[i + 1]) == 0);
    }
    strata_hostlist_free(names, n);
    free(text);
    return 0;
}
