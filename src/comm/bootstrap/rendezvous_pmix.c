/* A PMIx client (libpmix: Open MPI's mpirun, srun --mpi=pmix, PRRTE), enough to meet there: rank 0
 * puts and commits, every rank fences with data collection, the others get from rank 0. */
#include <stdio.h>
#include <string.h>

#include <pmix.h>

#include "base/base.h"
#include "comm/bootstrap/rendezvous.h"

static strata_status_t fail(const char *what, pmix_status_t st, bool inited)
{
    strata_status_t rc = st_error(STRATA_ERR_REMOTE, "rendezvous: PMIx %s failed: %s", what,
                                  PMIx_Error_string(st));
    if (inited)
        PMIx_Finalize(NULL, 0);
    return rc;
}

strata_status_t st_rdzv_pmix(bool set, const char *key, char *val, size_t size)
{
    pmix_proc_t me;
    pmix_status_t st = PMIx_Init(&me, NULL, 0);
    if (st != PMIX_SUCCESS)
        return fail("init (is this process started by a PMIx launcher?)", st, false);
    if (set) {
        pmix_value_t v = {.type = PMIX_STRING};
        v.data.string = val;
        if ((st = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS)
            return fail("put", st, true);
        if ((st = PMIx_Commit()) != PMIX_SUCCESS)
            return fail("commit", st, true);
    }
    pmix_info_t collect;
    bool yes = true;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    pmix_proc_t all;
    PMIX_PROC_LOAD(&all, me.nspace, PMIX_RANK_WILDCARD);
    if ((st = PMIx_Fence(&all, 1, &collect, 1)) != PMIX_SUCCESS)
        return fail("fence", st, true);
    if (!set) {
        pmix_proc_t zero;
        PMIX_PROC_LOAD(&zero, me.nspace, 0);
        pmix_value_t *v = NULL;
        if ((st = PMIx_Get(&zero, key, NULL, 0, &v)) != PMIX_SUCCESS)
            return fail("get", st, true);
        bool ok = v->type == PMIX_STRING && v->data.string && strlen(v->data.string) < size;
        if (ok)
            snprintf(val, size, "%s", v->data.string);
        PMIX_VALUE_RELEASE(v);
        if (!ok) {
            PMIx_Finalize(NULL, 0);
            return st_error(STRATA_ERR_REMOTE, "rendezvous: PMIx: %s from rank 0 is not a string",
                            key);
        }
    }
    // Done with PMIx: finalize, so the launcher counts a later exit as a normal one.
    if ((st = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS)
        return st_error(STRATA_ERR_REMOTE, "rendezvous: PMIx finalize failed: %s",
                        PMIx_Error_string(st));
    return STRATA_OK;
}
