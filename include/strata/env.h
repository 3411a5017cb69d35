/* Environment knobs: every STRATA_* setting is declared once, with its default and a one-line doc.
 * `strata env` prints the table. Knobs are read from the environment on first use. */
#ifndef STRATA_ENV_H
#define STRATA_ENV_H

#include "strata/status.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_knob {
    const char *name;    /* environment variable, e.g. "STRATA_COMM_TIMEOUT_MS" */
    const char *dflt;    /* default value as text ("" when unset means "automatic") */
    const char *doc;     /* one line */
} strata_knob_t;

/* Number of declared knobs. */
STRATA_API int strata_knob_count(void);

/* The i-th declared knob (0 <= i < strata_knob_count()), or NULL. Static storage. */
STRATA_API const strata_knob_t *strata_knob_at(int i);

/* The value in force for a declared knob: the environment's value if set, else the default.
 * Returns NULL for a name that is not declared. */
STRATA_API const char *strata_knob_value(const char *name);

/* Parses a size "64", "8K", "256M", "1G" (powers of 1024) into *out, as knobs and tools read sizes.
 * Returns false on garbage. */
STRATA_API bool strata_parse_size(const char *text, long long *out);

#ifdef __cplusplus
}
#endif
#endif
