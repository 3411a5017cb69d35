/* `strata env`: every STRATA_* knob with its default, the value in force and its meaning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/strata.h"

int cmd_env(int argc, char **argv)
{
    int json = argc > 1 && !strcmp(argv[1], "--json");
    if (argc > 1 && !json) {
        printf("usage: strata env [--json]\n");
        return strcmp(argv[1], "--help") ? 2 : 0;
    }
    for (int i = 0; i < strata_knob_count(); i++) {
        const strata_knob_t *k = strata_knob_at(i);
        const char *v = strata_knob_value(k->name);
        const char *src = getenv(k->name) && *getenv(k->name) ? "env" : "default";
        if (json)
            printf("{\"name\":\"%s\",\"default\":\"%s\",\"value\":\"%s\",\"source\":\"%s\"}\n",
                   k->name, k->dflt, v, src);
        else
            printf("%-24s = %-10s (%s)\n    %s\n", k->name, *v ? v : "\"\"", src, k->doc);
    }
    return 0;
}
