/* `strata algos`: every collective algorithm with its description, and how to force one. */
#include <stdio.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/strata.h"

int cmd_algos(int argc, char **argv)
{
    if (argc > 1) {
        printf("usage: strata algos\n");
        return strcmp(argv[1], "--help") ? 2 : 0;
    }
    for (int c = 0; c < STRATA_COLL_COUNT; c++) {
        printf("%s\n", strata_coll_name((strata_coll_t)c));
        const char *name, *desc;
        for (int i = 0; strata_algo_info((strata_coll_t)c, i, &name, &desc); i++)
            printf("  %-22s %s\n", name, desc);
    }
    printf("\nForce a choice with STRATA_COMM_ALGO=allreduce:ring,bcast:binomial\n");
    return 0;
}
