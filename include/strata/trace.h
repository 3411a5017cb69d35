/* Chrome trace-event recording (chrome://tracing, Perfetto): compute and communication spans of
 * one process, written as a JSON file when the trace is closed.
 *
 * A span is either synchronous (begin/end on the calling thread, nested like a call stack; compute)
 * or asynchronous (begin/end matched by an id, may overlap anything; a non-blocking collective from
 * issue to completion). Recording is off until strata_trace_open(); while off every call is a
 * cheap no-op, so code can be instrumented unconditionally. Events are kept in memory (a growing
 * array) and written once by strata_trace_close(), so recording never touches the file system in
 * the middle of a step. Names and categories must be string literals or otherwise outlive the
 * trace: only the pointers are stored.
 *
 * Thread-safety: one process-wide trace, used from one thread at a time.
 */
#ifndef STRATA_TRACE_H
#define STRATA_TRACE_H

#include "strata/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording. `path` is the file written at close; `pid` labels the process (the rank).
 * Errors: STRATA_ERR_INVALID_ARG when already open or path is NULL. */
STRATA_API strata_status_t strata_trace_open(const char *path, int pid);

/* True while recording. */
STRATA_API bool strata_trace_enabled(void);

/* A synchronous span on the calling thread: begin/end must nest. */
STRATA_API void strata_trace_begin(const char *cat, const char *name);
STRATA_API void strata_trace_end(const char *cat, const char *name);

/* An asynchronous span identified by (cat, id); shown on its own track in the viewer. */
STRATA_API void strata_trace_async_begin(const char *cat, const char *name, uint64_t id);
STRATA_API void strata_trace_async_end(const char *cat, const char *name, uint64_t id);

/* Writes the file ({"traceEvents": [...]}, timestamps in microseconds) and stops recording.
 * A no-op returning STRATA_OK when not open. Errors: STRATA_ERR_IO naming the path. */
STRATA_API strata_status_t strata_trace_close(void);

#ifdef __cplusplus
}
#endif
#endif
