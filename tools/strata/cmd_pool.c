/* `strata pool`: the UDP memory pool (docs/pool.md).
 *   strata pool serve --listen ADDR:PORT --bytes N [--secret-env VAR] [--drop P --dup P
 *                     --reorder P --seed S]      serves a node until SIGINT or SIGTERM
 *   strata pool stats ADDR:PORT [--json]         a node's counters
 * The node and the client are the library's (strata_pool_node_*, strata_pool_*). */
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/strata.h"

#define POLL_MS 250 /* longest a signal waits to be noticed */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata pool serve --listen ADDR:PORT --bytes N [--secret-env VAR]\n"
            "                         [--drop P] [--dup P] [--reorder P] [--seed S]\n"
            "       strata pool stats ADDR:PORT [--json]\n"
            "\n"
            "serve: serves N bytes (K/M/G suffixes) of memory over UDP until SIGINT or SIGTERM;\n"
            "       prints the address it listens on (port 0 picks one). Clients must prove the\n"
            "       secret in $VAR (default STRATA_SECRET). --drop/--dup/--reorder inject seeded\n"
            "       faults into what the node receives (probabilities, for tests).\n"
            "stats: asks a node for its counters (dropped malformed and unauthorised datagrams,\n"
            "       duplicates suppressed, ZERO records, adds, forwards).\n");
}

static bool parse_prob(const char *flag, const char *v, double *out)
{
    char *end = NULL;
    double d = v ? strtod(v, &end) : -1;
    if (!v || *end || !(d >= 0 && d < 1)) {
        fprintf(stderr, "strata pool serve: %s expects a probability in [0, 1), got '%s'\n", flag,
                v ? v : "");
        return false;
    }
    *out = d;
    return true;
}

static void print_stats(const strata_pool_stats_t *s, bool json)
{
    const struct {
        const char *name;
        uint64_t v;
    } f[] = {{"rx_packets", s->rx_packets},         {"tx_packets", s->tx_packets},
             {"malformed", s->malformed},           {"unauthorized", s->unauthorized},
             {"injected_drops", s->injected_drops}, {"injected_dups", s->injected_dups},
             {"injected_reorders", s->injected_reorders}, {"duplicates", s->duplicates},
             {"zero_in", s->zero_in},               {"zero_out", s->zero_out},
             {"adds", s->adds},                     {"forwards", s->forwards},
             {"results", s->results},               {"sessions", s->sessions}};
    int n = (int)(sizeof f / sizeof f[0]);
    for (int i = 0; i < n; i++)
        if (json)
            printf("%s\"%s\":%" PRIu64 "%s", i ? "," : "{", f[i].name, f[i].v, i + 1 < n ? "" : "}\n");
        else
            printf("%-18s %" PRIu64 "\n", f[i].name, f[i].v);
}

static int serve(int argc, char **argv)
{
    strata_pool_node_config_t cfg = {0};
    const char *secret_env = "STRATA_SECRET";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "strata pool serve: %s needs a value\n", a);
            return 2;
        }
        i++;
        long long n;
        if (!strcmp(a, "--listen"))
            cfg.listen = v;
        else if (!strcmp(a, "--bytes")) {
            if (!strata_parse_size(v, &n) || n < 1) {
                fprintf(stderr, "strata pool serve: --bytes expects a size (e.g. 64M), got '%s'\n",
                        v);
                return 2;
            }
            cfg.bytes = (size_t)n;
        } else if (!strcmp(a, "--secret-env"))
            secret_env = v;
        else if (!strcmp(a, "--drop") || !strcmp(a, "--dup") || !strcmp(a, "--reorder")) {
            double *p = a[2] == 'd' ? (a[3] == 'r' ? &cfg.drop : &cfg.dup) : &cfg.reorder;
            if (!parse_prob(a, v, p))
                return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!cmd_parse_int(v, 0, LLONG_MAX, &n)) {
                fprintf(stderr, "strata pool serve: --seed expects an integer >= 0, got '%s'\n", v);
                return 2;
            }
            cfg.seed = (uint64_t)n;
        } else {
            fprintf(stderr, "strata pool serve: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!cfg.listen || !cfg.bytes) {
        fprintf(stderr, "strata pool serve: --listen and --bytes are required\n");
        usage(stderr);
        return 2;
    }
    const char *secret = getenv(secret_env);
    cfg.secret = secret;
    if (!secret || !*secret)
        fprintf(stderr, "strata pool serve: warning: $%s is empty; any client that reaches the "
                        "port may use the pool\n", secret_env);
    strata_pool_node_t *node = NULL;
    if (strata_pool_node_open(&cfg, &node) != STRATA_OK)
        return cmd_fail(NULL, "%s", strata_last_error());
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const char *colon = strrchr(cfg.listen, ':');
    printf("strata pool listening on %.*s:%d\n", (int)(colon - cfg.listen), cfg.listen,
           strata_pool_node_port(node));
    fflush(stdout);
    int rc = 0;
    while (!stop_signal)
        if (strata_pool_node_poll(node, POLL_MS) != STRATA_OK) {
            rc = cmd_fail(NULL, "%s", strata_last_error());
            break;
        }
    strata_pool_stats_t s;
    strata_pool_node_stats(node, &s);
    fprintf(stderr, "strata pool: stopping: %" PRIu64 " datagrams in, %" PRIu64 " dropped malformed, %" PRIu64
                    " unauthorised\n", s.rx_packets, s.malformed, s.unauthorized);
    strata_pool_node_close(node);
    return rc;
}

static int stats(int argc, char **argv)
{
    const char *node = NULL;
    bool json = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!node && argv[i][0] != '-')
            node = argv[i];
        else {
            fprintf(stderr, "strata pool stats: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!node) {
        fprintf(stderr, "strata pool stats: which node? (ADDR:PORT)\n");
        return 2;
    }
    const char *secret = getenv("STRATA_SECRET");
    strata_pool_t *pool = NULL;
    strata_pool_stats_t s;
    if (strata_pool_open(&node, 1, secret, -1, &pool) != STRATA_OK ||
        strata_pool_stats(pool, 0, &s) != STRATA_OK) {
        strata_pool_close(pool);
        return cmd_fail(NULL, "%s", strata_last_error());
    }
    strata_pool_close(pool);
    print_stats(&s, json);
    return 0;
}

int cmd_pool(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "serve"))
        return serve(argc, argv);
    if (!strcmp(argv[1], "stats"))
        return stats(argc, argv);
    fprintf(stderr, "strata pool: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
