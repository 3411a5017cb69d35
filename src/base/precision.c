/* Names of strata_precision_t (strata/precision.h). */
#include <string.h>

#include "base/base.h"
#include "strata/precision.h"

static const char *const names[] = {"bf16", "fp16", "fp32", "fp8"};
#define NNAMES ((int)(sizeof names / sizeof names[0]))

const char *strata_precision_name(strata_precision_t p)
{
    return (unsigned)p < (unsigned)NNAMES ? names[p] : "?";
}

strata_status_t strata_precision_parse(const char *s, strata_precision_t *out)
{
    for (int i = 0; s && i < NNAMES; i++)
        if (!strcmp(s, names[i])) {
            *out = (strata_precision_t)i;
            return STRATA_OK;
        }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "expected precision (one of: bf16, fp16, fp32, fp8), got '%s'",
                    s ? s : "(null)");
}
