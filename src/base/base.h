/* Base utilities shared by every part of strata: error raising and propagation, the logger, knob
 * readers and the clock. Internal: parts include it as "base/base.h"; users never see it. */
#ifndef ST_BASE_H
#define ST_BASE_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/env.h"
#include "strata/status.h"

#define ST_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#define ST_LIKELY(x)   __builtin_expect(!!(x), 1)
#define ST_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ST_MIN(a, b)   ((a) < (b) ? (a) : (b))
#define ST_MAX(a, b)   ((a) > (b) ? (a) : (b))

/* a * b for a, b >= 0, saturating at LLONG_MAX: products of sizes read from files (a job's
 * tp x cp x pp x dp) must not overflow before they are checked against a limit. */
/* FNV-1a of a string: a short stable name for a longer one (job ids, derived ports). */
static inline uint32_t st_fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static inline long long st_mul_sat(long long a, long long b)
{
    long long r;
    return __builtin_mul_overflow(a, b, &r) ? LLONG_MAX : r;
}

/* The shortest of %.15g and %.17g that strtod reads back as exactly v, in buf (32 bytes are
 * enough); returns buf. For files strata writes and reads again (traces, accelerator files). */
const char *st_format_double(double v, char *buf, size_t size);
/* The ranks r with in[r] as ranges, "0-2, 4, 6-7"; cut short (at a range) when buf is full. */
void st_format_ranks(const bool *in, int n, char *buf, size_t len);

/* ---- text in SVG pictures (svg.c) -------------------------------------------------------------- */

/* Writes s as XML character data or attribute text: & < > " ' escaped, control characters as '?'. */
void st_xml_text(FILE *f, const char *s);
/* The same for a printf-formatted string. */
void st_xml_textf(FILE *f, const char *fmt, ...) ST_PRINTF(2, 3);
/* An upper estimate of the width in pixels of s in sans-serif at font_px (UTF-8 aware). */
double st_svg_text_width(const char *s, double font_px);

/* ---- errors ------------------------------------------------------------------------------------ */

/* Formats a message into the calling thread's error buffer and returns `status`, so a detector can
 * write `return st_error(STRATA_ERR_PARSE, "%s:%d: expected ...", path, line);`. */
strata_status_t st_error(strata_status_t status, const char *fmt, ...) ST_PRINTF(2, 3);

/* Like st_error with ": strerror(err)" appended. */
strata_status_t st_error_errno(strata_status_t status, int err, const char *fmt, ...) ST_PRINTF(3, 4);

/* Sets the thread's message verbatim (used to re-raise a stored error on another thread). */
void st_error_set(const char *msg);

/* Return on error, keeping the detector's message. */
#define ST_TRY(expr)                                                                               \
    do {                                                                                           \
        strata_status_t st_try_rc_ = (expr);                                                       \
        if (ST_UNLIKELY(st_try_rc_ < 0))                                                           \
            return st_try_rc_;                                                                     \
    } while (0)

/* Jump to a cleanup label on error, keeping the code in `rc`. */
#define ST_TRY_GOTO(expr, rc, label)                                                               \
    do {                                                                                           \
        (rc) = (expr);                                                                             \
        if (ST_UNLIKELY((rc) < 0))                                                                 \
            goto label;                                                                            \
    } while (0)

/* Evaluates a syscall-like expression, retrying on EINTR; leaves the result in `res`. */
#define ST_RETRY_EINTR(res, expr)                                                                  \
    do {                                                                                           \
        (res) = (expr);                                                                            \
    } while ((res) == -1 && errno == EINTR)

/* ---- logging ----------------------------------------------------------------------------------- */

typedef enum st_log_level {
    ST_LOG_ERROR = 0,
    ST_LOG_WARN,
    ST_LOG_INFO,
    ST_LOG_DEBUG,
    ST_LOG_TRACE,
} st_log_level_t;

/* Subsystems, selectable with STRATA_LOG_SUBSYS=comm,store,... */
typedef enum st_log_subsys {
    ST_SUB_BASE = 1u << 0,
    ST_SUB_COMM = 1u << 1,
    ST_SUB_STORE = 1u << 2,
    ST_SUB_NET = 1u << 3, /* transports */
    ST_SUB_TOPO = 1u << 4,
    ST_SUB_PLAN = 1u << 5,
    ST_SUB_TRAIN = 1u << 6,
    ST_SUB_TOOL = 1u << 7,
} st_log_subsys_t;

/* True when a message at this level and subsystem would be written. Cheap after the first call. */
bool st_log_enabled(st_log_level_t level, unsigned subsys);

/* Writes one line: "time host:pid rN LEVEL subsys file:line message". */
void st_log_write(st_log_level_t level, unsigned subsys, const char *file, int line,
                  const char *fmt, ...) ST_PRINTF(5, 6);

/* Sets the rank shown in log lines (-1 hides it). */
void st_log_set_rank(int rank);

#define ST_LOG(level, subsys, ...)                                                                 \
    do {                                                                                           \
        if (st_log_enabled(level, subsys))                                                         \
            st_log_write(level, subsys, __FILE__, __LINE__, __VA_ARGS__);                          \
    } while (0)
#define ST_LOG_ERROR(sub, ...) ST_LOG(ST_LOG_ERROR, sub, __VA_ARGS__)
#define ST_LOG_WARN(sub, ...)  ST_LOG(ST_LOG_WARN, sub, __VA_ARGS__)
#define ST_LOG_INFO(sub, ...)  ST_LOG(ST_LOG_INFO, sub, __VA_ARGS__)
#define ST_LOG_DEBUG(sub, ...) ST_LOG(ST_LOG_DEBUG, sub, __VA_ARGS__)
#define ST_LOG_TRACE(sub, ...) ST_LOG(ST_LOG_TRACE, sub, __VA_ARGS__)

/* ---- knobs ------------------------------------------------------------------------------------- */

/* Reads a declared knob as an integer (K/M/G suffixes allowed). An unparsable value logs one
 * warning and yields the default. Undeclared names are a bug and return `fallback`. */
long long st_knob_int(const char *name, long long fallback);

/* Reads a declared knob as text (never NULL; "" when unset and no default). */
const char *st_knob_str(const char *name);

/* Parses "64", "8K", "256M", "1G" (powers of 1024) into *out. Returns false on garbage. */
bool st_parse_size(const char *text, long long *out);

/* ---- clock ------------------------------------------------------------------------------------- */

/* Monotonic time in nanoseconds. */
uint64_t st_now_ns(void);

/* Deadline `timeout_ms` from now in st_now_ns() units; timeout_ms < 0 means never. */
uint64_t st_deadline_ms(long long timeout_ms);

#endif
