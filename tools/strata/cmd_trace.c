/* strata trace merge: the per-rank Chrome traces of one job (strata train --trace, or any program
 * recording with strata/trace.h) into one file, one timeline with a track per rank. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/trace.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: strata trace merge TRACE.json... -o OUT.json\n"
               "  the ranks' traces (e.g. step.r0.json step.r1.json from strata train --trace\n"
               "  step.json) on one timeline: every event kept, the job's first at time 0; open\n"
               "  OUT.json in https://ui.perfetto.dev or chrome://tracing\n");
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "merge") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            usage(stdout);
            return 0;
        }
        usage(stderr);
        return 2;
    }
    const char *out = NULL;
    static const struct option opts[] = {{"out", 1, 0, 'o'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "o:", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    int n = argc - 1 - optind;
    if (!out || n < 1) {
        fprintf(stderr, "strata trace merge: %s\n", !out ? "give the output file with -o OUT.json"
                                                         : "give the traces to merge");
        usage(stderr);
        return 2;
    }
    if (strata_trace_merge((const char *const *)(argv + 1 + optind), n, out) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    fprintf(stderr, "strata trace merge: %d trace%s -> %s\n", n, n == 1 ? "" : "s", out);
    return 0;
}
