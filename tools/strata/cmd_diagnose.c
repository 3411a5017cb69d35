/* `strata diagnose DIR`: the post-mortem of a failed job from its dump directory (the ranks'
 * rank<r>.json and the launcher's launch.json): the verdict, then per rank what it returned, whom
 * it blamed and the last operations of its flight recorder. Reading and judging are the library's
 * (strata/launch.h); this file parses and prints. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/launch.h"

#define DIAG_DEFAULT_OPS 5

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: strata diagnose [--json] [--ops N] DIR\n"
        "\n"
        "Reads the failure dumps in DIR (STRATA_DIAG_DIR: rank<r>.json, written by each rank at\n"
        "its first failure, and launch.json from `strata launch`) and prints the verdict (the\n"
        "rank that caused the failure), then per rank: its status, the rank it blamed, and the\n"
        "last N operations of its flight recorder (default %d; => marks one that never ended).\n"
        "Ranks without a dump are listed: they were dead or stopped. A malformed dump is\n"
        "reported, naming the file and what was expected, and the others are still used.\n"
        "\n"
        "  --json    one JSON document instead (verdict, ranks with dump and launcher fields)\n"
        "  --ops N   operations shown per rank\n"
        "\n"
        "Exit status: 0 when a culprit was found, 1 when none could be (or DIR has no dumps),\n"
        "2 for a usage error.\n",
        DIAG_DEFAULT_OPS);
}

static const char *state_name(int s)
{
    return s == STRATA_FLIGHT_DONE ? "done" : s == STRATA_FLIGHT_FAILED ? "failed" : "started";
}

static void print_op(const strata_flight_op_t *f)
{
    char when[48];
    if (f->state == STRATA_FLIGHT_STARTED)
        snprintf(when, sizeof when, "started, never ended");
    else
        snprintf(when, sizeof when, "%s in %.3f ms", state_name(f->state), f->ms);
    printf("    %s %s #%lld (ctx %lld, %s, %lld B) %s\n",
           f->state == STRATA_FLIGHT_STARTED ? "=>" : "  ", f->op, f->seq, f->ctx,
           f->algo[0] ? f->algo : "direct", f->bytes, when);
}

static void print_obs(const strata_rank_obs_t *o)
{
    if (o->pid <= 0)
        return;
    printf("    launcher: pid %d, ", o->pid);
    if (o->end == STRATA_RANK_EXITED)
        printf("exited with status %d", o->status);
    else if (o->end == STRATA_RANK_SIGNALED && sigabbrev_np(o->status))
        printf("killed by SIG%s%s", sigabbrev_np(o->status),
               o->by_launcher ? " (sent by the launcher)" : "");
    else if (o->end == STRATA_RANK_SIGNALED)
        printf("killed by signal %d%s", o->status, o->by_launcher ? " (sent by the launcher)" : "");
    else
        printf("end unknown");
    printf("%s\n", o->stopped ? "; was found stopped" : "");
}

static void print_rank(const strata_diag_t *d, int r, int nops)
{
    const strata_rank_dump_t *dump = d->dumps ? d->dumps[r] : NULL;
    if (!dump) {
        printf("rank %d: no dump: dead or stopped\n", r);
    } else {
        printf("rank %d (host %s pid %d): %s", r, dump->host, dump->pid, dump->status);
        if (dump->culprit >= 0)
            printf(", blames rank %d", dump->culprit);
        printf(", %lld operations completed\n    error: %s\n", dump->completed, dump->error);
    }
    if (d->obs)
        print_obs(&d->obs[r]);
    if (!dump || dump->nflight == 0)
        return;
    printf("    last operations, oldest first:\n");
    for (int i = 0; i < dump->nflight; i++) {
        // The tail, and anything older that never ended (a non-blocking operation left behind).
        const strata_flight_op_t *f = &dump->flight[i];
        if (i >= dump->nflight - nops || f->state == STRATA_FLIGHT_STARTED)
            print_op(f);
    }
}

int cmd_diagnose(int argc, char **argv)
{
    bool json = false;
    int nops = DIAG_DEFAULT_OPS;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--ops")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "strata diagnose: --ops needs a value\n");
                return 2;
            }
            if (!cmd_int_option("diagnose", "--ops", argv[++i], 0, 64, &nops))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "strata diagnose: unknown option '%s' (see `strata diagnose --help`)\n",
                    a);
            return 2;
        } else if (dir) {
            fprintf(stderr, "strata diagnose: one directory only, got '%s' and '%s'\n", dir, a);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "strata diagnose: missing DIR (the job's STRATA_DIAG_DIR)\n");
        usage(stderr);
        return 2;
    }
    strata_diag_t *d;
    if (strata_diag_load(dir, 0, &d) != STRATA_OK)
        return cmd_fail(NULL, "diagnose: %s", strata_last_error());
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    // Problems go to stderr in both forms: a script reading --json still sees them in "problems".
    for (int i = 0; i < d->nproblems; i++)
        fprintf(stderr, "strata diagnose: %s\n", d->problems[i]);
    int rc = v.rank >= 0 ? 0 : 1;
    if (json) {
        char *s = strata_diag_to_json(d, &v);
        if (!s) {
            strata_diag_free(d);
            return cmd_fail(NULL, "diagnose: out of memory");
        }
        printf("%s\n", s);
        free(s);
    } else if (d->nranks == 0) {
        fprintf(stderr, "strata diagnose: no readable dumps in %s (expected rank<r>.json files)\n",
                dir);
    } else {
        if (v.rank >= 0)
            printf("verdict: %s\n", v.text);
        else
            printf("verdict: no rank can be blamed from these dumps\n");
        bool *missing = calloc((size_t)d->nranks, sizeof *missing);
        int nmissing = 0;
        for (int r = 0; missing && r < d->nranks; r++)
            nmissing += missing[r] = !d->dumps || !d->dumps[r];
        if (missing && nmissing > 0) {
            char list[512];
            strata_rank_ranges(missing, d->nranks, list, sizeof list);
            printf("no dump from rank%s %s (dead or stopped)\n", nmissing == 1 ? "" : "s", list);
        }
        free(missing);
        printf("\n");
        for (int r = 0; r < d->nranks; r++)
            print_rank(d, r, nops);
    }
    strata_diag_free(d);
    return rc;
}
