/* The one logger. STRATA_LOG sets the level, STRATA_LOG_SUBSYS the subsystems, STRATA_LOG_FILE the
 * destination (%h host, %p pid). A line is written with one write() so lines of concurrent ranks
 * sharing a terminal do not interleave mid-line. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

static atomic_int log_level = -1; /* -1: not read yet */
static unsigned log_mask;
static int log_fd = 2;
static int log_rank = -1;
static char log_host[64];

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
static const char *const subsys_names[] = {"base", "comm", "store", "net", "topo", "plan", "train", "tool"};

static void log_setup(void)
{
    const char *lv = st_knob_str("STRATA_LOG");
    int level = ST_LOG_WARN;
    for (int i = 0; i <= ST_LOG_TRACE; i++)
        if (strcasecmp(lv, level_names[i]) == 0)
            level = i;
    const char *sub = st_knob_str("STRATA_LOG_SUBSYS");
    unsigned mask = 0;
    if (strcmp(sub, "all") == 0 || !*sub) {
        mask = ~0u;
    } else {
        for (unsigned i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
            if (strstr(sub, subsys_names[i]))
                mask |= 1u << i;
    }
    gethostname(log_host, sizeof log_host - 1);
    const char *file = st_knob_str("STRATA_LOG_FILE");
    if (*file) {
        char path[512];
        size_t o = 0;
        for (const char *p = file; *p && o < sizeof path - 32; p++) {
            if (p[0] == '%' && p[1] == 'h') {
                o += (size_t)snprintf(path + o, sizeof path - o, "%s", log_host);
                p++;
            } else if (p[0] == '%' && p[1] == 'p') {
                o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
                p++;
            } else {
                path[o++] = *p;
            }
        }
        path[o] = '\0';
        FILE *f = fopen(path, "a");
        if (f)
            log_fd = fileno(f);
    }
    log_mask = mask;
    atomic_store(&log_level, level);
}

bool st_log_enabled(st_log_level_t level, unsigned subsys)
{
    int cur = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (ST_UNLIKELY(cur < 0)) {
        log_setup();
        cur = atomic_load(&log_level);
    }
    return (int)level <= cur && (log_mask & subsys);
}

void st_log_set_rank(int rank)
{
    log_rank = rank;
}

void st_log_write(st_log_level_t level, unsigned subsys, const char *file, int line,
                  const char *fmt, ...)
{
    char buf[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *sub = "?";
    for (unsigned i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
        if (subsys == (1u << i))
            sub = subsys_names[i];
    char rank[16] = "";
    if (log_rank >= 0)
        snprintf(rank, sizeof rank, " r%d", log_rank);
    int n = snprintf(buf, sizeof buf, "%02d:%02d:%02d.%06ld %s:%d%s %s %s %s:%d ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, log_host, (int)getpid(), rank,
                     level_names[level], sub, base, line);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : ST_MIN((size_t)m, sizeof buf - (size_t)n - 2));
    buf[len++] = '\n';
    ssize_t w = write(log_fd, buf, len);
    (void)w;
}
