/* Fuzz target: a launcher's environment (src/comm/bootstrap/launch_env.c,
 * strata_comm_config_from_env): the rank and size of torchrun, Open MPI, MPICH and Slurm, the
 * store address (STRATA_STORE_ADDR, MASTER_ADDR and MASTER_PORT, SLURM_LAUNCH_NODE_IPADDR), the
 * job id and the STRATA_* knobs. The input is lines NAME=VALUE; only the variables strata reads
 * are set (the rest of the environment is left alone), and they are unset again after each run.
 * An accepted environment must name a rank inside the job and a store address. */
#include "common.h"

#include "strata/comm.h"

#include <string.h>

static const char *const vars[] = {
    "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "STRATA_STORE_ADDR", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_ID", "STRATA_STORE_EXTERNAL", "STRATA_JOB_ID",
    "STRATA_SECRET", "STRATA_COMM_TIMEOUT_MS", "STRATA_COMM_TRANSPORT", "TORCHELASTIC_RUN_ID"};
#define NVARS (sizeof vars / sizeof vars[0])

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    for (size_t i = 0; i < NVARS; i++)
        unsetenv(vars[i]);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (size_t i = 0; i < NVARS; i++)
            if (!strcmp(line, vars[i]))
                setenv(vars[i], eq + 1, 1);
    }
    strata_comm_config_t cfg;
    if (strata_comm_config_from_env(&cfg) == STRATA_OK) {
        FUZZ_CHECK(cfg.nranks >= 1 && cfg.rank >= 0 && cfg.rank < cfg.nranks);
        FUZZ_CHECK(cfg.store_addr && cfg.store_addr[0]);
    } else {
        FUZZ_CHECK(strata_last_error()[0]);
    }
    (void)strata_comm_config_default();
    for (size_t i = 0; i < NVARS; i++)
        unsetenv(vars[i]);
    free(text);
    return 0;
}
