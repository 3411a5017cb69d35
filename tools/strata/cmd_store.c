/* `strata store`: serves a standalone bootstrap store (the job's rendezvous and failure detector)
 * until SIGINT or SIGTERM, for jobs whose ranks run with STRATA_STORE_EXTERNAL=1. It prints the
 * bound address on stdout first ("strata store listening on 0.0.0.0:29500"), so a script can start
 * it with port 0 and read the port back. The store itself is the library's (strata_store_server_*). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/strata.h"

#define DEFAULT_ADDR "0.0.0.0:29500"
#define POLL_MS      250 /* longest a signal waits to be noticed */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata store [--addr HOST:PORT] [--secret SECRET]\n"
            "\n"
            "Serves a bootstrap store until SIGINT or SIGTERM; prints the address it listens on.\n"
            "\n"
            "  --addr HOST:PORT   where to listen (default " DEFAULT_ADDR "; port 0 picks one)\n"
            "  --secret SECRET    secret clients must present (default: $STRATA_SECRET)\n"
            "\n"
            "Ranks then use STRATA_STORE_ADDR=<this host>:<port> STRATA_STORE_EXTERNAL=1 and the\n"
            "same STRATA_SECRET.\n");
}

/* Matches "--name VALUE" and "--name=VALUE"; advances *i past a separate value. Returns 1 on a
 * match, 0 if argv[*i] is another option, -1 if the value is missing. */
static int option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return 0;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}

/* "strata: error: <msg>" and the usage on stderr; returns the usage exit code, 2. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    usage(stderr);
    return 2;
}

int cmd_store(int argc, char **argv)
{
    const char *addr = DEFAULT_ADDR, *secret = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        int m = option_value(argc, argv, &i, "--addr", &addr);
        if (m == 0)
            m = option_value(argc, argv, &i, "--secret", &secret);
        if (m < 0)
            return usage_error("%s needs a value", argv[i]);
        if (m == 0)
            return usage_error("unknown argument '%s'", argv[i]);
    }
    if (!secret)
        secret = strata_knob_value("STRATA_SECRET");
    if (!*secret)
        fprintf(stderr, "strata store: warning: no secret (--secret or STRATA_SECRET); any client "
                        "that reaches the port may join\n");

    strata_store_server_t *srv = NULL;
    if (strata_store_server_open(addr, secret, &srv) != STRATA_OK)
        return cmd_fail("--addr takes HOST:PORT, e.g. 0.0.0.0:29500", "%s", strata_last_error());

    // Handlers without SA_RESTART, so a signal cuts the poll short.
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *colon = strrchr(addr, ':');
    int host_len = (int)(colon - addr);
    printf("strata store listening on %.*s:%d\n", host_len ? host_len : 7,
           host_len ? addr : "0.0.0.0", strata_store_server_port(srv));
    fflush(stdout);

    int rc = 0;
    while (!stop_signal) {
        if (strata_store_server_poll(srv, POLL_MS) != STRATA_OK) {
            rc = cmd_fail(NULL, "%s", strata_last_error());
            break;
        }
    }
    strata_store_stats_t stats;
    strata_store_server_stats(srv, &stats);
    if (stop_signal)
        fprintf(stderr,
                "strata store: %s: stopping with %d client(s) connected, %d key(s), %d "
                "failure notice(s)\n",
                strsignal(stop_signal), stats.clients, stats.keys, stats.notices);
    strata_store_server_close(srv);
    return rc;
}
