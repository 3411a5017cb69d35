/* Chrome trace-event recording (chrome://tracing, Perfetto): compute and communication spans of
 * one process, written as a JSON file when the trace is closed, and the merge of several processes'
 * files into one timeline of the whole job.
 *
 * A span is either synchronous (begin/end on the calling thread, nested like a call stack; compute)
 * or asynchronous (begin/end matched by an id, may overlap anything; a non-blocking collective from
 * issue to completion). A begin may carry arguments (a message's size, the algorithm), shown in the
 * viewer when the span is selected. Recording is off until strata_trace_open(); while off every
 * call is a cheap no-op, so code can be instrumented unconditionally. Events are kept in memory (a
 * growing array) and written once by strata_trace_close(), so recording never touches the file
 * system in the middle of a step. Names, categories, argument keys and string values must be
 * string literals or otherwise outlive the trace: only the pointers are stored.
 *
 * The file always pairs its events: an end whose begin was not recorded (the span began before the
 * trace was opened) is dropped, and a span still open at close (an error path left it, or a
 * collective is still in flight) is ended at the close with the argument "closed_at_close": true.
 * It names the process ("rank <pid>", sorted by pid, labelled with the host) and each recording
 * thread ("main" or "thread <tid>") with metadata events (ph "M").
 *
 * Clock: timestamps are microseconds since the Unix epoch (CLOCK_REALTIME read once at open, then
 * advanced by the monotonic clock, so a clock step during the trace cannot bend it). Every rank's
 * file is on the same clock: exactly for the ranks of one host, to the hosts' clock synchronisation
 * (NTP, PTP) across hosts. strata_trace_merge() puts several files on one timeline.
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

/* One argument of a span: a string value when `str` is not NULL, else the number `num`. */
typedef struct strata_trace_arg {
    const char *key;
    const char *str;
    double num;
} strata_trace_arg_t;

/* At most this many arguments per span; more are ignored. */
#define STRATA_TRACE_MAX_ARGS 8

/* Starts recording. `path` is the file written at close; `pid` labels the process (the rank).
 * Errors: STRATA_ERR_INVALID_ARG when already open or path is NULL. */
STRATA_API strata_status_t strata_trace_open(const char *path, int pid);

/* True while recording. */
STRATA_API bool strata_trace_enabled(void);

/* A synchronous span on the calling thread: begin/end must nest. */
STRATA_API void strata_trace_begin(const char *cat, const char *name);
STRATA_API void strata_trace_begin_args(const char *cat, const char *name,
                                        const strata_trace_arg_t *args, int nargs);
STRATA_API void strata_trace_end(const char *cat, const char *name);

/* An asynchronous span identified by (cat, id); shown on its own track in the viewer. */
STRATA_API void strata_trace_async_begin(const char *cat, const char *name, uint64_t id);
STRATA_API void strata_trace_async_begin_args(const char *cat, const char *name, uint64_t id,
                                              const strata_trace_arg_t *args, int nargs);
STRATA_API void strata_trace_async_end(const char *cat, const char *name, uint64_t id);

/* Ends the spans still open, writes the file ({"traceEvents": [...], "otherData": {...}}) and stops
 * recording. A no-op returning STRATA_OK when not open. Errors: STRATA_ERR_IO naming the path. */
STRATA_API strata_status_t strata_trace_close(void);

/* Merges the traces `paths[0..n)` written by strata_trace_close (one per rank, on the common clock)
 * into one file at `out`: every event of every input, timestamps shifted so the earliest is 0.
 * Errors: STRATA_ERR_IO / STRATA_ERR_PARSE naming the file; STRATA_ERR_INVALID_ARG for a file not on
 * the common clock (not written by this recorder) or two files holding the same process id (traces
 * of different jobs, or one file given twice). */
STRATA_API strata_status_t strata_trace_merge(const char *const *paths, int n, const char *out);

#ifdef __cplusplus
}
#endif
#endif
